#!/usr/bin/env bash
# Cuts a release of syncgc: hack/release.sh VERSION [OUT]
#
#   1. stamps VERSION into Cargo.toml (and Cargo.lock) and the chart (version, appVersion);
#   2. cuts the CHANGELOG: what stands under "Unreleased" becomes the section of VERSION;
#   3. pins the release's image (ghcr.io/syncgc/syncgc:vVERSION; SYNCGC_RELEASE_IMAGE overrides
#      the repository) in manifests/ and renders install.yaml and install-1.20.yaml with it;
#   4. packages the chart (syncgc-VERSION.tgz);
#   5. builds the syncgc binary for this machine (linux/amd64 or linux/arm64), archived as
#      syncgc-VERSION-linux-ARCH.tar.gz with the LICENSE (on the PATH as kubectl-syncgc it is
#      a kubectl plugin); SYNCGC_BINARY names a binary already built instead;
#   6. writes the krew plugin manifest (syncgc.krew.yaml) for the archives in OUT, and
#      SHA256SUMS of every file.
#
# OUT defaults to dist/ (not committed). The container image for amd64 and arm64 is built and
# pushed by .github/workflows/release.yaml on the tag, where a container engine and the
# registry are at hand; the workflow runs this script too, with both binaries in OUT.
# Everything here runs offline: helm and kubectl come from hack/tools.sh, kubectl 1.20 from
# hack/cluster.sh install.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:?usage: hack/release.sh VERSION [OUT]}
out=${2:-dist}
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "hack/release.sh: $version is not a version such as 0.1.0 or 0.2.0-rc.1" >&2
  exit 1
fi
repository=${SYNCGC_RELEASE_IMAGE:-ghcr.io/syncgc/syncgc}
home=https://github.com/syncgc/syncgc
image=$repository:v$version
log() { printf '[release] %s\n' "$*" >&2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

# 1. The version, where it is written.
log "stamping $version"
sed -i "0,/^version = \".*\"/s//version = \"$version\"/" Cargo.toml
awk -v v="$version" '
  /^name = "syncgc"$/ { print; getline; sub(/version = ".*"/, "version = \"" v "\"") }
  { print }' Cargo.lock >Cargo.lock.new && mv Cargo.lock.new Cargo.lock
sed -i -e "s/^version: .*/version: $version/" -e "s/^appVersion: .*/appVersion: \"$version\"/" \
  charts/syncgc/Chart.yaml
# The manifests pin the release's image: kustomize's images entry, and the uninstall Job.
sed -i -e "s#^    newName: .*#    newName: $repository#" -e "s#^    newTag: .*#    newTag: v$version#" \
  manifests/base/kustomization.yaml
sed -i "s#^\( *image: \).*#\1$image#" manifests/uninstall/job.yaml

# 2. The changelog: Unreleased becomes VERSION, and a new empty Unreleased stands above it.
if grep -Eq "^## $version( |$)" CHANGELOG.md; then
  log "CHANGELOG.md already has $version"
else
  log "cutting CHANGELOG.md"
  sed -i "0,/^## Unreleased$/s//## Unreleased\n\n## $version — $(date -u +%Y-%m-%d)/" CHANGELOG.md
fi
awk -v v="$version" '
  index($0, "## " v " ") == 1 { on = 1; next }
  on && /^## / { exit }
  on { print }' CHANGELOG.md >"$out/RELEASE_NOTES.md"

# 3. The single-file installs, with the release's image (from the kustomization).
log "rendering install.yaml and install-1.20.yaml for $image"
hack/install.sh
cp manifests/install.yaml manifests/install-1.20.yaml "$out/"
cp manifests/uninstall/job.yaml "$out/uninstall.yaml"

# 4. The chart.
helm=$(hack/tools.sh helm)
log "packaging the chart"
"$helm" package charts/syncgc --version "$version" --app-version "$version" \
  --destination "$out" >/dev/null

# 5. The binary of this machine.
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "hack/release.sh: no release binary for $(uname -m)" >&2; exit 1 ;;
esac
binary=${SYNCGC_BINARY:-}
if [ -z "$binary" ]; then
  log "building syncgc (release profile)"
  SYNCGC_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown) \
    cargo build --locked --release --bin syncgc
  binary=${CARGO_TARGET_DIR:-target}/release/syncgc
fi
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
install -m 0755 "$binary" "$staging/syncgc"
cp LICENSE "$staging/"
tar -C "$staging" -czf "$out/syncgc-$version-linux-$arch.tar.gz" syncgc LICENSE

# 6. The krew manifest, for every archive in OUT, and the checksums.
log "writing syncgc.krew.yaml and SHA256SUMS"
{
  cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: syncgc
spec:
  version: v$version
  homepage: $home
  shortDescription: Explain, check and disarm synchronous garbage collection
  description: |
    The command line of syncgc, synchronous garbage collection for Kubernetes:
    kubectl syncgc check (is syncgc working here?), explain (what keeps an object from
    going), and disarm (take syncgc's finalizer off every object, for uninstalling).
  platforms:
EOF
  for archive in "$out"/syncgc-"$version"-linux-*.tar.gz; do
    a=${archive##*-linux-}
    a=${a%.tar.gz}
    cat <<EOF
    - selector:
        matchLabels:
          os: linux
          arch: $a
      uri: $home/releases/download/v$version/$(basename "$archive")
      sha256: $(sha256sum "$archive" | cut -d' ' -f1)
      bin: syncgc
EOF
  done
} >"$out/syncgc.krew.yaml"
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort \
  | xargs sha256sum >SHA256SUMS)
log "release $version in $out:"
ls -1 "$out" >&2
