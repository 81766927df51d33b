#!/usr/bin/env bash
# syncgc's main job on the embedded default: starts the local control plane (etcd,
# kube-apiserver and kube-controller-manager with its own GC; see hack/cluster.sh) and runs
# syncgc until Ctrl-C as the manifests deploy it: it registers its own webhook and keeps its CA
# and serving certificate in the Secret syncgc-system/syncgc-webhook-tls (the apiserver reaches
# it by URL here, by its Service in a cluster). Then the webhook is unregistered. Extra
# arguments go to `syncgc run`.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/cluster.sh up --kcm "${SYNCGC_KCM:-gc}"
eval "$(hack/cluster.sh env)"
cargo build --locked --release
bin=target/release/syncgc
port=${SYNCGC_WEBHOOK_PORT:-8443}

# Kubernetes labels namespaces with their name only from 1.21 on; the webhook's namespace
# exclusions select on that label.
for ns in kube-system kube-node-lease syncgc-system; do
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" "kubernetes.io/metadata.name=$ns" --overwrite >/dev/null
done

"$bin" run \
  --kubeconfig "$SYNCGC_KUBECONFIG" \
  --webhook-addr "127.0.0.1:$port" \
  --manage-webhook --webhook-url "https://127.0.0.1:$port/mutate" \
  --tls-secret syncgc-system/syncgc-webhook-tls \
  --debug-graph \
  --metrics-addr "${SYNCGC_METRICS_ADDR:-127.0.0.1:9090}" \
  "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' INT TERM
status=0
wait $pid || status=$?
wait $pid 2>/dev/null || true
kubectl delete mutatingwebhookconfiguration syncgc --ignore-not-found >/dev/null
exit $status
