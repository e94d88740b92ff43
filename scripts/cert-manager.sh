#!/usr/bin/env bash
# cert-manager for the tests of the chart's default TLS path (tls.mode certManager): its
# controller and CA injector, built from the github.com/cert-manager/cert-manager module that
# tools/cert-manager/go.mod pins, and that module's CRDs.
#
#   scripts/cert-manager.sh build   build the binary (cached; prints the cache directory, which
#                                   holds bin/cert-manager and crds/*.yaml)
#
# tools/cert-manager/main.go says why the project wires cert-manager's packages itself. The
# build is cached outside the checkout, keyed by the module files, as the control plane's is
# (scripts/control-plane.sh): $CONTROL_PLANE_CACHE, else $XDG_CACHE_HOME/configsum or
# ~/.cache/configsum, then cert-manager/<key>/. docs/testing.md has the cold and warm timings.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
module="$here/tools/cert-manager"

log() { echo "cert-manager: $*" >&2; }

cache_dir() {
  local base=${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configsum}
  local key
  # The module files, the command and the build command decide the binary.
  key=$( (cat "$module/go.mod" "$module/go.sum" "$module/main.go"; sed -n '/^build()/,/^}/p' "$0") |
    sha256sum | cut -c1-16)
  echo "$base/cert-manager/$key"
}

build() {
  local dir
  dir=$(cache_dir)
  if [ -x "$dir/bin/cert-manager" ] && [ -f "$dir/crds/cert-manager.io_certificates.yaml" ]; then
    echo "$dir"
    return
  fi
  command -v go >/dev/null || { log "needs Go (go.mod: $(sed -n 's/^go //p' "$module/go.mod"))"; exit 1; }
  log "building cert-manager's controller and CA injector into $dir (minutes when cold)"
  local started=$SECONDS tmp="$dir.tmp" source
  rm -rf "$tmp"
  mkdir -p "$tmp/bin" "$tmp/crds"
  (cd "$module" && go build -trimpath -ldflags="-s -w" -o "$tmp/bin/cert-manager" .)
  # The CRDs of the same module version, as its release publishes them.
  source=$(cd "$module" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  cp "$source"/deploy/crds/cert-manager.io_*.yaml "$tmp/crds/"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  # Builds of other pins are not needed any more.
  find "$(dirname "$dir")" -mindepth 1 -maxdepth 1 ! -name "$(basename "$dir")" -exec rm -rf {} +
  log "built in $((SECONDS - started)) s: $(du -sh "$dir/bin" | cut -f1)"
  echo "$dir"
}

case "${1:-}" in
  build) build ;;
  *)
    echo "usage: $0 build" >&2
    exit 2
    ;;
esac
