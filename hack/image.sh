#!/usr/bin/env bash
# syncgc's image from a checkout, without a registry or a Docker engine: the release binary on
# the runtime layout of the Dockerfile's final stage (distroless cc: glibc and libgcc_s, the CA
# certificates, /etc/passwd with nonroot; user 65532, entrypoint /usr/local/bin/syncgc, command
# run), as a docker-archive tarball, imported into the local node's containerd
# (hack/cluster.sh). Prints the image's reference.
#
#   hack/image.sh                 build, import into the node, print syncgc.local/syncgc:dev
#   hack/image.sh --out FILE      build and write the tarball only (`kind load image-archive
#                                 FILE`, `docker load -i FILE`, `ctr images import FILE`)
#
# SYNCGC_IMAGE_LOAD=kind loads it into the kind cluster KIND_CLUSTER_NAME [kind] instead of
# the local node.
#
# Environment: SYNCGC_IMAGE_REF [syncgc.local/syncgc:dev]; SYNCGC_BINARY, a syncgc binary to
# put in the image instead of building the release profile's (the tests give theirs);
# CARGO_TARGET_DIR as cargo's.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/oci.sh
. hack/oci.sh

ref=${SYNCGC_IMAGE_REF:-syncgc.local/syncgc:dev}
out=
case ${1:-} in
  --out) out=${2:?--out needs a file} ;;
  "") ;;
  *) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac

log() { printf '[image] %s\n' "$*" >&2; }

bin=${SYNCGC_BINARY:-}
if [ -z "$bin" ]; then
  cargo build --locked --release --bin syncgc >&2
  bin=${CARGO_TARGET_DIR:-target}/release/syncgc
fi

root=$(mktemp -d)
archive=$(mktemp)
trap 'rm -rf "$root" "$archive"' EXIT
install -D -m 0755 "$bin" "$root/usr/local/bin/syncgc"
# The shared libraries the binary loads, where the dynamic loader looks for them.
ldd "$bin" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
chmod 1777 "$root/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
image_archive "$root" "$archive" "$ref" '{
  "User": "65532:65532",
  "Entrypoint": ["/usr/local/bin/syncgc"],
  "Cmd": ["run"],
  "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
  "ExposedPorts": {"8443/tcp": {}, "8080/tcp": {}}
}'

if [ -n "$out" ]; then
  cp "$archive" "$out"
  log "wrote $ref to $out"
elif [ "${SYNCGC_IMAGE_LOAD:-node}" = kind ]; then
  kind load image-archive "$archive" --name "${KIND_CLUSTER_NAME:-kind}" >&2
  log "loaded $ref into kind cluster ${KIND_CLUSTER_NAME:-kind}"
else
  sock=${SYNCGC_CLUSTER_DIR:-/tmp/syncgc-cluster}/node/containerd.sock
  [ -S "$sock" ] || { log "error: no node's containerd at $sock (hack/cluster.sh up)"; exit 1; }
  ctr -a "$sock" -n k8s.io images import "$archive" >/dev/null
  log "imported $ref into the node"
fi
echo "$ref"
