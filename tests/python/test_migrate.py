"""Parameter migration across ranks: every member's new packed buffer must equal, byte
for byte, the new layout's packing of the whole tensors (which every rank builds from
one seed), whatever moved where."""

import numpy as np
import pytest

import weft
from helpers import torch_or_skip


def model():
    rng = np.random.default_rng(42)
    return {
        "embed": rng.standard_normal((37, 5)).astype(np.float32),
        "bias": rng.standard_normal(11).astype(np.float16),
        "step": np.arange(3, dtype=np.int64) + 40,
        "mask": rng.integers(0, 255, (4, 3)).astype(np.uint8),
    }


def run(world, old, new, full, **kw):
    me = world.member_id()
    plan = weft.Plan(old, new)
    old_buf = old.pack(me, full) if old.packed_bytes(me) else None
    new_buf = np.full(new.packed_bytes(me), 0xAB, np.uint8)
    assert weft.migrate(world, plan, old_buf, new_buf, **kw) is new_buf
    np.testing.assert_array_equal(new_buf, new.pack(me, full))
    return plan


def test_zero_recut_to_fewer_members(world):
    full, ids = model(), world.member_ids
    old = weft.Layout.from_tensors(full).flat(ids)
    new = weft.Layout.from_tensors(full).flat(ids[:-1] or ids)  # the last hands over
    plan = run(world, old, new, full)
    assert plan.stats().bytes_in == plan.stats().bytes_lower_bound


def test_mixed_layouts_both_ways(world):
    full, ids = model(), world.member_ids
    a = weft.Layout.from_tensors(full)
    a.shard("embed", 0, ids).replicate("bias", ids).whole("step", ids[-1]).flat(ids, ["mask"])
    b = weft.Layout.from_tensors(full)
    b.shard("embed", 1, ids[::-1]).whole("bias", ids[0]).replicate("step", ids)
    b.shard("mask", 0, ids[::-1])
    run(world, a, b, full)
    run(world, b, a, full)


def test_nonblocking_with_priorities(world):
    full, ids = model(), world.member_ids
    old = weft.Layout.from_tensors(full).flat(ids)
    new = weft.Layout.from_tensors(full).shard("embed", 0, ids[::-1])
    for name in ("bias", "step", "mask"):
        new.replicate(name, ids)
    me = world.member_id()
    plan = weft.Plan(old, new)
    new_buf = np.zeros(new.packed_bytes(me), np.uint8)
    req = weft.imigrate(world, plan, old.pack(me, full), new_buf,
                             priority={"step": 3, "embed": 1}, max_staged_bytes=4096)
    assert req.wait(timeout=60) is new_buf
    np.testing.assert_array_equal(new_buf, new.pack(me, full))


def test_tensor_buffers(world):
    torch = torch_or_skip()
    full, ids = model(), world.member_ids
    old = weft.Layout.from_tensors(full).flat(ids)
    new = weft.Layout.from_tensors(full).flat(ids[::-1])
    me = world.member_id()
    old_t = torch.from_numpy(old.pack(me, full))
    new_t = torch.zeros(new.packed_bytes(me), dtype=torch.uint8)
    weft.migrate(world, weft.Plan(old, new), old_t, new_t)
    np.testing.assert_array_equal(new_t.numpy(), new.pack(me, full))


def test_buffer_too_small_is_refused_before_any_message(world):
    full, ids = model(), world.member_ids
    old = weft.Layout.from_tensors(full).flat(ids)
    new = weft.Layout.from_tensors(full).flat(ids[::-1])
    me = world.member_id()
    plan = weft.Plan(old, new)
    need = new.packed_bytes(me)
    if need:  # the check is local: members that would pass it do not call at all
        with pytest.raises(weft.InvalidArgument, match="new_buf"):
            weft.migrate(world, plan, old.pack(me, full), np.zeros(need - 1, np.uint8))
    world.barrier()


def test_replan_flat_lists_what_nobody_here_holds(world):
    full, ids = model(), world.member_ids
    gone = max(ids) + 7  # a member that is not in the group
    old = weft.Layout.from_tensors(full).flat(ids + [gone])
    new, plan = weft.replan_flat(old, world)
    me = world.member_id()
    assert [t.name for t in new.tensors] == list(full)
    missing = plan.missing
    assert missing and all(t.src == -1 for t in missing)
    assert plan.stats().bytes_missing == old.packed_bytes(gone)
    new_buf = np.full(new.packed_bytes(me), 0xAB, np.uint8)
    weft.migrate(world, plan, old.pack(me, full), new_buf)
    want = new.pack(me, full)
    untouched = np.zeros(new_buf.size, bool)
    for t in missing:  # the engine leaves the missing pieces as they were
        if t.dst != me:
            continue
        r = new.region(me, t.dst_region)
        item = new.tensor(t.tensor).dtype.itemsize
        mark = untouched[r.packed_offset:r.packed_offset + r.nbytes].reshape(
            r.box.extent + (item,))
        mark[tuple(slice(o - w, o - w + e) for o, e, w in
                   zip(t.box.offset, t.box.extent, r.box.offset))] = True
    np.testing.assert_array_equal(new_buf[~untouched], want[~untouched])
    assert (new_buf[untouched] == 0xAB).all()
