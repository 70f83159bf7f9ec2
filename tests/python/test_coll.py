"""Collectives on NumPy arrays, on any number of ranks: each result is checked against a
sequential computation over every rank's input (each rank regenerates the others')."""

import gc
import os

import numpy as np
import pytest

import weft
from helpers import rank_floats, rank_values

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8"]
OPS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def all_inputs(n, count, dtype, seed=0):
    return np.stack([rank_values(r, count, dtype, seed) for r in range(n)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce(world, dtype, op):
    n, me = world.size, world.rank
    x = rank_values(me, 11, dtype)
    out = np.empty_like(x)
    assert world.allreduce(x, out, op=op) is out
    want = OPS[op](all_inputs(n, 11, dtype), axis=0).astype(dtype)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(x, rank_values(me, 11, dtype))  # input untouched


def test_allreduce_in_place_large_floats(world):
    n, me = world.size, world.rank
    count = 300_001  # past the shared-memory chunk, not a multiple of anything
    for dtype, rtol in (("float32", 1e-5), ("float64", 1e-12)):
        x = rank_floats(me, count, dtype, seed=1)
        world.allreduce(x)
        want = sum(rank_floats(r, count, "float64", seed=1).astype(dtype).astype(np.float64)
                   for r in range(n))
        np.testing.assert_allclose(x, want, rtol=rtol, atol=rtol)


def test_nonblocking_keeps_buffers_and_returns_output(world):
    n, me = world.size, world.rank
    req = world.iallreduce(rank_values(me, 1000, "int64"), np.zeros(1000, np.int64),
                           op=weft.MAX)
    gc.collect()  # the request alone keeps both arrays alive
    out = req.wait(timeout=30)
    assert req.done
    np.testing.assert_array_equal(out, all_inputs(n, 1000, "int64").max(axis=0))
    assert req.wait() is out  # a completed request keeps answering


def test_test_polls_to_completion(world):
    x = rank_values(world.rank, 64, "float32")
    req = world.iallreduce(x)
    while not req.test():
        pass
    np.testing.assert_array_equal(x, all_inputs(world.size, 64, "float32").sum(axis=0))


def test_dropped_request_completes(world):
    x = rank_values(world.rank, 32, "int32")
    world.iallreduce(x)  # dropped in flight: weft keeps x and finishes it
    world.barrier()
    y = rank_values(world.rank, 32, "int32")
    world.allreduce(y)
    np.testing.assert_array_equal(y, all_inputs(world.size, 32, "int32").sum(axis=0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter(world, dtype):
    n, me, count = world.size, world.rank, 5
    x = rank_values(me, n * count, dtype)
    out = np.empty(count, dtype)
    world.reduce_scatter(x, out)
    want = all_inputs(n, n * count, dtype).sum(axis=0).astype(dtype)
    np.testing.assert_array_equal(out, want[me * count:(me + 1) * count])
    world.ireduce_scatter(x, op="max").wait()  # in place: result at the start of x
    want = all_inputs(n, n * count, dtype).max(axis=0)
    np.testing.assert_array_equal(x[:count], want[me * count:(me + 1) * count])


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather(world, dtype):
    n, me = world.size, world.rank
    x = rank_values(me, 6, dtype, seed=2)
    out = np.zeros(6 * n, dtype)
    world.allgather(x, out)
    np.testing.assert_array_equal(out, all_inputs(n, 6, dtype, seed=2).reshape(-1))
    inplace = np.zeros(6 * n, dtype)
    inplace[me * 6:(me + 1) * 6] = x
    world.iallgather(None, inplace).wait()
    np.testing.assert_array_equal(inplace, out)


def test_broadcast_from_every_root(world):
    n, me = world.size, world.rank
    for root in range(n):
        x = rank_values(me, 9, "float64", seed=root)
        world.broadcast(x, root=root)
        np.testing.assert_array_equal(x, rank_values(root, 9, "float64", seed=root))
        y = rank_values(me, 100_000, "uint8")
        world.ibroadcast(y, root).wait()
        np.testing.assert_array_equal(y, rank_values(root, 100_000, "uint8"))


def test_reduce_to_every_root(world):
    n, me = world.size, world.rank
    want = all_inputs(n, 7, "int64").sum(axis=0)
    for root in range(n):
        x = rank_values(me, 7, "int64")
        out = np.zeros(7, np.int64)
        got = world.reduce(x, out, root=root)
        if me == root:
            assert got is out
            np.testing.assert_array_equal(out, want)
        x2 = rank_values(me, 7, "int64")
        world.ireduce(x2, None, op="min", root=root).wait()  # in place on the root
        if me == root:
            np.testing.assert_array_equal(x2, all_inputs(n, 7, "int64").min(axis=0))
        else:
            np.testing.assert_array_equal(x2, rank_values(me, 7, "int64"))


def test_alltoall(world):
    n, me, count = world.size, world.rank, 3
    send = (np.arange(n * count) + 100 * me).astype(np.int32)
    recv = np.zeros_like(send)
    world.alltoall(send, recv)
    for i in range(n):  # block i came from rank i: its block `me`
        src = np.arange(n * count) + 100 * i
        np.testing.assert_array_equal(recv[i * count:(i + 1) * count],
                                      src[me * count:(me + 1) * count])
    recv2 = np.zeros_like(send)
    world.ialltoall(send, recv2).wait()
    np.testing.assert_array_equal(recv2, recv)


def test_alltoallv(world):
    n, me = world.size, world.rank

    def count(i, j):  # elements rank i sends rank j
        return (i + 2 * j) % 3

    def block(i, j):
        return np.full(count(i, j), 10 * i + j, np.float32)

    send = np.concatenate([block(me, j) for j in range(n)] + [np.zeros(0, np.float32)])
    sendcounts = [count(me, j) for j in range(n)]
    recvcounts = [count(i, me) for i in range(n)]
    recv = np.full(sum(recvcounts) + 2, -1, np.float32)
    world.alltoallv(send, sendcounts, recv, recvcounts)
    want = np.concatenate([block(i, me) for i in range(n)] + [np.full(2, -1, np.float32)])
    np.testing.assert_array_equal(recv, want)
    # Explicit displacements: blocks in reverse order, one gap each.
    rdispls, at = [0] * n, 0
    for i in reversed(range(n)):
        rdispls[i] = at
        at += recvcounts[i] + 1
    recv = np.full(at, -1, np.float32)
    world.ialltoallv(send, sendcounts, recv, recvcounts, rdispls=rdispls).wait()
    for i in range(n):
        np.testing.assert_array_equal(recv[rdispls[i]:rdispls[i] + recvcounts[i]], block(i, me))


def test_barrier(world):
    world.barrier()
    world.ibarrier().wait()


def test_count_zero(world):
    x = np.zeros(0, np.float32)
    world.allreduce(x)
    world.broadcast(x)
    world.allgather(x, np.zeros(0, np.float32))


def test_group_identity(world):
    n = world.size
    assert world.epoch == 0
    assert world.member_ids == list(range(n))
    assert all(world.rank_of(i) == i for i in range(n))
    assert world.member_id() == world.rank
    before = world.coll_count
    world.barrier()
    assert world.coll_count == before + 1


def test_launcher_environment(world):
    if "WEFT_STORE" not in os.environ:
        pytest.skip("not started by weftrun")
    assert os.environ["RANK"] == str(world.rank) == os.environ["WEFT_RANK"]
    assert os.environ["WORLD_SIZE"] == str(world.size)
    assert os.environ["LOCAL_RANK"] == os.environ["WEFT_LOCAL_RANK"]
    assert os.environ["LOCAL_WORLD_SIZE"] == os.environ["WEFT_LOCAL_SIZE"]


def test_second_init_while_open_says_so(ctx):
    """Under a launcher with a store, a second weft.init() while the context is open is
    refused by the binding, which names the open context, before the store would blame a
    rank started twice. Without a store (one rank) contexts are independent."""
    if "WEFT_STORE" not in os.environ:
        other = weft.init()
        other.finalize()
        return
    with pytest.raises(weft.InvalidArgument, match="already open in this process") as e:
        weft.init()
    assert e.value.context is ctx
    x = np.ones(2, np.float32)
    ctx.world.allreduce(x)  # the open context is unharmed
    np.testing.assert_array_equal(x, np.full(2, ctx.size, np.float32))


def test_split(world):
    n, me = world.size, world.rank
    sub = world.split(me % 2, key=-me)  # reverse order inside each colour
    mates = [r for r in range(n) if r % 2 == me % 2]
    assert sub.size == len(mates)
    assert sub.member_ids == sorted(mates, reverse=True)
    x = rank_values(me, 4, "int64")
    sub.allreduce(x)
    np.testing.assert_array_equal(x, sum(rank_values(r, 4, "int64") for r in mates))
    vocab = weft.Vocab(sub, 10, 2)  # made on the subgroup: freed before it
    mb = vocab.microbatch(max_tokens=4)
    sub.free()
    with pytest.raises(weft.InvalidArgument):
        sub.allreduce(x)
    with pytest.raises(weft.InvalidArgument, match="freed"):
        vocab.memory("alg2", 4)
    with pytest.raises(weft.InvalidArgument, match="closed"):
        mb.stats()
    assert world.split(None) is None
    with world.split(0) as everyone:
        assert everyone.size == n


def test_point_to_point_ring(world):
    n, me = world.size, world.rank
    right, left = (me + 1) % n, (me - 1) % n
    out = rank_values(me, 257, "float64")
    got = np.zeros(300, np.float64)
    rreq = world.irecv(got, left, tag=7)
    sreq = world.isend(out, right, tag=7)
    rreq.wait(timeout=30)
    sreq.wait(timeout=30)
    assert rreq.nbytes in (None, 257 * 8)
    np.testing.assert_array_equal(got[:257], rank_values(left, 257, "float64"))
    # Blocking, bytes objects and bytearrays.
    msg = bytearray(16)
    if n == 1:
        r = world.isend(b"hello weft", 0, tag=3)
        assert world.recv(msg, 0, tag=3) == 10
        r.wait()
    elif me == 0:
        world.send(b"hello weft", 1, tag=3)
    elif me == 1:
        assert world.recv(msg, 0, tag=3) == 10
    if me == 1 or n == 1:
        assert bytes(msg[:10]) == b"hello weft"


def test_message_longer_than_buffer_is_mismatch(world):
    if world.size < 2:
        pytest.skip("needs two ranks")
    if world.rank == 0:
        world.send(np.arange(4, dtype=np.int64), 1, tag=9)
    elif world.rank == 1:
        with pytest.raises(weft.Mismatch) as e:
            world.recv(np.zeros(2, np.int64), 0, tag=9)
        assert e.value.status == weft.Status.ERR_MISMATCH
    world.barrier()


def test_ranks_disagreeing_on_count_get_mismatch(world):
    if world.size < 2:
        pytest.skip("needs two ranks")
    x = np.ones(4 if world.rank == 0 else 5, np.float32)
    with pytest.raises(weft.Mismatch):
        world.allreduce(x)
    y = np.ones(3, np.float32)  # the group is still in step
    world.allreduce(y)
    np.testing.assert_array_equal(y, np.full(3, world.size, np.float32))
