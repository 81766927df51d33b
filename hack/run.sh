#!/usr/bin/env bash
# syncgc's main job on the embedded default: starts the local control plane (kube-apiserver,
# etcd and kube-controller-manager, see hack/cluster.sh), builds syncgc and runs it against that
# control plane until Ctrl-C. Extra arguments go to `syncgc run`.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/cluster.sh up --kcm "${SYNCGC_KCM:-gc}"
eval "$(hack/cluster.sh env)"
cargo build --locked --release
exec target/release/syncgc run \
  --kubeconfig "$SYNCGC_KUBECONFIG" \
  --metrics-addr "${SYNCGC_METRICS_ADDR:-127.0.0.1:9090}" \
  "$@"
