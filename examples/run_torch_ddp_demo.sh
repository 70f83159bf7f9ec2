#!/usr/bin/env bash
# run_torch_ddp_demo.sh [-n RANKS] [-o DIR] [-- ARGS...]
#
# Trains examples/torch_ddp_lm.py (the demo's language model under DistributedDataParallel
# on the weft backend) twice under weftrun on RANKS ranks (default 3): first without a
# failure (the reference), then with --elastic --replace and a rank that kills itself at
# --kill-step; then compares the two runs bit for bit (every step's loss, a digest of
# every tensor of the model and optimizer at the end). ARGS go to both runs (e.g.
# --steps 20 --kill-step 8); the reference gets --kill-step 0 after them. Results go to
# DIR (default build/torch-ddp-demo).
#
# Exit status: 0 when the runs are bitwise equal, 1 when they differ or a run failed,
# 77 when the Python interpreter (WEFT_PYTHON, default /usr/bin/python3) has no PyTorch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks=3 dir=$root/build/torch-ddp-demo
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
    echo "run_torch_ddp_demo: $py cannot import torch and numpy: skipped" >&2
    exit 77
fi
mkdir -p "$dir"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
unset MASTER_ADDR
lm=$root/examples/torch_ddp_lm.py

echo "== torch_ddp_lm on $ranks ranks, without a failure (the reference)"
"$weftrun" -n "$ranks" --timeout 600 -- "$py" "$lm" "$@" --kill-step 0 \
    --out "$dir/reference.json"
echo "== the same, with a rank killed (SIGKILL) and replaced"
"$weftrun" -n "$ranks" --elastic --replace --timeout 600 -- "$py" "$lm" "$@" \
    --out "$dir/failure.json"
echo "== comparison"
"$py" - "$dir/reference.json" "$dir/failure.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
steps = sorted(int(s) for s in a["losses"])
same = [s for s in steps if a["losses"][str(s)] == b["losses"].get(str(s))]
print("losses equal bit for bit at %d of %d steps; final tensors %s" %
      (len(same), len(steps), "equal" if a["digest"] == b["digest"] else "DIFFERENT"))
for e in b["events"]:
    print("recovery: a member died in step %d; resumed from step %d at width %d after %.3f s"
          % (e["failed_in"], e["resume_from"], e["width"], e["seconds"]))
if not b["events"]:
    sys.exit("run_torch_ddp_demo: the run with a failure recovered from none")
if len(same) != len(steps) or a["digest"] != b["digest"]:
    sys.exit("run_torch_ddp_demo: the runs differ")
PY
