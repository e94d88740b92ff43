#!/usr/bin/env bash
# Real CRDs of workload and operator kinds that docs/custom-kinds.md declares, for
# tests/control_plane/custom_kinds.rs to install into the real control plane. Written to
# target/operator-crds/ (OPERATOR_CRDS_DIR to change it), never committed: they come from the
# Go module proxy at the version pinned here, checked against the pinned go.sum hash.
#
#   knative-service.yaml   Service (serving.knative.dev/v1): config/core/300-resources/service.yaml
#                          of the module knative.dev/serving v0.51.0
#
# OpenKruise (github.com/openkruise/kruise, kruise-api) and harbor-operator
# (github.com/goharbor/harbor-operator) are not served by the module proxy these machines reach
# (403 for every version), nor by npm or PyPI: their tests use CRDs written in the tests, shaped
# after the public types.
#
# Nothing to do when the files are there for the same pins (target/operator-crds/stamp).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OPERATOR_CRDS_DIR:-$here/target/operator-crds}

knative=knative.dev/serving@v0.51.0
knative_sum=h1:yN2Q7eYqJgoPfZkATjoBZyGbZ2P1Qhns9HIMU4mF+to=

log() { echo "install-operator-crds: $*" >&2; }

stamp=$(sha256sum < "$0" | cut -c1-16)
if [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ] && [ -s "$out/knative-service.yaml" ]; then
  log "already in $out"
  exit 0
fi
command -v go >/dev/null || { log "needs Go"; exit 1; }
export GOWORK=off
tmp="$out.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/empty"

json_field() { # name json
  printf '%s' "$2" | python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"
}

# Outside any module: only this module is downloaded, checked against the checksum database
# and the pinned hash.
json=$(cd "$tmp/empty" && go mod download -json "$knative")
if [ "$(json_field Sum "$json")" != "$knative_sum" ]; then
  log "$knative: the module's hash is '$(json_field Sum "$json")', not the pinned $knative_sum"
  exit 1
fi
dir=$(json_field Dir "$json")
install -m 0644 "$dir/config/core/300-resources/service.yaml" "$tmp/knative-service.yaml"
grep -q '^kind: CustomResourceDefinition$' "$tmp/knative-service.yaml" &&
  grep -q '^  name: services.serving.knative.dev$' "$tmp/knative-service.yaml" || {
  log "$tmp/knative-service.yaml is not the CRD services.serving.knative.dev"
  exit 1
}

rm -rf "$tmp/empty"
echo "$stamp" > "$tmp/stamp"
rm -rf "$out"
mv "$tmp" "$out"
log "Knative Serving's Service CRD in $out"
