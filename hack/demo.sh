#!/usr/bin/env bash
# A tour of synchronous deletion against the control plane and syncgc that hack/run.sh runs:
# an opted-in owner, three children, nine grandchildren (one held for five seconds by a
# finalizer of its own), and a `kubectl delete` of the owner that returns only when all of
# them are gone.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(hack/cluster.sh env)"
ns=${SYNCGC_DEMO_NAMESPACE:-syncgc-demo}
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null

# create NAME OWNER_NAME OWNER_UID [ANNOTATED] [FINALIZER] -> prints the new object's uid
create() {
  local owners='[]' annotations='{}' finalizers='[]'
  [ -n "$2" ] && owners="[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"$2\",\"uid\":\"$3\",\"blockOwnerDeletion\":true}]"
  [ "${4:-}" = annotated ] && annotations='{"syncgc.io/synchronous":"true"}'
  [ -n "${5:-}" ] && finalizers="[\"$5\"]"
  kubectl create -n "$ns" -o jsonpath='{.metadata.uid}' -f - <<JSON
{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"$1","annotations":$annotations,
 "ownerReferences":$owners,"finalizers":$finalizers}}
JSON
}

owner_uid=$(create owner "" "" annotated)
echo "owner: finalizers $(kubectl get configmap owner -n "$ns" -o jsonpath='{.metadata.finalizers}')"
for c in 1 2 3; do
  child_uid=$(create "child-$c" owner "$owner_uid")
  for g in 1 2 3; do
    hold=""
    [ "$c$g" = 33 ] && hold=demo.syncgc.io/hold
    create "grandchild-$c-$g" "child-$c" "$child_uid" "" "$hold" >/dev/null
  done
done
kubectl get configmaps -n "$ns"

# Let go of the held grandchild after five seconds.
(sleep 5 && kubectl patch configmap grandchild-3-3 -n "$ns" --type merge \
  -p '{"metadata":{"finalizers":null}}' >/dev/null) &

echo
echo "kubectl delete configmap owner: returns when the whole tree is gone"
start=$(date +%s%N)
kubectl delete configmap owner -n "$ns"
echo "returned after $((($(date +%s%N) - start) / 1000000)) ms; left in $ns:"
kubectl get configmaps -n "$ns"
kubectl get events -n "$ns" --field-selector reason=SyncGCReleased -o custom-columns=REASON:.reason,MESSAGE:.message 2>/dev/null || true
wait
