#!/usr/bin/env bash
# The node of scripts/control-plane.sh's control plane (`control-plane.sh up DIR --node` runs
# this; docs/testing.md): Debian's containerd 1.6 with runc and its CNI plugins, and the kubelet
# built beside kube-apiserver, registered as node `configsum-node`. Pods really run.
#
#   scripts/node.sh network DIR   choose the node's addresses and make its bridge; writes
#                                 DIR/node/network (sourced by control-plane.sh, which binds
#                                 kube-apiserver to the kubernetes Service's address there)
#   scripts/node.sh up DIR BIN    start containerd, import the images under target/image/,
#                                 start the kubelet (BIN holds it), wait for the node to be Ready
#   scripts/node.sh stop DIR      stop the kubelet, the pods and containerd; remove the cgroups
#   scripts/node.sh down DIR      stop, and undo everything `network` and `up` did (the bridge
#                                 goes last: control-plane.sh stops its API server in between,
#                                 so that no connection to the address is left half closed)
#
# What it changes on the machine, each undone by `down`:
#   - a bridge csnodeN (N from 1 to 250, the first free) holding 10.244.N.1/24, the node's
#     address and the pods' subnet, and 10.96.N.1/32, the kubernetes Service's ClusterIP, where
#     kube-apiserver listens on 443 so that pods reach it with no kube-proxy and no iptables
#     rule. Pods get one route, to the Service range through the node; there is no default
#     route and no NAT: nothing leaves the machine.
#   - cgroups /configsum-node-N in each of the machine's cgroup hierarchies, the pods' root
#     (the kubelet's cgroupRoot). Nothing else of the hierarchies is touched.
# Everything else stays in a mount namespace of the node's own (unshare): containerd, its shims
# and the kubelet run inside it, with a private /run (containerd's state, shim sockets, network
# namespaces' mounts), /var/log and /var/lib (paths the kubelet and libcni fix); their mounts (volumes, container root
# filesystems) are never seen by the machine and vanish with the namespace. The kubelet would
# set six kernel sysctls (vm.overcommit_memory, kernel.panic, ...) machine-wide; inside the
# namespace it reads files that already hold its values, so the machine's stay as they are.
# Its iptables chains are turned off (makeIPTablesUtilChains: false).
#
# Options (environment): NODE_MAX_PODS, the kubelet's maxPods (default 110, the kubelet's own;
# at most 250, as the pods' /24 holds 253 addresses). `make bench-node` raises it: 100
# one-replica Deployments rolling at once hold 200 pods.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
NODE_NAME=configsum-node
NODE_MAX_PODS=${NODE_MAX_PODS:-110}

log() { echo "node: $*" >&2; }
# shellcheck source=scripts/lib.sh
. "$here/scripts/lib.sh"

# The sysctls the kubelet insists on (pkg/kubelet/cm: setupKernelTunables), as it wants them.
KUBELET_SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"

# Makes the node's namespace, chooses N and makes the bridge. A bridge named csnodeN is the
# claim on N: `ip link add` fails for a name that exists, so two nodes starting at once never
# share one. The namespace comes first: a bridge whose namespace holder is gone is stale.
network() {
  mkdir -p "$node"
  clean_stale
  make_namespace
  local n bridge
  for n in $(seq 1 250); do
    bridge=csnode$n
    # Addresses or routes of the machine already in either range, cgroups still in use, or a
    # socket still bound to the Service address (a killed API server's, while it dies).
    if ip -4 addr show | grep -qE "inet (10\.244|10\.96)\.$n\." ||
      ip -4 route show | grep -qE "^(10\.244|10\.96)\.$n\." ||
      [ -e "/sys/fs/cgroup/pids/configsum-node-$n" ] ||
      [ -n "$(ss -Htan exclude time-wait "( src 10.96.$n.1 or src 10.244.$n.1 )" 2>/dev/null)" ]; then
      continue
    fi
    # A MAC of its own: a bridge without one takes its lowest port's, and changes it as pods
    # come and go, which leaves every pod's ARP entry for the node stale for a while.
    ip link add "$bridge" address "$(printf '02:63:73:6e:00:%02x' "$n")" type bridge 2>/dev/null ||
      continue
    ip link set "$bridge" alias "$dir"
    ip addr add "10.244.$n.1/24" dev "$bridge"
    ip addr add "10.96.$n.1/32" dev "$bridge"
    ip link set "$bridge" up
    cat > "$node/network" <<EOF
NODE_INDEX=$n
NODE_NAME=$NODE_NAME
BRIDGE=$bridge
NODE_IP=10.244.$n.1
POD_SUBNET=10.244.$n.0/24
SERVICE_CIDR=10.96.$n.0/24
API_IP=10.96.$n.1
CGROUP_ROOT=/configsum-node-$n
EOF
    log "bridge $bridge: node 10.244.$n.1, pods 10.244.$n.0/24, Services 10.96.$n.0/24"
    return
  done
  log "no free node network (10.244.N.0/24 and 10.96.N.0/24, N from 1 to 250)"
  kill "$(cat "$node/holder.pid")"
  exit 1
}

# Bridges whose node is gone (its run was killed before `down`): their DIR is the alias.
clean_stale() {
  local bridge owner
  for bridge in $(ip -o link show type bridge | sed -n 's/^[0-9]*: \(csnode[0-9]*\)[:@].*/\1/p'); do
    owner=$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null || true)
    # Running: its holder still holds the namespace it recorded (a pid alone may be reused).
    if [ -n "$owner" ] && [ -f "$owner/node/holder.pid" ] && [ -f "$owner/node/namespace" ] &&
      [ "$(readlink "/proc/$(cat "$owner/node/holder.pid")/ns/mnt" 2>/dev/null)" = \
        "$(cat "$owner/node/namespace")" ]; then
      continue
    fi
    if [ -n "$owner" ] && [ -f "$owner/node/network" ]; then
      log "cleaning up the node of $owner, which was not stopped"
      "$here/scripts/control-plane.sh" down "$owner" || true
    else
      ip link del "$bridge" 2>/dev/null || true
    fi
  done
}

# Runs a command inside the node's mount namespace.
inside() {
  nsenter --target "$(cat "$node/holder.pid")" --mount -- "$@"
}

start() { # name log command...
  local name=$1 logfile=$2
  shift 2
  setsid nsenter --target "$(cat "$node/holder.pid")" --mount -- "$@" >"$logfile" 2>&1 < /dev/null &
  record_pid "$node/pids" $! "$name"
}

# containerd's, CNI's and the kubelet's configuration; the kubelet's certificates and kubeconfig
# are the control plane's (scripts/control-plane.sh).
write_configs() {
  mkdir -p "$node/cni/net.d" "$node/kubelet" "$node/pod-logs"
  cat > "$node/containerd.toml" <<EOF
version = 2
root = "$node/containerd"
# State, shim sockets and runc's own state stay under the namespace's private /run.
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$node/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$node/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/configsum-pause:$version"
  disable_apparmor = true
  # Never below containerd's own oom_score_adj: lowering it takes CAP_SYS_RESOURCE, which a
  # sandboxed machine may not grant (the pod sandbox asks for -998).
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node/cni/net.d"
EOF
  # The bridge exists already, with the node's address: the plugin only attaches pods to it.
  # No gateway (which would turn on the machine's IP forwarding), no masquerade: one route, to
  # the Service range through the node.
  cat > "$node/cni/net.d/10-configsum-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "configsum-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$NODE_IP"}],
        "dataDir": "$node/cni/ipam"
      }
    }
  ]
}
EOF
  # Image garbage collection off: the images cannot be pulled again here. Eviction only near
  # the real limits, not at the kubelet's defaults of 10-15 % free disk.
  cat > "$node/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
tlsCertFile: $dir/pki/kubelet.crt
tlsPrivateKeyFile: $dir/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$node/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failCgroupV1: false
makeIPTablesUtilChains: false
failSwapOn: false
resolvConf: ""
podLogsDir: $node/pod-logs
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
maxPods: $NODE_MAX_PODS
EOF
}

# The mount namespace every node process runs in, held open by a sleeping process; its
# identity (mnt:[inode]) is recorded, for `down` to find its processes even without the holder.
make_namespace() {
  unshare --mount --propagation private sleep infinity < /dev/null > /dev/null 2>&1 &
  echo $! > "$node/holder.pid"
  local holder=$! namespace=""
  for _ in $(seq 50); do
    namespace=$(readlink "/proc/$holder/ns/mnt" || true)
    [ "$namespace" != "$(readlink /proc/self/ns/mnt)" ] && break
    sleep 0.05
  done
  echo "$namespace" > "$node/namespace"
  mkdir -p "$node/sysctl"
  local setting name
  for setting in $KUBELET_SYSCTLS; do
    name=${setting%%=*}
    echo "${setting#*=}" > "$node/sysctl/${name//\//.}"
  done
  inside mount -t tmpfs -o mode=755 configsum-node-run /run
  inside mount -t tmpfs -o mode=755 configsum-node-log /var/log
  # The kubelet's device-plugin socket (/var/lib/kubelet/device-plugins) and libcni's cache
  # (/var/lib/cni) have fixed paths; nothing of the node reads anything else there.
  inside mount -t tmpfs -o mode=755 configsum-node-lib /var/lib
  local setting name
  for setting in $KUBELET_SYSCTLS; do
    name=${setting%%=*}
    inside mount --bind "$node/sysctl/${name//\//.}" "/proc/sys/$name"
  done
}

make_cgroups() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    mkdir -p "$hierarchy${CGROUP_ROOT#/}"
  done
}

import_images() {
  local archive names name
  for archive in "$here"/target/image/*.tar; do
    [ -e "$archive" ] || continue
    names=$(ctr --address "$node/containerd.sock" -n k8s.io images import "$archive" 2>&1 |
      sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p')
    # The archives are tagged as `make image` names them (configsum:0.1.0); the kubelet asks
    # for the name as a reference normalises it (docker.io/library/configsum:0.1.0).
    for name in $names; do
      # A name whose first part is a registry (has a dot or a port, or is localhost) is kept.
      case "$name" in
        */*) local first=${name%%/*}
          case "$first" in *.*|*:*|localhost) log "image $name"; continue ;; esac
          ctr --address "$node/containerd.sock" -n k8s.io images tag --force "$name" \
            "docker.io/$name" >/dev/null ;;
        *) ctr --address "$node/containerd.sock" -n k8s.io images tag --force "$name" \
             "docker.io/library/$name" >/dev/null ;;
      esac
      log "image $name"
    done
  done
}

up() {
  local bin=$1 started=$SECONDS
  # shellcheck source=/dev/null
  . "$node/network"
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)
  [ -e "$here/target/image/configsum-pause-$version.tar" ] ||
    { log "needs target/image/configsum-pause-$version.tar: run 'make node-images'"; exit 1; }
  for tool in containerd runc ctr unshare nsenter; do
    command -v "$tool" >/dev/null || { log "needs $tool (scripts/install-test-deps.sh installs it)"; exit 1; }
  done
  [ -x /usr/lib/cni/bridge ] || { log "needs the CNI plugins in /usr/lib/cni (containernetworking-plugins)"; exit 1; }
  [[ $NODE_MAX_PODS =~ ^[0-9]+$ ]] && [ "$NODE_MAX_PODS" -ge 1 ] && [ "$NODE_MAX_PODS" -le 250 ] ||
    { log "NODE_MAX_PODS=$NODE_MAX_PODS: a number from 1 to 250"; exit 1; }
  : > "$node/pids"
  write_configs
  make_cgroups
  start containerd "$dir/logs/containerd.log" containerd --config "$node/containerd.toml"
  wait_for containerd 30 ctr --address "$node/containerd.sock" version || { down; exit 1; }
  import_images
  start kubelet "$dir/logs/kubelet.log" "$bin/kubelet" \
    --config "$node/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --root-dir "$node/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1
  local kubectl=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")
  wait_for kubelet 120 "${kubectl[@]}" wait --for=condition=Ready --timeout=1s "node/$NODE_NAME" ||
    { down; exit 1; }
  log "node $NODE_NAME Ready in $((SECONDS - started)) s"
}

# Stops every process of the node and removes its cgroups and directories. Safe to run twice,
# and on a node that only half started.
stop() {
  local network=""
  if [ -f "$node/network" ]; then
    # shellcheck source=/dev/null
    . "$node/network"
    network=1
  fi
  local pid name start
  # The kubelet first, so that it restarts nothing; while it is still the process recorded.
  if [ -f "$node/pids" ]; then
    while read -r pid name start; do
      [ "$name" = kubelet ] || continue
      still_running "$pid" "$start" || continue
      kill -TERM "$pid" 2>/dev/null || true
      wait_exited "$pid" 5 || true
      still_running "$pid" "$start" || continue
      kill -KILL "$pid" 2>/dev/null || true
    done < "$node/pids"
  fi
  # The pods' processes: everything in the node's cgroups.
  local round procs
  for round in $(seq 50); do
    [ -n "$network" ] || break
    procs=$(find /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" -name cgroup.procs -exec cat {} + 2>/dev/null |
      sort -u || true)
    [ -n "$procs" ] || break
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null || true
    sleep 0.1
  done
  # containerd, its shims and the namespace's holder: every process in the node's namespace.
  if [ -f "$node/namespace" ]; then
    local namespace
    namespace=$(cat "$node/namespace")
    if [ -n "$namespace" ] && [ "$namespace" != "$(readlink /proc/self/ns/mnt)" ]; then
      local killed=""
      for round in $(seq 50); do
        procs=""
        for pid in /proc/[0-9]*; do
          [ "$(readlink "$pid/ns/mnt" 2>/dev/null)" = "$namespace" ] && procs="$procs ${pid#/proc/}"
        done
        [ -n "$procs" ] || break
        # shellcheck disable=SC2086
        kill -KILL $procs 2>/dev/null || true
        killed="$killed $procs"
        sleep 0.1
      done
      # A killed process leaves the namespace as soon as its leader exits, while its other
      # threads (containerd has dozens) are still exiting: `down` returns once none runs.
      for pid in $killed; do
        wait_exited "$pid" 10 || true
      done
    fi
    rm -f "$node/holder.pid" "$node/namespace"
  fi
  # Empty cgroups, deepest first; the kernel frees a cgroup a moment after its last process.
  local hierarchy
  for round in $(seq 50); do
    [ -n "$network" ] || break
    local left=""
    for hierarchy in /sys/fs/cgroup/*/; do
      [ -d "$hierarchy${CGROUP_ROOT#/}" ] || continue
      find "$hierarchy${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$hierarchy${CGROUP_ROOT#/}" ] && left=1
    done
    [ -n "$left" ] || break
    sleep 0.1
  done
  # The images and snapshots: hundreds of MB that no later run reads.
  rm -rf "$node/containerd" "$node/kubelet"
  rm -f "$node/pids"
}

# stop, then the bridge with its addresses.
down() {
  stop
  if [ -f "$node/network" ]; then
    # shellcheck source=/dev/null
    . "$node/network"
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -f "$node/network"
  fi
}

case "${1:-}" in
  network) dir=$(cd "${2:?usage: node.sh network DIR}" && pwd); node=$dir/node; network ;;
  up) dir=$(cd "${2:?usage: node.sh up DIR BIN}" && pwd); node=$dir/node; up "${3:?usage: node.sh up DIR BIN}" ;;
  stop) dir=$(cd "${2:?usage: node.sh stop DIR}" && pwd); node=$dir/node; stop ;;
  down) dir=$(cd "${2:?usage: node.sh down DIR}" && pwd); node=$dir/node; down ;;
  *) echo "usage: $0 network DIR | up DIR BIN | stop DIR | down DIR" >&2; exit 2 ;;
esac
