#!/usr/bin/env bash
# A test bed of "hosts" on one machine. Host i is a network namespace with an address of
# its own, and UTS (host name nsh<i>), IPC, PID and mount namespaces (a /dev/shm and a
# /proc of its own) held by a process that sleeps there; every command run on the host
# enters all of them. The hosts are joined by veth pairs to a bridge that lives in a
# namespace of its own: nothing is added to the machine's own network. UCX, like weft,
# then takes them for different machines (it compares the boot id and the IPC and PID
# namespaces), so peers on different hosts talk over TCP.
#
#   netns_hosts.sh N COMMAND [ARGS...]
#       Make N hosts (1 to 8), run COMMAND with NSH_BED (this script), NSH_HOSTS,
#       NSH_PREFIX and NSH_DIR exported, check that nothing is left in the hosts (no
#       process in their namespaces, no file in their /dev/shm), and remove everything,
#       whatever happens. Host i has the address 10.77.0.<i+1>/24. Exits with COMMAND's
#       status, 1 when something was left behind, 77 where namespaces cannot be made
#       (not root, no ip(8), a kernel or container that refuses them).
#   netns_hosts.sh exec I COMMAND [ARGS...]    (from COMMAND) run it on host I
#   netns_hosts.sh kill I                      (from COMMAND) SIGKILL every process of
#                                              host I: the host is lost
#   netns_hosts.sh addr I                      print host I's address
set -u

addr() { echo "10.77.0.$(($1 + 1))"; }

# The process holding host $1's namespaces (pid 1 there).
holder() { cat "$NSH_DIR/h$1/holder"; }

in_host() {
    local i=$1
    shift
    exec nsenter -t "$(holder "$i")" -n -u -i -m -p --wd="$PWD" -- "$@"
}

kill_host() {
    local pids
    pids=$(ip netns pids "${NSH_PREFIX}h$1" 2>/dev/null)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null
}

case "${1:-}" in
exec)
    shift
    in_host "$@"
    exit $?
    ;;
kill)
    kill_host "$2"
    exit 0
    ;;
addr)
    addr "$2"
    exit 0
    ;;
esac

n=${1:-}
shift
if [[ ! $n =~ ^[1-8]$ ]] || [ $# -eq 0 ]; then
    echo "usage: netns_hosts.sh N COMMAND [ARGS...] (N from 1 to 8)" >&2
    exit 2
fi
skip() {
    echo "skipped: $* (the multi-host tests need root and network namespaces)"
    exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not root"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "no ip(8) or unshare(1)"

export NSH_BED=$(readlink -f "$0") NSH_HOSTS=$n NSH_PREFIX="wn$$" NSH_DIR
NSH_DIR=$(mktemp -d /tmp/weft-nsh.XXXXXX) || exit 1
sw="${NSH_PREFIX}sw"
made_ns=""

teardown() {
    local i
    for i in $(seq 0 $((n - 1))); do
        kill_host "$i"
    done
    for ns in $made_ns; do
        ip netns del "$ns" 2>/dev/null
    done
    # veth ends left in the machine's own namespace if set-up stopped half way
    for l in $(ip -o link show 2>/dev/null | grep -o "${NSH_PREFIX}h[0-9]p\?" | sort -u); do
        ip link del "$l" 2>/dev/null
    done
    rm -rf "$NSH_DIR"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# The first namespace tells whether we may make them at all.
ip netns add "$sw" 2>/dev/null || skip "cannot make a network namespace"
made_ns="$sw"
ip netns exec "$sw" unshare --uts true 2>/dev/null || skip "cannot make a UTS namespace"
set -e
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for i in $(seq 0 $((n - 1))); do
    h="${NSH_PREFIX}h$i"
    ip netns add "$h"
    made_ns="$made_ns $h"
    ip link add "${h}" type veth peer name "${h}p"
    ip link set "${h}" netns "$h"
    ip link set "${h}p" netns "$sw"
    ip -n "$h" link set "$h" name eth0
    ip -n "$h" addr add "$(addr "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n "$sw" link set "${h}p" master br0
    ip -n "$sw" link set "${h}p" up
    mkdir -p "$NSH_DIR/h$i"
    # In a subshell, so that its end (SIGKILL at teardown) is no job of ours to report.
    (ip netns exec "$h" unshare --uts --ipc --pid --fork --mount --mount-proc \
        --propagation private /bin/sh -c \
        'hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && touch "$2" &&
         exec sleep infinity' sh "nsh$i" "$NSH_DIR/h$i/ready" </dev/null >/dev/null 2>&1 &)
done
# The holders: the process of each host's network namespace that is in a PID namespace
# other than ours, once it has made its /dev/shm.
for i in $(seq 0 $((n - 1))); do
    for _ in $(seq 100); do
        [ -e "$NSH_DIR/h$i/ready" ] && break
        sleep 0.05
    done
    for p in $(ip netns pids "${NSH_PREFIX}h$i"); do
        [ "$(readlink /proc/$p/ns/pid)" != "$(readlink /proc/self/ns/pid)" ] &&
            echo "$p" >"$NSH_DIR/h$i/holder"
    done
    [ -s "$NSH_DIR/h$i/holder" ]
done
set +e

"$@"
rc=$?

# Left behind: processes on a host besides its holder (and the unshare(1) waiting for
# it), files in its /dev/shm.
left=0
for i in $(seq 0 $((n - 1))); do
    h=$(holder "$i")
    pids=""
    for p in $(ip netns pids "${NSH_PREFIX}h$i"); do
        [ "$p" = "$h" ] || [ "$(readlink /proc/$p/exe)" = "$(command -v unshare)" ] ||
            pids="$pids $p"
    done
    if [ -n "$pids" ]; then
        echo "netns_hosts: processes left on host $i:"
        ps -o pid,args -p $(echo $pids | tr ' ' ',')
        left=1
    fi
    # A host killed whole took its /dev/shm with it.
    files=""
    [ -d "/proc/$h/root/dev/shm" ] && files=$(ls -A "/proc/$h/root/dev/shm")
    if [ -n "$files" ]; then
        echo "netns_hosts: left in /dev/shm of host $i: $files"
        left=1
    fi
done
teardown
trap - EXIT
gone=$(ip netns list | grep -c "^${NSH_PREFIX}")
links=$(ip -o link show | grep -c "${NSH_PREFIX}")
if [ "$gone" -ne 0 ] || [ "$links" -ne 0 ]; then
    echo "netns_hosts: $gone namespace(s) and $links link(s) of the bed were not removed"
    left=1
fi
[ $left -eq 0 ] || exit 1
exit $rc
