#!/usr/bin/env bash
# Ranks started by Open MPI's mpirun, a PMIx server, with no weftrun and no WEFT_STORE:
# weft bootstraps through PMIx (comm/ctx/boot_pmix.c). Checked: weft-perf's allreduce with
# its results checked on 4 ranks, two contexts one after the other in each process, every
# rank but 0 (which serves the store) holding its own member secret and no token, with
# what that forbids (member_secret.c), and a PMIx library that cannot be loaded, which
# fails every rank with a reason, not a hang.
# Skips (77) where mpirun is absent or weft was built without PMIx.
# usage: pmix_launch.sh WEFT_PERF PMIX_TWICE MEMBER_SECRET
set -euo pipefail
perf=$1 twice=$2 member=$3

if ! command -v mpirun >/dev/null; then
    echo "pmix_launch: no mpirun (Debian: openmpi-bin); skipped"
    exit 77
fi
# Open MPI refuses root unless told; oversubscribe: 4 ranks on a 2-core machine.
args=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && args+=(--allow-run-as-root)
# Every rank reads its store through PMIx, not through a variable left over by a caller.
unset WEFT_STORE WEFT_JOB_TOKEN WEFT_RANK WEFT_WORLD_SIZE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

set +e
timeout 120 mpirun "${args[@]}" -n 4 "$perf" allreduce -b 8 -e 4M -c 1 >"$out/perf" 2>&1
rc=$?
set -e
if grep -q "built without PMIx" "$out/perf"; then
    echo "pmix_launch: weft was built without PMIx (no pmix.h); skipped"
    exit 77
fi
cat "$out/perf"
[[ $rc -eq 0 ]] || { echo "FAIL: mpirun -n 4 weft-perf allreduce exited $rc"; exit 1; }
# Every size from 8 B to 4 MiB, none wrong.
"$(dirname "$0")/perf_table_ok.sh" "$out/perf" 4 20

timeout 120 mpirun "${args[@]}" -n 4 "$twice" | tee "$out/twice"
[[ $(grep -c "allreduce correct" "$out/twice") -eq 2 ]] || { echo "FAIL: two contexts"; exit 1; }

# A lease of 6 s: a member counts as alive to the store until its renewals are 1.5 s late.
timeout 120 mpirun "${args[@]}" -n 3 -x WEFT_FAILURE_TIMEOUT_MS=6000 -x WEFT_LOG_LEVEL=error \
    "$member" | tee "$out/member"
[[ $(grep -c "^SECRET-OK" "$out/member") -eq 3 ]] || { echo "FAIL: member secrets"; exit 1; }

set +e
timeout 60 mpirun "${args[@]}" -n 2 -x WEFT_PMIX_LIBRARY=libweft-no-such-pmix.so \
    "$perf" allreduce -b 8 -e 8 >"$out/bad" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$out/bad"; echo "FAIL: bad library: exit $rc"; exit 1; }
[[ $(grep -c "WEFT_PMIX_LIBRARY, or start the job with weftrun" "$out/bad") -ge 2 ]] ||
    { cat "$out/bad"; echo "FAIL: every rank says why"; exit 1; }
echo "pmix_launch: passed"
