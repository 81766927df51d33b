#!/usr/bin/env bash
# Fuzzes the webhook's skimming parser against serde_json (fuzz/fuzz_targets/skim.rs; what must
# hold: syncgc::webhook::review::check_skim) for SECONDS (default 60) with cargo fuzz (libFuzzer,
# AddressSanitizer) on the nightly toolchain. Installs cargo-fuzz when it is missing. The build,
# the corpus the fuzzer grows and any failing input live in the cache, outside the checkout
# (${XDG_CACHE_HOME:-~/.cache}/syncgc/fuzz); the AdmissionReview fixtures in
# tests/fixtures/admission seed it.
#   hack/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/syncgc/fuzz
mkdir -p "$cache/corpus" "$cache/artifacts"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "hack/fuzz.sh: cargo fuzz needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
cargo +nightly fuzz run --fuzz-dir fuzz --target-dir "$cache/target" skim \
  "$cache/corpus" tests/fixtures/admission -- \
  -max_total_time="$seconds" -artifact_prefix="$cache/artifacts/" -print_final_stats=1
