"""A process started after the job joins the world group from Python: rank 0 starts it
(this script with the argument "joiner" and WEFT_JOIN=1), it calls Context.join(), every
member waits until Group.pending_joiners() sees it and admits it with Group.grow(), and
all of them check the new membership and an allreduce that includes the newcomer. Then
the state the members snapshotted before the grow is restored re-cut over everyone: the
members with Snapshot.restore, the newcomer with Snapshot.restore_join; every member's
share must equal the model packed independently, and the newcomer reads the blobs.

The joiner inherits the job token from os.environ (Python's copy, taken before weft.init
removed it), which ranks hold only under weftrun --share-token (tests/python/CMakeLists.txt).

Run by tests/groups/run_fault.sh, which counts the "SURVIVOR-OK" lines: one per member
and one for the joiner.
"""

import os
import subprocess
import sys
import time

import numpy as np

import weft


def say(text):
    """One line in one write: the processes share weftrun's output file."""
    os.write(1, (text + "\n").encode())


def checked_allreduce(g):
    x = np.full(100, g.rank + 1, np.int64)
    g.allreduce(x)
    if not (x == g.size * (g.size + 1) // 2).all():
        raise AssertionError("allreduce gave %d on %d ranks" % (x[0], g.size))


def model():
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((123, 7)).astype(np.float32),
            "b": np.arange(301, dtype=np.int64)}


def target(g):
    return weft.Layout.from_tensors(model()).flat(g.member_ids)


def check_share(g, lay, state, who):
    want = lay.pack(g.member_id(), model())
    if not (np.asarray(state) == want).all():
        raise AssertionError("%s: restored share differs from the model" % who)


def joiner():
    with weft.init() as ctx:
        g = ctx.join("world", timeout=30)
        if g.rank != g.size - 1:
            raise AssertionError("the joiner is rank %d of %d" % (g.rank, g.size))
        checked_allreduce(g)
        lay = target(g)
        snap, r = weft.Snapshot.restore_join(g, lay)
        check_share(g, lay, r.state, "joiner")
        for m in g.member_ids[:-1]:
            if snap.blob(m) != b"member %d" % m:
                raise AssertionError("joiner: blob of %d is %r" % (m, snap.blob(m)))
        if r.step != 1 or r.bytes_missing:
            raise AssertionError("joiner: restored step %d, %d B missing" %
                                 (r.step, r.bytes_missing))
        snap.free()
        say("SURVIVOR-OK joiner: rank %d of %d, member id %d, epoch %d" %
            (g.rank, g.size, g.member_id(), g.epoch))


def member():
    ctx = weft.init()
    g = ctx.world
    n, me = g.size, g.rank
    lay = weft.Layout.from_tensors(model()).flat(g.member_ids)
    snap = weft.Snapshot(g, lay, blob_bytes=16)
    snap.start(1, lay.pack(g.member_id(), model()), b"member %d" % g.member_id()).wait(60)
    child = None
    if me == 0:
        env = dict(os.environ, WEFT_JOIN="1")
        env.pop("WEFT_RANK", None)
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "joiner"],
                                 env=env)
    until = time.monotonic() + 30
    while g.pending_joiners() < 1 and time.monotonic() < until:
        time.sleep(0.001)
    info = g.grow(min_new=1, timeout=30)
    if len(info.added) != 1 or info.new_size != n + 1 or info.rank_map[me] != me or \
            info.new_epoch != info.old_epoch + 1 or g.size != n + 1:
        raise AssertionError("grow: %s" % (info,))
    checked_allreduce(g)
    assert g.member_ids[-1] == info.added[0]
    new = target(g)
    r = snap.restore(new)
    check_share(g, new, r.state, "member %d" % me)
    snap.free()
    ctx.finalize()
    if child is not None and child.wait(timeout=60) != 0:
        raise AssertionError("the joiner exited with %d" % child.returncode)
    say("SURVIVOR-OK member rank %d: admitted member %d, epoch %d -> %d" %
        (me, info.added[0], info.old_epoch, info.new_epoch))


if __name__ == "__main__":
    try:
        joiner() if sys.argv[1:] == ["joiner"] else member()
    except Exception as e:
        say("SURVIVOR-FAIL: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
