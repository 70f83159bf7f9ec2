#!/usr/bin/env bash
# store_scale.sh [-n LIST] [-r ROUNDS] [-p PROCS] [-t TIMEOUT_S] [-b BINDIR] [--json]
#
# The rendezvous store under many lightweight clients (weft-store-scale, built with the
# tests: it builds nothing). For each client count of LIST (comma-separated, default
# 1000,10000), ROUNDS runs (default 3) of PROCS worker processes (default 2) against a
# fresh store each: connect and authenticate, a barrier-like rendezvous, a failure
# notice fanned out to every client. Prints the median time of each phase, the handshakes
# retried and the store's memory (VmRSS after the fan-out, VmHWM), or with --json one
# JSON document. A failed run ends the runs of its count and is reported; the script then
# exits 1. TIMEOUT_S bounds each phase (default 60).
set -euo pipefail
list=1000,10000 rounds=3 procs=2 timeout=60 json=0
bin="$(cd "$(dirname "$0")/.." && pwd)/build/bin"
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    -n) list=${2:?}; shift 2 ;;
    -r) rounds=${2:?}; shift 2 ;;
    -p) procs=${2:?}; shift 2 ;;
    -t) timeout=${2:?}; shift 2 ;;
    -b) bin=${2:?}; shift 2 ;;
    --json) json=1; shift ;;
    *) usage ;;
    esac
done
tool="$bin/weft-store-scale"
[ -x "$tool" ] || { echo "store_scale.sh: no $tool (build weft first: scripts/build.sh)" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for n in ${list//,/ }; do
    for ((i = 1; i <= rounds; i++)); do
        [ "$json" = 1 ] || echo "# $n clients, run $i of $rounds" >&2
        if ! "$tool" -n "$n" -p "$procs" -t "$timeout" --json >"$tmp/$n.$i.json"; then
            break # the failure is in its JSON; more runs would only fail alike
        fi
    done
done

"$py" - "$tmp" "$list" "$rounds" "$json" <<'EOF'
import json, os, statistics, sys

tmp, counts, rounds, as_json = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4] == "1"
FIGURES = ["connect_ms", "rendezvous_ms", "fanout_ms", "server_rss_kib", "server_hwm_kib",
           "retries"]
results, failed = [], False
for n in counts:
    runs = []
    for i in range(1, rounds + 1):
        path = os.path.join(tmp, f"{n}.{i}.json")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            doc = json.load(open(path))
            doc["retries"] = doc["retries_busy"] + doc["retries_closed"]
            runs.append(doc)
    good = [r for r in runs if r["ok"]]
    bad = [r for r in runs if not r["ok"]]
    row = {"clients": int(n), "procs": runs[0]["procs"] if runs else None, "runs": len(good),
           "ok": not bad and bool(runs)}
    for k in FIGURES if good else []:
        m = statistics.median(r[k] for r in good)
        row[k] = round(m, 3) if k.endswith("_ms") else int(m)
    if bad:
        row.update({"failed_phase": bad[0]["failed_phase"], "error": bad[0]["error"]})
    elif not runs:
        row["error"] = "weft-store-scale gave no result (see its messages above)"
    failed = failed or not row["ok"]
    results.append(row)

if as_json:
    print(json.dumps({"tool": "weft-store-scale", "rounds": rounds, "results": results},
                     indent=2))
else:
    print(f"# weft-store-scale: median of the runs per client count ({rounds} asked); "
          "store memory after the fan-out")
    print(f"{'clients':>8} {'procs':>5} {'runs':>4} {'connect ms':>11} {'rendezvous ms':>14} "
          f"{'fanout ms':>10} {'retries':>8} {'store RSS KiB':>14} {'store HWM KiB':>14}")
    for r in results:
        if r["runs"]:
            print(f"{r['clients']:>8} {r['procs']:>5} {r['runs']:>4} {r['connect_ms']:>11.1f} "
                  f"{r['rendezvous_ms']:>14.1f} {r['fanout_ms']:>10.1f} {r['retries']:>8} "
                  f"{r['server_rss_kib']:>14} {r['server_hwm_kib']:>14}")
        if not r["ok"]:
            print(f"{r['clients']:>8} failed: {r.get('error', '?')}")
sys.exit(1 if failed else 0)
EOF
