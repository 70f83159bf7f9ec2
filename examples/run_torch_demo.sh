#!/usr/bin/env bash
# run_torch_demo.sh [-n RANKS] [-o DIR] [-- ARGS...]
#
# Trains examples/torch_elastic_lm.py twice under weftrun on RANKS ranks (default 4):
# first without a failure (the reference), then with --elastic --replace and a rank that
# kills itself at --kill-step (default: the script's own); then compares the two runs bit
# for bit (every step's loss, every tensor's digest at the end) and plots both loss
# curves into DIR/torch_demo_loss.png (DIR: build/torch-demo). ARGS go to both runs
# (e.g. --steps 20 --kill-step 8); the reference gets --kill-step 0 after them.
#
# Exit status: 0 when the runs are bitwise equal, 1 when they differ or a run failed,
# 77 when the Python interpreter (WEFT_PYTHON, default /usr/bin/python3) has no PyTorch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks=4 dir=$root/build/torch-demo
while getopts "n:o:h" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    o) dir=$OPTARG ;;
    h) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift

py=${WEFT_PYTHON:-/usr/bin/python3}
weftrun=${WEFTRUN:-$root/build/bin/weftrun}
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
    echo "run_torch_demo: $py cannot import torch and numpy: skipped" >&2
    exit 77
fi
if [[ ! -x "$weftrun" ]]; then
    echo "run_torch_demo: no $weftrun (run ./scripts/build.sh)" >&2
    exit 1
fi
mkdir -p "$dir"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
lm=$root/examples/torch_elastic_lm.py

echo "== torch_elastic_lm on $ranks ranks, without a failure (the reference)"
"$weftrun" -n "$ranks" --timeout 600 -- "$py" "$lm" "$@" --kill-step 0 \
    --out "$dir/reference.json"
echo "== the same, with a rank killed (SIGKILL) and replaced"
"$weftrun" -n "$ranks" --elastic --replace --timeout 600 -- "$py" "$lm" "$@" \
    --out "$dir/failure.json"
echo "== comparison"
"$py" "$root/examples/torch_lm/report.py" "$dir/reference.json" "$dir/failure.json" \
    --png "$dir/torch_demo_loss.png"
