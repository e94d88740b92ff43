#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, for tests and by hand: etcd, kube-apiserver and
# kube-controller-manager built from Go modules (tools/control-plane/go.mod pins the versions);
# with --node also kube-scheduler and a node where pods run (scripts/node.sh: containerd, runc,
# CNI and the kubelet built from the same module).
#
#   scripts/control-plane.sh build      build the binaries, kubectl, kubelet and kube-scheduler of
#                                       the same version included (cached; prints their directory)
#   scripts/control-plane.sh up DIR     start all three on 127.0.0.1, write DIR/kubeconfig (an
#                                       admin), wait for /readyz, print how to use it; no nodes
#                                       (pods are created by their controllers and never run)
#   scripts/control-plane.sh up DIR --node
#                                       the same with kube-scheduler and node `configsum-node`,
#                                       Ready; kube-apiserver then listens on the kubernetes
#                                       Service's address on the node's bridge (scripts/node.sh
#                                       says why), not on 127.0.0.1
#   scripts/control-plane.sh down DIR   stop exactly the processes `up DIR` started, and the node
#                                       with everything it changed on the machine
#   scripts/control-plane.sh restart-apiserver DIR
#                                       stop kube-apiserver and start it again (tests: every
#                                       watch ends, resumed ones may get 410)
#
# The build is cached outside the checkout, keyed by the module files, so a fresh clone on the
# same machine (CI's case) finds it: $CONTROL_PLANE_CACHE, else $XDG_CACHE_HOME/configsum or
# ~/.cache/configsum, then control-plane/<key>/. The Go module and build caches (GOMODCACHE,
# GOCACHE) are the machine's too. docs/testing.md has the cold and warm timings.
#
# Options (environment):
#   CONTROL_PLANE_COMPACTION   kube-apiserver --etcd-compaction-interval (default 5m; tests that
#                              need a 410 after compaction set a few seconds)
#   CONTROL_PLANE_OWNER        a process id: when it exits, the control plane is stopped (tests)
#   NODE_MAX_PODS              with --node: the kubelet's maxPods (scripts/node.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
module="$here/tools/control-plane"

log() { echo "control-plane: $*" >&2; }
# shellcheck source=scripts/lib.sh
. "$here/scripts/lib.sh"

cache_dir() {
  build_cache_dir control-plane "$module/go.mod" "$module/go.sum" "$module/etcd/main.go"
}

build() {
  local dir bin
  dir=$(cache_dir)
  bin="$dir/bin"
  if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/etcd" ] &&
    [ -x "$bin/kubectl" ] && [ -x "$bin/kubelet" ] && [ -x "$bin/kube-scheduler" ]; then
    echo "$bin"
    return
  fi
  command -v go >/dev/null || { log "needs Go (go.mod: $(sed -n 's/^go //p' "$module/go.mod"))"; exit 1; }
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl and etcd into $bin (minutes when cold)"
  local started=$SECONDS tmp="$dir/bin.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # The version stamps Kubernetes' own build sets (hack/lib/version.sh): without them the API
  # server reports v0.0.0-master and clients cannot parse it.
  local version minor stamp="" package
  version=$(sed -n 's/^\s*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$module/go.mod")
  minor=$(echo "$version" | cut -d. -f2)
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp="$stamp -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
    stamp="$stamp -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$module" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubectl ./etcd)
  rm -rf "$bin"
  mv "$tmp" "$bin"
  # Builds of other pins are not needed any more.
  find "$(dirname "$dir")" -mindepth 1 -maxdepth 1 ! -name "$(basename "$dir")" -exec rm -rf {} +
  log "built in $((SECONDS - started)) s: $(du -sh "$bin" | cut -f1)"
  echo "$bin"
}

# A free port below Linux's ephemeral range (32768-60999): while kube-apiserver restarts, its
# clients retry connecting to its port, and a retry whose own ephemeral port happens to be that
# port connects to itself (TCP simultaneous open) and holds it.
free_port() {
  python3 -c '
import random, socket
for _ in range(1000):
    port = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(port)
    break
'
}

# A CA, the API server's serving certificate (for API_IP too, with a node), the service-account
# key pair, and client certificates for the admin (system:masters) and the controller manager.
# With a node (NODE_IP and NODE_NAME), client certificates for the scheduler, the API server's
# own to the kubelet, and the kubelet's (system:node:<name> in system:nodes, which the Node
# authorizer knows), and the kubelet's serving certificate for the node's address.
make_certs() {
  local dir=$1 api_ip=${2:-10.0.0.1} node_ip=${3:-} node_name=${4:-}
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 365 -subj "/CN=configsum-test-control-plane" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out ca.crt 2>/dev/null
    leaf() { # name subject extensions
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -sha256 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    leaf apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:$api_ip
extendedKeyUsage=serverAuth"
    leaf admin "/O=system:masters/CN=configsum-test-admin" "extendedKeyUsage=clientAuth"
    leaf controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
    if [ -n "$node_ip" ]; then
      leaf scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
      leaf apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
      leaf kubelet-client "/O=system:nodes/CN=system:node:$node_name" "extendedKeyUsage=clientAuth"
      leaf kubelet "/CN=$node_name" "subjectAltName=IP:$node_ip,DNS:$node_name
extendedKeyUsage=serverAuth"
    fi
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl
    chmod 600 ./*.key
  )
}

kubeconfig() { # file server user-cert user-key
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: configsum-test
  cluster:
    server: $2
    certificate-authority: $(dirname "$1")/pki/ca.crt
users:
- name: user
  user:
    client-certificate: $3
    client-key: $4
contexts:
- name: configsum-test
  context: {cluster: configsum-test, user: user}
current-context: configsum-test
EOF
}

start() { # name log command...
  local name=$1 logfile=$2
  shift 2
  # setsid: its own process group, so `down` can stop it and anything it spawned.
  setsid "$@" >"$logfile" 2>&1 < /dev/null &
  record_pid "$dir/pids" $! "$name"
}

# kube-apiserver from the arguments `up` wrote, so that `restart-apiserver` runs the same.
start_apiserver() {
  local args=()
  mapfile -d '' -t args < "$dir/kube-apiserver.args"
  start kube-apiserver "$dir/logs/kube-apiserver.log" "${args[@]}"
}

wait_apiserver() {
  local pki="$dir/pki" server
  server=$(sed -n 's/^    server: //p' "$dir/kubeconfig")
  wait_for kube-apiserver 90 curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
    --key "$pki/admin.key" "$server/readyz" || { down; exit 1; }
}

# Kills kube-apiserver and starts it again with the same arguments: every watch ends, and a
# client that resumes from an older resourceVersion than the new watch cache holds gets 410.
restart_apiserver() {
  local pid
  pid=$(awk '$2 == "kube-apiserver" { print $1 }' "$dir/pids")
  [ -n "$pid" ] || { log "no kube-apiserver in $dir/pids"; exit 1; }
  # Killed, as in a crash: a graceful shutdown waits for long requests to drain (14 s here).
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
  wait_exited "$pid" 10 || true
  awk '$2 != "kube-apiserver"' "$dir/pids" > "$dir/pids.tmp" || true
  mv "$dir/pids.tmp" "$dir/pids"
  start_apiserver
  wait_apiserver
  log "kube-apiserver restarted"
}

up() {
  local bin started=$SECONDS
  bin=$(build)
  mkdir -p "$dir/logs"
  if [ -s "$dir/pids" ]; then
    log "$dir already has a control plane (pids in $dir/pids); run 'down $dir' first"
    exit 1
  fi
  : > "$dir/pids"
  # Without a node: everything on 127.0.0.1. With one: kube-apiserver on the kubernetes Service's
  # ClusterIP, port 443, an address on the node's bridge, where pods reach it as in any cluster.
  local api_ip=127.0.0.1 api_port="" service_cidr=10.0.0.0/24 node_flags=() controllers=""
  local authorization=RBAC admission=MutatingAdmissionWebhook,ValidatingAdmissionWebhook
  if [ -n "$with_node" ]; then
    "$here/scripts/node.sh" network "$dir"
    # shellcheck source=/dev/null
    . "$dir/node/network"
    api_ip=$API_IP
    api_port=443
    service_cidr=$SERVICE_CIDR
    # The kubelet's identity is authorised by the Node authorizer and limited by NodeRestriction;
    # the API server calls the kubelet (logs, exec) with a client certificate, and reaches
    # webhooks' Services at their endpoints (pods' addresses on the bridge), which needs no
    # kube-proxy.
    authorization=Node,RBAC
    admission=NodeRestriction,$admission
    node_flags=(--kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt"
      --kubelet-client-key "$dir/pki/apiserver-kubelet-client.key"
      --kubelet-preferred-address-types InternalIP
      --enable-aggregator-routing)
    # Endpoints for Services, the not-ready taint lifted from a Ready node, kube-root-ca.crt
    # for every pod's token volume, PodDisruptionBudgets' status, and finished pods collected.
    controllers=",endpointslice,nodelifecycle,taint-eviction-controller,root-ca-cert-publisher,disruption,podgc,ttl-after-finished"
  fi
  make_certs "$dir/pki" "$api_ip" "${NODE_IP:-}" "${NODE_NAME:-}"
  local etcd_port peer_port
  etcd_port=$(free_port)
  peer_port=$(free_port)
  [ -n "$api_port" ] || api_port=$(free_port)
  start etcd "$dir/logs/etcd.log" "$bin/etcd" --data-dir "$dir/etcd" --name control-plane \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "control-plane=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health" || { down; exit 1; }

  local pki="$dir/pki"
  # Every request's metadata (never bodies) in logs/audit.log, for tests that assert which
  # requests a component made (a relist that reads nothing again, no write from a reader).
  printf '%s\n' "apiVersion: audit.k8s.io/v1" "kind: Policy" "omitStages: [RequestReceived]" \
    "rules:" "- level: Metadata" > "$dir/audit-policy.yaml"
  printf '%s\0' "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$api_ip" --advertise-address "$api_ip" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$service_cidr" \
    --authorization-mode "$authorization" \
    --enable-admission-plugins "$admission" \
    "${node_flags[@]}" \
    --etcd-compaction-interval "${CONTROL_PLANE_COMPACTION:-5m}" \
    --endpoint-reconciler-type none \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/logs/audit.log" \
    --audit-log-format json --audit-log-mode blocking \
    --v 1 > "$dir/kube-apiserver.args"
  start_apiserver
  local server="https://$api_ip:$api_port"
  kubeconfig "$dir/kubeconfig" "$server" "$pki/admin.crt" "$pki/admin.key"
  kubeconfig "$dir/controller-manager.kubeconfig" "$server" "$pki/controller-manager.crt" "$pki/controller-manager.key"
  wait_apiserver

  start kube-controller-manager "$dir/logs/kube-controller-manager.log" "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --controllers "deployment,replicaset,statefulset,daemonset,job,garbage-collector-controller,namespace,serviceaccount,serviceaccount-token$controllers" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true \
    --v 1
  # Ready when the service-account controller has made the default ServiceAccount.
  wait_for kube-controller-manager 60 curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
    --key "$pki/admin.key" "$server/api/v1/namespaces/default/serviceaccounts/default" ||
    { down; exit 1; }

  if [ -n "$with_node" ]; then
    kubeconfig "$dir/scheduler.kubeconfig" "$server" "$pki/scheduler.crt" "$pki/scheduler.key"
    kubeconfig "$dir/kubelet.kubeconfig" "$server" "$pki/kubelet-client.crt" "$pki/kubelet-client.key"
    start kube-scheduler "$dir/logs/kube-scheduler.log" "$bin/kube-scheduler" \
      --kubeconfig "$dir/scheduler.kubeconfig" --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port 0 --v 1
    "$here/scripts/node.sh" up "$dir" "$bin" || { down; exit 1; }
  fi
  echo "$server" > "$dir/server"
  ln -sf "$bin/kubectl" "$dir/kubectl"
  if [ -n "${CONTROL_PLANE_OWNER:-}" ]; then
    # Tests: stop everything when the owning process exits, however it exits.
    setsid bash -c 'while s=$(ps -o stat= -p "$1") && [ "${s:0:1}" != Z ]; do sleep 1; done
      exec "$2" down "$3"' \
      watchdog "$CONTROL_PLANE_OWNER" "$here/scripts/control-plane.sh" "$dir" \
      >"$dir/logs/watchdog.log" 2>&1 < /dev/null &
    : > "$dir/watchdog.pid"
    record_pid "$dir/watchdog.pid" $! watchdog
  fi
  log "up in $((SECONDS - started)) s: $server (etcd on 127.0.0.1:$etcd_port)"
  cat <<EOF
export KUBECONFIG=$dir/kubeconfig
# kubectl get --raw /version; helm install …; then: scripts/control-plane.sh down $dir
EOF
}

down() {
  # The node first (its pods' processes, containerd, the kubelet, its cgroups), then the control
  # plane, then the node's bridge, which holds the API server's address.
  [ ! -d "$dir/node" ] || "$here/scripts/node.sh" stop "$dir" || true
  stop_processes
  [ ! -d "$dir/node" ] || "$here/scripts/node.sh" down "$dir" || true
}

stop_processes() {
  [ -f "$dir/pids" ] || return 0
  local pid name start
  # Controller manager first, etcd last. A process is killed only while it is still the one
  # recorded: the PID of one that exited early may be another's by now.
  tac "$dir/pids" | while read -r pid name start; do
    if still_running "$pid" "$start"; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      wait_exited "$pid" 5 || true
      still_running "$pid" "$start" || continue
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -f "$dir/pids"
  if [ -f "$dir/watchdog.pid" ]; then
    local watchdog start
    read -r watchdog _ start < "$dir/watchdog.pid" || true
    rm -f "$dir/watchdog.pid"
    # Not when the watchdog runs this `down`, nor when it is gone (killed with its run) and its
    # PID, the process group's ID, may be another's by now.
    if [ "$watchdog" != "$$" ] && still_running "$watchdog" "$start"; then
      kill -TERM -- "-$watchdog" 2>/dev/null || kill "$watchdog" 2>/dev/null || true
    fi
  fi
}

case "${1:-}" in
  build) build ;;
  up)
    dir=$(mkdir -p "${2:?usage: control-plane.sh up DIR [--node]}" && cd "$2" && pwd)
    with_node=""
    case "${3:-}" in
      --node) with_node=1 ;;
      "") ;;
      *) echo "usage: $0 up DIR [--node]" >&2; exit 2 ;;
    esac
    up ;;
  down) dir=$(cd "${2:?usage: control-plane.sh down DIR}" && pwd); down ;;
  restart-apiserver) dir=$(cd "${2:?usage: control-plane.sh restart-apiserver DIR}" && pwd); restart_apiserver ;;
  *) echo "usage: $0 build | up DIR [--node] | down DIR | restart-apiserver DIR" >&2; exit 2 ;;
esac
