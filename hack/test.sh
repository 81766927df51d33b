#!/usr/bin/env bash
# The whole test suite: unit tests, HTTP tests, and the tests against the real local control
# plane, which this script starts (and stops again if it started it; SYNCGC_KEEP_CLUSTER=1 keeps
# it). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

started=false
hack/cluster.sh status >/dev/null 2>&1 || started=true
if $started && [ -z "${SYNCGC_KEEP_CLUSTER:-}" ]; then
  trap 'hack/cluster.sh down' EXIT
fi
hack/cluster.sh up --kcm gc
eval "$(hack/cluster.sh env)"
cargo test --locked "$@"
