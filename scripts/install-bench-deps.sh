#!/usr/bin/env bash
# Installs what `make bench` needs beyond `make test`: nginx (the floor).
set -euo pipefail
if ! [ -x /usr/sbin/nginx ] && ! command -v nginx >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq nginx-light || $sudo apt-get install -y -qq nginx
fi
