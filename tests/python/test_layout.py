"""Layouts, plans, batch shares and vocabulary shards: local values, no communication.
Plans are checked by applying their transfers in NumPy to packed buffers and comparing
byte for byte with the new layout's packing of the same tensors."""

import numpy as np
import pytest

import weft


def model(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "embed": rng.standard_normal((37, 5)).astype(np.float32),
        "bias": rng.standard_normal(11).astype(np.float16),
        "step": np.arange(3, dtype=np.int64) + 40,
        "mask": rng.integers(0, 255, (4, 3)).astype(np.uint8),
    }


def apply_plan(plan, old, new, full):
    """New packed buffers built from old ones by the plan's transfers alone."""
    members = range(0, 8)
    old_bufs = {m: old.pack(m, full) for m in members}
    new_bufs = {m: np.full(new.packed_bytes(m), 0xEE, np.uint8) for m in members}
    infos = old.tensors
    for t in plan.transfers:
        info = infos[t.tensor]
        item = info.dtype.itemsize
        src_r, dst_r = old.region(t.src, t.src_region), new.region(t.dst, t.dst_region)
        src = region_array(old_bufs[t.src], src_r, item)
        dst = region_array(new_bufs[t.dst], dst_r, item)
        dst[box_slices(t.box, dst_r.box)] = src[box_slices(t.box, src_r.box)]
    return new_bufs


def region_array(buf, region, item):
    part = buf[region.packed_offset:region.packed_offset + region.nbytes]
    return part.view("u%d" % item).reshape(region.box.extent)


def box_slices(box, within):
    return tuple(slice(o - w, o - w + e) for o, e, w in zip(box.offset, box.extent,
                                                             within.offset))


def test_from_tensors_and_queries():
    full = model()
    lay = weft.Layout.from_tensors(full)
    assert [t.name for t in lay.tensors] == list(full)
    info = lay.tensor("embed")
    assert info == weft.TensorInfo("embed", weft.F32, (37, 5), 37 * 5 * 4)
    assert lay.tensor(1).dtype == weft.F16 and lay.find("mask") == 3
    lay2 = weft.Layout.from_tensors({"a": ((2, 3), "bf16"), "b": ((4,), np.int32)})
    assert lay2.tensor("a").dtype == weft.BF16 and lay2.tensor("b").nbytes == 16


def test_flat_partitions_are_the_flat_shards():
    full = model()
    lay = weft.Layout.from_tensors(full).flat([0, 1, 2])
    total = sum(a.nbytes for a in full.values())
    assert sum(lay.packed_bytes(m) for m in range(3)) == total
    lay.check_complete()
    for m in range(3):
        for r in lay.regions(m):
            assert r.nbytes == np.prod(r.box.extent) * lay.tensor(r.tensor).dtype.itemsize


@pytest.mark.parametrize("old_n,new_n", [(4, 3), (3, 4), (2, 5), (5, 1)])
def test_zero_recut_plan_is_minimal_and_correct(old_n, new_n):
    full = model(old_n)
    old = weft.Layout.from_tensors(full).flat(range(old_n))
    new = weft.Layout.from_tensors(full).flat(range(new_n))
    plan = weft.Plan(old, new)
    s = plan.stats()
    assert s.bytes_in == s.bytes_out == s.bytes_lower_bound
    assert s.bytes_in + s.bytes_local == sum(a.nbytes for a in full.values())
    got = apply_plan(plan, old, new, full)
    for m in range(new_n):
        np.testing.assert_array_equal(got[m], new.pack(m, full))
    assert weft.Plan(old, new).digest == plan.digest
    assert "lower bound %d B" % s.bytes_lower_bound in plan.summary()


def test_shard_whole_replicate_plan():
    full = model(7)
    old = weft.Layout.from_tensors(full)
    old.shard("embed", 0, [0, 1, 2]).replicate("bias", [0, 1, 2]).whole("step", 2)
    old.add_region(0, "mask", ((0, 0), (4, 2))).add_region(1, "mask", ((0, 2), (4, 1)))
    new = weft.Layout.from_tensors(full)
    new.shard("embed", 1, [2, 1, 0]).whole("bias", 1).replicate("step", [0, 1])
    new.shard("mask", 0, [1, 2])
    plan = weft.Plan(old, new, host_of=[0, 0, 1], balance_bytes=64)
    got = apply_plan(plan, old, new, full)
    for m in range(3):
        np.testing.assert_array_equal(got[m], new.pack(m, full))
        back = {k: np.zeros_like(v) for k, v in full.items()}
        new.unpack(m, got[m], back)
        for r in new.regions(m):
            name = new.tensor(r.tensor).name
            sl = tuple(slice(o, o + e) for o, e in zip(*r.box))
            np.testing.assert_array_equal(back[name][sl], full[name][sl])


def test_missing_pieces_listed_with_allow_missing():
    full = {"w": np.arange(24, dtype=np.float32).reshape(6, 4)}
    old = weft.Layout.from_tensors(full).shard("w", 0, [0, 1, 2])
    survivors = old.keep([0, 2])
    assert survivors.num_regions(1) == 0 and survivors.packed_bytes(0) == old.packed_bytes(0)
    new = weft.Layout.from_tensors(full).flat([0, 2])
    with pytest.raises(weft.InvalidArgument) as e:
        weft.Plan(survivors, new)
    assert "w" in e.value.detail
    plan = weft.Plan(survivors, new, allow_missing=True)
    missing = plan.missing
    assert missing and all(t.src == -1 and t.src_region == -1 for t in missing)
    assert sum(t.nbytes for t in missing) == 2 * 4 * 4  # member 1's two rows
    assert plan.stats().bytes_missing == 2 * 4 * 4


def test_absorb_keeps_shards_and_moves_only_the_leavers():
    full = {"w": np.arange(60, dtype=np.float32).reshape(15, 4),
            "b": np.arange(7, dtype=np.float32)}
    old = weft.Layout.from_tensors(full).flat([0, 1, 2, 3])
    new = old.absorb([0, 1, 3])
    for m in (0, 1, 3):  # own regions first, where they were in the packed buffer
        own = old.regions(m)
        assert new.regions(m)[:len(own)] == own
    # Every element held once, as numpy counts it from the boxes.
    for name, arr in full.items():
        seen = np.zeros(arr.shape, dtype=int)
        for m in (0, 1, 3):
            for r in new.regions(m):
                if new.tensor(r.tensor).name == name:
                    seen[tuple(slice(o, o + e) for o, e in zip(*r.box))] += 1
        assert (seen == 1).all()
    plan = weft.Plan(old, new)
    assert plan.stats().bytes_lower_bound == old.packed_bytes(2)  # only member 2's shard
    with pytest.raises(weft.InvalidArgument):
        old.absorb([0, 0])


def test_layout_errors_name_the_tensor():
    lay = weft.Layout()
    lay.add_tensor("w", "float32", (4, 4))
    with pytest.raises(weft.InvalidArgument) as e:
        lay.add_tensor("w", "float32", (2,))
    assert "w" in e.value.detail
    lay.add_region(0, "w", ((0, 0), (2, 4)))
    with pytest.raises(weft.InvalidArgument):
        lay.add_region(0, "w", ((1, 0), (2, 4)))  # overlaps
    with pytest.raises(weft.InvalidArgument):
        lay.add_region(1, "w", ((3, 0), (2, 4)))  # outside
    with pytest.raises(weft.InvalidArgument):
        lay.check_complete()
    with pytest.raises(weft.InvalidArgument):
        lay.find("nope")
    with pytest.raises(weft.InvalidArgument):
        lay.add_tensor("c", np.complex64, (2,))
    with pytest.raises(weft.InvalidArgument, match="packed buffer"):
        lay.pack(0, {"w": np.zeros((4, 4), np.float32)}, out=np.zeros(8, np.uint8))


def test_box_copy():
    src = np.arange(12, dtype=np.int32).reshape(3, 4)
    dst = np.zeros((2, 2), np.int32)
    weft.layout.box_copy(dst, ((1, 1), (2, 2)), src, ((0, 0), (3, 4)), ((1, 1), (2, 2)), 4)
    np.testing.assert_array_equal(dst, src[1:3, 1:3])


def test_batch_share():
    shares = [weft.batch_share(10, 3, r, max_micro=3) for r in range(3)]
    assert [s.samples for s in shares] == [4, 3, 3]
    assert [s.first for s in shares] == [0, 4, 7]
    assert shares[0].micro_batches == 2 and shares[0].last_micro == 1
    assert all(s.grad_scale == pytest.approx(0.1) for s in shares)
    with pytest.raises(weft.InvalidArgument):
        weft.batch_share(2, 3, 0)


def test_shard_range():
    got = [weft.shard_range(10, 3, r) for r in range(3)]
    assert got == [weft.VocabRange(0, 4, 4), weft.VocabRange(4, 4, 4), weft.VocabRange(8, 2, 4)]
    assert weft.shard_range(10, 3, 2, align=8) == weft.VocabRange(16, 0, 8)
    with pytest.raises(weft.InvalidArgument):
        weft.shard_range(10, 3, 3)


def test_vocab_default_algo_matches_c():
    """The Python default algorithm (Vocab.microbatch, VocabParallelCrossEntropy) is the
    one a zero-initialised weft_vocab_mb_params_t selects in C, named by the library."""
    import inspect

    from weft import vocab
    from weft._lib import lib
    from weft._structs import VocabMbParams

    c_default = VocabMbParams().algo  # ctypes zero-initialises, as C's {0}
    assert c_default == 0
    c_name = lib.weft_vocab_algo_name(c_default).decode()
    assert c_name == vocab.DEFAULT_ALGO == "alg2"
    assert all(lib.weft_vocab_algo_name(v).decode() == k for k, v in vocab.ALGOS.items())
    default = inspect.signature(weft.Vocab.microbatch).parameters["algo"].default
    assert vocab.ALGOS[default] == c_default
    try:
        from weft.torch import VocabParallelCrossEntropy
    except ImportError:
        return  # no torch here: the layer's default is checked where it is installed
    default = inspect.signature(VocabParallelCrossEntropy).parameters["algo"].default
    assert vocab.ALGOS[default] == c_default
