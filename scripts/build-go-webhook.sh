#!/usr/bin/env bash
# Builds the load bench's Go webhook (benches/go-webhook) and prints the binary's path. The
# binary is kept under target/go-webhook/ in a folder named by a hash of the sources and the
# Go version, so `make bench` builds it once per change, not once per run.
#   --cached   print the path only if that build exists; fail without building
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source_dir="$root/benches/go-webhook"
command -v go >/dev/null || { echo "build-go-webhook: no go on PATH" >&2; exit 1; }
hash="$( (go version; cd "$source_dir" && cat go.mod go.sum ./*.go) | sha256sum | cut -c1-16)"
binary="$root/target/go-webhook/$hash/go-webhook"
if [ ! -x "$binary" ]; then
  [ "${1:-}" = "--cached" ] && { echo "build-go-webhook: not built yet ($binary)" >&2; exit 1; }
  mkdir -p "$(dirname "$binary")"
  # Older builds are of sources that no longer exist.
  find "$root/target/go-webhook" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +
  (cd "$source_dir" && GOFLAGS=-buildvcs=false go build -trimpath -o "$binary.tmp" .)
  mv "$binary.tmp" "$binary"
fi
echo "$binary"
