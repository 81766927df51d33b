#!/usr/bin/env bash
# The benchmark: syncgc against kube-controller-manager's garbage collector and against the limits
# of this machine, in one run on the local control plane, as ratios (what each phase measures:
# benches/cluster/main.rs). Starts the control plane when it is not running, builds in release
# mode, prints the tables and writes them with a plot to benches/results/cluster.{md,svg}.
#   hack/bench.sh [PHASE]...     graph cascade sync order barrier platform plan api guards webhook writes memory scale
#                              workloads teardown
#                              (default: all)
# Environment (defaults in brackets): SYNCGC_BENCH_SIZES [1000,5000] N of the unthrottled cascades,
# SYNCGC_BENCH_THROTTLED_SIZE [1000] N at kube-controller-manager's default limits,
# SYNCGC_BENCH_CONCURRENCY [16] workers and requests in flight, SYNCGC_BENCH_REPEATS [9] runs of
# each unthrottled case of syncgc and of the loop and of each order case (the median is reported),
# SYNCGC_BENCH_CONNECTIONS [8] of the webhook load, SYNCGC_BENCH_WATCHED [10000] objects for the
# memory reading,
# SYNCGC_BENCH_BARRIER_TRIALS [100] releases with and without the release barrier, and lone
# releases of the platform phase before and after adding 300 CRDs,
# SYNCGC_BENCH_WRITES [4000] ConfigMaps per round of the writes phase, SYNCGC_BENCH_WRITERS [32]
# requests in flight, SYNCGC_BENCH_WRITES_ROUNDS [3] rounds of each kind, SYNCGC_BENCH_SCALE_N
# [1000000] objects the scale phase grows to (measured at a tenth, three tenths and all),
# SYNCGC_BENCH_SCALE_CASCADE [100000] dependents of its cascade, SYNCGC_BENCH_API_N [1000000]
# objects among which the api phase plans, SYNCGC_BENCH_WORKLOAD_REPEATS [5]
# runs of each workload of the workloads phase, SYNCGC_BENCH_GRAPH_HASHING [100000,1000000] objects
# of the graph phase's keyed-hashing comparison, SYNCGC_BENCH_GRAPH_ROUNDS [7] rounds of each of
# its cases, SYNCGC_BENCH_OUT [benches/results].
set -euo pipefail
cd "$(dirname "$0")/.."

hack/cluster.sh up --kcm gc
eval "$(hack/cluster.sh env)"
# Afterwards kube-controller-manager runs as hack/run.sh and hack/test.sh expect it.
trap 'hack/cluster.sh kcm gc' EXIT
# The teardown phase runs this operator in a Pod on the node.
cargo build --locked --release --example finalizer-operator
cargo bench --locked --bench cluster -- "$@"
