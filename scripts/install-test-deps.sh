#!/usr/bin/env bash
# Installs what `make test` needs beyond cargo: rustfmt and clippy, and openssl
# (certs/make-dev-certs.sh makes the certificates the end-to-end tests use).
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
