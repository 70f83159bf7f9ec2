#!/usr/bin/python3
"""Randomized fault injection for elastic weft jobs.

What it does
------------
Each trial runs the example trainer under the launcher,

    weftrun -n N --elastic [--replace | --min M] --timeout T --
            weft-example-trainer --steps S --redundancy R [--wait-replacement 3000]

and hurts it from outside at random moments: SIGKILL of 1, 2 or 3 rank processes, or
SIGSTOP of one (with or without a SIGCONT 0.5-3 s later). A trial draws everything from
its own seed, so `--seed SEED --trials 1` replays the choices of one trial exactly (the
timing of the machine is not replayed):

  N         3..8 ranks
  mode      elastic (--elastic), replace (--elastic --replace), replace+wait (the same,
            and the trainer waits up to 3000 ms for replacements), min (--elastic --min M,
            M = N - deaths or one more, so that about half of these trials go below it)
  fault     kill1, kill2, kill3 (SIGKILLs), stop (SIGSTOP), stop+cont (SIGSTOP, then
            SIGCONT after 0.5-3 s; the default WEFT_FAILURE_TIMEOUT_MS is 2 s, so the
            rank is fenced in some of these trials and resumes in the others)
  spacing   between two kills: burst (0-5 ms), repair (10-50 ms after the previous kill,
            while the survivors repair), spread (100-500 ms); "-" for one fault
  moment    of the first fault: startup (0-100 ms after launch, which with the current
            library is mostly inside weft_init), midrun (once the trainer has reported
            step K, K drawn in 10-50 % of the steps), joiner (replace modes, 2-3 kills:
            the first kill mid-run, then each further kill waits for a replacement, a
            process with WEFT_JOIN=1, to appear, and kills it 0-50 ms later; spacing
            "join")
  redundancy 1 or 2: the trainer's --redundancy, the buddies that hold a copy of each
            member's snapshot (drawn last, so the other choices of a seed are those of
            the versions before it)

Victims are the current rank processes of the trial: the children of weftrun whose
environment has WEFT_RANK (a replacement also has WEFT_JOIN=1), read from /proc. weftrun's
stdout and stderr go through a pseudo-terminal, so the trainer's stdio writes each line at
once and its progress lines ("step N: loss ...", from rank 0 every 50 steps) tell the
driver how far the job is. The number of steps is chosen so that a healthy run lasts
1.5-3 s (1-1.8 s with --quick), from the cost of a step with 3 and with 8 ranks measured
before the trials (`--step-us` gives them instead, and the replay commands do).

Outcome of a trial
------------------
  PASS           weftrun exited 0, the trainer's last line says "done: ... parameters
                 equal on every rank", and it said that w and the momentum are bitwise
                 those of a run without failures.
  EXPECTED-STOP  weftrun exited non-zero well before the bound (in less than half of it),
                 no rank printed "NOT equal", and the mode demands that stop:
                 - weftrun said "fewer than --min M" and the faults delivered could leave
                   fewer than M processes: under --min M, N - deaths < M; under --elastic
                   alone (M = 1) every process was killed. Under --replace each death is
                   replaced, so this stop is never expected there. A stopped rank counts as
                   a possible death (it is fenced when its lease lapses).
                 - weftrun said a process died "after the job began to finish", and every
                   such process was one of the trial's victims: a fault that landed while
                   the ranks were leaving fails the job by weftrun's rules.
                 - every rank was killed (or stopped) and a replacement said that nobody is
                   left to admit it: no state survives, so the job cannot go on.
                 - the trainer said "training state lost" after more faults than the
                   trial's redundancy (it snapshots each member's shard on the member and
                   on R buddies, so a member and its R buddies dying before the survivors
                   have snapshotted the restored state anew lose that shard), and weftrun
                   exited 86: the members stop with WEFT_EXIT_JOB_FAILED, which weftrun
                   replaces in no mode and takes as the job's failure. With another
                   non-zero status the other rules here must explain it (a --min stop
                   that came first); exit 0 after "training state lost" is a FAIL (a
                   failed job that a scheduler would record as a success).
  HANG           weftrun exited 124 (its own --timeout), or did not exit within the
                 trial's wall-clock bound (then the driver kills everything). Always a
                 failure.
  FAIL           anything else: another exit status, "NOT equal", a state that differs
                 from the reference, exit 0 without those final lines, exit 0 although
                 --min demanded a stop (N - kills < M), a stop that was not prompt. A
                 PASS or EXPECTED-STOP becomes FAIL when a process of the trial is still
                 running after weftrun exited (it is killed and listed) or a
                 /dev/shm/weft-* name of the trial's job remains (it is removed and
                 listed); the job's names are found from WEFT_STORE, the token (the
                 driver draws it and hands it to weftrun with --token-file; the ranks
                 hold only their member secrets) and this host's id, as
                 comm/shm/shm_job.c derives them.

At the end a table gives the trials by fault x spacing x moment x mode with their counts
per outcome, then the totals per dimension. The output of every HANG and FAIL is kept in
--keep DIR/trial-SEED/ (output.txt: weftrun's stdout and stderr; trial.json: the draw, the
faults delivered with their times, the verdict and the command that replays the trial;
procs.txt: the trial's processes when it hung). The exit status is 1 when any trial hung
or failed, 0 otherwise, 2 on a usage or set-up error.

How to run
----------
    cmake --build build
    tests/elastic/fault_random.py --trials 30                 # a seed from the clock
    tests/elastic/fault_random.py --trials 1000 --jobs 2 --keep /tmp/weft-faults
    tests/elastic/fault_random.py --seed 1234 --trials 1      # the draw of one trial
    tests/elastic/fault_random.py --quick                     # the short version (ctest)

The replay command printed for a failing trial also gives --step-us, --bound and --quick
as that run had them, so that its draw, steps included, is the same.

Options: --trials N, --seed S (trial i uses seed S+i), --jobs J (trials in parallel),
--bin DIR (weftrun and weft-example-trainer; default build/bin), --quick (shorter runs, a
shorter bound, 16 trials unless --trials says otherwise), --keep DIR, --bound SECONDS
(wall-clock bound of a trial, default 40, 25 with --quick; weftrun gets --timeout
SECONDS - 8), --budget SECONDS (start no trial after this long; the rest are reported as
not run), --step-us US3,US8 (the cost of a step, instead of measuring it), --only
KEY=VALUE,... (run only the drawn trials with that fault, spacing, moment, mode, n or
redundancy; the draw is unchanged, so seeds stay valid), --stacks (gdb stacks of a hung trial's ranks in
procs.txt).
Only the Python standard library is used; run it as root or as the user that owns the
processes, since it reads their /proc entries. Every process of a trial carries
FAULTRAND_TRIAL=<seed> in its environment, which is how leftovers are found.
"""

import argparse
import glob
import hashlib
import hmac
import json
import math
import os
import pty
import random
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

PASS, EXPECTED, HANG, FAIL, NOTRUN = "PASS", "EXPECTED-STOP", "HANG", "FAIL", "NOT-RUN"
EXIT_JOB_FAILED = 86  # WEFT_EXIT_JOB_FAILED (include/weft/core.h): the members say the job failed
OUTCOMES = (PASS, EXPECTED, HANG, FAIL)
WAIT_REPLACEMENT_MS = 3000
MARKER = "FAULTRAND_TRIAL"  # not WEFT_*: weft warns about WEFT_* names it does not know

print_lock = threading.Lock()
running = {}  # seed -> Popen of weftrun, for Ctrl-C
running_lock = threading.Lock()
interrupted = threading.Event()


# ---------------------------------------------------------------------------- the draw


def step_cost_us(step_us, n):
    """Cost of one training step with n ranks, from the measured costs with 3 and with 8
    ranks (a power law through the two)."""
    c3, c8 = step_us
    e = math.log(c8 / c3) / math.log(8 / 3)
    return c3 * (n / 3.0) ** e


def draw_trial(seed, quick, step_us):
    """Everything random about a trial, from its seed alone."""
    r = random.Random(seed)
    n = r.randint(3, 8)
    mode = r.choice(["elastic", "replace", "replace+wait", "min"])
    fault = r.choices(["kill1", "kill2", "kill3", "stop", "stop+cont"],
                      weights=[25, 25, 20, 15, 15])[0]
    kills = int(fault[4]) if fault.startswith("kill") else 0
    moments = ["startup", "midrun"]
    if mode.startswith("replace") and kills >= 2:
        moments.append("joiner")
    moment = r.choice(moments)
    if kills < 2:
        spacing = "-"
    elif moment == "joiner":
        spacing = "join"
    else:
        spacing = r.choice(["burst", "repair", "spread"])
    deaths = max(kills, 1)
    min_m = r.randint(max(1, n - deaths), min(n, n - deaths + 1)) if mode == "min" else 1
    run_s = r.uniform(1.0, 1.8) if quick else r.uniform(1.5, 3.0)
    steps = max(1000, int(round(run_s * 1e6 / step_cost_us(step_us, n), -2)))
    # Start-up: a time after launch. Mid-run: a step the trainer must have reported.
    first_ms = r.uniform(0, 100)
    first_step = int(r.uniform(0.1, 0.5) * steps) // 50 * 50
    gap_range = {"burst": (0, 5), "repair": (10, 50), "spread": (100, 500),
                 "join": (0, 50), "-": (0, 0)}[spacing]
    gaps_ms = [r.uniform(*gap_range) for _ in range(max(kills - 1, 0))]
    return {
        "seed": seed, "n": n, "mode": mode, "min": min_m, "fault": fault, "kills": kills,
        "spacing": spacing, "moment": moment, "steps": steps, "run_s": round(run_s, 3),
        "first_ms": round(first_ms, 2) if moment == "startup" else None,
        "first_step": first_step if moment != "startup" else None,
        "gaps_ms": [round(g, 2) for g in gaps_ms],
        "cont_s": round(r.uniform(0.5, 3.0), 3) if fault == "stop+cont" else None,
        "picks": [r.random() for _ in range(4)],  # which of the candidates is the victim
        "redundancy": r.choice([1, 2]),
    }


def command(t, bindir, weftrun_timeout, token_file):
    cmd = [os.path.join(bindir, "weftrun"), "-n", str(t["n"]), "--elastic",
           "--token-file", token_file]
    if t["mode"].startswith("replace"):
        cmd.append("--replace")
    if t["mode"] == "min":
        cmd += ["--min", str(t["min"])]
    cmd += ["--timeout", str(weftrun_timeout), "--",
            os.path.join(bindir, "weft-example-trainer"), "--steps", str(t["steps"]),
            "--redundancy", str(t["redundancy"])]
    if t["mode"] == "replace+wait":
        cmd += ["--wait-replacement", str(WAIT_REPLACEMENT_MS)]
    return cmd


# ----------------------------------------------------------------------------- /proc


def proc_stat(pid):
    """(state, ppid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def proc_env(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return {}
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def rank_processes(weftrun_pid):
    """Live rank processes of a job: children of weftrun that have exec'd the program
    (WEFT_RANK is in their environment). Returns [(pid, env)]."""
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st is None or st[1] != weftrun_pid or st[0] in ("Z", "X"):
            continue
        env = proc_env(pid)
        if "WEFT_RANK" in env:
            out.append((pid, env))
    return out


def trial_processes(tag):
    """Every process whose environment carries this trial's marker."""
    me = os.getpid()
    found = []
    for pid in all_pids():
        if pid == me:
            continue
        env = proc_env(pid)
        if env.get(MARKER) == tag:
            st = proc_stat(pid)
            if st is not None and st[0] not in ("Z", "X"):
                found.append((pid, st, env))
    return found


def host_id():
    """This host as weft counts hosts (util/host_id.h): FNV-1a over the boot id, the
    network and PID namespaces and /dev/shm's device. The driver shares all four with the
    ranks it watches."""
    prime, mask = 1099511628211, (1 << 64) - 1

    def fnv(h, data):
        for b in data:
            h = ((h ^ b) * prime) & mask
        return h

    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().split("\n")[0]
    except OSError:
        boot = ""
    h = fnv(1469598103934665603, boot.encode() + b"\0")
    for ns in ("/proc/self/ns/net", "/proc/self/ns/pid"):
        try:
            link = os.readlink(ns).encode()[:64]
        except OSError:
            link = b""
        h = (fnv(h, link) * prime) & mask
    try:
        dev = os.stat("/dev/shm").st_dev
    except OSError:
        dev = 0
    h = fnv(h, dev.to_bytes(8, "little"))
    return f"{h:016x}"


def job_hash(store, token, ns):
    """The job part of its shared-memory names (comm/shm/shm_job.c): 16 hex digits of
    HMAC-SHA256 over "weft shm job", the store address and the host id, keyed by the hex
    of the job's data key, HMAC-SHA256(token, "weft-data-v1"). It does not depend on the
    namespace, so every name of the job starts with it."""
    del ns
    data = hmac.new(token.encode(), b"weft-data-v1", hashlib.sha256).hexdigest()
    msg = b"weft shm job\0" + store.encode() + b"\0" + host_id().encode() + b"\0"
    return hmac.new(data.encode(), msg, hashlib.sha256).hexdigest()[:16]


# -------------------------------------------------------------------------- one trial


class Injector:
    """Delivers a trial's faults to the rank processes of a running weftrun."""

    def __init__(self, t, proc, t0, deadline, progress, token):
        self.t, self.proc, self.t0, self.deadline = t, proc, t0, deadline
        self.token = token
        self.progress = progress
        self.events = []   # what was done, when
        self.victims = set()
        self.identity = None  # (WEFT_STORE, the job token, namespace) of the job
        self.joiners_seen = set()
        self.pick = 0
        self.seen = (-1e9, [])  # the last look at the ranks: (ms, [(pid, env)])

    def ms(self):
        return (time.monotonic() - self.t0) * 1000.0

    def alive(self):
        return self.proc.poll() is None and not interrupted.is_set() and \
            time.monotonic() < self.deadline

    def wait_step(self, step):
        """Wait until the trainer reported this step; False when the job ended first."""
        while self.alive():
            if self.progress.step >= step:
                return True
            if self.identity is None:
                self.ranks()
            time.sleep(0.002)
        return False

    def ranks(self):
        rs = rank_processes(self.proc.pid)
        self.seen = (self.ms(), rs)
        if self.identity is None and rs:
            env = rs[0][1]
            self.identity = (env.get("WEFT_STORE", ""), self.token,
                             env.get("WEFT_NAMESPACE", "weft") or "weft")
        return rs

    def sleep_until_ms(self, at_ms):
        """Sleep until at_ms after launch; False when weftrun exited meanwhile."""
        while self.alive():
            left = at_ms - self.ms()
            if left <= 0:
                return True
            if self.identity is None:
                self.ranks()
            time.sleep(min(left / 1000.0, 0.005))
        return False

    def candidates(self, wait_ms=300):
        """Rank processes not hurt yet; waits a little when there is none (start-up, or a
        replacement on its way). A look at /proc costs milliseconds, so kills a few
        milliseconds apart choose from the look of the one before."""
        if self.ms() - self.seen[0] < 10:
            rs = [(p, e) for p, e in self.seen[1] if p not in self.victims]
            if rs:
                return rs
        until = self.ms() + wait_ms
        while self.alive():
            rs = [(p, e) for p, e in self.ranks() if p not in self.victims]
            if rs or self.ms() >= until:
                return rs
            time.sleep(0.002)
        return []

    def hit(self, sig, pid, env, what):
        st = proc_stat(pid)
        delivered = False
        if st is not None and st[0] not in ("Z", "X"):
            try:
                os.kill(pid, sig)
                delivered = True
            except OSError:
                pass
        self.victims.add(pid)
        self.events.append({
            "ms": round(self.ms(), 1), "step": self.progress.step, "what": what, "pid": pid,
            "rank": env.get("WEFT_RANK"), "join": env.get("WEFT_JOIN") == "1",
            "delivered": delivered})
        return delivered

    def hit_random(self, sig, what):
        rs = self.candidates()
        if not rs:
            self.events.append({"ms": round(self.ms(), 1), "what": what,
                                "delivered": False, "note": "no victim"})
            return None
        rs.sort()
        pid, env = rs[int(self.t["picks"][self.pick % 4] * len(rs))]
        self.pick += 1
        self.hit(sig, pid, env, what)
        return pid

    def wait_new_joiner(self):
        """A replacement that appeared since the last one, or None."""
        while self.alive():
            for pid, env in self.ranks():
                if env.get("WEFT_JOIN") == "1" and pid not in self.joiners_seen \
                        and pid not in self.victims:
                    self.joiners_seen.add(pid)
                    return pid, env
            time.sleep(0.001)
        return None

    def run(self):
        t = self.t
        if t["moment"] == "startup":
            if not self.sleep_until_ms(t["first_ms"]):
                return
        elif not self.wait_step(t["first_step"]):
            return
        if t["fault"].startswith("stop"):
            pid = self.hit_random(signal.SIGSTOP, "stop")
            if pid is not None and t["cont_s"] is not None:
                if self.sleep_until_ms(self.ms() + t["cont_s"] * 1000):
                    self.hit(signal.SIGCONT, pid, proc_env(pid), "cont")
            return
        # Replacements already running are not the ones a joiner fault waits for.
        self.joiners_seen.update(p for p, e in self.ranks() if e.get("WEFT_JOIN") == "1")
        self.hit_random(signal.SIGKILL, "kill")
        for gap in t["gaps_ms"]:
            if t["moment"] == "joiner":
                j = self.wait_new_joiner()
                if j is None:
                    self.events.append({"ms": round(self.ms(), 1), "what": "kill",
                                        "delivered": False, "note": "no replacement came"})
                    return
                if not self.sleep_until_ms(self.ms() + gap):
                    return
                self.hit(signal.SIGKILL, j[0], j[1], "kill")
            else:
                if not self.sleep_until_ms(self.ms() + gap):
                    return
                self.hit_random(signal.SIGKILL, "kill")


def kill_everything(proc, tag):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(3):
        left = trial_processes(tag)
        if not left:
            break
        for pid, _, _ in left:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        time.sleep(0.1)


def describe_processes(tag, stacks=False):
    """One line per live process of the trial (and its threads' stacks when asked)."""
    lines = []
    for pid, st, env in trial_processes(tag):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read().strip()
        except OSError:
            cmd, wchan = "?", "?"
        lines.append(f"pid {pid} ppid {st[1]} state {st[0]} wchan {wchan} "
                     f"WEFT_RANK={env.get('WEFT_RANK', '-')} "
                     f"WEFT_JOIN={env.get('WEFT_JOIN', '-')}  {cmd}")
        if stacks and "WEFT_RANK" in env:
            try:
                bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                                     "-ex", "thread apply all bt"],
                                    stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=30).stdout
                lines += ["    " + ln for ln in bt.splitlines()
                          if ln.startswith(("#", "Thread"))]
            except (OSError, subprocess.TimeoutExpired) as e:
                lines.append(f"    (no stack: {e})")
    return lines


class Output:
    """weftrun's stdout and stderr through a pseudo-terminal, copied to a file. On a
    terminal the trainer's stdio writes each line at once, so its progress lines ("step
    N: loss ...", printed by rank 0 every 50 steps) tell how far the job is."""

    STEP = re.compile(rb"^step (\d+): loss")

    def __init__(self, path):
        self.file = open(path, "wb")
        self.master, self.slave = pty.openpty()
        attrs = termios.tcgetattr(self.slave)
        attrs[1] &= ~termios.OPOST  # no "\r\n" for "\n"
        termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        self.step = -1
        self.thread = threading.Thread(target=self.copy, daemon=True)

    def start(self):
        os.close(self.slave)  # the job holds it now
        self.thread.start()

    def copy(self):
        partial = b""
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not data:
                break
            self.file.write(data)
            lines = (partial + data).split(b"\n")
            partial = lines.pop()
            for ln in lines:
                m = self.STEP.match(ln)
                if m:
                    self.step = max(self.step, int(m.group(1)))
        self.file.write(partial)

    def close(self):
        self.thread.join(timeout=5)
        os.close(self.master)
        self.file.close()


def run_trial(t, opts, workdir):
    tag = str(t["seed"])
    bound = opts.bound
    weftrun_timeout = max(bound - 8, 5)
    # The ranks hold no token (only their member secrets), so the driver chooses it: the
    # job's /dev/shm names derive from it (job_hash).
    token = secrets.token_hex(32)
    token_file = os.path.join(workdir, f"token-{tag}")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    cmd = command(t, opts.bin, weftrun_timeout, token_file)
    env = dict(os.environ)
    env[MARKER] = tag
    outpath = os.path.join(workdir, f"out-{tag}.txt")
    res = {"cmd": cmd, "notes": []}
    out = Output(outpath)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out.slave,
                            stderr=out.slave, env=env, start_new_session=True)
    out.start()
    with running_lock:
        running[tag] = proc
    deadline = t0 + bound
    inj = Injector(t, proc, t0, deadline, out, token)
    try:
        inj.run()
    except Exception as e:  # a bug of the driver must not leave the job running
        res["notes"].append(f"injector error: {e!r}")
    wall_hit = False
    rc = None
    # Just before weftrun's own --timeout would stop it, look at what is stuck where.
    look_at = min(deadline, t0 + weftrun_timeout - 1.0)
    try:
        rc = proc.wait(timeout=max(look_at - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        res["procs"] = describe_processes(tag, opts.stacks)
    if rc is None:
        try:
            rc = proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            wall_hit = True
            res.setdefault("procs", [])
            res["procs"] += ["", "at the bound:"] + describe_processes(tag, False)
            kill_everything(proc, tag)
            rc = proc.wait()
    elapsed = time.monotonic() - t0
    with running_lock:
        running.pop(tag, None)
    # What the trial left behind.
    time.sleep(0.05)
    left = trial_processes(tag)
    if left:
        res["leftover_procs"] = describe_processes(tag)
        kill_everything(proc, tag)
    out.close()
    os.unlink(token_file)
    shm_left = []
    if inj.identity is not None:
        for path in glob.glob(f"/dev/shm/weft-{job_hash(*inj.identity)}-*"):
            shm_left.append(os.path.basename(path))
            try:
                os.unlink(path)
            except OSError:
                pass
    else:
        res["notes"].append("no rank process seen: /dev/shm not checked")
    with open(outpath, "rb") as f:
        output = f.read().decode(errors="replace")
    res.update({"rc": rc, "elapsed_s": round(elapsed, 3), "wall_hit": wall_hit,
                "events": inj.events, "shm_left": shm_left, "output_path": outpath})
    res["outcome"], res["reason"] = classify(t, res, output, bound, inj.victims)
    return res, output


def first_complaint(output):
    """The line that best says why a job failed: the trainer's own, else weftrun's, else
    the first error of a rank."""
    lines = output.splitlines()
    for test in (lambda ln: ln.startswith("trainer:"),
                 lambda ln: ln.startswith("[weftrun] ERROR"),
                 lambda ln: "ERROR" in ln):
        ln = next((ln for ln in lines if test(ln)), None)
        if ln is not None:
            return ": " + ln.strip()[:200]
    return ""


def classify(t, res, output, bound, victims):
    rc = res["rc"]
    kills = sum(1 for e in res["events"] if e["what"] == "kill" and e["delivered"])
    stops = sum(1 for e in res["events"] if e["what"] == "stop" and e["delivered"])
    possible = kills + stops
    min_m = t["min"]  # 1 unless --min
    done = re.findall(r"^done: .*parameters (equal|NOT equal) on every rank\s*$", output, re.M)
    not_equal = "NOT equal" in output
    leftovers = []
    if res.get("leftover_procs"):
        leftovers.append(f"{len(res['leftover_procs'])} process(es) still running after "
                         "weftrun exited")
    if res["shm_left"]:
        leftovers.append(f"/dev/shm names left: {' '.join(res['shm_left'])}")

    if res["wall_hit"]:
        return HANG, f"no exit within the bound of {bound} s"
    if rc == 124:
        return HANG, "weftrun's --timeout expired (exit 124)"
    if not_equal:
        return FAIL, "the trainer printed 'NOT equal'"
    if "DIFFER from a run without failures" in output:
        return FAIL, "the state differs from the reference (bitwise)"
    state_lost = "training state lost" in output
    if state_lost and rc == 0:
        return FAIL, "the trainer said 'training state lost' but weftrun exited 0"
    if state_lost and rc == EXIT_JOB_FAILED and possible > t["redundancy"]:
        # The members stop together with WEFT_EXIT_JOB_FAILED; weftrun stops the job with it.
        why = (f"{possible} faults, redundancy {t['redundancy']}: a member and all its "
               "buddies could die before the snapshots were renewed")
        if res["elapsed_s"] > bound / 2:
            return FAIL, f"a stop that took {res['elapsed_s']:.1f} s, not prompt ({why})"
        if leftovers:
            return FAIL, "; ".join(leftovers)
        return EXPECTED, why
    if rc == 0:
        if not done or done[-1] != "equal":
            return FAIL, "exit 0 without the final 'parameters equal' line"
        if not re.search(r"^reference: w and momentum bitwise equal", output, re.M):
            return FAIL, "exit 0 without the line that says the state is bitwise the reference"
        if t["mode"] == "min" and t["n"] - kills < min_m:
            return FAIL, (f"exit 0 although {kills} kill(s) left {t['n'] - kills} process(es), "
                          f"fewer than --min {min_m}")
        if leftovers:
            return FAIL, "; ".join(leftovers)
        return PASS, ""
    # A non-zero exit: is it a stop the mode demands?
    why = None
    if re.search(r"fewer than --min \d+", output):
        if not t["mode"].startswith("replace") and t["n"] - possible < min_m:
            why = (f"{possible} death(s) of {t['n']} could leave fewer than --min {min_m}")
    if why is None and "nobody is left to admit" in output and possible >= t["n"]:
        why = f"all {t['n']} ranks died: no state survives for a replacement to join"
    finishing = re.findall(r"rank \d+ \(pid (\d+)\) .*after the job began to finish", output)
    if why is None and finishing and all(int(p) in victims for p in finishing):
        why = "a victim died after the job began to finish"
    if why is None:
        return FAIL, f"exit {rc}" + first_complaint(output)
    if res["elapsed_s"] > bound / 2:
        return FAIL, f"a stop that took {res['elapsed_s']:.1f} s, not prompt ({why})"
    if leftovers:
        return FAIL, "; ".join(leftovers)
    return EXPECTED, why


# ------------------------------------------------------------------------------ driver


def calibrate(bindir, jobs):
    """Microseconds per step of a 3-rank and of an 8-rank job, with `jobs` such jobs at
    once (the difference between a short and a long run, so start-up does not count)."""
    def timed(n, steps):
        # --timeout far above what the runs take anywhere: a busy machine makes them slow,
        # not wrong (the step counts below keep them to seconds at about 80 steps/s).
        cmd = [os.path.join(bindir, "weftrun"), "-n", str(n), "--timeout", "180", "--",
               os.path.join(bindir, "weft-example-trainer"), "--steps", str(steps)]
        t0 = time.monotonic()
        procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for _ in range(jobs)]
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                sys.exit(f"fault_random: a healthy calibration run failed (exit "
                         f"{p.returncode}): {' '.join(cmd)}\n{err.decode(errors='replace')}")
        return time.monotonic() - t0
    costs = []
    for n, steps in ((3, 1200), (8, 600)):
        short, long_ = timed(n, 100), timed(n, 100 + steps)
        costs.append(max((long_ - short) / steps * 1e6, 5.0))
    costs[1] = max(costs[1], costs[0] * 1.01)  # the model needs 8 ranks to cost more
    return tuple(costs)


def parse_step_us(text):
    try:
        c3, c8 = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("--step-us needs two numbers: US3,US8")
    if not 0 < c3 < c8:
        raise argparse.ArgumentTypeError("--step-us needs 0 < US3 < US8")
    return c3, c8


def fmt_step_us(c):
    return f"{c[0]:.1f},{c[1]:.1f}"


def replay_command(opts, seed):
    parts = [sys.argv[0], "--seed", str(seed), "--trials", "1", "--bin", opts.bin,
             "--step-us", fmt_step_us(opts.step_us), "--bound", str(opts.bound)]
    if opts.quick:
        parts.append("--quick")
    return " ".join(shlex.quote(p) for p in parts)


def label(t):
    return f"{t['fault']}/{t['spacing']}/{t['moment']}"


def mode_label(t):
    return f"min{t['min']}" if t["mode"] == "min" else t["mode"]


def keep_failure(opts, t, res, output):
    d = os.path.join(opts.keep, f"trial-{t['seed']}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "output.txt"), "w") as f:
        f.write(output)
    record = {"trial": t, "result": {k: v for k, v in res.items() if k != "output_path"},
              "replay": replay_command(opts, t["seed"])}
    with open(os.path.join(d, "trial.json"), "w") as f:
        json.dump(record, f, indent=2)
    for key in ("procs", "leftover_procs"):
        if res.get(key):
            with open(os.path.join(d, f"{key.replace('_', '-')}.txt"), "w") as f:
                f.write("\n".join(res[key]) + "\n")
    return d


def print_table(trials, results):
    keys = ["fault", "spacing", "moment", "mode"]
    rows = {}
    for t in trials:
        res = results.get(t["seed"])
        if res is None:
            continue
        k = (t["fault"], t["spacing"], t["moment"], t["mode"])
        rows.setdefault(k, {o: 0 for o in OUTCOMES})[res["outcome"]] += 1
    if not rows:
        return
    head = f"{'fault':<10}{'spacing':<8}{'moment':<9}{'mode':<14}{'trials':>6}" + \
        "".join(f"{o:>15}" for o in OUTCOMES)
    print("\n" + head)
    print("-" * len(head))
    total = {o: 0 for o in OUTCOMES}
    for k in sorted(rows):
        c = rows[k]
        print(f"{k[0]:<10}{k[1]:<8}{k[2]:<9}{k[3]:<14}{sum(c.values()):>6}" +
              "".join(f"{c[o]:>15}" for o in OUTCOMES))
        for o in OUTCOMES:
            total[o] += c[o]
    print("-" * len(head))
    print(f"{'all':<41}{sum(total.values()):>6}" + "".join(f"{total[o]:>15}" for o in OUTCOMES))
    # The same counts along each dimension alone.
    for i, name in enumerate(keys):
        per = {}
        for k, c in rows.items():
            acc = per.setdefault(k[i], {o: 0 for o in OUTCOMES})
            for o in OUTCOMES:
                acc[o] += c[o]
        cells = ", ".join(
            f"{v} {sum(c.values())}" +
            (" (" + " ".join(f"{o}={c[o]}" for o in OUTCOMES[1:] if c[o]) + ")"
             if any(c[o] for o in OUTCOMES[1:]) else "")
            for v, c in sorted(per.items()))
        print(f"by {name}: {cells}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bin = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "bin")
    ap = argparse.ArgumentParser(
        description="Randomized fault injection for weftrun --elastic jobs of the example "
                    "trainer (see the top of this file).")
    ap.add_argument("--trials", type=int, help="number of trials (default 30; 16 with --quick)")
    ap.add_argument("--seed", type=int, help="seed of the first trial; trial i uses seed+i "
                    "(default: from the clock)")
    ap.add_argument("--jobs", type=int, default=1, help="trials run in parallel (default 1)")
    ap.add_argument("--bin", default=default_bin,
                    help="folder with weftrun and weft-example-trainer (default build/bin)")
    ap.add_argument("--quick", action="store_true", help="shorter runs and bound")
    ap.add_argument("--keep", help="folder for the output of failing trials "
                    "(default: a new folder under the temporary directory)")
    ap.add_argument("--bound", type=int, help="wall-clock bound of one trial in seconds "
                    "(default 40; 25 with --quick); weftrun gets --timeout bound-8")
    ap.add_argument("--budget", type=float, help="start no trial after this many seconds")
    ap.add_argument("--stacks", action="store_true",
                    help="with gdb, record the stacks of a hung trial's ranks in procs.txt")
    ap.add_argument("--only", default="",
                    help="run only the drawn trials that match KEY=VALUE[,KEY=VALUE...] "
                         "(keys: fault, spacing, moment, mode, n, redundancy); the draw is "
                         "unchanged")
    ap.add_argument("--step-us", type=parse_step_us, metavar="US3,US8",
                    help="cost of one step of a 3-rank and of an 8-rank job in microseconds "
                         "(default: measured before the trials)")
    opts = ap.parse_args()
    if opts.trials is None:
        opts.trials = 16 if opts.quick else 30
    if opts.bound is None:
        opts.bound = 25 if opts.quick else 40
    if opts.seed is None:
        opts.seed = int(time.time() * 1000) % 1_000_000_000
    opts.bin = os.path.abspath(opts.bin)
    for prog in ("weftrun", "weft-example-trainer"):
        if not os.access(os.path.join(opts.bin, prog), os.X_OK):
            print(f"fault_random: no {prog} in {opts.bin} (build first, or say --bin)",
                  file=sys.stderr)
            return 2
    if opts.trials < 1 or opts.jobs < 1 or opts.bound < 10:
        print("fault_random: --trials and --jobs need at least 1, --bound at least 10",
              file=sys.stderr)
        return 2
    made_keep = opts.keep is None
    if made_keep:
        opts.keep = tempfile.mkdtemp(prefix="weft-faultrand-")
    os.makedirs(opts.keep, exist_ok=True)
    opts.keep = os.path.abspath(opts.keep)

    start = time.monotonic()
    if opts.step_us is None:
        opts.step_us = calibrate(opts.bin, opts.jobs)
        how = f"measured with {opts.jobs} job(s) at once"
    else:
        how = "given"
    print(f"fault_random: seed {opts.seed}, {opts.trials} trial(s), {opts.jobs} at a time, "
          f"bound {opts.bound} s, a step of 3 and of 8 ranks {fmt_step_us(opts.step_us)} us "
          f"({how}); "
          f"failing trials kept in {opts.keep}", flush=True)

    trials = [draw_trial(opts.seed + i, opts.quick, opts.step_us) for i in range(opts.trials)]
    if opts.only:
        want = dict(kv.split("=", 1) for kv in opts.only.split(","))
        trials = [t for t in trials if all(str(t.get(k)) == v for k, v in want.items())]
        print(f"fault_random: {len(trials)} of the {opts.trials} trials match --only {opts.only}")
        opts.trials = len(trials)
    results = {}
    counter = [0]
    workdir = tempfile.mkdtemp(prefix="weft-faultrand-run-")

    def one(t):
        if interrupted.is_set() or \
                (opts.budget is not None and time.monotonic() - start > opts.budget):
            return
        res, output = run_trial(t, opts, workdir)
        if interrupted.is_set():  # cut short by us: says nothing about weft
            os.unlink(res["output_path"])
            return
        if res["outcome"] in (HANG, FAIL):
            res["kept"] = keep_failure(opts, t, res, output)
        try:
            os.unlink(res["output_path"])
        except OSError:
            pass
        results[t["seed"]] = res
        faults = ", ".join(
            f"{e['ms']:.0f}ms" + (f"@s{e['step']}" if e.get("step", -1) >= 0 else "") +
            f" {e['what']}" +
            (f" r{e['rank']}{'(join)' if e.get('join') else ''}" if e.get("rank") else "") +
            ("" if e["delivered"] else f" [not delivered{': ' + e['note'] if 'note' in e else ''}]")
            for e in res["events"])
        with print_lock:
            counter[0] += 1
            print(f"[{counter[0]:>4}/{opts.trials}] seed {t['seed']} n={t['n']} "
                  f"{mode_label(t)} r{t['redundancy']} {label(t)} steps={t['steps']} -> "
                  f"{res['outcome']} "
                  f"exit {res['rc']} {res['elapsed_s']:.2f}s | {faults or 'no fault delivered'}"
                  + (f" | {res['reason']}" if res["reason"] else ""), flush=True)

    # Ctrl-C, and SIGTERM (a test runner's timeout), stop the trials and what they run;
    # SIGINT may come ignored from a shell that started us in the background.
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    pool = ThreadPoolExecutor(max_workers=opts.jobs)
    futures = [pool.submit(one, t) for t in trials]
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5)
            for f in done:
                f.result()
    except KeyboardInterrupt:
        interrupted.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("\nfault_random: interrupted; stopping the running trials", file=sys.stderr)
        with running_lock:
            procs = list(running.items())
        for tag, p in procs:
            kill_everything(p, tag)
        pool.shutdown(wait=True, cancel_futures=True)
        # A trial may have started between the look at `running` and the shutdown.
        tags = {str(t["seed"]) for t in trials}
        for pid in all_pids():
            if proc_env(pid).get(MARKER) in tags:
                for sig in (signal.SIGKILL, signal.SIGCONT):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
    else:
        pool.shutdown(wait=True)
    try:
        os.rmdir(workdir)
    except OSError:
        pass

    print_table(trials, results)
    notrun = len(trials) - len(results)
    bad = [t for t in trials if t["seed"] in results
           and results[t["seed"]]["outcome"] in (HANG, FAIL)]
    if notrun:
        why = "interrupted" if interrupted.is_set() else f"--budget {opts.budget} s spent"
        print(f"\n{notrun} trial(s) not run ({why})")
    if bad:
        print(f"\n{len(bad)} trial(s) hung or failed:")
        for t in bad:
            r = results[t["seed"]]
            print(f"  seed {t['seed']}: {r['outcome']}: {r['reason']}\n"
                  f"    kept in {r['kept']}\n    replay: {replay_command(opts, t['seed'])}")
    elif made_keep:
        try:
            os.rmdir(opts.keep)  # nothing kept: do not leave an empty folder behind
        except OSError:
            pass
    print(f"\nfault_random: seed {opts.seed}: {len(results)} trial(s) in "
          f"{time.monotonic() - start:.0f} s, {len(bad)} hung or failed"
          + (" (interrupted)" if interrupted.is_set() else ""))
    if interrupted.is_set():
        return 130
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
