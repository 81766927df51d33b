#!/usr/bin/env bash
# Fuzzes what syncgc parses from others, every target in fuzz/fuzz_targets, for SECONDS in all
# (default 60, shared evenly between the targets, after one build of them all) with cargo fuzz
# (libFuzzer, AddressSanitizer, debug assertions, so that an overflow panics) on the nightly
# toolchain:
#   skim         the webhook's skimming parser against serde_json (what must hold:
#                syncgc::webhook::review::check_skim), seeded with tests/fixtures/admission;
#   annotations  the parsers of syncgc.io/ annotations (duration, max-cascade, deletion-order,
#                handles-finalizers) and the warnings about them, seeded with fuzz/seeds/annotations;
#   proto        the protobuf list decoder, whole and in chunks, seeded with fuzz/seeds/proto.
# Installs cargo-fuzz when it is missing. The build, the corpus each target grows and any
# failing input live in the cache, outside the checkout (${XDG_CACHE_HOME:-~/.cache}/syncgc/fuzz).
# Fails when any target fails, after running the others.
#   hack/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/syncgc/fuzz
declare -A seeds=(
  [skim]=tests/fixtures/admission
  [annotations]=fuzz/seeds/annotations
  [proto]=fuzz/seeds/proto
)
targets=(skim annotations proto)
each=$((seconds / ${#targets[@]}))
((each >= 1)) || each=1

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "hack/fuzz.sh: cargo fuzz needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
fuzz=(--fuzz-dir fuzz --target-dir "$cache/target" --debug-assertions)
cargo +nightly fuzz build "${fuzz[@]}"

failed=()
for target in "${targets[@]}"; do
  mkdir -p "$cache/corpus/$target" "$cache/artifacts/$target"
  echo "hack/fuzz.sh: $target for ${each}s" >&2
  cargo +nightly fuzz run "${fuzz[@]}" "$target" "$cache/corpus/$target" "${seeds[$target]}" -- \
    -max_total_time="$each" -artifact_prefix="$cache/artifacts/$target/" -print_final_stats=1 ||
    failed+=("$target")
done
if ((${#failed[@]})); then
  echo "hack/fuzz.sh: failed: ${failed[*]} (inputs in $cache/artifacts/)" >&2
  exit 1
fi
