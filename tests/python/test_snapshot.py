"""Snapshots from Python: steps committed on every member, restored into other layouts
(and over fewer members) with every member's bytes equal to the new layout's packing of
the tensors each rank computes independently for that step, the blobs of every member,
and the refusals (weft.InvalidArgument). Runs on 1 to 4 ranks."""

import os

import numpy as np
import pytest

import weft
from helpers import torch_or_skip


def model(step):
    """The whole state at @p step, the same on every rank."""
    rng = np.random.default_rng(100 + step)
    return {
        "embed": rng.standard_normal((41, 6)).astype(np.float32),
        "bias": rng.standard_normal(13).astype(np.float64),
        "step": np.arange(5, dtype=np.int64) + 1000 * step,
        "mask": rng.integers(0, 255, (7, 3)).astype(np.uint8),
    }


def blob_of(step, member):
    return b"step %d of member %d" % (step, member)


def flat(ids):
    return weft.Layout.from_tensors(model(0)).flat(ids)


def mixed(ids):
    """Another layout of the same tensors: slabs, a replica, a whole tensor, a re-cut."""
    layout = weft.Layout.from_tensors(model(0))
    layout.shard("embed", 1, ids[::-1]).replicate("bias", ids).whole("step", ids[0])
    return layout.flat(ids[::-1], ["mask"])


def take(world, snap, layout, steps):
    me = world.member_id()
    for step in steps:
        state = layout.pack(me, model(step))
        assert snap.start(step, state, blob_of(step, me)).wait(timeout=60) == step
    assert snap.committed == steps[-1]


@pytest.mark.parametrize("target", [mixed, lambda ids: flat(ids[:-1] or ids)],
                         ids=["mixed", "fewer"])
def test_commit_then_restore_into_another_layout(world, target):
    ids, me = world.member_ids, world.member_id()
    state = flat(ids)
    with weft.Snapshot(world, state, blob_bytes=64) as snap:
        assert snap.committed is None and snap.restore_plan is None
        assert snap.nbytes >= 2 * state.packed_bytes(me)
        take(world, snap, state, [1, 2, 5])
        new = target(ids)
        r = snap.restore(new)
        assert (r.step, r.bytes_missing) == (5, 0)
        assert r.buffer.size == snap.restore_bytes(new) >= new.packed_bytes(me)
        np.testing.assert_array_equal(r.state, new.pack(me, model(5)))
        for m in ids:
            assert snap.blob(m) == blob_of(5, m)
        plan = snap.restore_plan
        assert plan.missing == [] and plan.stats().bytes_missing == 0
        assert plan.stats().bytes_in == r.bytes_moved
    with pytest.raises(weft.InvalidArgument, match="freed"):
        plan.stats()


def test_restore_from_live_buffers(world):
    """Live buffers that hold the committed step: the restore takes the survivors'
    regions from them and gives the same bytes as from the copies."""
    ids, me = world.member_ids, world.member_id()
    state = flat(ids)
    with weft.Snapshot(world, state, blob_bytes=64) as snap:
        take(world, snap, state, [1, 2])
        live = state.pack(me, model(2))
        new = mixed(ids)
        r = snap.restore(new, live=live)
        assert (r.step, r.bytes_missing) == (2, 0)
        np.testing.assert_array_equal(r.state, new.pack(me, model(2)))
        for m in ids:
            assert snap.blob(m) == blob_of(2, m)


def test_redundancy_and_torch_buffers(world):
    torch = torch_or_skip()
    ids, me = world.member_ids, world.member_id()
    state = flat(ids)
    snap = weft.Snapshot(world, state, blob_bytes=32, redundancy=2)
    one = weft.Snapshot(world, state, blob_bytes=32)
    if world.size >= 3:  # two buddies keep more than one
        assert snap.nbytes > one.nbytes
    one.free()
    for step in (3, 4):
        packed = torch.from_numpy(state.pack(me, model(step)))
        snap.start(step, packed, blob_of(step, me)).wait(timeout=60)
    out = torch.zeros(snap.restore_bytes(state), dtype=torch.uint8)
    r = snap.restore(state, out)
    assert r.buffer is out and r.step == 4
    np.testing.assert_array_equal(r.state.numpy(), state.pack(me, model(4)))
    snap.free()


def test_choose_generation_then_restore(world):
    """weft.choose_generation(): the newest generation some member holds committed and
    none uncommitted, the same on every member; a restore from it gives its step."""
    ids, me = world.member_ids, world.member_id()
    state = flat(ids)
    a = weft.Snapshot(world, state, blob_bytes=64)
    b = weft.Snapshot(world, state, blob_bytes=64)
    fresh = weft.Snapshot(world, state, blob_bytes=64)  # never committed
    c = weft.choose_generation(world, [(weft.GEN_START, None), (0, a)])
    assert c == weft.GenChoice(weft.GEN_START, 0, 0, world.size)
    take(world, a, state, [1, 2])
    take(world, b, state, [3])
    # The last member holds generation 7 uncommitted: 0 is chosen, and gives step 2.
    last = me == ids[-1]
    c = weft.choose_generation(world, [(0, a), (7, fresh if last else b)])
    assert c == weft.GenChoice(0, 0, 0, world.size)
    r = a.restore(mixed(ids))
    assert r.step == 2
    np.testing.assert_array_equal(r.state, mixed(ids).pack(me, model(2)))
    # Only the last member holds anything: it is the root; nothing at all: None.
    c = weft.choose_generation(world, [(7, b)] if last else [])
    assert c == weft.GenChoice(7, 0 if last else None, world.size - 1, 1)
    assert weft.choose_generation(world, []) == weft.GenChoice(None, None, None, 0)
    with pytest.raises(weft.InvalidArgument, match="bad generations"):
        weft.choose_generation(world, [(0, a), (0, b)] if last else [(0, a)])
    for s in (a, b, fresh):
        s.free()


def test_restore_generation(world):
    """Snapshot.restore_generation() (weft_elastic_restore_gen): the generation, on a
    subgroup split off the world, restored to the layout the target function gives over
    the surviving members; an exception in the target on one member is raised there and
    fails the call on every member, after which a good call works."""
    if "WEFT_STORE" not in os.environ:
        pytest.skip("repairing a group needs the rendezvous store (run under weftrun)")
    ids, me = world.member_ids, world.member_id()
    sub = world.split(0)
    snap = weft.Snapshot(sub, flat(ids), blob_bytes=64)
    take(world, snap, flat(ids), [1, 2])
    assert weft.choose_generation(world, [(0, snap)]) == weft.GenChoice(0, 0, 0, world.size)
    seen = []

    def target(members):
        seen.append(members)
        return mixed(members)

    r = snap.restore_generation(world, target)
    assert seen == [ids]
    assert r.step == 2 and r.bytes_missing == 0
    assert len(r.buffer) == snap.restore_bytes(mixed(ids))
    np.testing.assert_array_equal(r.state, mixed(ids).pack(me, model(2)))
    assert all(snap.blob(m) == blob_of(2, m) for m in ids)
    world.barrier()  # completion is not uniform: order the next call after this one

    def failing(members):
        if me == ids[-1]:
            raise KeyError("no layout here")
        return mixed(members)

    with pytest.raises(KeyError if me == ids[-1] else weft.InvalidArgument):
        snap.restore_generation(world, failing)
    world.barrier()
    r = snap.restore_generation(world, mixed)
    np.testing.assert_array_equal(r.state, mixed(ids).pack(me, model(2)))
    snap.free()
    world.barrier()
    sub.free()


def test_refusals(world):
    ids, me = world.member_ids, world.member_id()
    state = flat(ids)
    with pytest.raises(weft.InvalidArgument, match="not in group"):
        weft.Snapshot(world, flat(ids + [max(ids) + 5]), blob_bytes=8)
    reserved = weft.Layout.from_tensors({"weft.blob.0": np.zeros(4, np.uint8)})
    with pytest.raises(weft.InvalidArgument, match="reserved"):
        weft.Snapshot(world, reserved.replicate(0, ids))
    with pytest.raises(weft.InvalidArgument):
        weft.Snapshot(world, state, blob_bytes=-1)
    snap = weft.Snapshot(world, state, blob_bytes=8)
    packed = state.pack(me, model(1))
    with pytest.raises(weft.InvalidArgument, match="blob"):
        snap.start(1, packed, b"x" * 9)
    if state.packed_bytes(me):
        with pytest.raises(weft.InvalidArgument, match="packed buffer needs"):
            snap.start(1, packed[:-1])
    with pytest.raises(weft.InvalidArgument):
        snap.blob(me)  # no restore yet
    snap.start(2, packed, b"ok").wait(timeout=60)
    with pytest.raises(weft.InvalidArgument, match="not above"):
        snap.start(2, packed)
    with pytest.raises(weft.InvalidArgument, match="out has"):
        snap.restore(state, np.zeros(snap.restore_bytes(state) - 1, np.uint8))
    other = weft.Layout.from_tensors({"other": np.zeros(3, np.float32)}).replicate(0, ids)
    with pytest.raises(weft.InvalidArgument):  # every member refuses it together
        snap.restore(other)
    snap.free()
    with pytest.raises(weft.InvalidArgument, match="freed"):
        snap.start(3, packed)
    world.barrier()


def test_resume_refuses_what_did_not_fail(world):
    ids, me = world.member_ids, world.member_id()
    old, new = flat(ids), flat(ids[::-1])
    full = model(0)
    buf = np.zeros(new.packed_bytes(me), np.uint8)
    req = weft.imigrate(world, weft.Plan(old, new), old.pack(me, full), buf)
    req.wait(timeout=60)
    with pytest.raises(weft.InvalidArgument, match="succeeded"):
        weft.migrate_resume(world, req, old, new)
    with pytest.raises(weft.InvalidArgument, match="Request"):
        weft.migrate_resume(world, None, old, new)
    if buf.size:
        with pytest.raises(weft.InvalidArgument, match="overlaps"):
            weft.migrate(world, weft.Plan(old, new), old.pack(me, full), buf, resume_buf=buf)
    world.barrier()
