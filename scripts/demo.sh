#!/usr/bin/env bash
# demo.sh: installs dependencies, builds, and runs the local multi-rank demo through
# weftrun: a small transformer language model in PyTorch (examples/torch_elastic_lm.py),
# data-parallel with a vocabulary-parallel embedding and output layer over 4 ranks
# (WEFT_DEMO_RANKS), trained twice: without a failure, and with a rank killed (SIGKILL)
# mid-run and replaced, its state restored from in-memory snapshots and migrated to the
# new member. The runs must be bitwise equal (examples/run_torch_demo.sh compares them
# and plots both loss curves into build/torch-demo/torch_demo_loss.png).
# The C benchmarks are scripts/bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
"") ;;
-h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
echo "== the C benchmarks: scripts/bench.sh"
