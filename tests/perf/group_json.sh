#!/bin/sh
# weft-perf group on 3 ranks under weftrun --elastic: every run kills a rank, the others
# repair, a replacement that weft-perf starts itself (it must hand on the job token,
# which weft_init took out of the environment: weftrun --share-token) joins and is admitted by a grow, and a
# full rebuild is timed; the JSON has every figure, positive, and the ratio adds up.
#   group_json.sh WEFTRUN WEFT_PERF
set -u
out=$("$1" -n 3 --elastic --share-token --timeout 90 -- "$2" group -n 2 --json 2>/dev/null) || {
    echo "FAILED: weft-perf group exited $?"
    exit 1
}
/usr/bin/python3 - "$out" <<'PY'
import json, sys
doc = json.loads(sys.argv[1])
assert doc["subcommand"] == "group" and doc["ranks"] == 3 and doc["runs"] == 2, doc
for k in ("detect_us", "repair_us", "rebuild_us", "grow_us"):
    v = doc[k]
    assert 0 < v["min"] <= v["median"] <= v["max"], (k, v)
ratio = doc["rebuild_us"]["median"] / doc["repair_us"]["median"]
assert abs(doc["rebuild_over_repair"] - ratio) < 0.1, doc
print("group json: repair %.0f us, rebuild %.0f us, grow %.0f us" %
      (doc["repair_us"]["median"], doc["rebuild_us"]["median"], doc["grow_us"]["median"]))
PY
