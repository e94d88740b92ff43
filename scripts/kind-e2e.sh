#!/usr/bin/env bash
# End to end on a throwaway kind cluster: build the image, install cert-manager
# and configsum, opt a namespace in, and check that changing a ConfigMap and
# re-applying the Deployment rolls it (a new ReplicaSet appears).
#
# Needs Docker, kind, kubectl and network access (cert-manager is downloaded).
# It has NOT been run on the project's development machines, which have none
# of these; run it where you have them: `make e2e`.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${CLUSTER:-configsum-e2e}
image=${IMAGE:-ghcr.io/configsum/configsum:$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)}
cert_manager=${CERT_MANAGER_VERSION:-v1.16.2}
ns=configsum-e2e-demo

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 1; }
done

cleanup() { [ "${KEEP_CLUSTER:-}" = 1 ] || kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "== kind cluster $cluster"
kind create cluster --name "$cluster" --wait 120s
kubectl config use-context "kind-$cluster"

echo "== image $image"
docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"

echo "== cert-manager $cert_manager"
kubectl apply -f "https://github.com/cert-manager/cert-manager/releases/download/$cert_manager/cert-manager.yaml"
kubectl -n cert-manager wait --for=condition=Available deployment --all --timeout=180s

echo "== configsum"
make deploy IMAGE="$image"
kubectl -n configsum-system wait --for=condition=Complete job/configsum-digest-key --timeout=120s || true
kubectl -n configsum-system rollout status deployment/configsum-webhook --timeout=180s
# cert-manager injects the caBundle asynchronously.
for _ in $(seq 60); do
  [ -n "$(kubectl get mutatingwebhookconfiguration configsum -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ] && break
  sleep 2
done

echo "== a workload in an opted-in namespace"
kubectl create namespace "$ns"
kubectl label namespace "$ns" configsum.dev/enabled=true
kubectl -n "$ns" create configmap app-config --from-literal=log-level=info
cat <<YAML > /tmp/configsum-e2e-deploy.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $ns}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: registry.k8s.io/pause:3.10
          env:
            - name: LOG_LEVEL
              valueFrom: {configMapKeyRef: {name: app-config, key: log-level}}
YAML
kubectl apply --server-side -f /tmp/configsum-e2e-deploy.yaml
kubectl -n "$ns" rollout status deployment/web --timeout=120s
before=$(kubectl -n "$ns" get deploy web -o jsonpath='{.spec.template.metadata.annotations.configmap\.configsum\.dev/app-config}')
[ -n "$before" ] || { echo "FAIL: no digest annotation on the template" >&2; exit 1; }
echo "digest: $before"

echo "== change the ConfigMap, re-apply the Deployment"
kubectl -n "$ns" create configmap app-config --from-literal=log-level=debug --dry-run=client -o yaml | kubectl apply -f -
# Server-side apply always sends the write (client-side apply skips unchanged objects).
kubectl apply --server-side -f /tmp/configsum-e2e-deploy.yaml
kubectl -n "$ns" rollout status deployment/web --timeout=120s
after=$(kubectl -n "$ns" get deploy web -o jsonpath='{.spec.template.metadata.annotations.configmap\.configsum\.dev/app-config}')
replicasets=$(kubectl -n "$ns" get replicaset -l app=web -o name | wc -l)
echo "digest: $after; ReplicaSets: $replicasets"
[ "$before" != "$after" ] && [ "$replicasets" -ge 2 ] || { echo "FAIL: the change did not roll the Deployment" >&2; exit 1; }
echo "PASS: a new ReplicaSet rolled out for the changed ConfigMap"

echo "== the controller: change the ConfigMap only, no write to the Deployment"
kubectl -n configsum-system rollout status deployment/configsum-controller --timeout=120s
kubectl -n "$ns" create configmap app-config --from-literal=log-level=warn --dry-run=client -o yaml | kubectl apply -f -
for _ in $(seq 30); do
  latest=$(kubectl -n "$ns" get deploy web -o jsonpath='{.spec.template.metadata.annotations.configmap\.configsum\.dev/app-config}')
  [ "$latest" != "$after" ] && break
  sleep 1
done
[ "$latest" != "$after" ] || { echo "FAIL: the controller did not roll the Deployment" >&2; exit 1; }
kubectl -n "$ns" rollout status deployment/web --timeout=120s
echo "PASS: the controller rolled the Deployment for a ConfigMap-only change"
