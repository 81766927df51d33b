# Sourced by hack/cluster.sh and hack/tools.sh: apt_install PACKAGE... installs the Debian
# packages that are missing (the package lists updated once per run; apt_updated=false asks
# for another update after a sources change). The sourcing script defines log.
apt_updated=false
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! $apt_updated; then apt-get update -qq; apt_updated=true; fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
