#!/usr/bin/env bash
# krew, the kubectl plugin manager, built from its Go module at the version pinned here, for
# tests/kubectl_plugin.rs: it installs configsum's plugin from plugins/krew/configsum.yaml and
# an archive built here, offline (`krew install --manifest --archive`), as a user's krew would.
# Cached outside the checkout (~/.cache/configsum/krew-<version>, KREW_CACHE to change it), so
# a fresh clone on the same machine does not build it again; linked to target/tools/krew.
# About a minute when cold (the Go module and build caches are the machine's).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
version=v0.4.3
cache=${KREW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configsum/krew-$version}
log() { echo "install-krew: $*" >&2; }

mkdir -p "$here/target/tools"
if [ ! -x "$cache/krew" ]; then
  command -v go >/dev/null || { log "needs Go to build krew $version"; exit 1; }
  started=$SECONDS
  mkdir -p "$cache"
  GOWORK=off GOBIN="$cache.tmp" go install "sigs.k8s.io/krew/cmd/krew@$version"
  mv "$cache.tmp/krew" "$cache/krew"
  rmdir "$cache.tmp"
  log "built krew $version in $((SECONDS - started)) s"
fi
ln -sf "$cache/krew" "$here/target/tools/krew"
