#!/usr/bin/env bash
# Installs what `make bench` needs beyond `make test`: nginx (the floor). The load bench's Go
# webhook needs Go (the machine's; scripts/build-go-webhook.sh builds it from the Go module
# proxy): this only says so when it is missing.
set -euo pipefail
if ! [ -x /usr/sbin/nginx ] && ! command -v nginx >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq nginx-light || $sudo apt-get install -y -qq nginx
fi
command -v go >/dev/null || echo "install-bench-deps: no go on PATH; the load bench's Go webhook needs it" >&2
