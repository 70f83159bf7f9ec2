#!/usr/bin/env bash
# Recovery of DistributedDataParallel on the weft backend after a SIGKILL, against the
# usual restart from a torch.save checkpoint, in one script.
#
#   perf/peers/ddp_recovery.sh [-n RANKS] [-H HIDDEN] [-r ROUNDS]
#
# weft: tests/python/ddp_elastic.py under weftrun --elastic --replace, the last rank
#   SIGKILLed in step 4: the seconds from the survivors' failed backward to the state
#   restored on every member with the replacement admitted (weft.torch.ElasticState's
#   recover(); the replacement's start, torch's import included); the same run saves a
#   torch.save checkpoint of the model and Adam at its end.
# restart: every rank started again by weftrun with gloo through env:// (MASTER_ADDR),
#   loading that checkpoint (perf/peers/ddp_restart.py): the seconds from before the
#   launch until every rank is ready, not counting the failure's detection nor a
#   scheduler's delay.
# Rounds alternate the two; medians and the ratio restart / weft.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ranks=4 hidden=4096 rounds=3
while getopts "n:H:r:h" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    H) hidden=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
done
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "ddp_recovery: no PyTorch for $py"; exit 77; }
weftrun=$root/build/bin/weftrun
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
w=() s=()
for ((i = 0; i < rounds; i++)); do
    env -u MASTER_ADDR PYTHONPATH="$root/python" "$weftrun" -n "$ranks" --elastic --replace \
        --timeout 300 -- "$py" "$root/tests/python/ddp_elastic.py" --steps 6 --kill-step 4 \
        --hidden "$hidden" --out "$tmp/w.json" --save "$tmp/ckpt.pt" >"$tmp/wlog" 2>&1 ||
        { cat "$tmp/wlog"; exit 1; }
    w+=("$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["recovery"]["seconds"])' "$tmp/w.json")")
    t0=$(date +%s.%N)
    out=$(DDP_T0=$t0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29500 + RANDOM % 1000)) \
        "$weftrun" -n "$ranks" --timeout 300 -- "$py" "$here/ddp_restart.py" \
        --ckpt "$tmp/ckpt.pt" --hidden "$hidden" 2>&1) || { echo "$out"; exit 1; }
    s+=("$(awk '/restart_ready_s/ { print $2 }' <<<"$out")")
done
ckpt_mb=$(du -m "$tmp/ckpt.pt" | cut -f1)
"$py" - "${w[*]}" "${s[*]}" "$ranks" "$hidden" "$ckpt_mb" <<'PY'
import statistics, sys
w = [float(v) for v in sys.argv[1].split()]
s = [float(v) for v in sys.argv[2].split()]
mw, ms = statistics.median(w), statistics.median(s)
print("# DDP recovery after a SIGKILL, %s ranks, hidden %s (checkpoint %s MB), %d rounds"
      % (sys.argv[3], sys.argv[4], sys.argv[5], len(w)))
print("  weft (repair, restore, admit the replacement, hand it the state): %s s, median %.3f"
      % (" ".join("%.3f" % v for v in w), mw))
print("  restart of every rank from torch.save (start, import, init, load):  %s s, median %.3f"
      % (" ".join("%.3f" % v for v in s), ms))
print("ddp_recovery weft %.3f restart %.3f restart/weft %.2f" % (mw, ms, ms / mw))
PY
