#!/usr/bin/env bash
# Deletion order against the control plane and syncgc that hack/run.sh runs: an opted-in
# owner ("shop") whose dependents are a Deployment (wave 2), its ConfigMap and Secret (wave 1)
# and a PersistentVolumeClaim (wave 0, the default). The Deployment carries a finalizer of the
# demo's own for two seconds, as a workload that takes its time to shut down.
# `kubectl delete configmap shop` deletes the Deployment first (with its ReplicaSet and Pods),
# then, once it is gone, the ConfigMap and the Secret, then the claim, and returns when all of
# them are gone; each object's changes are printed as they happen.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(hack/cluster.sh env)"
ns=${SYNCGC_DEMO_NAMESPACE:-syncgc-demo-order}
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null

kubectl create -n "$ns" -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop
  annotations:
    syncgc.io/synchronous: "true"
YAML
uid=$(kubectl get configmap shop -n "$ns" -o jsonpath='{.metadata.uid}')
owner="ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: shop, uid: $uid, blockOwnerDeletion: true}]"

kubectl create -n "$ns" -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {syncgc.io/deletion-order: "2"}
  finalizers: [demo.syncgc.io/shutdown]
  $owner
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.k8s.io/pause:3.9}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  annotations: {syncgc.io/deletion-order: "1"}
  $owner
---
apiVersion: v1
kind: Secret
metadata:
  name: web-secret
  annotations: {syncgc.io/deletion-order: "1"}
  $owner
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  $owner
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
YAML
sleep 2
objects=(deployment/web configmap/web-config secret/web-secret persistentvolumeclaim/data)
kubectl get "${objects[@]}" -n "$ns"

# Prints each object's changes (being deleted, gone), with the milliseconds since the DELETE.
start=$(date +%s%N)
(
  declare -A was
  while :; do
    now=$(kubectl get "${objects[@]}" -n "$ns" --ignore-not-found \
      -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.deletionTimestamp}{"\n"}{end}')
    for o in "${objects[@]}"; do
      name=${o#*/}
      line=$(grep "/$name=" <<<"$now" || true)
      state=present
      [ -z "$line" ] && state=gone
      [ -n "${line#*=}" ] && state="being deleted"
      if [ "${was[$name]:-present}" != "$state" ]; then
        echo "  $((($(date +%s%N) - start) / 1000000)) ms: ${o%%/*} $name $state"
        was[$name]=$state
      fi
    done
    [ -z "$now" ] && break
    sleep 0.05
  done
) &
# The Deployment's shutdown takes two seconds.
(sleep 2 && kubectl patch deployment web -n "$ns" --type merge \
  -p '{"metadata":{"finalizers":null}}' >/dev/null) &

echo
echo "kubectl delete configmap shop: the Deployment first, then its ConfigMap and Secret, then the claim"
kubectl delete configmap shop -n "$ns"
echo "returned after $((($(date +%s%N) - start) / 1000000)) ms"
wait
kubectl get events -n "$ns" --field-selector reason=SyncGCWave --sort-by=.eventTime \
  -o custom-columns=REASON:.reason,MESSAGE:.message 2>/dev/null || true
