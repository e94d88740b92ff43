#!/usr/bin/env bash
# `make demo`: configsum working end to end with no cluster.
# Builds the binary, makes a throwaway CA and serving certificate, serves
# examples/objects.yaml over TLS, and sends it an example AdmissionReview;
# then a Deployment on a floating tag, against a real registry on loopback
# (Debian's docker-registry, installed by scripts/install-test-deps.sh); then
# a Keycloak that rolls with its database, and a digest handed on through an
# environment variable.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in curl jq openssl base64; do
  command -v "$tool" >/dev/null || missing="${missing:-} $tool"
done
if [ -n "${missing:-}" ]; then
  echo "== installing${missing}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq ${missing/base64/coreutils}
fi
command -v docker-registry >/dev/null || scripts/install-test-deps.sh

work=.demo
port=${DEMO_PORT:-18443}
metrics_port=${DEMO_METRICS_PORT:-19090}
registry_port=${DEMO_REGISTRY_PORT:-15000}
registry="127.0.0.1:$registry_port"
url="https://localhost:$port"
rm -rf "$work" && mkdir -p "$work"

echo "== building configsum"
cargo build --quiet --bin configsum
bin=target/debug/configsum

echo "== making a throwaway CA and serving certificate for localhost"
certs/make-dev-certs.sh "$work/certs" localhost
openssl rand -hex 32 > "$work/digest.key"

server_pid=""
registry_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
stop_all() {
  stop_server
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null && wait "$registry_pid" 2>/dev/null || true; fi
}
trap stop_all EXIT

start_server() {
  "$bin" serve --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
    --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port" \
    --digest-key-file "$work/digest.key" --objects-from "$1" --log-format text \
    --insecure-registry "$registry" 2>>"$work/server.log" &
  server_pid=$!
  for _ in $(seq 100); do
    curl -fsS --cacert "$work/certs/ca.crt" "$url/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "configsum did not become ready; its log:" >&2; cat "$work/server.log" >&2; exit 1
}

# review FILE: POST an AdmissionReview, print the decoded patch, keep the response.
review() {
  curl -fsS --cacert "$work/certs/ca.crt" -H 'Content-Type: application/json' \
    --data-binary "@$1" "$url/mutate?timeout=10s" > "$work/response.json"
  local patch
  patch=$(jq -r '.response.patch // empty' "$work/response.json")
  if [ -z "$patch" ]; then
    echo "   (no patch: nothing to change)"
    echo '[]' > "$work/patch.json"
  else
    echo "$patch" | base64 -d | jq . | tee "$work/patch.json" | sed 's/^/   /'
  fi
  jq -c '.response | {allowed, warnings, auditAnnotations} | with_entries(select(.value != null))' \
    "$work/response.json" | sed 's/^/   response: /'
}

# Applies a JSON Patch of add/remove operations, as the API server would.
apply_patch='reduce $patch[0][] as $op (.;
  ($op.path | split("/")[1:] | map(gsub("~1"; "/") | gsub("~0"; "~"))) as $p
  | if $op.op == "add" then setpath($p; $op.value) else delpaths([$p]) end)'

# update_review: an UPDATE whose object is the patched object of the last review.
update_review() {
  jq --slurpfile patch "$work/patch.json" \
    '.request.operation = "UPDATE" | .request.oldObject = .request.object
     | .request.object |= ('"$apply_patch"')' "$1" > "$work/next-review.json"
  cp "$work/next-review.json" "$work/review.json"
}

echo "== starting configsum serve with examples/objects.yaml"
start_server examples/objects.yaml

echo
echo "== 1. CREATE of Deployment shop/web (env from app-config, envFrom db-credentials, volume nginx-conf)"
cp examples/deployment-review.json "$work/review.json"
review "$work/review.json"
update_review "$work/review.json"
echo "   pod-template annotations after the patch:"
jq '.request.object.spec.template.metadata.annotations' "$work/review.json" | sed 's/^/   /'

echo
echo "== 2. the same Deployment written again, configuration unchanged"
review "$work/review.json"

echo
echo "== 3. app-config's log-level changes; the Deployment is written again (restarting on examples/objects-changed.yaml)"
stop_server
start_server examples/objects-changed.yaml
review "$work/review.json"

# A real registry on loopback, its storage in $work.
start_registry() {
  cat > "$work/registry.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $PWD/$work/registry}}
http: {addr: $registry}
YAML
  docker-registry serve "$work/registry.yml" >>"$work/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 100); do
    curl -fsS "http://$registry/v2/" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the registry did not start; its log:" >&2; cat "$work/registry.log" >&2; exit 1
}

# push_image REPO TAG CONTENT: one layer and a config through the registry's
# HTTP API, as `docker push` would; prints the manifest digest.
push_blob() {
  local digest location
  digest="sha256:$(sha256sum "$2" | cut -d' ' -f1)"
  location=$(curl -fsS -o /dev/null -w '%header{location}' -X POST "http://$registry/v2/$1/blobs/uploads/")
  case "$location" in /*) location="http://$registry$location" ;; esac
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    --data-binary "@$2" "$location&digest=$digest"
  echo "$digest"
}
push_image() {
  printf '%s' "$3" > "$work/layer"
  printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{"Labels":{"demo":"%s"}}}' "$3" > "$work/config"
  local layer config
  layer=$(push_blob "$1" "$work/layer")
  config=$(push_blob "$1" "$work/config")
  jq -cn --arg c "$config" --arg l "$layer" --argjson cs "$(stat -c %s "$work/config")" \
    --argjson ls "$(stat -c %s "$work/layer")" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]}' \
    > "$work/manifest.json"
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary "@$work/manifest.json" "http://$registry/v2/$1/manifests/$2"
  echo "sha256:$(sha256sum "$work/manifest.json" | cut -d' ' -f1)"
}

echo
echo "== 4. a Deployment on a floating tag: shop/api runs $registry/shop/api:prod"
echo "   (configsum.dev/images: \"*\"), against a real registry on loopback"
start_registry
echo "   pushed shop/api:prod = $(push_image shop/api prod v1)"
sed "s|REGISTRY|$registry|" examples/image-review.json > "$work/review.json"
review "$work/review.json"
update_review "$work/review.json"

echo
echo "== 5. a new build is pushed under the same tag; the Deployment is written again"
echo "   pushed shop/api:prod = $(push_image shop/api prod v2)"
# A fresh server: a running one reuses a registry answer for up to 10 s.
stop_server
start_server examples/objects-changed.yaml
review "$work/review.json"

echo
echo "== 6. workloads that roll together: shop/keycloak tracks deployment/keycloak-db"
echo "   (configsum.dev/track), so it records the digest of the database's pod template"
stop_server
start_server examples/objects.yaml
cp examples/together-review.json "$work/review.json"
review "$work/review.json"
update_review "$work/review.json"

echo
echo "== 7. kubectl rollout restart deployment/keycloak-db; Keycloak is written again"
echo "   (the controller does this write in a cluster: it watches the database's template)"
stop_server
cat examples/objects.yaml examples/keycloak-db-restarted.yaml > "$work/objects-restarted.yaml"
start_server "$work/objects-restarted.yaml"
review "$work/review.json"

echo
echo "== 8. a digest handed on: shop/jobs-manager's Jobs run the ingestor image, so its api"
echo "   container gets the ingestor's digest in INGESTOR_IMAGE_DIGEST (configsum.dev/image-env)"
echo "   pushed shop/ingestor:prod = $(push_image shop/ingestor prod ingestor-v1)"
sed "s|REGISTRY|$registry|g" examples/image-env-review.json > "$work/review.json"
review "$work/review.json"

echo
echo "== configsum's log:"
sed 's/^/   /' "$work/server.log"
echo "== metrics (curl http://127.0.0.1:$metrics_port/metrics):"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" | grep '^configsum_admissions_total' | sed 's/^/   /'
stop_server
echo "== done: the changed ConfigMap changed shop/web's pod template, the moved tag changed"
echo "   shop/api's, the restarted database changed shop/keycloak's and the ingestor's digest"
echo "   went into shop/jobs-manager's environment, so Kubernetes would roll all four."
