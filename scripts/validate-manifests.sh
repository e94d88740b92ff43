#!/usr/bin/env bash
# Renders the kustomize base, the dev-ca overlay and the network-policy overlay
# (the optional component), and the Helm chart with its defaults and with
# charts/configsum/ci/custom-values.yaml (NetworkPolicy, a user-supplied CA and
# every other value moved), and validates every object against the Kubernetes
# API schemas (strict: unknown fields fail) of the oldest supported version
# (1.30) and the newest the validator knows. cert-manager objects have no
# schema there; tests/manifests.rs checks their fields. tests/chart.rs checks
# that Helm 3 renders the same objects as Helm 4, which renders them here.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools-venv
# kubernetes-validate, pinned, in the venv the tests' YAML readers share.
scripts/install-python-tools.sh >/dev/null
# The pinned kubectl (its built-in kustomize renders the kustomizations) and
# Helm 4 (renders the chart), from scripts/install-helm.sh: nothing when present.
scripts/install-helm.sh >/dev/null
kubectl=target/tools/kubectl
helm=target/tools/helm4/helm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kubectl" kustomize manifests/ > "$tmp/base.yaml"
certs/dev-ca-overlay.sh > /dev/null
"$kubectl" kustomize manifests/overlays/dev-ca > "$tmp/dev-ca.yaml"
"$kubectl" kustomize manifests/overlays/network-policy > "$tmp/network-policy.yaml"
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"
"$helm" template configsum charts/configsum -n configsum-system > "$tmp/chart.yaml"
"$helm" template configsum charts/configsum -n configsum-system \
  -f charts/configsum/ci/custom-values.yaml > "$tmp/chart-custom-values.yaml"
status=0
passed=0
failed=0
for version in 1.30.0 1.37.0; do
  for rendered in "$tmp"/{base,dev-ca,network-policy,chart,chart-custom-values}.yaml; do
    out=$("$venv/bin/kubernetes-validate" --strict -k "$version" "$rendered" 2>&1) || status=1
    # Only cert-manager kinds may lack a schema.
    if grep "Couldn't find schema" <<<"$out" | grep -v "cert-manager.io/v1"; then status=1; failed=$((failed + 1)); fi
    grep -E "^(ERROR|WARN)" <<<"$out" | grep -v "cert-manager.io/v1" || true
    ok=$(grep -c "passed for resource" <<<"$out" || true)
    bad=$(grep -c "did not validate" <<<"$out" || true)
    passed=$((passed + ok))
    failed=$((failed + bad))
    echo "validate-manifests: $(basename "$rendered") against Kubernetes $version: $ok objects passed, $bad failed"
  done
done
echo "manifests: $passed passed, $failed failed"
exit $status
