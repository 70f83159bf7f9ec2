#!/usr/bin/env bash
# A libFuzzer campaign on one fuzz target of tests/fuzz, for a given time:
#
#     tests/fuzz/run.sh TARGET SECONDS [libFuzzer options...]
#
# TARGET is store (the store's frame reader and request handling), decision (the
# membership-decision decoder), ssd (the SSD tier's chunk headers, chunk MACs, manifests
# and file names; its seeds are real files, written by build/bin/ssd_seeds DIR) or etcd
# (fuzz_etcd_json: the JSON reader and the decoders of etcd's answers; its seeds are
# answers of a real etcd, captured by tests/fuzz/etcd_seeds.sh). Builds weft with clang,
# libFuzzer and ASan+UBSan into build-fuzz/, then fuzzes from the seed corpus tests/fuzz/corpus/TARGET (read only) and
# the campaign's own corpus build-fuzz/corpus/TARGET (kept from run to run). An input
# that fails is written to build-fuzz/crashes/TARGET/ and the script exits non-zero.
# Once the bug is fixed, copy that input into tests/fuzz/corpus/TARGET/: the unit test
# fuzz_TARGET_corpus replays the corpus on every run of the suite.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:-}
program=$target
if [ "$target" = etcd ]; then
    program=etcd_json
fi
if [ $# -lt 2 ] || [ ! -f "tests/fuzz/fuzz_$program.c" ]; then
    echo "usage: $0 store|decision|ssd|etcd SECONDS [libFuzzer options...]" >&2
    exit 2
fi
seconds=$2
shift 2

cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DWEFT_FUZZ=ON -DWEFT_WITH_CUDA=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target "fuzz_$program"

mkdir -p "build-fuzz/corpus/$target" "build-fuzz/crashes/$target"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
max_len=8192
if [ "$target" = ssd ]; then
    max_len=16384 # a chunk file of 4 KiB of payload after its 4 KiB header
fi
exec "build-fuzz/bin/fuzz_$program" -max_total_time="$seconds" -max_len=$max_len -timeout=10 \
     -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$target/" "$@" \
     "build-fuzz/corpus/$target" "tests/fuzz/corpus/$target"
