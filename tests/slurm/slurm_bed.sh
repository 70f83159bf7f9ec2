#!/usr/bin/env bash
# A private Slurm on this host, to run srun jobs in tests. It makes a munge key, a
# slurm.conf naming this host as the one node (reached at 127.0.0.1) and starts munged,
# slurmctld and slurmd with everything they write under STATE_DIR, on ports found free
# (not Slurm's defaults, so a real Slurm on the machine is neither used nor disturbed),
# waits for the node to be idle, runs COMMAND with SLURM_CONF exported, and stops all it
# started, whatever happens.
#
#   slurm_bed.sh STATE_DIR COMMAND [ARGS...]
#       STATE_DIR is cleared first (it must be empty, absent or a bed's own). Exits with
#       COMMAND's status, 1 when a process of the bed outlived the bed, 77 where Slurm
#       cannot run here (not root, no Slurm or munge, a daemon that does not come up),
#       2 on a usage error.
#
# The node has at least 8 CPUs whatever the machine has, so that `srun -n 4` runs on 2
# cores: SlurmdParameters=config_overrides keeps slurmd from draining a node that claims
# more CPUs than it has. No cgroups (proctrack/linuxproc, task/none): a container has
# none to give. Every process the bed starts, and every process of its jobs, carries
# SLURM_TEST_BED=STATE_DIR in its environment (not WEFT_*: the ranks
# would warn about an unknown setting): slurmstepd outlives a killed slurmd, and
# this is how the bed finds it, and what a bed killed outright left behind, to end it.
set -euo pipefail

usage() {
    echo "usage: slurm_bed.sh STATE_DIR COMMAND [ARGS...]" >&2
    exit 2
}
skip() {
    echo "slurm_bed: skipped: $*"
    exit 77
}
[ $# -ge 2 ] || usage
state=$1
shift

[ "$(id -u)" -eq 0 ] || skip "not root (slurmd runs jobs as their user, munged's key is root's)"
for b in munged mungekey munge slurmctld slurmd srun sinfo squeue scancel; do
    command -v "$b" >/dev/null || skip "no $b in PATH (scripts/install-deps.sh installs Slurm and munge)"
done

# Never clear a folder that is someone's: only an empty one or one a bed made.
if [ -e "$state" ] && [ -n "$(ls -A "$state")" ] && [ ! -e "$state/.slurm_bed" ]; then
    echo "slurm_bed: $state is not empty and is no bed's state: refusing to clear it" >&2
    exit 2
fi
mkdir -p "$state"
state=$(cd "$state" && pwd -P)
marker="SLURM_TEST_BED=$state"

# The processes whose environment carries this bed's marker.
bed_pids() {
    local e p
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}
        p=${p%/environ}
        if [ "$p" = $$ ] || [ "$p" = "$BASHPID" ]; then
            continue
        fi
        tr '\0' '\n' 2>/dev/null <"$e" | grep -qxF "$marker" && echo "$p"
    done
    return 0
}

# A bed killed outright (SIGKILL at a test's timeout) could not stop its daemons.
mapfile -t left < <(bed_pids)
((${#left[@]} == 0)) || kill -9 "${left[@]}" 2>/dev/null || true
rm -rf "$state"
# STATE_DIR and munge/ are 0711: munged wants every folder above its socket open to all
# (srun of any user talks to it); the rest is 0700, and the key is 0400.
mkdir -m 0711 "$state" "$state/munge"
mkdir -m 0700 "$state/ctld" "$state/spool" "$state/log" "$state/tmp"
touch "$state/.slurm_bed"

# A port nobody listens on, from a range away from Slurm's defaults (6817-6819) and from
# the kernel's ephemeral ports (32768 and up, where srun's own ports come from).
taken=""
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 10000))
        case " $taken " in *" $p "*) continue ;; esac
        if command -v ss >/dev/null; then
            [ -z "$(ss -Hltn "sport = :$p")" ] || continue
        else
            ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || continue
        fi
        taken="$taken $p"
        echo "$p"
        return 0
    done
    return 1
}
ctld_port=$(free_port) || skip "found no free port"
slurmd_port=$(free_port) || skip "found no free port"

node=$(hostname -s)
cpus=$(nproc)
((cpus >= 8)) || cpus=8
conf=$state/slurm.conf
sock=$state/munge/munge.socket
cat >"$conf" <<EOF
# Written by tests/slurm/slurm_bed.sh: a one-node Slurm private to $state.
ClusterName=weftbed
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
TmpFS=$state/tmp
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$state/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=bed Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
# Empty: the machine's /etc/slurm/plugstack.conf would load its SPANK plug-ins.
: >"$state/plugstack.conf"
# Run inside a real Slurm job, srun would take the job's variables for ours.
for v in $(compgen -e | grep '^SLURM_' || true); do
    unset "$v"
done
export SLURM_CONF=$conf

# The daemons the bed started, in this order: munged, slurmctld, slurmd.
pids=()
alive() { [ -n "${pids[$1]:-}" ] && kill -0 "${pids[$1]}" 2>/dev/null; }
# shellcheck disable=SC2317  # called by the EXIT trap
stop_bed() {
    local rc=$? i p jobs left
    trap - EXIT
    set +e
    # Jobs first: their slurmstepd would outlive slurmd. (Not without slurmctld: squeue
    # would retry it until its timeout.)
    jobs=()
    ! alive 1 || mapfile -t jobs < <(timeout 10 squeue -h -o %i 2>/dev/null)
    if ((${#jobs[@]} > 0)); then
        timeout 10 scancel "${jobs[@]}" 2>/dev/null
        for _ in $(seq 50); do
            [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    # Then the daemons, youngest first, each by the pid it was started with (the pid files
    # say the same; a daemon that died early left none), SIGKILL after 10 s.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        p=${pids[i]}
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 100); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    mapfile -t left < <(bed_pids)
    if ((${#left[@]} > 0)); then
        echo "slurm_bed: processes left by the bed, killed:"
        ps -o pid,args -p "$(IFS=,; echo "${left[*]}")"
        kill -9 "${left[@]}" 2>/dev/null
        [ "$rc" -ne 0 ] || rc=1
    fi
    exit "$rc"
}
trap stop_bed EXIT
trap 'exit 130' INT TERM

# A daemon in the foreground, as our child: its pid is ours to stop, and its stderr (its
# log with -D or -F) goes to a file, so that no pipe of the caller's stays open.
start() {
    local name=$1
    shift
    env "$marker" "$@" </dev/null >"$state/log/$name.out" 2>&1 &
    pids+=($!)
}
fail_start() {
    echo "slurm_bed: $1; the end of its log:"
    tail -n 20 "$state/log/$2.out" "$state/log/$2.log" 2>/dev/null || true
    exit 77
}

umask 077
mungekey -c -b 1024 -k "$state/munge/munge.key" >/dev/null
chmod 0400 "$state/munge/munge.key"
start munged munged -F --socket="$sock" --key-file="$state/munge/munge.key" \
    --pid-file="$state/munge/munged.pid" --seed-file="$state/munge/munged.seed"
for _ in $(seq 100); do
    munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 && break
    alive 0 || break
    sleep 0.1
done
munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 ||
    fail_start "munged did not come up on $sock" munged
umask 022

start slurmctld slurmctld -D -f "$conf"
start slurmd slurmd -D -f "$conf" -N "$node"
# Idle within 30 s, or the daemons' logs say why not.
t0=$SECONDS
state_now=""
while ((SECONDS - t0 < 30)); do
    alive 1 || fail_start "slurmctld exited" slurmctld
    alive 2 || fail_start "slurmd exited" slurmd
    state_now=$(timeout 5 sinfo -h -N -n "$node" -o %T 2>/dev/null || true)
    # A node slurmctld refused (a configuration that does not fit the machine) stays so.
    case $state_now in idle | inval | drain*) break ;; esac
    sleep 0.2
done
if [ "$state_now" != idle ]; then
    echo "slurm_bed: node $node is '${state_now:-unknown}', not idle, after $((SECONDS - t0)) s"
    tail -n 10 "$state/log/slurmctld.log" "$state/log/slurmd.log" 2>/dev/null || true
    exit 77
fi
echo "slurm_bed: node $node idle after $((SECONDS - t0)) s (slurmctld port $ctld_port," \
    "slurmd port $slurmd_port, SLURM_CONF=$conf)"

set +e
env "$marker" "$@"
rc=$?
set -e
exit $rc
