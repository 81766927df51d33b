#!/usr/bin/env bash
# Renders the single-file installs from the kustomizations: manifests/install.yaml (Kubernetes
# 1.21 or later) and manifests/install-1.20.yaml (Kubernetes 1.20), with the image the
# kustomization names (hack/release.sh pins each release's), or SYNCGC_IMAGE (such as
# registry.example/syncgc:dev or a digest). With --check, renders into a temporary
# directory and fails if the committed files differ (tests/lifecycle/manifests.rs runs it).
#
# Each is built by the kubectl its users run: manifests/ by a current one (SYNCGC_KUBECTL,
# default hack/tools.sh's kubectl 1.34; kustomize v4 or later), manifests/kubernetes-1.20/ by
# kubectl 1.20 (kustomize v2, from hack/cluster.sh install). A kustomize warning fails the
# build.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${SYNCGC_IMAGE:-}
current=${SYNCGC_KUBECTL:-$(hack/tools.sh kubectl)}
cache=${SYNCGC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncgc}
kubectl_1_20=$cache/kubernetes-1.20.2/bin/kubectl
for bin in "$current" "$kubectl_1_20"; do
  [ -x "$bin" ] || { echo "hack/install.sh: no kubectl at $bin (hack/cluster.sh install builds 1.20's)" >&2; exit 1; }
done
out=manifests
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
render() { # kubectl, kustomization, file, what it is for
  local warnings
  warnings=$(mktemp)
  {
    echo "# syncgc $4: kubectl apply -f $3"
    echo "# Rendered by hack/install.sh from $2 (do not edit)."
    "$1" kustomize "$2" 2>"$warnings" | if [ -n "$image" ]; then sed "s#^\( *image: \).*#\1$image#"; else cat; fi
  } >"$out/$3"
  if [ -s "$warnings" ]; then
    echo "$1 kustomize $2 warns:" >&2
    cat "$warnings" >&2
    rm -f "$warnings"
    exit 1
  fi
  rm -f "$warnings"
}
render "$current" manifests install.yaml "for Kubernetes 1.21 or later"
render "$kubectl_1_20" manifests/kubernetes-1.20 install-1.20.yaml "for Kubernetes 1.20"
if [ "$out" != manifests ]; then
  for file in install.yaml install-1.20.yaml; do
    if ! diff -u "manifests/$file" "$out/$file"; then
      echo "manifests/$file is not what the kustomizations render: run hack/install.sh" >&2
      exit 1
    fi
  done
  echo "install.yaml and install-1.20.yaml are up to date"
fi
