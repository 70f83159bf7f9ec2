#!/usr/bin/env bash
# bench.sh: the C benchmarks on local ranks through weftrun (builds first if needed):
# point-to-point bandwidth between two ranks, an allreduce sweep, losing and regaining a
# rank (detection, in-place repair vs a full rebuild, grow), parameter migration against
# allgather-then-slice and save-and-reload, and in-memory snapshots (step overhead; a
# rank killed and its state restored, against re-reading a file checkpoint).
# WEFT_DEMO_RANKS (default 4) sets the ranks of all but the two-rank sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
"") ;;
-h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
[ -x build/bin/weft-perf ] || ./scripts/build.sh
ranks=${WEFT_DEMO_RANKS:-4}
echo "== weft-perf sendrecv, 2 ranks"
build/bin/weftrun -n 2 -- build/bin/weft-perf sendrecv -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
echo "== weft-perf allreduce, $ranks ranks"
build/bin/weftrun -n "$ranks" -- build/bin/weft-perf allreduce -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
echo "== weft-perf group, $ranks ranks: a rank is killed (SIGKILL) each run and replaced"
build/bin/weftrun -n "$ranks" --elastic --share-token -- build/bin/weft-perf group -n 5
echo "== weft-perf migrate, $ranks ranks: ZeRO re-cut, tensor-parallel and pipeline re-layouts"
build/bin/weftrun -n "$ranks" -- build/bin/weft-perf migrate --model-bytes 64M -n 3
echo "== weft-perf snapshot, $ranks ranks: snapshot overhead, then a rank is killed and restored"
build/bin/weftrun -n "$ranks" --elastic --share-token -- build/bin/weft-perf snapshot --state-bytes 64M -n 6 --step-ms 200
