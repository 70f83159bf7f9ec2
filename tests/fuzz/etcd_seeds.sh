#!/usr/bin/env bash
# Writes the seed corpus of fuzz_etcd_json: answers of a real etcd to the requests the
# etcd backend sends (comm/store/etcd_client.c, same bodies), keys under the fuzz target's
# root (weft/0123456789abcdef/):
#
#     tests/fuzz/etcd_seeds.sh OUT_DIR
#
# Starts a 1-member etcd on free loopback ports (removed at exit) and asks it with curl
# through the JSON gateway: ranges (one key, absent key, a prefix with a limit, a count),
# transactions that win and lose, a lease grant, keepalives of a live and a revoked lease,
# and watch streams (a get's wait for a key; a prefix's watch of keys and notices, a
# notice deleted with its lease, a canceled watch of a compacted revision).
set -euo pipefail
out=$1
command -v etcd >/dev/null || { echo "etcd is not installed" >&2; exit 77; }
mkdir -p "$out"
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
etcd --name s --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
    --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "s=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
epid=$!
trap 'kill -9 $epid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
url=http://127.0.0.1:$port

b64() { printf '%s' "$1" | base64 -w0; }
root=weft/0123456789abcdef/
k() { b64 "${root}k/$1"; }
n() { b64 "${root}n/$1"; }
# post PATH BODY [NAME]: the answer, also written to OUT_DIR/seed-NAME when named.
post() {
    local a
    a=$(curl -s --noproxy '*' -X POST "$url$1" -d "$2")
    if [ -n "${3:-}" ]; then printf '%s' "$a" >"$out/seed-$3"; fi
    printf '%s' "$a"
}
for _ in $(seq 100); do
    curl -s --noproxy '*' -X POST "$url/v3/kv/range" -d '{"key":"AA=="}' >/dev/null && break
    sleep 0.1
done

post /v3/kv/range '{"key":"AA==","limit":"1"}' range-first-contact >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/x)\"}" range-absent >/dev/null
post /v3/kv/put "{\"key\":\"$(k job/x)\",\"value\":\"$(b64 hello)\"}" put >/dev/null
post /v3/kv/put "{\"key\":\"$(k job/empty)\",\"value\":\"\"}" >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/x)\"}" range-one >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/empty)\"}" range-empty-value >/dev/null
for i in 0 1 2 3 4; do
    post /v3/kv/put "{\"key\":\"$(k "job/addr/$i")\",\"value\":\"$(b64 "tcp://127.0.0.1:$((4000 + i))")\"}" >/dev/null
done
end=$(b64 "${root}k/job/addr0") # the prefix job/addr/ with its last byte one up
post /v3/kv/range "{\"key\":\"$(k job/addr/)\",\"range_end\":\"$end\",\"limit\":\"3\"}" range-page-more >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/addr/)\",\"range_end\":\"$end\",\"limit\":\"256\"}" range-page >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/addr/)\",\"range_end\":\"$end\",\"count_only\":true}" range-count >/dev/null
post /v3/kv/range "{\"key\":\"$(k job/none/)\",\"range_end\":\"$(b64 "${root}k/job/none0")\",\"count_only\":true}" range-count-zero >/dev/null

# Compare-and-swaps as txn() writes them: a create that wins, one that loses, an add.
mark=$(b64 "${root}m/00112233445566778")
txn() { # KEY VALUE TARGET FIELD REV
    printf '{"compare":[{"target":"%s","key":"%s","%s":"%s"}],"success":[{"request_put":{"key":"%s","value":"%s"}},{"request_put":{"key":"%s","value":"%s"}}],"failure":[{"request_range":{"key":"%s"}},{"request_range":{"key":"%s"}}]}' \
        "$3" "$1" "$4" "$5" "$1" "$2" "$mark" "$(b64 1)" "$1" "$mark"
}
post /v3/kv/txn "$(txn "$(k job/claim)" "$(b64 0)" CREATE create_revision 0)" txn-won >/dev/null
post /v3/kv/txn "$(txn "$(k job/claim)" "$(b64 1)" CREATE create_revision 0)" txn-lost >/dev/null
rev=$(post /v3/kv/range "{\"key\":\"$(k job/claim)\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["mod_revision"])')
post /v3/kv/txn "$(txn "$(k job/claim)" "$(b64 1)" MOD mod_revision "$rev")" txn-add-won >/dev/null
post /v3/kv/txn "$(txn "$(k job/claim)" "$(b64 2)" MOD mod_revision "$rev")" txn-add-lost >/dev/null

# Leases: a grant, a keepalive, a notice bound to it, a revoked lease's keepalive.
lease=$(post /v3/lease/grant '{"TTL":"5"}' lease-grant | python3 -c 'import json,sys; print(json.load(sys.stdin)["ID"])')
post /v3/lease/keepalive "{\"ID\":\"$lease\"}" lease-keepalive >/dev/null

# A get's wait: the watch of one key, then its put.
rev=$(post /v3/kv/range "{\"key\":\"AA==\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
curl -s --noproxy '*' -N --max-time 3 -X POST "$url/v3/watch" \
    -d "{\"create_request\":{\"key\":\"$(k job/late)\",\"start_revision\":\"$((rev + 1))\"}}" \
    >"$out/seed-watch-key" &
wpid=$!
sleep 0.5
post /v3/kv/put "{\"key\":\"$(k job/late)\",\"value\":\"$(b64 "here at last")\"}" >/dev/null
wait $wpid || true

# A prefix's watch as stream_once() opens it: keys and notices (with prev_kv); a key put
# and deleted, a notice armed, and deleted with its lease (revoked: a lapse).
rev=$(post /v3/kv/range "{\"key\":\"AA==\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
body=$(printf '{"create_request":{"key":"%s","range_end":"%s","start_revision":"%s"}}\n{"create_request":{"key":"%s","range_end":"%s","start_revision":"%s","prev_kv":true}}\n' \
    "$(k fail/)" "$(b64 "${root}k/fail0")" $((rev + 1)) "$(n fail/)" "$(b64 "${root}n/fail0")" $((rev + 1)))
curl -s --noproxy '*' -N --max-time 4 -X POST "$url/v3/watch" --data-binary "$body" \
    >"$out/seed-watch-prefix" &
wpid=$!
sleep 0.5
post /v3/kv/put "{\"key\":\"$(k fail/3)\",\"value\":\"$(b64 dead)\"}" >/dev/null
post /v3/kv/deleterange "{\"key\":\"$(k fail/3)\"}" >/dev/null
post /v3/kv/put "{\"key\":\"$(n fail/7)\",\"value\":\"$(b64 "rank 7")\",\"lease\":\"$lease\"}" >/dev/null
post /v3/lease/revoke "{\"ID\":\"$lease\"}" lease-revoke >/dev/null
wait $wpid || true
post /v3/lease/keepalive "{\"ID\":\"$lease\"}" lease-keepalive-lapsed >/dev/null

# A watch from a compacted revision: canceled.
rev=$(post /v3/kv/range "{\"key\":\"AA==\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
post /v3/kv/compaction "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
curl -s --noproxy '*' -N --max-time 2 -X POST "$url/v3/watch" \
    -d "{\"create_request\":{\"key\":\"$(k job/x)\",\"start_revision\":\"1\"}}" \
    >"$out/seed-watch-compacted" || true
# A refusal (an HTTP 400's body: the client does not parse it, the reader may meet it).
post /v3/kv/range '{"key":"not base64!"}' error-body >/dev/null
# Each message of the streams alone too (one JSON document, no newline).
for f in "$out"/seed-watch-key "$out"/seed-watch-prefix "$out"/seed-watch-compacted; do
    awk -v base="$f" 'NF { printf "%s", $0 > (base "-msg" NR) }' "$f"
done
ls "$out" | wc -l
