#!/usr/bin/env bash
# The soak: two syncgc replicas on the local control plane for DURATION (a Go-style duration:
# 60m, 3m), cooperative for the first half and standalone for the second, under a workload of
# trees of ConfigMaps and faults at random (what it checks: benches/soak/, observer.rs). Starts the
# control plane when it is not running, builds in release mode, writes the results to OUT
# (default benches/results/soak.md) and fails on any violation. --steady: standalone throughout,
# one replica never faulted for the whole run, its memory growth per hour reported and judged.
#   hack/soak.sh DURATION [OUT] [--steady]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: hack/soak.sh DURATION [OUT] [--steady]" >&2; exit 2; }
hack/cluster.sh up --kcm gc
eval "$(hack/cluster.sh env)"
# Afterwards the control plane runs as hack/run.sh and hack/test.sh expect it.
trap 'hack/cluster.sh restart-apiserver >/dev/null 2>&1 || true; hack/cluster.sh kcm gc' EXIT
duration=$1; shift
steady=()
out=$PWD/benches/results/soak.md
for arg in "$@"; do
  case $arg in
    --steady) steady=(--steady) ;;
    /*) out=$arg ;;
    *) out=$PWD/$arg ;;
  esac
done
cargo bench --locked --bench soak -- "$duration" "$out" "${steady[@]}"
