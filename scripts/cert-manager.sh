#!/usr/bin/env bash
# cert-manager for the tests of the chart's default TLS path (tls.mode certManager): its
# controller and CA injector, built from the github.com/cert-manager/cert-manager module that
# tools/cert-manager/go.mod pins, and that module's CRDs.
#
#   scripts/cert-manager.sh build    build the binary (cached; prints the cache directory, which
#                                    holds bin/cert-manager and crds/*.yaml)
#   scripts/cert-manager.sh up DIR   on the control plane of DIR (scripts/control-plane.sh up):
#                                    apply the CRDs, wait until they are served, and start the
#                                    controller and the CA injector as its admin, logging to
#                                    DIR/logs/cert-manager-*.log; recorded in DIR/pids, so that
#                                    `control-plane.sh down DIR` stops them with the rest
#
# tools/cert-manager/main.go says why the project wires cert-manager's packages itself. The
# build is cached outside the checkout, keyed by the module files, as the control plane's is
# (scripts/control-plane.sh): $CONTROL_PLANE_CACHE, else $XDG_CACHE_HOME/configsum or
# ~/.cache/configsum, then cert-manager/<key>/. docs/testing.md has the cold and warm timings.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
module="$here/tools/cert-manager"

log() { echo "cert-manager: $*" >&2; }
# shellcheck source=scripts/lib.sh
. "$here/scripts/lib.sh"

cache_dir() {
  # The module files and the command decide the binary.
  build_cache_dir cert-manager "$module/go.mod" "$module/go.sum" "$module/main.go"
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

up() {
  local cm component deadline=$((SECONDS + 60))
  cm=$(build)
  "$dir/kubectl" --kubeconfig "$dir/kubeconfig" apply --server-side -f "$cm/crds" >/dev/null
  # Right after its creation a CRD may have no conditions yet, which `kubectl wait` reports as
  # an error rather than waiting.
  until "$dir/kubectl" --kubeconfig "$dir/kubeconfig" wait --for=condition=Established \
    --timeout=60s crd/certificates.cert-manager.io crd/certificaterequests.cert-manager.io \
    crd/issuers.cert-manager.io crd/clusterissuers.cert-manager.io >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { log "cert-manager's CRDs not established"; exit 1; }
    sleep 0.2
  done
  for component in controller cainjector; do
    setsid "$cm/bin/cert-manager" "$component" --kubeconfig "$dir/kubeconfig" \
      >"$dir/logs/cert-manager-$component.log" 2>&1 </dev/null &
    record_pid "$dir/pids" $! "cert-manager-$component"
  done
  log "controller and CA injector started on $dir"
}

case "${1:-}" in
  build) build ;;
  up)
    dir=$(cd "${2:?usage: cert-manager.sh up DIR}" && pwd)
    [ -f "$dir/pids" ] || { log "$dir has no control plane (scripts/control-plane.sh up $dir)"; exit 1; }
    up
    ;;
  *)
    echo "usage: $0 build | up DIR" >&2
    exit 2
    ;;
esac
