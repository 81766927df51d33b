#!/usr/bin/env bash
# A tour of synchronous deletion on the local cluster's real node, against the syncgc that
# hack/run.sh installs: a Deployment whose two Pods take three seconds to stop after SIGTERM,
# deleted with `kubectl delete` once opted in (it returns when the Pods are gone) and once
# not (it returns while they still stop).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(hack/cluster.sh env)"
ns=${SYNCGC_DEMO_NAMESPACE:-syncgc-demo}
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null

deployment() { # name annotations
  kubectl apply -n "$ns" -f - >/dev/null <<JSON
{"apiVersion": "apps/v1", "kind": "Deployment",
 "metadata": {"name": "$1", "annotations": $2},
 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "$1"}},
  "template": {"metadata": {"labels": {"app": "$1"}},
   "spec": {"tolerations": [{"key": "syncgc.io/node", "operator": "Exists"}],
    "containers": [{"name": "app", "image": "syncgc.local/busybox:1.35", "imagePullPolicy": "Never",
     "command": ["sh", "-c", "trap 'sleep 3; exit 0' TERM; sleep 3600 & wait"]}]}}}}
JSON
  kubectl rollout status -n "$ns" "deployment/$1" --timeout 2m >/dev/null
}

delete() { # name
  local start
  echo "\$ kubectl delete deployment $1"
  start=$(date +%s%N)
  kubectl delete -n "$ns" "deployment/$1"
  echo "returned after $((($(date +%s%N) - start) / 1000000)) ms; Pods of $1 left:"
  kubectl get pods -n "$ns" -l "app=$1" --no-headers 2>&1 | sed 's/^/  /'
}

deployment web '{"syncgc.io/synchronous": "true"}'
echo "Deployment web, opted in; its ReplicaSet and Pods:"
kubectl get replicasets,pods -n "$ns" -l app=web --no-headers | sed 's/^/  /'
delete web
echo
deployment plain '{}'
echo "Deployment plain, not opted in:"
delete plain
kubectl wait --for=delete pod -n "$ns" -l app=plain --timeout 2m >/dev/null 2>&1 || true
