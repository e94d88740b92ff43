#!/usr/bin/env bash
# Prepares manifests/overlays/dev-ca for a cluster without cert-manager: makes
# a development CA and a serving certificate for the webhook Service with
# make-dev-certs.sh, and writes the CA as the webhook's caBundle.
#   certs/dev-ca-overlay.sh            # then: kubectl apply -k manifests/overlays/dev-ca
set -euo pipefail
cd "$(dirname "$0")/.."
out=manifests/overlays/dev-ca/generated
rm -rf "$out" && mkdir -p "$out"
certs/make-dev-certs.sh "$out/certs" \
  configsum-webhook.configsum-system.svc configsum-webhook.configsum-system.svc.cluster.local
# Only the leaf and its key go into the Secret; the CA key stays on this machine.
cp "$out/certs/tls.crt" "$out/tls.crt"
cp "$out/certs/tls.key" "$out/tls.key"
ca_bundle=$(base64 -w0 < "$out/certs/ca.crt")
cat > "$out/cabundle.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: configsum
  annotations:
    cert-manager.io/inject-ca-from: null
webhooks:
  - name: mutate.configsum.dev
    clientConfig:
      caBundle: ${ca_bundle}
YAML
echo "wrote $out; the CA and its key are in $out/certs (keep them out of git)"
