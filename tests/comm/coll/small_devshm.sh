#!/bin/sh
# A /dev/shm too small for a group's data segment: every rank warns, large collectives
# move their data with messages and stay correct, nothing is left in /dev/shm, and no rank
# dies of SIGBUS. Runs in a private mount namespace with a 12 MiB /dev/shm (UCX itself
# needs about 9 MiB for two ranks); skipped (77) where that cannot be set up.
#   small_devshm.sh WEFTRUN WEFT_PERF
set -u
weftrun=$1
perf=$2
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "skipped: needs root and unshare"
    exit 77
fi
unshare -m sh -c 'mount -t tmpfs -o size=12m tmpfs /dev/shm' 2>/dev/null || {
    echo "skipped: cannot mount a private /dev/shm here"
    exit 77
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# WEFT_SHM_CHUNK=4M asks for a 32 MiB data segment with two ranks.
unshare -m sh -c '
    mount -t tmpfs -o size=12m tmpfs /dev/shm || exit 77
    WEFT_SHM_CHUNK=4M "$1" -n 2 --timeout 60 -- "$2" allreduce -b 8 -e 8M -f 32 -n 3 -w 1 || exit 1
    WEFT_SHM_CHUNK=4M "$1" -n 2 --timeout 60 -- "$2" allgather -b 64 -e 4M -f 64 -n 3 -w 1 || exit 1
    left=$(ls /dev/shm)
    [ -z "$left" ] || { echo "left in /dev/shm: $left"; exit 1; }
' sh "$weftrun" "$perf" >"$out" 2>&1
rc=$?
cat "$out"
[ $rc = 0 ] || { echo "FAILED: exit status $rc"; exit 1; }
grep -q "could not be allocated" "$out" || { echo "FAILED: no warning about /dev/shm"; exit 1; }
echo "PASSED"
