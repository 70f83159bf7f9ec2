#!/usr/bin/env bash
# Installs dependencies, builds, and runs a local multi-rank demo through weftrun:
# point-to-point latency/bandwidth between two ranks, then an allreduce sweep on four.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
ranks=${WEFT_DEMO_RANKS:-4}
echo "== weft-perf sendrecv, 2 ranks"
build/bin/weftrun -n 2 -- build/bin/weft-perf sendrecv -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
if build/bin/weft-perf --help | grep -q allreduce; then
    echo "== weft-perf allreduce, $ranks ranks"
    build/bin/weftrun -n "$ranks" -- build/bin/weft-perf allreduce -b 8 -e 16M -f 8 -n 20 -w 5 -c 1
fi
