#!/bin/sh
# weft-perf's collectives with --reuse (one buffer set for every iteration, cache-warm, as
# nccl-tests and OSU) and without (sets rotated, cache-cold), on 3 ranks: each run's JSON
# says which ("buffers"), every row is checked (wrong 0), and the sets the calls went
# through ("buffer_sets") are 1 with --reuse and one per call otherwise (more sets than
# calls exist for these small sizes). In place too, where the collective has it. Sizes
# start at 96 B, so that every rank's block holds an element of every dtype used.
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

if [ "$failures" != 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "PASSED"
