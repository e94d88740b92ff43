#!/usr/bin/env bash
# `make cluster`: a one-node cluster on this machine with configsum installed the way a user
# installs it, and a demo application to watch it work (docs/testing.md). The node's tests
# (tests/node) start their cluster with this script too.
#
#   scripts/cluster.sh up DIR     scripts/control-plane.sh up DIR --node; then `helm install` of
#                                 charts/configsum from the images in target/image (`make image`,
#                                 `make node-images`), and the demo in namespace demo
#   scripts/control-plane.sh down DIR   stops it all (`make cluster-down`)
#
# The chart is given the image (configsum:<version>, imported into the node's containerd, so
# pullPolicy Never) and controller.fanOut=waves, the chart's default, set explicitly so that
# the node's tests of waves (tests/node/waves.rs) do not depend on it. Nothing else is set: TLS
# takes the chart's default path, cert-manager, whose controller and CA injector run beside the
# node as processes of the run (scripts/cert-manager.sh builds them; their images cannot be
# pulled here), with its CRDs of the same version.
#
# Options (environment): CONTROL_PLANE_OWNER as for control-plane.sh; NODE_MAX_PODS as for
# node.sh; CLUSTER_DEMO=false skips the demo application.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
SYSTEM=configsum-system

log() { echo "cluster: $*" >&2; }

up() {
  local started=$SECONDS
  "$here/scripts/install-helm.sh" >/dev/null
  "$here/scripts/control-plane.sh" up "$dir" --node >/dev/null
  export KUBECONFIG=$dir/kubeconfig
  local helm=$here/target/tools/helm3/helm
  export HELM_CACHE_HOME=$dir/helm/cache HELM_CONFIG_HOME=$dir/helm/config HELM_DATA_HOME=$dir/helm/data

  "$here/scripts/cert-manager.sh" up "$dir"
  local version
  version=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$here/charts/configsum/Chart.yaml")
  log "helm install configsum (image configsum:$version)"
  "$helm" install configsum "$here/charts/configsum" --namespace "$SYSTEM" --create-namespace \
    --set image.repository=configsum --set image.pullPolicy=Never \
    --set controller.fanOut=waves \
    --wait --wait-for-jobs --timeout 5m >"$dir/logs/helm-install.log"

  if [ "${CLUSTER_DEMO:-true}" != false ]; then
    demo
  fi
  log "up in $((SECONDS - started)) s"
  cat <<EOF
export KUBECONFIG=$dir/kubeconfig
# The demo's pods serve what they read at start (a ConfigMap key and a Secret file):
kubectl -n demo get pods -o wide
curl -s http://\$(kubectl -n demo get pod -l app=demo -o jsonpath='{.items[0].status.podIP}'):8080/
# Change the Secret; configsum's controller rolls the Deployment, new pods serve the new value:
kubectl -n demo create secret generic demo-secret --from-literal=password=v2 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n demo rollout status deployment/demo
$here/target/$(uname -m)-unknown-linux-gnu/release/configsum explain deployment/demo -n demo
# Then: make cluster-down
EOF
}

# Namespace demo (opted in): a ConfigMap read as an env var, a Secret read as a file, and two
# replicas of config-echo that serve both.
demo() {
  local version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)
  "$dir/kubectl" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: demo
  labels: {configsum.dev/enabled: "true"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: demo-config, namespace: demo}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: demo-secret, namespace: demo}
stringData: {password: v1}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: demo, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: app
          image: config-echo:$version
          imagePullPolicy: Never
          env:
            - name: VALUE
              valueFrom: {configMapKeyRef: {name: demo-config, key: greeting}}
            - {name: VALUE_FILE, value: /etc/demo/password}
          ports: [{name: http, containerPort: 8080}]
          readinessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 2
          volumeMounts: [{name: secret, mountPath: /etc/demo, readOnly: true}]
      volumes:
        - name: secret
          secret: {secretName: demo-secret}
EOF
  "$dir/kubectl" -n demo rollout status deployment/demo --timeout 2m >/dev/null
  log "demo application running in namespace demo"
}

case "${1:-}" in
  up) dir=$(mkdir -p "${2:?usage: cluster.sh up DIR}" && cd "$2" && pwd); up ;;
  *) echo "usage: $0 up DIR  (stop it with scripts/control-plane.sh down DIR)" >&2; exit 2 ;;
esac
