#!/usr/bin/env bash
# `make demo`: configsum working end to end with no cluster.
# Builds the binary, makes a throwaway CA and serving certificate, serves
# examples/objects.yaml over TLS, and sends it an example AdmissionReview;
# then a Deployment on a floating tag, against a real registry on loopback
# (Debian's docker-registry, installed by scripts/install-test-deps.sh); then
# a Keycloak that rolls with its database, and a digest handed on through an
# environment variable; then `configsum controller` rolling a Deployment when
# only its Secret changes, against the project's in-memory API server stand-in
# (examples/api_server_stand_in.rs, not a cluster); last, `configsum render` as
# a real Helm 3's post-renderer on examples/chart (Helm from PyPI, by
# scripts/install-helm.sh).
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
controller_metrics_port=${DEMO_CONTROLLER_METRICS_PORT:-19091}
registry="127.0.0.1:$registry_port"
url="https://localhost:$port"
rm -rf "$work" && mkdir -p "$work"

echo "== building configsum"
cargo build --quiet --bin configsum --example api_server_stand_in
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
stand_in_pid=""
controller_pid=""
stop_all() {
  stop_server
  for pid in "$registry_pid" "$controller_pid" "$stand_in_pid"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; fi
  done
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
# shop/web as the API server stores it after this admission, for the controller in step 9.
jq '.request.object' "$work/review.json" > "$work/web.json"

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
echo "== 9. configsum controller: shop/web rolls when only its Secret changes. Against the"
echo "   project's in-memory API server stand-in (examples/api_server_stand_in.rs), NOT a"
echo "   cluster: it stores objects and serves watches; nothing runs pods."
target/debug/examples/api_server_stand_in "$work" examples/objects.yaml >"$work/stand-in.out" 2>&1 &
stand_in_pid=$!
for _ in $(seq 100); do [ -s "$work/stand-in.out" ] && break; sleep 0.1; done
api="http://$(cut -d' ' -f1 "$work/stand-in.out")"
kube() { curl -fsS -H "Authorization: Bearer fake-token" -H 'Content-Type: application/json' "$@"; }
web_url="$api/apis/apps/v1/namespaces/shop/deployments/web"
secret_url="$api/api/v1/namespaces/shop/secrets/db-credentials"
kube -X POST --data-binary "@$work/web.json" "$api/apis/apps/v1/namespaces/shop/deployments" >/dev/null
KUBECONFIG="$work/kubeconfig" "$bin" controller --digest-key-file "$work/digest.key" \
  --metrics-listen "127.0.0.1:$controller_metrics_port" --lease-namespace configsum-system \
  --window 1s --log-format text 2>>"$work/controller.log" &
controller_pid=$!
for _ in $(seq 200); do
  curl -fsS "http://127.0.0.1:$controller_metrics_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
digest_of_db() { kube "$web_url" | jq -r '.spec.template.metadata.annotations["secret.configsum.dev/db-credentials"]'; }
before=$(digest_of_db)
echo "   shop/web records secret.configsum.dev/db-credentials: $before"
echo "   the Secret's password changes (as kubectl edit would); nothing writes shop/web:"
kube "$secret_url" | jq --arg p "$(printf 'a-new-password' | base64)" '.data.password = $p' >"$work/secret.json"
kube -X PUT --data-binary "@$work/secret.json" "$secret_url" >/dev/null
after=$before
for _ in $(seq 150); do
  after=$(digest_of_db)
  [ "$after" != "$before" ] && break
  sleep 0.1
done
[ "$after" != "$before" ] || { echo "the controller did not roll shop/web; its log:" >&2; cat "$work/controller.log" >&2; exit 1; }
echo "   the controller patched shop/web's pod template, so it rolls:"
echo "   secret.configsum.dev/db-credentials: $after"
# The Event is created just after the patch.
for _ in $(seq 30); do
  events=$(kube "$api/api/v1/namespaces/shop/events" |
    jq -r '.items[] | select(.involvedObject.name == "web") | "   Event \(.reason): \(.message)"')
  [ -n "$events" ] && break
  sleep 0.1
done
echo "$events"

echo
echo "== 10. configsum render as Helm 3's post-renderer: examples/chart gets its digests at"
echo "   render time (helm template; the same holds for helm install and upgrade)"
scripts/install-helm.sh >/dev/null
render_chart() {
  target/tools/helm3/helm template shop examples/chart --namespace shop "$@" \
    --post-renderer "$PWD/$bin" --post-renderer-args render \
    --post-renderer-args --namespace=shop --post-renderer-args "--digest-key-file=$work/digest.key"
}
render_chart >"$work/chart.yaml"
grep 'configsum.dev/' "$work/chart.yaml" | sed 's/^ */   /'
echo "   with --set logLevel=debug, only the ConfigMap's digest changes:"
render_chart --set logLevel=debug >"$work/chart-debug.yaml"
diff <(grep 'configsum.dev/' "$work/chart.yaml") <(grep 'configsum.dev/' "$work/chart-debug.yaml") |
  grep '^[<>]' | sed 's/^\([<>]\) */   \1 /' || true

echo
echo "== configsum's log:"
sed 's/^/   /' "$work/server.log"
echo "== metrics (curl http://127.0.0.1:$metrics_port/metrics):"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" | grep '^configsum_admissions_total' | sed 's/^/   /'
stop_server
echo "== done: the changed ConfigMap changed shop/web's pod template, the moved tag changed"
echo "   shop/api's, the restarted database changed shop/keycloak's and the ingestor's digest"
echo "   went into shop/jobs-manager's environment, so Kubernetes would roll all four; the"
echo "   controller rolled shop/web for its Secret alone, and Helm's render carries the digests."
