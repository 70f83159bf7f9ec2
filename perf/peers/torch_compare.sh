#!/usr/bin/env bash
# The Python binding against C and against torch.distributed (gloo), side by side.
#
#   perf/peers/torch_compare.sh [-n RANKS] [-r ROUNDS]
#
# 1. The binding's own cost: an 8-byte allreduce, back to back, mean per call of the
#    slowest rank, from C (weft-perf allreduce -b 8 -e 8) and from Python (the same loop
#    over a torch tensor), alternating ROUNDS times; medians and the difference.
# 2. torch_compare.py: weft from Python against gloo from Python, 8 B to 64 MiB, in the
#    same processes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ranks=2 rounds=5
while [ $# -gt 0 ]; do
    case "$1" in
    -n) ranks=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    *) echo "torch_compare.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "torch_compare: no PyTorch for $py"; exit 77; }
weftrun="$root/build/bin/weftrun"
c_us=() py_us=()
for ((r = 0; r < rounds; r++)); do
    c=$("$weftrun" -n "$ranks" -- "$root/build/bin/weft-perf" allreduce -b 8 -e 8 -n 5000 -w 500 \
        | awk '$1 == 8 { print $5; exit }')
    p=$("$weftrun" -n "$ranks" -- "$py" "$here/torch_compare.py" --overhead-only \
        | awk '/python_allreduce_8B_us/ { print $2 }')
    c_us+=("$c") py_us+=("$p")
done
"$py" - "${c_us[*]}" "${py_us[*]}" "$ranks" <<'PY'
import statistics, sys
c = [float(v) for v in sys.argv[1].split()]
p = [float(v) for v in sys.argv[2].split()]
mc, mp = statistics.median(c), statistics.median(p)
print("# 8 B allreduce, %s ranks, mean per call back to back, slowest rank; %d rounds "
      "alternating" % (sys.argv[3], len(c)))
print("  from C (weft-perf):  %s us, median %.3f" % (" ".join("%.2f" % v for v in c), mc))
print("  from Python:         %s us, median %.3f" % (" ".join("%.2f" % v for v in p), mp))
print("  the binding adds %.2f us per call" % (mp - mc))
PY
"$weftrun" -n "$ranks" -- "$py" "$here/torch_compare.py" -r 3
