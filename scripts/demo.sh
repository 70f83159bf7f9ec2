#!/usr/bin/env bash
# demo.sh [--no-bench]
#
# Installs dependencies, builds, and runs the local multi-rank demo through weftrun:
#
# 1. A small transformer language model in PyTorch (examples/torch_elastic_lm.py),
#    data-parallel with a vocabulary-parallel embedding and output layer over 4 ranks,
#    trained twice: without a failure, and with a rank killed (SIGKILL) mid-run and
#    replaced, its state restored from in-memory snapshots and migrated to the new
#    member. The runs must be bitwise equal (examples/run_torch_demo.sh compares them
#    and plots both loss curves into build/torch-demo/torch_demo_loss.png).
# 2. Unless --no-bench: the C benchmarks: point-to-point bandwidth between two ranks, an
#    allreduce sweep on four, losing and regaining a rank on four (detection, in-place
#    repair vs a full rebuild, grow), parameter migration on four against
#    allgather-then-slice and save-and-reload, and in-memory snapshots on four (step
#    overhead; a rank killed and its state restored, against re-reading a file
#    checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
bench=1
case "${1:-}" in
--no-bench) bench=0 ;;
"") ;;
-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "demo.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
./scripts/install-deps.sh
./scripts/build.sh
ranks=${WEFT_DEMO_RANKS:-4}
echo "== PyTorch: a language model trained on $ranks ranks, a rank killed and replaced"
rc=0
examples/run_torch_demo.sh -n "$ranks" || rc=$?
if ((rc == 77)); then
    echo "== (skipped: no PyTorch for /usr/bin/python3)"
elif ((rc != 0)); then
    exit "$rc"
fi
((bench)) || exit 0
echo "== weft-perf sendrecv, 2 ranks"
build/bin/weftrun -n 2 -- build/bin/weft-perf sendrecv -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
echo "== weft-perf allreduce, $ranks ranks"
build/bin/weftrun -n "$ranks" -- build/bin/weft-perf allreduce -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
echo "== weft-perf group, $ranks ranks: a rank is killed (SIGKILL) each run and replaced"
build/bin/weftrun -n "$ranks" --elastic -- build/bin/weft-perf group -n 5
echo "== weft-perf migrate, $ranks ranks: ZeRO re-cut, tensor-parallel and pipeline re-layouts"
build/bin/weftrun -n "$ranks" -- build/bin/weft-perf migrate --model-bytes 64M -n 3
echo "== weft-perf snapshot, $ranks ranks: snapshot overhead, then a rank is killed and restored"
build/bin/weftrun -n "$ranks" --elastic -- build/bin/weft-perf snapshot --state-bytes 64M -n 6 --step-ms 200
