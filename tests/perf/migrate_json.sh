#!/usr/bin/env bash
# weft-perf migrate --json on 3 ranks: every scenario moves exactly its lower bound and
# produces the same bytes as allgather-then-slice; the document has the fields the
# README promises; --overlap adds a latency entry per size, --step-ms a background entry;
# --dry-run prints the plans.
set -euo pipefail
weftrun=$1 perf=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$weftrun" -n 3 --timeout 120 -- "$perf" migrate --json --overlap --step-ms 20 --model-bytes 4M -n 1 \
    --tmpdir "$tmp" >"$tmp/out.json"
python3 - "$tmp/out.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["subcommand"] == "migrate" and doc["ranks"] == 3, doc
names = [s["name"] for s in doc["scenarios"]]
assert len(names) == 4, names
for s in doc["scenarios"]:
    for k in ("name", "ranks", "bytes_moved", "bytes_lower_bound", "time_us",
              "allgather_slice_us", "file_reload_us"):
        assert k in s, (k, s)
    assert s["bytes_moved"] == s["bytes_lower_bound"] > 0, s
    assert s["wrong"] == 0, s
    assert s["time_us"] > 0 and s["allgather_slice_us"] > 0 and s["file_reload_us"] > 0, s
sizes = [o["bytes"] for o in doc["overlap"]]
assert sizes == [8, 64, 512, 4096, 32768], sizes
for o in doc["overlap"]:
    assert o["idle_p50_us"] > 0 and o["during_p50_us"] > 0, o
    assert o["during_p99_us"] >= o["during_p50_us"], o
bg = doc["background"]
assert bg["step_ms"] == 20 and bg["runs"] == 5 and 0 <= bg["done_at_step_end"] <= 5, bg
assert bg["bytes_moved"] > 0 and bg["waited_us"] > 0, bg
print("migrate json: %d scenarios, %d overlap sizes" % (len(names), len(sizes)))
PY
"$weftrun" -n 2 --timeout 60 -- "$perf" migrate --dry-run --scenario handover --model-bytes 1M \
    >"$tmp/dry.txt"
grep -q "(lower bound" "$tmp/dry.txt" || { cat "$tmp/dry.txt"; exit 1; }
