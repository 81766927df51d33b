#!/usr/bin/env bash
# A real, local Kubernetes cluster for syncgc's development and tests: etcd + kube-apiserver
# (+ optionally kube-controller-manager) on loopback, and one real node (containerd, runc, a CNI
# bridge, kubelet, kube-proxy, kube-scheduler) whose Pods run and take time to stop.
#
#   hack/cluster.sh install            install Debian packages, build kube-apiserver,
#                                      kube-controller-manager, kube-scheduler, kubelet,
#                                      kube-proxy and kubectl (cached)
#   hack/cluster.sh up [--kcm MODE]    start what is not running; MODE = gc | nogc | none
#   hack/cluster.sh kcm MODE           (re)start kube-controller-manager in MODE
#   hack/cluster.sh restart-apiserver  stop kube-apiserver and start it again (every watch ends)
#   hack/cluster.sh restart-etcd       stop etcd and start it again
#   hack/cluster.sh compact            compact etcd at its current revision
#   hack/cluster.sh busybox-image      build the workloads' image; print its tarball's path
#   hack/cluster.sh kubelet stop|start stop the node's kubelet (its Pods go on running, unseen:
#                                      the node goes NotReady), or start it and wait until
#                                      the node is Ready
#   hack/cluster.sh down               stop exactly the processes this script started
#   hack/cluster.sh status             what runs, where the kubeconfig and logs are
#   hack/cluster.sh env                shell exports for clients (KUBECONFIG, SYNCGC_KUBECONFIG,
#                                      PATH with kubectl)
#
# Two kubeconfigs in SYNCGC_CLUSTER_DIR: admin.kubeconfig (system:masters, which no in-flight
# limit or flow control ever refuses) and controller.kubeconfig (user syncgc-controller, bound
# to cluster-admin: refused with 429 as a controller's ServiceAccount is).
#
# MODE gc:   kube-controller-manager with all controllers, so the cluster's own GC runs.
# MODE nogc: all controllers but the garbage collector (for syncgc --mode standalone).
#
# The node, syncgc-node, is Ready and schedulable once `up` returns, and tainted
# syncgc.io/node=workloads:NoSchedule: only Pods that tolerate the taint run there; the others
# stay Pending, as plain objects (most tests create Pods only to collect them). Its images come
# from no registry: syncgc.local/pause:3.4.1 (the sandbox) and syncgc.local/busybox:1.35 are
# built here, hack/image.sh adds syncgc's; Pods use imagePullPolicy Never. Pods' addresses are
# on the bridge syncgc0 (SYNCGC_POD_CIDR), whose first address is the node's; the apiserver
# listens there too, for the Pods, and calls webhooks at their Services' endpoints.
#
# Environment (defaults in brackets):
#   SYNCGC_CACHE         binaries, Kubernetes source, Go caches   [~/.cache/syncgc]
#   SYNCGC_CLUSTER_DIR   PKI, etcd data, logs, pids, kubeconfig   [/tmp/syncgc-cluster]
#   SYNCGC_ETCD_PORT [23790]  SYNCGC_ETCD_PEER_PORT [23800]
#   SYNCGC_APISERVER_PORT [26443]  SYNCGC_KCM_PORT [26257]  SYNCGC_SCHEDULER_PORT [26259]
#   SYNCGC_KUBELET_PORT [10250]  SYNCGC_KUBELET_HEALTHZ_PORT [26248]
#   SYNCGC_PROXY_METRICS_PORT [26249]  SYNCGC_PROXY_HEALTHZ_PORT [26256]
#   SYNCGC_POD_CIDR [10.244.0.0/24]  SYNCGC_NODE_NAME [syncgc-node]
#   SYNCGC_KCM_QPS [20]  SYNCGC_KCM_BURST [30]   kube-controller-manager's client rate limit
#   SYNCGC_KCM_GC_SYNCS [20]                     its garbage collector's workers
#   SYNCGC_APISERVER_INFLIGHT [2000]  SYNCGC_APISERVER_MUTATING_INFLIGHT [1000]
#                        kube-apiserver's --max-(mutating-)requests-inflight when it starts
#   SYNCGC_APISERVER_FLOW_CONTROL [true]  its --enable-priority-and-fairness (false: the
#                        in-flight limits answer 429 at once instead of queueing)
#   SYNCGC_APISERVER_WATCH_CACHE [true]   its --watch-cache (false: watches read etcd, so a
#                        compaction is what expires them)
# kube-apiserver keeps an audit log ($SYNCGC_CLUSTER_DIR/logs/audit.log, JSON lines) of the
# writes of the user syncgc-controller (controller.kubeconfig), with each request's User-Agent:
# which replica wrote what, and when the apiserver received it. It is written in batches (within
# a second, in order), so that it adds no latency to the requests it records.
set -euo pipefail

K8S_VERSION=1.20.2
CACHE=${SYNCGC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncgc}
DIR=${SYNCGC_CLUSTER_DIR:-/tmp/syncgc-cluster}
ETCD_PORT=${SYNCGC_ETCD_PORT:-23790}
ETCD_PEER_PORT=${SYNCGC_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${SYNCGC_APISERVER_PORT:-26443}
KCM_PORT=${SYNCGC_KCM_PORT:-26257}
BIN=$CACHE/kubernetes-$K8S_VERSION/bin
KUBE_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
PKI=$DIR/pki
LOGS=$DIR/logs
PIDS=$DIR/pids
KUBECONFIG_FILE=$DIR/admin.kubeconfig
NODE=$DIR/node
NODE_NAME=${SYNCGC_NODE_NAME:-syncgc-node}
NODE_TAINT=syncgc.io/node=workloads:NoSchedule
BRIDGE=syncgc0
POD_CIDR=${SYNCGC_POD_CIDR:-10.244.0.0/24}
NODE_IP=${POD_CIDR%.*}.1
CONTAINERD_SOCK=$NODE/containerd.sock
KUBELET_PORT=${SYNCGC_KUBELET_PORT:-10250}
KUBELET_HEALTHZ_PORT=${SYNCGC_KUBELET_HEALTHZ_PORT:-26248}
SCHEDULER_PORT=${SYNCGC_SCHEDULER_PORT:-26259}
PROXY_METRICS_PORT=${SYNCGC_PROXY_METRICS_PORT:-26249}
PROXY_HEALTHZ_PORT=${SYNCGC_PROXY_HEALTHZ_PORT:-26256}
PAUSE_IMAGE=syncgc.local/pause:3.4.1
BUSYBOX_IMAGE=syncgc.local/busybox:1.35

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- install -----------------------------------------------------------------

# shellcheck source=hack/apt.sh
. "$(dirname "$0")/apt.sh"
# shellcheck source=hack/oci.sh
. "$(dirname "$0")/oci.sh"

enable_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources
  if [ -f "$f" ]; then
    if grep -q '^Types: deb$' "$f"; then
      log "adding deb-src to $f"
      sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
      apt_updated=false
    fi
  elif [ -f /etc/apt/sources.list ] && ! grep -q '^deb-src ' /etc/apt/sources.list; then
    log "adding deb-src lines to /etc/apt/sources.list"
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >>/etc/apt/sources.list
    apt_updated=false
  fi
}

# Prints the unpacked Kubernetes source tree, fetching it first when it is not there.
kube_source() {
  local src=$CACHE/src tree
  mkdir -p "$src"
  # Debian ships 1.20.2 as "1.20.5+really1.20.2".
  tree=$(find "$src" -maxdepth 1 -type d -name "kubernetes-*$K8S_VERSION" | head -n1)
  if [ -z "$tree" ]; then
    log "fetching the Debian source package kubernetes ($K8S_VERSION)"
    enable_deb_src
    if ! $apt_updated; then apt-get update -qq; apt_updated=true; fi
    (cd "$src" && apt-get source -qq kubernetes >/dev/null 2>"$src/apt-source.log") ||
      die "apt-get source kubernetes failed, see $src/apt-source.log"
    tree=$(find "$src" -maxdepth 1 -type d -name "kubernetes-*$K8S_VERSION" | head -n1)
    [ -n "$tree" ] || die "the source package is not Kubernetes $K8S_VERSION: $(ls "$src")"
  fi
  echo "$tree"
}

build_kubernetes() {
  local b missing=false
  for b in $KUBE_BINARIES; do [ -x "$BIN/$b" ] || missing=true; done
  $missing || return 0
  local src=$CACHE/src tree
  tree=$(kube_source)
  # The vendored reflect2 1.0.1 crashes the apiserver under Go >= 1.18; use Debian's 1.0.2.
  local reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -d "$reflect2" ] || die "missing $reflect2 (golang-github-modern-go-reflect2-dev)"
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  mkdir -p "$tree/vendor/github.com/modern-go/reflect2"
  find "$reflect2" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
    -exec cp {} "$tree/vendor/github.com/modern-go/reflect2/" \;
  mkdir -p "$tree/.go/src/k8s.io"
  ln -sfn ../../.. "$tree/.go/src/k8s.io/kubernetes"
  log "building $KUBE_BINARIES (first run: several minutes)"
  local start=$SECONDS
  (
    cd "$tree/.go/src/k8s.io/kubernetes"
    export GOPATH=$tree/.go GOCACHE=$CACHE/go-build CGO_ENABLED=0 GO111MODULE=off GOFLAGS=
    make WHAT="$(printf 'cmd/%s ' $KUBE_BINARIES)" >"$src/build.log" 2>&1
  ) || { tail -n 40 "$src/build.log" >&2; die "kubernetes build failed, see $src/build.log"; }
  mkdir -p "$BIN"
  local out
  for b in $KUBE_BINARIES; do
    out=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n1)
    [ -n "$out" ] || die "built $b not found under $tree/_output"
    cp "$out" "$BIN/$b.tmp" && mv "$BIN/$b.tmp" "$BIN/$b"
  done
  log "built in $((SECONDS - start))s; binaries cached in $BIN"
}

cmd_install() {
  apt_install etcd-server golang-go rsync jq dpkg-dev openssl curl golang-github-modern-go-reflect2-dev prometheus faketime containerd runc containernetworking-plugins busybox-static iptables conntrack
  build_kubernetes
}

# --- PKI ---------------------------------------------------------------------

gen_ca() { # name subject: a self-signed CA, $PKI/name.{crt,key}
  openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -sha256 \
    -subj "$2" -keyout "$PKI/$1.key" -out "$PKI/$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 600 "$PKI/$1.key"
}

gen_cert() { # name subject ca-name ext-file
  local name=$1 subj=$2 ca=$3 ext=$4
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" \
    -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
  chmod 600 "$PKI/$name.key"
}

gen_pki() {
  [ -f "$PKI/.complete" ] && return 0
  log "generating the control plane's PKI in $PKI"
  rm -rf "$PKI"
  mkdir -p "$PKI"
  gen_ca ca "/CN=syncgc-local-ca"
  cat >"$PKI/server.ext" <<'EOF'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1
EOF
  cat >"$PKI/client.ext" <<'EOF'
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
  gen_cert apiserver "/CN=kube-apiserver" ca "$PKI/server.ext"
  gen_cert admin "/O=system:masters/CN=syncgc-admin" ca "$PKI/client.ext"
  gen_cert kcm "/CN=system:kube-controller-manager" ca "$PKI/client.ext"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI/sa.key"
  touch "$PKI/.complete"
}

# A client certificate outside system:masters (PKI made before it existed gets it too).
gen_controller_cert() {
  [ -f "$PKI/controller.crt" ] && return 0
  gen_cert controller "/CN=syncgc-controller" ca "$PKI/client.ext"
}

# The client certificate kube-apiserver presents to webhooks (its admission configuration names
# it for every webhook host), signed by a CA of its own: a webhook that trusts that CA alone
# (syncgc run --webhook-client-ca) answers the apiserver and nobody else.
gen_webhook_client_cert() {
  [ -f "$PKI/webhook-client.crt" ] && return 0
  gen_ca webhook-client-ca "/CN=syncgc-local-webhook-client-ca"
  gen_cert webhook-client "/CN=kube-apiserver-webhook-client" webhook-client-ca "$PKI/client.ext"
}

# The aggregation layer's front proxy: its own CA (the requestheader client CA, published in
# kube-system/extension-apiserver-authentication) and the client certificate the apiserver
# presents to aggregated APIs, with the user it vouches for in X-Remote-* headers.
gen_front_proxy_cert() {
  [ -f "$PKI/front-proxy-client.crt" ] && return 0
  gen_ca front-proxy-ca "/CN=syncgc-local-front-proxy-ca"
  gen_cert front-proxy-client "/CN=front-proxy-client" front-proxy-ca "$PKI/client.ext"
}

# kube-apiserver's admission configuration: the client certificate it presents to every webhook.
write_admission_config() {
  cat >"$DIR/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $PKI/webhook-client.crt
    client-key: $PKI/webhook-client.key
EOF
  cat >"$DIR/admission.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $DIR/webhook-client.kubeconfig
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $DIR/webhook-client.kubeconfig
EOF
}

# The controller user may do everything, as cluster-admin.
bind_controller() {
  local kubectl=("$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE")
  "${kubectl[@]}" get clusterrolebinding syncgc-controller >/dev/null 2>&1 ||
    "${kubectl[@]}" create clusterrolebinding syncgc-controller \
      --clusterrole cluster-admin --user syncgc-controller >/dev/null
}

write_kubeconfig() { # file user
  local file=$1 user=$2
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: syncgc-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$user.crt")
    client-key-data: $(base64 -w0 "$PKI/$user.key")
contexts:
- name: syncgc-local
  context: {cluster: syncgc-local, user: $user}
current-context: syncgc-local
EOF
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}

# --- processes ---------------------------------------------------------------

running() { # name
  local f=$PIDS/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  # The pid must still be the process we started (not a reused pid).
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(cat "$PIDS/$1.cmd" 2>/dev/null)"
}

start() { # name binary args...
  local name=$1; shift
  mkdir -p "$LOGS" "$PIDS"
  log "starting $name (log: $LOGS/$name.log)"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  basename "$1" >"$PIDS/$name.cmd"
}

stop() { # name
  local name=$1 pid
  if running "$name"; then
    pid=$(cat "$PIDS/$name.pid")
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.cmd" "$PIDS/$name.mode"
}

wait_for() { # what seconds command...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.3
  done
  log "$what is ready"
}

apiserver_ready() {
  curl -sf -m 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" | grep -q ok
}

start_etcd() {
  running etcd && return 0
  start etcd "$(command -v etcd)" --name syncgc --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "syncgc=http://127.0.0.1:$ETCD_PEER_PORT" \
    --quota-backend-bytes 4294967296 --unsafe-no-fsync
  wait_for etcd 60 curl -sf -m 5 "http://127.0.0.1:$ETCD_PORT/health" ||
    { tail -n 20 "$LOGS/etcd.log" >&2; die "etcd did not become healthy"; }
}

# Compacts etcd at its current revision (through its gRPC gateway): a watch behind it gets
# 410 Gone and must list again.
compact_etcd() {
  local rev
  rev=$(curl -sf -m 10 -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/range" -d '{"key":"AA=="}' | jq -r .header.revision)
  [ -n "$rev" ] && [ "$rev" != null ] || die "could not read etcd's revision"
  curl -sf -m 10 -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/compaction" -d "{\"revision\":\"$rev\"}" >/dev/null ||
    die "compaction at $rev failed"
  log "etcd compacted at revision $rev"
}

start_apiserver() {
  running kube-apiserver && return 0
  cat >"$DIR/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["syncgc-controller"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
POLICY
  gen_webhook_client_cert
  gen_front_proxy_cert
  write_admission_config
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
    --insecure-port 0 \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --enable-aggregator-routing=true \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
    --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --allow-privileged \
    --max-requests-inflight "${SYNCGC_APISERVER_INFLIGHT:-2000}" \
    --max-mutating-requests-inflight "${SYNCGC_APISERVER_MUTATING_INFLIGHT:-1000}" \
    --enable-priority-and-fairness="${SYNCGC_APISERVER_FLOW_CONTROL:-true}" \
    --watch-cache="${SYNCGC_APISERVER_WATCH_CACHE:-true}" \
    --audit-policy-file "$DIR/audit-policy.yaml" \
    --admission-control-config-file "$DIR/admission.yaml" \
    --audit-log-path "$LOGS/audit.log" --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --audit-log-mode batch --audit-log-batch-max-wait 1s --audit-log-batch-max-size 200 \
    --profiling=false \
    --v 1
  wait_for kube-apiserver 120 apiserver_ready ||
    { tail -n 30 "$LOGS/kube-apiserver.log" >&2; die "kube-apiserver did not become ready"; }
}

kcm_controllers() {
  case $1 in
    gc) echo '*' ;;
    nogc) echo '*,-garbagecollector' ;;
    *) die "unknown kube-controller-manager mode '$1' (gc | nogc | none)" ;;
  esac
}

start_kcm() { # mode
  local mode=$1
  if [ "$mode" = none ]; then stop kube-controller-manager; return 0; fi
  local controllers settings
  local qps=${SYNCGC_KCM_QPS:-20} burst=${SYNCGC_KCM_BURST:-30} gc_syncs=${SYNCGC_KCM_GC_SYNCS:-20}
  controllers=$(kcm_controllers "$mode")
  # A running kube-controller-manager is kept only when it runs with the same settings.
  settings="$mode qps=$qps burst=$burst gc-syncs=$gc_syncs"
  if running kube-controller-manager; then
    [ "$(cat "$PIDS/kube-controller-manager.mode" 2>/dev/null)" = "$settings" ] && return 0
    stop kube-controller-manager
  fi
  write_kubeconfig "$DIR/kcm.kubeconfig" kcm
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kcm.kubeconfig" \
    --authentication-kubeconfig "$DIR/kcm.kubeconfig" \
    --authorization-kubeconfig "$DIR/kcm.kubeconfig" \
    --controllers "$controllers" \
    --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" \
    --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --port 0 \
    --kube-api-qps "$qps" --kube-api-burst "$burst" --concurrent-gc-syncs "$gc_syncs" \
    --v 1
  echo "$settings" >"$PIDS/kube-controller-manager.mode"
  wait_for kube-controller-manager 60 curl -skf -m 5 "https://127.0.0.1:$KCM_PORT/healthz" ||
    { tail -n 30 "$LOGS/kube-controller-manager.log" >&2; die "kube-controller-manager did not become healthy"; }
}

# --- the node ----------------------------------------------------------------
#
# One real node, NODE_NAME, on this machine: containerd (runc, the CNI bridge), kubelet,
# kube-proxy, and kube-scheduler to place Pods on it. Pods get addresses of POD_CIDR on the
# bridge BRIDGE, whose address NODE_IP is the node's: the apiserver listens there too (the
# `kubernetes` Service's endpoint, which Pods reach through kube-proxy), and calls webhooks
# through their Services' endpoints (--enable-aggregator-routing). Images come from no
# registry: the pause image and a busybox image are built here and imported into containerd;
# hack/image.sh imports syncgc's.
#
# The node is tainted NODE_TAINT: Pods that do not tolerate it stay Pending, as they did
# before there was a node (most tests create Pods only as objects to collect); Pods meant to
# run tolerate it.

node_certs() {
  [ -f "$PKI/node.crt" ] && [ -f "$PKI/kubelet-serving.crt" ] && [ -f "$PKI/scheduler.crt" ] &&
    [ -f "$PKI/proxy.crt" ] && return 0
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s,IP:%s\n' \
    "$NODE_NAME" "$NODE_IP" >"$PKI/kubelet-serving.ext"
  gen_cert node "/O=system:nodes/CN=system:node:$NODE_NAME" ca "$PKI/client.ext"
  gen_cert kubelet-serving "/CN=$NODE_NAME" ca "$PKI/kubelet-serving.ext"
  gen_cert scheduler "/CN=system:kube-scheduler" ca "$PKI/client.ext"
  gen_cert proxy "/CN=system:kube-proxy" ca "$PKI/client.ext"
}

# The pause image (the Kubernetes source's pause.c, static) and a busybox one, built once.
node_images() {
  local images=$CACHE/images root
  mkdir -p "$images"
  busybox_image >/dev/null
  if [ ! -f "$images/pause.tar" ]; then
    log "building $PAUSE_IMAGE"
    root=$(mktemp -d)
    gcc -Os -static -DVERSION=v3.4.1 -o "$root/pause" "$(kube_source)/build/pause/linux/pause.c"
    image_archive "$root" "$images/pause.tar" "$PAUSE_IMAGE" '{"Entrypoint": ["/pause"]}'
    rm -rf "$root"
  fi
}

# The workloads' image, syncgc.local/busybox:1.35 (Debian's busybox-static), built once; prints
# its docker-archive's path.
busybox_image() {
  local images=$CACHE/images root
  mkdir -p "$images"
  if [ ! -f "$images/busybox.tar" ]; then
    log "building $BUSYBOX_IMAGE"
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/tmp" "$root/etc"
    chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    local applet
    for applet in sh sleep echo cat ls date kill true false env mkdir rm touch wget nc hostname ps grep sed; do
      ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
    image_archive "$root" "$images/busybox.tar" "$BUSYBOX_IMAGE" \
      '{"Cmd": ["sh"], "Env": ["PATH=/bin"]}'
    rm -rf "$root"
  fi
  echo "$images/busybox.tar"
}

# Imports the docker-archive FILE into the node's containerd unless REF is there already.
node_import() { # ref file
  local present
  present=$(ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls -q)
  grep -qxF "$1" <<<"$present" && return 0
  log "importing $1 into the node"
  ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$2" >/dev/null
}

node_config() {
  mkdir -p "$NODE/cni" "$NODE/kubelet"
  # root here lacks CAP_SYS_RESOURCE, so runc cannot set the negative oom_score_adj the kubelet
  # asks for a Pod's sandbox (and Guaranteed containers): raise it to 0 first.
  cat >"$NODE/runc" <<EOF
#!/bin/sh
bundle= prev=
for a in "\$@"; do
  case \$prev in --bundle | -b) bundle=\$a ;; esac
  prev=\$a
done
config=\$bundle/config.json
if [ -n "\$bundle" ] && grep -q '"oomScoreAdj":-' "\$config" 2>/dev/null; then
  jq -c '.process.oomScoreAdj = 0' "\$config" >"\$config.tmp" && mv "\$config.tmp" "\$config"
fi
exec $(command -v runc) "\$@"
EOF
  chmod 0755 "$NODE/runc"
  cat >"$NODE/containerd.toml" <<EOF
version = 2
root = "$NODE/containerd/root"
state = "$NODE/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$NODE/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE/cni"
EOF
  cat >"$NODE/cni/10-syncgc.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "syncgc",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$NODE/cni-ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
maxPods: 250
EOF
  write_kubeconfig "$NODE/kubelet.kubeconfig" node
  write_kubeconfig "$NODE/scheduler.kubeconfig" scheduler
  write_kubeconfig "$NODE/proxy.kubeconfig" proxy
}

# The bridge the Pods' addresses are on, with the node's address, made before the apiserver
# starts (it advertises that address); the CNI bridge plugin then uses it as it is.
node_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  [[ $(ip -4 -o addr show dev "$BRIDGE") == *" $NODE_IP/"* ]] ||
    ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  echo 1 >/proc/sys/net/ipv4/ip_forward
  echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
}

node_ready() {
  "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" get node "$NODE_NAME" -o json 2>/dev/null | jq -e '
    ([.status.conditions[] | select(.type == "Ready" and .status == "True")] | length == 1) and
    ([.spec.taints[]? | select(.key | startswith("node.kubernetes.io/"))] | length == 0)' >/dev/null
}

start_node() {
  node_certs
  node_images
  node_config
  if ! running containerd; then
    start containerd "$(command -v containerd)" --config "$NODE/containerd.toml"
    wait_for containerd 30 ctr -a "$CONTAINERD_SOCK" version ||
      { tail -n 20 "$LOGS/containerd.log" >&2; die "containerd did not start"; }
  fi
  node_import "$PAUSE_IMAGE" "$CACHE/images/pause.tar"
  node_import "$BUSYBOX_IMAGE" "$CACHE/images/busybox.tar"
  running kubelet || start kubelet "$BIN/kubelet" \
    --config "$NODE/kubelet.yaml" --kubeconfig "$NODE/kubelet.kubeconfig" \
    --container-runtime remote --container-runtime-endpoint "unix://$CONTAINERD_SOCK" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --root-dir "$NODE/kubelet" \
    --register-with-taints "$NODE_TAINT" --v 1
  running kube-proxy || start kube-proxy "$BIN/kube-proxy" \
    --kubeconfig "$NODE/proxy.kubeconfig" --hostname-override "$NODE_NAME" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" \
    --metrics-bind-address "127.0.0.1:$PROXY_METRICS_PORT" \
    --healthz-bind-address "127.0.0.1:$PROXY_HEALTHZ_PORT" \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 \
    --conntrack-tcp-timeout-close-wait 0 --v 1
  running kube-scheduler || start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$NODE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$NODE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$NODE/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --port 0 --v 1
  # Ready once the kubelet reports it and the node lifecycle controller has lifted its
  # not-ready taint.
  wait_for "node $NODE_NAME" 120 node_ready ||
    { tail -n 30 "$LOGS/kubelet.log" >&2; die "node $NODE_NAME did not become Ready"; }
}

stop_node() {
  stop kube-scheduler
  stop kube-proxy
  stop kubelet
  if running containerd; then
    # The Pods' containers outlive containerd (each has its own shim): kill them first.
    local task
    for task in $(ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null || true
  # What the kubelet and containerd mounted (volumes, root filesystems, network namespaces).
  awk -v node="$NODE/" 'index($2, node) == 1 {print $2}' /proc/mounts | sort -r |
    xargs -r -n1 umount -l 2>/dev/null || true
  [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
}

cmd_up() {
  local mode=gc
  while [ $# -gt 0 ]; do
    case $1 in
      --kcm) mode=${2:?--kcm needs gc, nogc or none}; shift 2 ;;
      --kcm=*) mode=${1#--kcm=}; shift ;;
      *) die "unknown argument '$1'" ;;
    esac
  done
  [ "$mode" = none ] || kcm_controllers "$mode" >/dev/null
  cmd_install
  mkdir -p "$DIR"
  gen_pki
  gen_controller_cert
  write_kubeconfig "$KUBECONFIG_FILE" admin
  write_kubeconfig "$DIR/controller.kubeconfig" controller
  node_bridge
  start_etcd
  start_apiserver
  bind_controller
  start_kcm "$mode"
  start_node
  log "control plane up: KUBECONFIG=$KUBECONFIG_FILE"
}

cmd_down() {
  stop_node
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
}

cmd_status() {
  local rc=0
  for n in etcd kube-apiserver kube-controller-manager containerd kubelet kube-proxy kube-scheduler; do
    if running "$n"; then
      local extra=""
      [ -f "$PIDS/$n.mode" ] && extra=" mode=$(cat "$PIDS/$n.mode")"
      echo "$n: running (pid $(cat "$PIDS/$n.pid"))$extra"
    else
      echo "$n: stopped"
      [ "$n" = kube-controller-manager ] || rc=1
    fi
  done
  echo "kubeconfig: $KUBECONFIG_FILE"
  echo "logs: $LOGS"
  return $rc
}

case ${1:-} in
  install) cmd_install ;;
  up) shift; cmd_up "$@" ;;
  kcm) [ $# -eq 2 ] || die "usage: $0 kcm gc|nogc|none"; start_kcm "$2" ;;
  restart-apiserver) stop kube-apiserver; start_apiserver ;;
  restart-etcd) stop etcd; start_etcd ;;
  compact) compact_etcd ;;
  busybox-image) apt_install busybox-static jq; busybox_image ;;
  kubelet)
    case ${2:-} in
      stop) stop kubelet ;;
      start) start_node ;;
      *) die "usage: $0 kubelet stop|start" ;;
    esac
    ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) printf 'export KUBECONFIG=%q SYNCGC_KUBECONFIG=%q PATH=%q:"$PATH"\n' \
    "$KUBECONFIG_FILE" "$KUBECONFIG_FILE" "$BIN" ;;
  *) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 2 ;;
esac
