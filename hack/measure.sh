#!/usr/bin/env bash
# Measures syncgc on the local control plane (kube-controller-manager with its own GC, i.e.
# cooperative mode): the time from `kubectl delete` of an opted-in owner with N dependents to
# its disappearance, and syncgc's resident memory with TOTAL objects watched.
#   hack/measure.sh [N [TOTAL]]     defaults: 1000 10000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
total=${2:-10000}
ns=syncgc-measure

hack/cluster.sh up --kcm gc >/dev/null
eval "$(hack/cluster.sh env)"
cargo build --locked --release -q
work=$(mktemp -d)
target/release/syncgc certs --out "$work" --dns localhost --ip 127.0.0.1 2>/dev/null
port=18443
kubectl get namespace syncgc-system >/dev/null 2>&1 || kubectl create namespace syncgc-system >/dev/null
kubectl delete namespace "$ns" --ignore-not-found --timeout=300s >/dev/null
while kubectl get namespace "$ns" >/dev/null 2>&1; do sleep 1; done
kubectl create namespace "$ns" >/dev/null
kubectl label namespace "$ns" "kubernetes.io/metadata.name=$ns" syncgc.io/measure=true --overwrite >/dev/null
target/release/syncgc webhook-config --name syncgc-measure --url "https://127.0.0.1:$port/mutate" \
  --ca-file "$work/ca.crt" --exclude-namespace kube-system |
  jq '.webhooks[0].namespaceSelector = {"matchLabels": {"syncgc.io/measure": "true"}}' |
  kubectl apply -f - >/dev/null

target/release/syncgc run --kubeconfig "$SYNCGC_KUBECONFIG" --webhook-addr "127.0.0.1:$port" \
  --metrics-addr 127.0.0.1:19090 --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" \
  --leader-election=false 2>"$work/syncgc.log" &
pid=$!
cleanup() {
  # While syncgc still runs, so that nothing it armed is left behind.
  kubectl delete namespace "$ns" --ignore-not-found --timeout=300s >/dev/null || true
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kubectl delete mutatingwebhookconfiguration syncgc-measure --ignore-not-found >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
until curl -sf 127.0.0.1:19090/readyz >/dev/null; do sleep 0.2; done
observed() { curl -s 127.0.0.1:19090/metrics | awk '/^syncgc_graph_nodes\{kind="observed"\}/ {print $2}'; }
sleep 5 # the graph gauges are refreshed every 5 seconds
baseline=$(observed)

owner_uid=$(kubectl create -n "$ns" -o jsonpath='{.metadata.uid}' -f - <<JSON
{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner","annotations":{"syncgc.io/synchronous":"true"}}}
JSON
)
# N dependents of the owner, and unrelated objects up to TOTAL.
jq -n --argjson n "$n" --argjson total "$total" --arg uid "$owner_uid" '{
  apiVersion: "v1", kind: "List",
  items: [range(0; $total - 1) | {apiVersion: "v1", kind: "ConfigMap", metadata: ({name: "cm-\(.)"} +
    (if . < $n then {ownerReferences: [{apiVersion: "v1", kind: "ConfigMap", name: "owner",
      uid: $uid, blockOwnerDeletion: true}]} else {} end))}]
}' >"$work/objects.json"
start=$(date +%s%N)
kubectl create -n "$ns" -f "$work/objects.json" >/dev/null
echo "created $((total - 1)) ConfigMaps ($n dependents) in $((($(date +%s%N) - start) / 1000000)) ms"
until [ "$(observed)" -ge $((baseline + total)) ]; do sleep 1; done
echo "syncgc resident memory with $(observed) objects in its graph: $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")"

start=$(date +%s%N)
kubectl delete configmap owner -n "$ns" --timeout=600s >/dev/null
echo "kubectl delete of the owner with $n dependents returned after $((($(date +%s%N) - start) / 1000000)) ms"
echo "dependents left: $(kubectl get configmaps -n "$ns" -o name | grep -c -v -e 'cm-[0-9]*$' -e kube-root-ca || true) owner, $(kubectl get configmaps -n "$ns" -o json | jq '[.items[] | select(.metadata.ownerReferences != null)] | length') with owner references"
