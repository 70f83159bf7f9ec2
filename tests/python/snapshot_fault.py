"""A rank killed (SIGKILL) while the others train or migrate from Python; the survivors
repair the world group and carry on from what weft kept for them.

"snapshot": a toy training loop (a flat state of two tensors; a step is an elementwise
update in NumPy and a loss allreduce, then a snapshot with the step and a seed in the
blob); the last member dies at the start of step KILL_STEP. The survivors restore a
flat re-cut over themselves from the snapshots (nothing missing with one buddy), read
the step to resume from the dead member's blob, take new snapshots and train to STEPS:
every byte of every survivor's shard must equal the state computed without a failure.

"resume": the last member dies during a migration (after a few of its chunks moved);
the survivors resume it with weft.migrate_resume to a flat layout over themselves, with
the failed migration's new buffer as a source: every byte must be right except the
pieces nobody holds any more, which stay untouched.

Run by tests/groups/run_fault.sh under `weftrun --elastic`, which counts the
"SURVIVOR-OK" lines (one per survivor) and fails on any "SURVIVOR-FAIL".
"""

import os
import signal
import struct
import sys
import time

import numpy as np

import weft
from fault_common import recover, run_survivor, say

STEPS, KILL_STEP = 10, 5


def shapes():
    return {"w": ((30000,), np.float32), "m": ((97, 61), np.float64)}


def layout(ids):
    return weft.Layout.from_tensors({k: v for k, v in shapes().items()}).flat(ids)


def initial():
    return {k: (np.arange(np.prod(s)).reshape(s) % 17).astype(t) for k, (s, t) in
            shapes().items()}


def update(x, step):
    """One step on any part of a tensor, elementwise: the same bits wherever it runs."""
    x *= x.dtype.type(0.75)
    x += x.dtype.type(step) / x.dtype.type(3)


def reference(steps):
    full = initial()
    for s in range(1, steps + 1):
        for x in full.values():
            update(x, s)
    return full


def train_step(g, lay, buf, step):
    """Update this member's shard in its packed buffer (region by region), then the loss
    allreduce, which fails once a member is gone."""
    me = g.member_id()
    infos = lay.tensors
    for r in lay.regions(me):
        dt = weft.numpy_dtype(infos[r.tensor].dtype)
        update(buf[r.packed_offset:r.packed_offset + r.nbytes].view(dt), step)
    g.allreduce(np.ones(1))


def blob(step):
    return struct.pack("<QQ", step, step * 1000003)


def snapshot_mode(ctx, g, victim):
    me = g.member_id()
    lay = layout(g.member_ids)
    snap = weft.Snapshot(g, lay, blob_bytes=16)
    buf = lay.pack(me, initial())
    try:
        for step in range(1, STEPS + 1):
            if me == victim and step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            train_step(g, lay, buf, step)
            snap.start(step, buf, blob(step)).wait(timeout=60)
        raise AssertionError("no error after the death")
    except weft.PeerError as e:
        seen = type(e).__name__
    info = recover(g)
    new = layout(g.member_ids)
    r = snap.restore(new)
    done, seed = struct.unpack("<QQ", snap.blob(victim))
    if r.bytes_missing or done != r.step or seed != done * 1000003 or \
            r.step not in (KILL_STEP - 1, KILL_STEP - 2):
        raise AssertionError("restored step %d, %d B missing; the victim's blob says %d" %
                             (r.step, r.bytes_missing, done))
    snap.free()
    snap = weft.Snapshot(g, new, blob_bytes=16)
    buf = np.array(r.state)
    for step in range(done + 1, STEPS + 1):
        train_step(g, new, buf, step)
        snap.start(step, buf, blob(step)).wait(timeout=60)
    if not (buf == new.pack(me, reference(STEPS))).all():
        raise AssertionError("the state after the failure differs from the one without")
    return "%s, epoch %d -> %d, restored step %d (%d B moved, %d B local)" % (
        seen, info.old_epoch, info.new_epoch, r.step, r.bytes_moved, r.bytes_local)


def resume_mode(ctx, g, victim):
    me, ids = g.member_id(), g.member_ids
    full = {"w": np.random.default_rng(5).standard_normal((512, 1000)).astype(np.float32),
            "m": np.arange(300000, dtype=np.float64)}
    old = weft.Layout.from_tensors(full).flat(ids)
    rotated = weft.Layout.from_tensors(full).flat(ids[1:] + ids[:1])
    nbuf = np.zeros(rotated.packed_bytes(me), np.uint8)
    obuf = old.pack(me, full)
    req = weft.imigrate(g, weft.Plan(old, rotated), obuf, nbuf)
    try:
        if me == victim:
            until = time.monotonic() + 0.002
            while time.monotonic() < until and not req.test():
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        req.wait(timeout=60)
        raise AssertionError("the migration did not fail with the member that died in it")
    except weft.PeerError as e:
        seen = type(e).__name__
    info = recover(g)
    target = weft.Layout.from_tensors(full).flat(g.member_ids)
    plan = weft.migrate_resume(g, req, old, target)
    out = np.full(target.packed_bytes(me), 0xEE, np.uint8)
    weft.migrate(g, plan, obuf, out, resume_buf=req.result)
    want = target.pack(me, full)
    kept = np.zeros(out.size, bool)
    for t in plan.missing:  # nobody holds these any more: left untouched
        if t.dst == me:
            r = target.region(me, t.dst_region)
            item = target.tensor(t.tensor).dtype.itemsize
            mark = kept[r.packed_offset:r.packed_offset + r.nbytes].reshape(
                r.box.extent + (item,))
            mark[tuple(slice(o - w, o - w + e) for o, e, w in
                       zip(t.box.offset, t.box.extent, r.box.offset))] = True
    if not (out[~kept] == want[~kept]).all() or not (out[kept] == 0xEE).all():
        raise AssertionError("the resumed migration delivered wrong bytes")
    req.cancel()
    return "%s, epoch %d -> %d, resumed: %d B moved, %d B missing" % (
        seen, info.old_epoch, info.new_epoch, plan.stats().bytes_in,
        plan.stats().bytes_missing)


def main():
    os.environ.setdefault("WEFT_TIMEOUT_MS", "60000")
    mode = sys.argv[1] if len(sys.argv) > 1 else "snapshot"
    if mode == "resume":
        os.environ.setdefault("WEFT_MIGRATE_CHUNK", "16K")
        os.environ.setdefault("WEFT_MIGRATE_WINDOW", "1")
    ctx = weft.init()
    g = ctx.world
    victim = g.member_ids[-1]
    text = (resume_mode if mode == "resume" else snapshot_mode)(ctx, g, victim)
    if victim in g.member_ids:
        raise AssertionError("the dead member is still in the group")
    say("SURVIVOR-OK rank %d: %s" % (g.rank, text))
    ctx.finalize()
    return 0


if __name__ == "__main__":
    run_survivor(main)
