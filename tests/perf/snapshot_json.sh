#!/usr/bin/env bash
# weft-perf snapshot --json on 3 ranks under weftrun --elastic, with a small state and a
# short step: the overhead fields, then the last rank killed after a committed snapshot,
# the survivors' restore checked word by word (and the dead rank's blob), the file
# checkpoint re-read and checked too, a fresh job of the survivors' size started (the
# full restart from files adds it and the detection; the survivors start it, so they hold
# the token: weftrun --share-token), and the restore from the live
# buffers and from the copies into the re-cut that keeps shards, after the same kill,
# checked too; with --ssd the SSD tier's speed beside sequential
# writes, and a second, unchanged snapshot writing almost nothing; the files are cleaned up.
set -euo pipefail
weftrun=$1 perf=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$weftrun" -n 3 --elastic --share-token --timeout 120 -- "$perf" snapshot --json --state-bytes 256K \
    --step-ms 10 -n 4 -w 1 --tmpdir "$tmp" --ssd >"$tmp/out.json"
python3 - "$tmp/out.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["subcommand"] == "snapshot" and doc["ranks"] == 3, doc
assert doc["state_bytes_per_rank"] == 256 << 10 and doc["step_ms"] == 10, doc
for k in ("snapshot_copy_us", "step_us", "step_with_snapshot_us", "recover_us",
          "detect_us", "repair_us", "restore_us", "file_restart_us", "file_write_us"):
    assert isinstance(doc[k], (int, float)) and doc[k] > 0, (k, doc)
assert doc["step_us"] >= 10000 and doc["step_with_snapshot_us"] >= 10000, doc
assert abs(doc["recover_us"] - doc["detect_us"] - doc["repair_us"] - doc["restore_us"]) < 1, doc
assert doc["killed"] is True and doc["survivors"] == 2, doc
assert doc["verified"] is True, doc
assert doc["restore_wrong"] == 0 and doc["file_restart_wrong"] == 0, doc
assert doc["restore_bytes_missing"] == 0 and doc["restore_bytes_moved"] > 0, doc
assert doc["restored_step"] == doc["committed_step"] > 0, doc
assert doc["file_read_bytes"] == 3 * doc["state_bytes_per_rank"], doc
# Ratios have two decimals: a slow detection (a busy machine) may make one 0.00, so each
# is checked against its parts, not against a speed.
def ratio_ok(key, num, den):
    return abs(doc[key] - num / den) <= 0.0051
assert ratio_ok("file_restart_over_recover", doc["file_restart_us"], doc["recover_us"]), doc
# The full restart from files: the same detection, a fresh job's start, the re-reading.
assert doc["job_start_us"] > 0, doc
full = doc["detect_us"] + doc["job_start_us"] + doc["file_restart_us"]
assert abs(doc["file_restart_full_us"] - full) < 1, doc
assert abs(doc["file_restart_full_over_recover"] - full / doc["recover_us"]) < 0.01, doc
# The restore from live buffers after the same kill: checked, each survivor's own shard
# left in place, only the dead rank's shard (and the blobs) moved.
assert doc["restore_live_wrong"] == 0 and doc["restore_live_us"] > 0, doc
assert abs(doc["recover_live_us"] - doc["detect_us"] - doc["repair_us"]
           - doc["restore_live_us"]) < 1, doc
assert doc["restore_live_bytes_in_place"] == 2 * doc["state_bytes_per_rank"], doc
assert doc["restore_live_bytes_moved"] <= doc["state_bytes_per_rank"] + 4096, doc
assert doc["file_restart_full_over_recover_live"] > 0, doc
# From the copies again into the same re-cut (weft_layout_absorb): own shards copied
# locally, nothing in place (the live state had moved on), only the dead rank's moved.
assert doc["restore_keep_wrong"] == 0 and doc["restore_keep_us"] > 0, doc
assert abs(doc["recover_keep_us"] - doc["detect_us"] - doc["repair_us"]
           - doc["restore_keep_us"]) < 1, doc
assert doc["restore_keep_bytes_in_place"] == 0, doc
assert doc["restore_keep_bytes_local"] >= 2 * doc["state_bytes_per_rank"], doc
assert doc["restore_keep_bytes_moved"] <= doc["state_bytes_per_rank"] + 4096, doc
assert ratio_ok("file_restart_over_recover_keep", doc["file_restart_us"],
                doc["recover_keep_us"]), doc
assert doc["ssd_write_gbs"] >= 0 and doc["dir_seq_write_gbs"] >= 0, doc
# Each member writes its shard and a buddy's: at least twice the state, all ranks.
assert doc["first_snapshot_bytes_written"] >= 2 * 3 * doc["state_bytes_per_rank"], doc
assert doc["second_snapshot_bytes_written"] * 100 < doc["first_snapshot_bytes_written"], doc
print("snapshot json: recover %.0f us, file restart %.0f us, overhead %+.1f%%"
      % (doc["recover_us"], doc["file_restart_us"], 100 * doc["overhead"]))
PY
left=$(find "$tmp" -mindepth 1 ! -name out.json | wc -l)
[ "$left" = 0 ] || { echo "files left in $tmp:"; ls "$tmp"; exit 1; }
