#!/usr/bin/env bash
# syncgc's main job as a user runs it: starts the local cluster (etcd, kube-apiserver,
# kube-controller-manager with its own GC, and a real node; see hack/cluster.sh), builds
# syncgc's image from this checkout and imports it into the node (hack/image.sh), installs the
# chart with it (helm upgrade --install, values hack/local-node/values.yaml), runs `syncgc
# check` (waiting up to a minute for a replica to take the leader Lease over), and follows the leader's log until Ctrl-C, which uninstalls the release (its
# pre-delete Job disarms every armed object). Extra arguments go to helm (such as
# --set mode=standalone, with SYNCGC_KCM=nogc).
set -euo pipefail
cd "$(dirname "$0")/.."

hack/cluster.sh up --kcm "${SYNCGC_KCM:-gc}"
eval "$(hack/cluster.sh env)"
helm=$(hack/tools.sh helm)
image=$(hack/image.sh)
bin=${CARGO_TARGET_DIR:-target}/release/syncgc
ns=syncgc-system

# Kubernetes labels namespaces with their name only from 1.21 on; the webhook's namespace
# exclusions select on that label.
for n in kube-system kube-node-lease "$ns"; do
  kubectl get namespace "$n" >/dev/null 2>&1 || kubectl create namespace "$n" >/dev/null
  kubectl label namespace "$n" "kubernetes.io/metadata.name=$n" --overwrite >/dev/null
done

echo "installing the chart with $image"
# --take-ownership --force-conflicts: what an earlier install or the tests left in syncgc-system
# becomes the release's.
"$helm" upgrade --install syncgc charts/syncgc --namespace "$ns" --take-ownership --force-conflicts \
  -f hack/local-node/values.yaml --set "image.tag=${image##*:}" --wait --timeout 5m "$@"
# A replica killed earlier (the last run's, a test's) may still hold the Lease: the new ones
# take it over within its duration.
"$bin" check --wait 60s || true

follower=
uninstall() {
  trap - INT TERM
  [ -z "$follower" ] || kill "$follower" 2>/dev/null || true
  echo
  echo "uninstalling (the pre-delete Job stops syncgc and disarms every armed object)"
  "$helm" uninstall syncgc --namespace "$ns" --wait --timeout 5m
  exit 0
}
trap uninstall INT TERM
leader=$(kubectl get lease syncgc -n "$ns" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
echo "syncgc runs in $ns (leader: ${leader:-none yet}); its log follows. Ctrl-C uninstalls it."
while true; do
  kubectl logs -f -n "$ns" "${leader:+pod/}${leader:-deployment/syncgc}" || sleep 2
  leader=$(kubectl get lease syncgc -n "$ns" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
done &
follower=$!
wait "$follower" || true
