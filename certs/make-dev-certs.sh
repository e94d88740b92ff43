#!/usr/bin/env bash
# Makes a throwaway development CA and a serving certificate signed by it.
#
#   certs/make-dev-certs.sh OUT_DIR [DNS_NAME ...]
#
# KEY_TYPE selects the serving key's format: ec-sec1 (default; what cert-manager
# issues), ec-pkcs8 or rsa-pkcs1. The default names are the in-cluster Service
# names plus localhost and 127.0.0.1.
# Writes ca.crt, ca.key, tls.crt (leaf then CA: a full chain) and tls.key.
set -euo pipefail
out=${1:?usage: make-dev-certs.sh OUT_DIR [DNS_NAME ...]}
shift
names=("$@")
if ((${#names[@]} == 0)); then
  names=(configsum-webhook.configsum-system.svc configsum-webhook.configsum-system.svc.cluster.local localhost)
fi
key_type=${KEY_TYPE:-ec-sec1}
mkdir -p "$out"
cd "$out"

openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=configsum development CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.crt 2>/dev/null

case "$key_type" in
  ec-sec1) openssl ecparam -name prime256v1 -genkey -noout -out tls.key 2>/dev/null ;;
  ec-pkcs8) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out tls.key 2>/dev/null ;;
  rsa-pkcs1) openssl genrsa -traditional -out tls.key 2048 2>/dev/null ;;
  *) echo "unknown KEY_TYPE $key_type (ec-sec1, ec-pkcs8, rsa-pkcs1)" >&2; exit 2 ;;
esac

san="IP:127.0.0.1"
for name in "${names[@]}"; do san="$san,DNS:$name"; done
openssl req -new -key tls.key -subj "/CN=${names[0]}" -out tls.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' "$san" > leaf.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 -sha256 \
  -extfile leaf.ext -out leaf.crt 2>/dev/null
cat leaf.crt ca.crt > tls.crt
rm -f tls.csr leaf.ext leaf.crt ca.srl
chmod 600 ca.key tls.key
