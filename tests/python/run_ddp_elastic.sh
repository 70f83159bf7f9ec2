#!/usr/bin/env bash
# run_ddp_elastic.sh WEFTRUN PYTHON N [ddp_elastic.py options...]
#   ddp_elastic.py on N ranks under weftrun --elastic --replace twice: without a failure,
#   then with the last rank (or --kill-rank's) SIGKILLed in step 4 and replaced. Passes
#   when the second run recovered (a replacement admitted, back to N ranks) and its
#   losses, final model and optimizer (SHA-256 of every tensor) and, with --per-rank,
#   every rank's generator and data position equal the first's, bit for bit.
set -u
weftrun=$1 py=$2 n=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for kill in 0 4; do
    "$weftrun" -n "$n" --elastic --replace --timeout 150 -- "$py" "$here/ddp_elastic.py" \
        --steps 8 --kill-step "$kill" --out "$out/run$kill.json" "$@" >"$out/log$kill" 2>&1
    rc=$?
    cat "$out/log$kill"
    [ $rc -eq 0 ] || { echo "run_ddp_elastic: FAIL: the run with kill step $kill exited $rc"; exit 1; }
done
"$py" - "$out/run0.json" "$out/run4.json" "$n" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
n = int(sys.argv[3])
r = b["recovery"]
if a["recovery"] is not None or r is None or r["width"] != n or b["width"] != n:
    sys.exit("run_ddp_elastic: FAIL: recoveries %s, %s" % (a["recovery"], r))
if a["losses"] != b["losses"] or a["digest"] != b["digest"] or a["ranks"] != b["ranks"]:
    sys.exit("run_ddp_elastic: FAIL: differs from the run without failure:\n%s\n%s" % (a, b))
print("run_ddp_elastic: PASS: bitwise equal after a SIGKILL in step 4, recovered in %.3f s "
      "(resumed from step %d, the replacement's start included)" % (r["seconds"], r["resume_from"]))
PY
