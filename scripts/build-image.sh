#!/usr/bin/env bash
# `make image`: configsum's container image, built with no Docker daemon. buildah (from the
# distribution's packages; scripts/install-test-deps.sh installs it) assembles it FROM scratch:
#
#   /configsum                          one statically linked binary (glibc, crt-static;
#                                       docs/image.md says why name resolution still works)
#   /etc/ssl/certs/ca-certificates.crt  the build machine's CA roots, for tools that look there
#                                       (configsum itself has Mozilla's roots compiled in)
#   user 65532:65532, no shell, MALLOC_ARENA_MAX=2, entrypoint ["/configsum"]
#
# and writes it as an OCI image layout archive, target/image/configsum-<version>.tar, tagged
# configsum:<version>. Layer and config times are fixed (SOURCE_DATE_EPOCH, default the last
# commit's), so the same binary gives the same image digest.
#
# `make node-images` (--node-images): the two images of the test node (docs/testing.md), each
# one static program of tools/node-images FROM scratch, the same way:
#   configsum-pause-<version>.tar   configsum-pause:<version>, the pod sandbox (containerd's
#                                   sandbox_image): holds the pod's namespaces, reaps orphans
#   config-echo-<version>.tar       config-echo:<version>, the test application: serves the
#                                   values it read at start, exits when configured to
#
#   scripts/build-image.sh [--node-images] [OUT_DIR]      (default target/image)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
node_images=""
if [ "${1:-}" = --node-images ]; then
  node_images=1
  shift
fi
out=${1:-$here/target/image}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)
# The build machine's architecture (x86_64 or aarch64): the release workflow builds each
# architecture on a runner of its own.
triple=$(uname -m)-unknown-linux-gnu
log() { echo "build-image: $*" >&2; }

for tool in buildah strip; do
  command -v "$tool" >/dev/null || { log "needs $tool (scripts/install-test-deps.sh installs it)"; exit 1; }
done
ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca" ] || { log "needs the CA roots at $ca (Debian's ca-certificates)"; exit 1; }

# Static: no dynamic loader or libc in the image. The explicit --target keeps build scripts and
# proc macros, which run on the build machine, dynamically linked.
started=$SECONDS
if [ -n "$node_images" ]; then
  (cd "$here" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked -p configsum-node-images --target "$triple")
else
  (cd "$here" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin configsum --target "$triple")
fi
log "binaries built in $((SECONDS - started)) s"

stage=$(mktemp -d)
container=""
storage="$stage/storage"
# vfs: works as root without overlay or fuse; the storage is ours and thrown away after. With
# the CNI plugins installed (the test node's), buildah picks the CNI network backend and makes
# /etc/cni/net.d for it, though nothing here uses a network: its configuration stays ours too.
printf '[network]\nnetwork_config_dir = "%s"\n' "$stage/cni" > "$stage/containers.conf"
bah() {
  CONTAINERS_CONF="$stage/containers.conf" \
    buildah --root "$storage" --runroot "$stage/run" --storage-driver vfs "$@"
}
cleanup() {
  [ -z "$container" ] || bah rm "$container" >/dev/null 2>&1 || true
  rm -rf "$stage"
}
trap cleanup EXIT

epoch=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}
mkdir -p "$out"

# The working container as image NAME:VERSION, in the archive OUT/NAME-VERSION.tar.
commit() {
  local archive="$out/$1-$version.tar"
  rm -f "$archive"
  bah commit --quiet --format oci --timestamp "$epoch" --rm "$container" \
    "oci-archive:$archive:$1:$version" >/dev/null
  container=""
  log "$archive: $(du -h "$archive" | cut -f1)"
  echo "$archive"
}

# One static program FROM scratch as image NAME:VERSION in OUT/NAME-VERSION.tar. Arguments:
# name, program, then buildah config options.
node_image() {
  local name=$1 program=$2
  shift 2
  install -m 0755 "$here/target/$triple/release/$program" "$stage/$program"
  strip --strip-all "$stage/$program"
  container=$(bah from --pull=never scratch)
  bah copy --quiet --chmod 0755 --chown 0:0 "$container" "$stage/$program" "/$program"
  bah config --entrypoint "[\"/$program\"]" --cmd '' --workingdir / \
    --created-by "scripts/build-image.sh: /$program from tools/node-images, FROM scratch" \
    --label "org.opencontainers.image.title=$name" \
    --label "org.opencontainers.image.version=$version" "$@" "$container"
  commit "$name"
}

if [ -n "$node_images" ]; then
  # The sandbox runs as the kubelet's pods ask; 65535 is the usual pause user.
  node_image configsum-pause pause --user 65535:65535
  node_image config-echo config-echo --user 65532:65532 --port 8080/tcp
  exit 0
fi

install -m 0755 "$here/target/$triple/release/configsum" "$stage/configsum"
strip --strip-all "$stage/configsum"

container=$(bah from --pull=never scratch)
bah copy --quiet --chmod 0755 --chown 0:0 "$container" "$stage/configsum" /configsum
bah copy --quiet --chmod 0644 --chown 0:0 "$container" "$ca" /etc/ssl/certs/ca-certificates.crt
# Two malloc arenas, not one per thread: the webhook parses megabyte reviews on short-lived
# threads, and per-thread arenas kept what they freed (docs/image.md).
bah config \
  --user 65532:65532 \
  --entrypoint '["/configsum"]' \
  --cmd '' \
  --env MALLOC_ARENA_MAX=2 \
  --port 8443/tcp --port 9090/tcp \
  --created-by "scripts/build-image.sh: /configsum and the CA roots, FROM scratch" \
  --workingdir / \
  --label "org.opencontainers.image.title=configsum" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  --label "org.opencontainers.image.source=https://github.com/configsum/configsum" \
  "$container"
commit configsum
