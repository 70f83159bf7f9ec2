#!/usr/bin/env bash
# store_scale.sh [-n LIST] [-r ROUNDS] [-p PROCS] [-t TIMEOUT_S] [-b BINDIR] [--json]
# store_scale.sh --init [-n LIST] [-T THREADS] [-a BYTES] [-b BINDIR] [--etcd[=MAX]] [--json]
#
# The rendezvous store under many lightweight clients (weft-store-scale, built with the
# tests: it builds nothing). For each client count of LIST (comma-separated, default
# 1000,10000), ROUNDS runs (default 3) of PROCS worker processes (default 2) against a
# fresh store each: connect and authenticate, a barrier-like rendezvous, a failure
# notice fanned out to every client. Prints the median time of each phase, the handshakes
# retried and the store's memory (VmRSS after the fan-out, VmHWM), or with --json one
# JSON document. A failed run ends the runs of its count and is reported; the script then
# exits 1. TIMEOUT_S bounds each phase (default 60).
#
# With --init: weft_init's traffic with the store (weft-store-init-scale, built with the
# tests too) for each rank count of LIST, the old way (a GET of each peer's address)
# against the new (one SCAN): requests per rank and time, and their ratio. THREADS threads
# (default 4) drive the emulated ranks, a connection each; addresses are BYTES long
# (default 300). Up to 1,000 ranks, every rank reads; above, enough of them for a million
# GETs the old way (100 at 10,000), and the time of all is scaled from theirs (marked *);
# the new way is then run again with every rank reading, measured in full.
# With --etcd, the same on the etcd backend too, in the same run: a 1-member etcd started
# on free loopback ports (its data in a temporary folder, fsync on), for the counts of
# LIST up to MAX (default 1000; reading every address from etcd grows with the square of
# the ranks); the old way there with 20 readers, scaled. Then, for the same counts, a
# failure notice fanned out to that many watchers on each store (weft-etcd-check fanout:
# real store clients, a connection and, on etcd, a watch stream and thread each): a key
# set under the watched prefix (weftrun's notice of a rank it reaped), and a lease left
# to lapse (a lost node's), with the time to the first, median and last delivery and the
# requests the watchers sent meanwhile.
set -euo pipefail
list=1000,10000 rounds=3 procs=2 timeout=60 json=0 init=0 threads=4 bytes=300 etcd_max=0
bin="$(cd "$(dirname "$0")/.." && pwd)/build/bin"
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    -n) list=${2:?}; shift 2 ;;
    -r) rounds=${2:?}; shift 2 ;;
    -p) procs=${2:?}; shift 2 ;;
    -t) timeout=${2:?}; shift 2 ;;
    -b) bin=${2:?}; shift 2 ;;
    -T) threads=${2:?}; shift 2 ;;
    -a) bytes=${2:?}; shift 2 ;;
    --init) init=1; shift ;;
    --etcd) etcd_max=1000; shift ;;
    --etcd=*) etcd_max=${1#--etcd=}; shift ;;
    --json) json=1; shift ;;
    *) usage ;;
    esac
done
py=/usr/bin/python3
[ -x "$py" ] || py=python3

if [ "$init" = 1 ]; then
    tool="$bin/weft-store-init-scale"
    [ -x "$tool" ] || { echo "store_scale.sh: no $tool (build weft first: scripts/build.sh)" >&2; exit 2; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for n in ${list//,/ }; do
        readers=$n
        if [ "$n" -gt 1000 ]; then
            readers=$((1000000 / n > 100 ? 1000000 / n : 100))
        fi
        [ "$json" = 1 ] || echo "# $n ranks: old and new, $readers of them reading" >&2
        "$tool" -n "$n" -r "$readers" -t "$threads" -a "$bytes" --json >"$tmp/$n.json"
        if [ "$readers" -lt "$n" ]; then
            [ "$json" = 1 ] || echo "# $n ranks: new, all of them reading" >&2
            "$tool" -n "$n" -m new -t "$threads" -a "$bytes" --json >"$tmp/$n.all.json"
        fi
    done
    if [ "$etcd_max" -gt 0 ]; then
        command -v etcd >/dev/null || { echo "store_scale.sh: --etcd: etcd is not installed" >&2; exit 2; }
        read -r cport pport <<<"$("$py" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')"
        etcd --name m0 --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
            --advertise-client-urls "http://127.0.0.1:$cport" \
            --listen-peer-urls "http://127.0.0.1:$pport" \
            --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
            --initial-cluster "m0=http://127.0.0.1:$pport" >"$tmp/etcd.log" 2>&1 &
        epid=$!
        trap 'kill -9 $epid 2>/dev/null; rm -rf "$tmp"' EXIT
        for _ in $(seq 100); do
            "$py" -c "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:$cport/v3/kv/range', data=b'{\"key\": \"AA==\"}'), timeout=1)" 2>/dev/null && break
            sleep 0.1
        done
        for n in ${list//,/ }; do
            [ "$n" -le "$etcd_max" ] || continue
            [ "$json" = 1 ] || echo "# $n ranks on etcd: new, all reading; old, 20 reading" >&2
            "$tool" -n "$n" -m new -t "$threads" -a "$bytes" -s "etcd://127.0.0.1:$cport" \
                -P "$epid" --json >"$tmp/$n.etcd.json"
            "$tool" -n "$n" -m old -r 20 -t "$threads" -a "$bytes" -s "etcd://127.0.0.1:$cport" \
                -P "$epid" --json >"$tmp/$n.etcd.old.json"
        done
        for n in ${list//,/ }; do
            [ "$n" -le "$etcd_max" ] || continue
            [ "$json" = 1 ] || echo "# $n watchers: a failure notice set, and a lease lapsed" >&2
            for kind in set lapse; do
                "$bin/weft-etcd-check" fanout native - "$n" "$kind" >>"$tmp/fanout.txt"
                "$bin/weft-etcd-check" fanout "etcd://127.0.0.1:$cport" "fanout-$kind-$n-$$" \
                    "$n" "$kind" >>"$tmp/fanout.txt"
            done
        done
    fi
    "$py" - "$tmp" "$list" "$json" <<'EOF'
import json, os, re, sys

tmp, counts, as_json = sys.argv[1], sys.argv[2].split(","), sys.argv[3] == "1"
runs = []
for n in counts:
    for name in (f"{n}.json", f"{n}.all.json", f"{n}.etcd.old.json", f"{n}.etcd.json"):
        path = os.path.join(tmp, name)
        if os.path.exists(path):
            runs.append(json.load(open(path)))
fanouts = []
path = os.path.join(tmp, "fanout.txt")
LINE = (r"fanout (\w+) (\w+): (\d+) watchers, set up in ([\d.]+) s; delivered first ([\d.]+) ms, "
        r"median ([\d.]+) ms, last ([\d.]+) ms .* meanwhile (\d+)")
for line in open(path) if os.path.exists(path) else []:
    m = re.match(LINE, line)
    if m:
        fanouts.append({"store": "weft" if m[1] == "native" else m[1], "notice": m[2],
                        "watchers": int(m[3]), "setup_s": float(m[4]), "first_ms": float(m[5]),
                        "median_ms": float(m[6]), "last_ms": float(m[7]),
                        "requests_per_watcher": int(m[8]) / int(m[3])})
if as_json:
    print(json.dumps({"tool": "weft-store-init-scale", "runs": runs, "fanouts": fanouts},
                     indent=2))
    sys.exit(0)
first = runs[0]
print(f"# weft_init's store traffic (weft-store-init-scale): emulated ranks, one store "
      f"connection each, on {first['threads']} threads, {first['addr_bytes']}-byte addresses")
print(f"{'ranks':>6} {'store':>5} {'way':>4} {'requests/rank':>14} {'publish ms':>11} {'readers':>8} "
      f"{'read ms':>9} {'total ms':>10} {'store CPU ms':>13}")
for r in runs:
    for w in r["ways"]:
        mark = "*" if r["scaled"] else " "
        print(f"{r['ranks']:>6} {r.get('store', 'weft'):>5} {w['way']:>4} {w['requests_per_rank']:>14.1f} "
              f"{w['publish_ms']:>11.0f} {r['readers']:>8} {w['read_ms']:>9.0f} "
              f"{w['total_ms']:>9.0f}{mark} {w['store_cpu_ms']:>12.0f}{mark}")
print("* scaled from the readers to every rank (ranks / readers)")
ways = {}
for r in runs:
    for w in r["ways"]:
        key = (r["ranks"], r.get("store", "weft"), w["way"])
        if key not in ways or not r["scaled"]:
            ways[key] = w
for (n, store, way), o in sorted(ways.items()):
    if way != "old" or (n, store, "new") not in ways:
        continue
    w = ways[(n, store, "new")]
    cpu = (f", {o['store_cpu_ms'] / w['store_cpu_ms']:.1f}x the store's CPU"
           if w["store_cpu_ms"] > 0 else "")
    print(f"{n} ranks on {store}, old/new: {o['requests_per_rank'] / w['requests_per_rank']:.0f}x "
          f"the requests per rank, {o['total_ms'] / w['total_ms']:.1f}x the time{cpu}")
for (n, store, way), w in sorted(ways.items()):
    if store == "etcd" and way == "new" and (n, "weft", "new") in ways:
        print(f"{n} ranks, new way, etcd/weft's store: "
              f"{w['total_ms'] / ways[(n, 'weft', 'new')]['total_ms']:.1f}x the time")
if fanouts:
    print("# a failure notice to every watcher (weft-etcd-check fanout): set = a key set under "
          "the watched prefix; lapse = a lease left to lapse, timed from its holder's close "
          "(on etcd that includes the lease's TTL, 1 s asked)")
    print(f"{'watchers':>8} {'store':>5} {'notice':>6} {'first ms':>9} {'median ms':>10} "
          f"{'last ms':>9} {'requests/watcher':>17} {'watch set-up s':>15}")
    for f in fanouts:
        print(f"{f['watchers']:>8} {f['store']:>5} {f['notice']:>6} {f['first_ms']:>9.1f} "
              f"{f['median_ms']:>10.1f} {f['last_ms']:>9.1f} {f['requests_per_watcher']:>17.2f} "
              f"{f['setup_s']:>15.2f}")
EOF
    exit
fi
tool="$bin/weft-store-scale"
[ -x "$tool" ] || { echo "store_scale.sh: no $tool (build weft first: scripts/build.sh)" >&2; exit 2; }
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
