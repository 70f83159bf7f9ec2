#!/bin/sh
# weft-perf's collectives with --reuse (one buffer set for every iteration, cache-warm, as
# nccl-tests and OSU) and without (sets rotated, cache-cold), on 3 ranks: each run's JSON
# says which ("buffers"), every row is checked (wrong 0), and the sets the calls went
# through ("buffer_sets") are 1 with --reuse and one per call otherwise (more sets than
# calls exist for these small sizes). In place too, where the collective has it. Sizes
# start at 96 B, so that every rank's block holds an element of every dtype used. Then
# sendrecv with and without --rotate.
#   reuse_json.sh WEFTRUN WEFT_PERF
set -u
weftrun=$1
perf=$2
tmp=$(mktemp -d)
trap 'rm -f -r "$tmp"' EXIT
failures=0
iters=3
warmup=1

# run NAME COLL ARGS...: the JSON document of one run in $tmp/NAME.json.
run() {
    name=$1
    coll=$2
    shift 2
    if ! "$weftrun" -n 3 --timeout 60 -- "$perf" "$coll" -b 96 -e 96K -f 32 -n $iters \
        -w $warmup --settle 0 --bind none --json "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"; then
        echo "FAILED: $coll $*: exit status $?"
        cat "$tmp/$name.err"
        failures=$((failures + 1))
        return
    fi
    case " $* " in
    *" --reuse "*) buffers=reused sets=1 ;;
    *) buffers=rotated sets=$((iters > warmup ? iters : warmup)) ;;
    esac
    /usr/bin/python3 - "$tmp/$name.json" "$buffers" "$sets" <<'PY' || failures=$((failures + 1))
import json, sys
path, buffers, sets = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = json.load(open(path))
bad = []
if doc.get("buffers") != buffers:
    bad.append("buffers %r, expected %r" % (doc.get("buffers"), buffers))
if doc["nranks"] != 3 or doc["total_wrong"] != 0 or len(doc["results"]) < 3:
    bad.append("nranks %s, total_wrong %s, %d rows" % (doc["nranks"], doc["total_wrong"],
                                                       len(doc["results"])))
for row in doc["results"]:
    if row["wrong"] != 0 or row["buffer_sets"] != sets or not row["time_us"] > 0:
        bad.append("row %s" % row)
if bad:
    print("FAILED: %s %s: %s" % (doc["subcommand"], buffers, "; ".join(bad)))
    sys.exit(1)
PY
}

for coll in allreduce reduce_scatter allgather broadcast alltoall; do
    run "$coll.reuse" "$coll" --reuse
    run "$coll.rotate" "$coll"
done
run allreduce.inplace.reuse allreduce --inplace --reuse -d bf16 -o max
run allgather.inplace.reuse allgather --inplace --reuse -d i64
run broadcast.root.reuse broadcast --reuse -r 2 -d u8 -b 1

# sendrecv: one send and one receive buffer by default (osu_bw), each message of the
# stream its own place in a pool larger than the cache with --rotate.
for mode in reuse rotate; do
    flag=
    [ "$mode" = rotate ] && flag=--rotate
    if ! "$weftrun" -n 2 --timeout 60 -- "$perf" sendrecv -b 4K -e 1M -f 16 -n 4 -w 1 \
        --json $flag >"$tmp/sendrecv.$mode.json" 2>"$tmp/sendrecv.$mode.err"; then
        echo "FAILED: sendrecv $flag"
        cat "$tmp/sendrecv.$mode.err"
        failures=$((failures + 1))
        continue
    fi
    /usr/bin/python3 - "$tmp/sendrecv.$mode.json" "$mode" <<'PY' || failures=$((failures + 1))
import json, sys
doc, mode = json.load(open(sys.argv[1])), sys.argv[2]
want = "reused" if mode == "reuse" else "rotated"
bad = [] if doc.get("buffers") == want and doc["total_wrong"] == 0 else ["header %s" % doc]
for row in doc["results"]:
    # -n 4 -w 1: 5 windows of 64 messages. Rotated, the 4 KiB ones each get a place of
    # their own (the pool is twice the cache plus 1 MiB); 1 MiB ones wrap around it.
    sets = row["buffer_sets"]
    if mode == "reuse":
        ok = sets == 1
    elif row["size"] == 4096:
        ok = sets == 320
    else:
        ok = 2 <= sets <= 320
    if row["wrong"] != 0 or not ok:
        bad.append("row %s" % row)
if bad:
    print("FAILED: sendrecv %s: %s" % (mode, "; ".join(bad)))
    sys.exit(1)
PY
done

if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "PASSED"
