#!/usr/bin/env bash
# Cascade deletion on the local control plane, kube-controller-manager's own garbage collector
# against `syncgc run --mode standalone` (with kube-controller-manager's GC off), in the same
# run, at the same client rate limit: an owner ConfigMap with N ConfigMap dependents is deleted
# in the background and in the foreground, and the time until everything is gone and the API
# requests on configmaps (GET, DELETE, PATCH, UPDATE, from apiserver_request_total) per
# collected object are printed, with syncgc's as a ratio of the native GC's.
#   hack/bench.sh [N]      default 1000
# Then syncgc's cascade unthrottled (qps 1000 / burst 2000, CONCURRENCY workers).
# Environment: SYNCGC_BENCH_QPS / SYNCGC_BENCH_BURST (default 20 / 30, kube-controller-manager's
# defaults) for both collectors; SYNCGC_BENCH_CONCURRENCY (default 16).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
qps=${SYNCGC_BENCH_QPS:-20}
burst=${SYNCGC_BENCH_BURST:-30}
concurrency=${SYNCGC_BENCH_CONCURRENCY:-16}
export SYNCGC_KCM_QPS=$qps SYNCGC_KCM_BURST=$burst

hack/cluster.sh up --kcm none >/dev/null
eval "$(hack/cluster.sh env)"
cargo build --locked --release -q
dir=${SYNCGC_CLUSTER_DIR:-/tmp/syncgc-cluster}
api=https://127.0.0.1:${SYNCGC_APISERVER_PORT:-26443}
work=$(mktemp -d)
pid=
cleanup() {
  [ -z "$pid" ] || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT

call() { curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$@"; }
requests() {
  call "$api/metrics" | awk '/^apiserver_request_total\{/ && /resource="configmaps"/ &&
    /verb="(GET|DELETE|PATCH|UPDATE)"/ { s += $NF } END { printf "%d\n", s }'
}
left() { kubectl get configmaps -n "$1" -o name | grep -c -v kube-root-ca || true; }

start_syncgc() { # qps burst workers
  target/release/syncgc run --mode standalone --kubeconfig "$SYNCGC_KUBECONFIG" \
    --webhook-addr 127.0.0.1:18444 --metrics-addr 127.0.0.1:19091 \
    --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" --leader-election=false \
    --qps "$1" --burst "$2" --workers "$3" 2>>"$work/syncgc.log" &
  pid=$!
  until curl -sf 127.0.0.1:19091/readyz >/dev/null; do sleep 0.2; done
}

stop_syncgc() {
  kill "$pid" && wait "$pid" 2>/dev/null || true
  pid=
}

# One cascade: prints "milliseconds requests".
cascade() { # policy
  local ns="bench-$RANDOM$RANDOM" uid before start
  kubectl create namespace "$ns" >/dev/null
  uid=$(kubectl create -n "$ns" -o jsonpath='{.metadata.uid}' -f - <<<'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}')
  jq -n --argjson n "$n" --arg uid "$uid" '{apiVersion: "v1", kind: "List", items: [range(0; $n) |
    {apiVersion: "v1", kind: "ConfigMap", metadata: {name: "d-\(.)", ownerReferences: [{apiVersion: "v1",
     kind: "ConfigMap", name: "owner", uid: $uid, blockOwnerDeletion: true}]}}]}' >"$work/objects.json"
  kubectl create -n "$ns" -f "$work/objects.json" >/dev/null
  sleep 5 # both collectors have seen every object
  before=$(requests)
  start=$(date +%s%N)
  call -X DELETE -H 'Content-Type: application/json' -d "{\"propagationPolicy\":\"$1\"}" \
    "$api/api/v1/namespaces/$ns/configmaps/owner" >/dev/null
  until [ "$(left "$ns")" -eq 0 ]; do sleep 0.5; done
  echo "$((($(date +%s%N) - start) / 1000000)) $(($(requests) - before - 1))"
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

declare -A result
hack/cluster.sh kcm gc >/dev/null
sleep 20 # kube-controller-manager's GC collects once its graph has synced
for policy in Background Foreground; do
  result[native-$policy]=$(cascade $policy)
  echo "kube-controller-manager $policy: ${result[native-$policy]}" >&2
done

hack/cluster.sh kcm nogc >/dev/null
target/release/syncgc certs --out "$work" --dns localhost --ip 127.0.0.1 2>/dev/null
start_syncgc "$qps" "$burst" 8
for policy in Background Foreground; do
  result[syncgc-$policy]=$(cascade $policy)
  echo "syncgc standalone $policy: ${result[syncgc-$policy]}" >&2
done
stop_syncgc

# Unthrottled: a generous client limit.
start_syncgc 1000 2000 "$concurrency"
for policy in Background Foreground; do
  result[unthrottled-$policy]=$(cascade $policy)
  echo "syncgc standalone unthrottled $policy: ${result[unthrottled-$policy]}" >&2
done
stop_syncgc

echo
echo "$n dependents, flat, client limit qps $qps / burst $burst ($(date -u +%F), $(nproc) cores)"
printf '%-12s %14s %14s %8s %18s %18s\n' policy "native s" "syncgc s" ratio "native req/obj" "syncgc req/obj"
for policy in Background Foreground; do
  read -r nt nr <<<"${result[native-$policy]}"
  read -r st sr <<<"${result[syncgc-$policy]}"
  awk -v p="$policy" -v nt="$nt" -v st="$st" -v nr="$nr" -v sr="$sr" -v n="$n" 'BEGIN {
    printf "%-12s %14.1f %14.1f %8.2f %18.2f %18.2f\n", p, nt / 1000, st / 1000, st / nt, nr / n, sr / n }'
done

echo
echo "unthrottled: syncgc standalone at qps 1000 / burst 2000 with $concurrency workers"
printf '%-12s %14s %18s\n' policy "syncgc s" "syncgc req/obj"
for policy in Background Foreground; do
  read -r ut ur <<<"${result[unthrottled-$policy]}"
  awk -v p="$policy" -v ut="$ut" -v ur="$ur" -v n="$n" 'BEGIN {
    printf "%-12s %14.1f %18.2f\n", p, ut / 1000, ur / n }'
done
