# Sourced by hack/cluster.sh and hack/image.sh: images made without a registry or a daemon.
#
#   image_archive ROOTFS OUT REF CONFIG
#
# writes OUT, a docker-archive tarball (what `docker save` writes and `ctr images import`
# reads) of one layer, the directory ROOTFS, tagged REF, whose image configuration's `config`
# is the JSON object CONFIG (Entrypoint, Cmd, User, Env, ...). The layer is reproducible: the
# same ROOTFS gives the same digest. Needs tar, sha256sum and jq.
image_archive() {
  local rootfs=$1 out=$2 ref=$3 config=$4
  local work digest
  work=$(mktemp -d)
  # The image's root directory as an image's is: a mktemp directory is 0700, which only root
  # could traverse.
  chmod 0755 "$rootfs"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$rootfs" -cf "$work/layer.tar" .
  digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  jq -n --argjson config "$config" --arg diff "sha256:$digest" \
    '{architecture: "amd64", os: "linux", config: $config,
      rootfs: {type: "layers", diff_ids: [$diff]}, history: [{created_by: "syncgc hack/oci.sh"}]}' \
    >"$work/config.json"
  jq -n --arg ref "$ref" '[{Config: "config.json", RepoTags: [$ref], Layers: ["layer.tar"]}]' \
    >"$work/manifest.json"
  tar --owner=0 --group=0 --numeric-owner -C "$work" -cf "$out.tmp" manifest.json config.json layer.tar
  mv "$out.tmp" "$out"
  rm -rf "$work"
}
