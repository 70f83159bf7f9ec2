"""Allreduce on torch tensors, on any number of ranks. A blocking allreduce of plain CPU
tensors takes a shorter path through the binding once their dtype and the operator name
have been seen; every test here calls it several times, so the first call (the general
path) and the later ones (the short path) are checked alike, against a sequential
computation over every rank's input in float64 or int64."""

import numpy as np
import pytest

import weft
from helpers import rank_values, torch_or_skip

torch = torch_or_skip()

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8]
OPS = {"sum": lambda s: s.sum(0), "prod": lambda s: s.prod(0),
       "max": lambda s: s.max(0).values, "min": lambda s: s.min(0).values,
       "avg": None}  # expected() divides the sum as weft does


def rank_tensor(rank, count, dtype, seed=0):
    return torch.from_numpy(rank_values(rank, count, "int64", seed)).to(dtype)


def expected(n, count, dtype, op, seed=0):
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([rank_tensor(r, count, wide, seed) for r in range(n)])
    if op == "avg":  # the sum in the dtype (integers wrap), divided: floats in float32 or
        # wider, integers toward zero
        total = stack.sum(0).to(dtype)
        if dtype.is_floating_point:
            calc = torch.float64 if dtype == torch.float64 else torch.float32
            return (total.to(calc) / n).to(dtype)
        return torch.div(total.to(torch.int64), n, rounding_mode="trunc").to(dtype)
    return OPS[op](stack).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_dtype_and_op(world, dtype, op):
    n, me = world.size, world.rank
    for seed in range(3):
        x = rank_tensor(me, 13, dtype, seed)
        out = torch.empty_like(x)
        assert world.allreduce(x, out, op=op) is out
        assert torch.equal(out, expected(n, 13, dtype, op, seed))
        assert torch.equal(x, rank_tensor(me, 13, dtype, seed))  # input untouched
        y = rank_tensor(me, 13, dtype, seed)
        assert world.allreduce(y, op=op) is y  # in place
        assert torch.equal(y, expected(n, 13, dtype, op, seed))


def test_parameters_views_and_operator_values(world):
    n, me = world.size, world.rank
    p = torch.nn.Parameter(rank_tensor(me, 5, torch.float32), requires_grad=False)
    for _ in range(2):
        p.data.copy_(rank_tensor(me, 5, torch.float32))
        world.allreduce(p)
        assert torch.equal(p.data, expected(n, 5, torch.float32, "sum"))
    big = torch.zeros(3, 5, dtype=torch.int64)
    for row in range(3):  # a contiguous row of a larger tensor: its own data_ptr
        big[row] = rank_tensor(me, 5, torch.int64, row)
        world.allreduce(big[row], op=weft.Op.MAX)
        assert torch.equal(big[row], expected(n, 5, torch.int64, "max", row))
    assert torch.equal(big[0], expected(n, 5, torch.int64, "max", 0))  # others left alone


def test_refusals_after_the_short_path_is_warm(world):
    x = torch.ones(4, 4)
    world.allreduce(x)  # float32 and "sum" seen
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.allreduce(x.t())
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.allreduce(torch.ones(4), x[:, 0])
    with pytest.raises(weft.InvalidArgument, match="elements"):
        world.allreduce(torch.zeros(4), torch.zeros(3))
    with pytest.raises(weft.InvalidArgument, match="dtypes differ"):
        world.allreduce(torch.zeros(4), torch.zeros(4, dtype=torch.float64))
    with pytest.raises(weft.InvalidArgument, match="operator"):
        world.allreduce(torch.zeros(4), op="mean")
    with pytest.raises(weft.InvalidArgument, match="not supported"):
        world.allreduce(torch.zeros(4, dtype=torch.int16))
    with pytest.raises(weft.InvalidArgument, match="expected"):
        world.allreduce(torch.zeros(4), [0.0] * 4)


def test_errors_from_the_library_on_the_short_path(world):
    sub = world.split(0)
    x = torch.ones(3)
    sub.allreduce(x)
    assert torch.equal(x, torch.full((3,), float(world.size)))
    # Every rank is out of that allreduce before one revokes the subgroup: a revocation
    # may fail an operation still under way on another rank (rank 0 of a loaded machine
    # was still in it when rank 1's revocation came).
    world.barrier()
    sub.revoke()
    with pytest.raises(weft.Revoked) as e:
        sub.allreduce(x)
    assert "revoked" in str(e.value).lower()
    sub.free()
    with pytest.raises(weft.InvalidArgument, match="freed"):
        sub.allreduce(x)
    world.barrier()  # every rank is past its revoked subgroup before the next test
    y = np.arange(3, dtype=np.float32)
    world.allreduce(y)
    np.testing.assert_array_equal(y, np.arange(3, dtype=np.float32) * world.size)


def torch_reduce_op():
    """torch.distributed.ReduceOp, or skip (a PyTorch built without distributed)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("this PyTorch has no torch.distributed")
    return dist.ReduceOp


@pytest.mark.parametrize("name,op", [("SUM", "sum"), ("PRODUCT", "prod"), ("MAX", "max"),
                                     ("MIN", "min"), ("AVG", "avg")])
def test_torch_reduce_ops(world, name, op):
    """torch.distributed.ReduceOp members are taken wherever an operator is: blocking and
    nonblocking allreduce, reduce_scatter, reduce."""
    torch_op = getattr(torch_reduce_op(), name)
    n, me = world.size, world.rank
    x = rank_tensor(me, 6, torch.int64)
    assert world.allreduce(x, op=torch_op) is x
    assert torch.equal(x, expected(n, 6, torch.int64, op))
    out = torch.empty(6, dtype=torch.int64)
    world.iallreduce(rank_tensor(me, 6, torch.int64), out, op=torch_op).wait()
    assert torch.equal(out, expected(n, 6, torch.int64, op))
    blk = torch.empty(2, dtype=torch.int64)
    world.reduce_scatter(rank_tensor(me, 2 * n, torch.int64), blk, op=torch_op)
    assert torch.equal(blk, expected(n, 2 * n, torch.int64, op)[2 * me:2 * me + 2])
    got = world.reduce(rank_tensor(me, 6, torch.int64), op=torch_op, root=0)
    if me == 0:
        assert torch.equal(got, expected(n, 6, torch.int64, op))


def test_torch_names_output_first(world):
    """all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single and
    the list all_gather take torch.distributed's order (output first), blocking and with
    async_op, and give what the C-order methods give."""
    n, me = world.size, world.rank
    x = rank_tensor(me, 5, torch.int64)
    assert world.all_reduce(x, op="max") is x
    assert torch.equal(x, expected(n, 5, torch.int64, "max"))
    y = rank_tensor(me, 5, torch.float32)
    world.all_reduce(y, op="avg", async_op=True).wait()
    assert torch.equal(y, expected(n, 5, torch.float32, "avg"))

    mine = torch.full((3,), float(me))
    out = torch.empty(n * 3)
    assert world.all_gather_into_tensor(out, mine) is out
    assert torch.equal(out, torch.arange(n).float().repeat_interleave(3))
    parts = [torch.empty(2, 2) for _ in range(n)]
    assert world.all_gather(parts, torch.full((2, 2), float(me))) is parts
    assert all(torch.equal(p, torch.full((2, 2), float(r))) for r, p in enumerate(parts))
    nparts = [np.empty(2, np.int32) for _ in range(n)]
    world.all_gather(nparts, np.full(2, me, np.int32))
    assert all((p == r).all() for r, p in enumerate(nparts))
    with pytest.raises(weft.InvalidArgument, match="output tensors"):
        world.all_gather(parts[:-1], mine)

    full = rank_tensor(me, 2 * n, torch.int64)
    blk = torch.empty(2, dtype=torch.int64)
    world.reduce_scatter_tensor(blk, full, async_op=True).wait()
    assert torch.equal(blk, expected(n, 2 * n, torch.int64, "sum")[2 * me:2 * me + 2])

    src = torch.arange(2 * n, dtype=torch.float64) + 100 * me
    dst = torch.empty(2 * n, dtype=torch.float64)
    assert world.all_to_all_single(dst, src) is dst
    want = torch.cat([torch.arange(2 * me, 2 * me + 2, dtype=torch.float64) + 100 * r
                      for r in range(n)])
    assert torch.equal(dst, want)


def test_torch_future(world):
    """Request.torch_future(): a torch.futures.Future completed when the request is, with
    what wait() returns; then() chains on it; torch.futures.wait_all takes several."""
    n, me = world.size, world.rank
    x = rank_tensor(me, 1000, torch.float64)
    fut = world.iallreduce(x).torch_future()
    doubled = fut.then(lambda f: f.value() * 2)
    assert fut.wait() is x and torch.equal(x, expected(n, 1000, torch.float64, "sum"))
    assert torch.equal(doubled.wait(), x * 2)
    ys = [rank_tensor(me, 7, torch.int64, seed) for seed in range(3)]
    futs = [world.iallreduce(y, op="max").torch_future() for y in ys]
    torch.futures.wait_all(futs)
    for seed, y in enumerate(ys):
        assert torch.equal(y, expected(n, 7, torch.int64, "max", seed))
    done = world.iallreduce(torch.ones(2))
    done.wait()
    assert torch.equal(done.torch_future().wait(), torch.full((2,), float(n)))


def test_torch_reduce_ops_weft_lacks_are_refused(world):
    ReduceOp = torch_reduce_op()
    x = torch.ones(3)
    with pytest.raises(weft.InvalidArgument, match="ReduceOp.PREMUL_SUM is not supported"):
        world.allreduce(x, op=getattr(ReduceOp, "PREMUL_SUM"))
    for name in ("BAND", "BOR", "BXOR"):
        with pytest.raises(weft.InvalidArgument, match="ReduceOp.%s is not supported" % name):
            world.reduce_scatter(torch.ones(world.size, dtype=torch.int32),
                                 op=getattr(ReduceOp, name))
    with pytest.raises(weft.InvalidArgument, match="unknown reduction operator"):
        world.allreduce(x, op=object())
    assert torch.equal(x, torch.ones(3))  # nothing ran
    world.allreduce(x, op=ReduceOp.SUM)  # and the ranks are still paired
    assert torch.equal(x, torch.full((3,), float(world.size)))


def saved_by_autograd(count=3):
    """(w, loss): w [count], a tensor that the graph of loss saved for its backward."""
    x = torch.arange(1.0, count + 1.0, requires_grad=True)
    w = torch.full((count,), 2.0)
    return w, (x * w).sum()  # d loss / dx needs w


def assert_backward_refused(loss):
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


WRITES = {  # how weft writes into w (3 elements per rank): (world, w, ranks) -> None
    "allreduce in place": lambda g, w, n: g.allreduce(w, op=weft.Op.SUM),  # general path
    "allreduce in place, short path": lambda g, w, n: g.allreduce(w),
    "allreduce recv": lambda g, w, n: g.allreduce(torch.ones(3), w, op=weft.Op.MAX),
    "allreduce recv, short path": lambda g, w, n: g.allreduce(torch.ones(3), w),
    "broadcast": lambda g, w, n: g.broadcast(w, root=0),
    "reduce on the root": lambda g, w, n: g.reduce(torch.ones(3), w, root=g.rank),
    "reduce_scatter": lambda g, w, n: g.reduce_scatter(torch.ones(3 * n), w),
}
WRITES_WHOLE = {  # into w of 3 x ranks elements
    "allgather": lambda g, w, n: g.allgather(torch.ones(3), w),
    "allgather in place": lambda g, w, n: g.allgather(None, w),
    "alltoall": lambda g, w, n: g.alltoall(torch.ones(3 * n), w),
}


@pytest.mark.parametrize("how", list(WRITES) + list(WRITES_WHOLE))
def test_weft_writes_bump_the_version_counter(world, how):
    """A tensor saved for backward and then written by weft makes backward raise, as
    after torch's own in-place operations, instead of computing a wrong gradient."""
    n = world.size
    world.allreduce(torch.ones(1))  # float32 and "sum" seen: the short paths are warm
    if how == "reduce on the root" and n > 1:
        pytest.skip("every rank its own root: one rank only")
    w, loss = saved_by_autograd(3 if how in WRITES else 3 * n)
    (WRITES.get(how) or WRITES_WHOLE[how])(world, w, n)
    assert_backward_refused(loss)


def test_nonblocking_writes_bump_at_completion(world):
    """An iallreduce bumps its output when it starts and again when it completes: a
    tensor saved in between is caught too (unless it had completed at once, as on one
    rank: then the write came before the save)."""
    w = torch.full((3,), 2.0)
    req = world.iallreduce(torch.ones(3), w)
    inline = req.done
    x = torch.arange(1.0, 4.0, requires_grad=True)
    loss = (x * w).sum()  # saved while weft may still write into w
    req.wait()
    if inline:
        loss.backward()
        assert torch.equal(x.grad, torch.full((3,), float(world.size)))
    else:
        assert_backward_refused(loss)


def test_point_to_point_receive_bumps_the_version_counter(world):
    n, me = world.size, world.rank
    right, left = (me + 1) % n, (me - 1) % n
    w, loss = saved_by_autograd()
    sreq = world.isend(torch.full((3,), float(me)), right, tag=11)
    world.recv(w, left, tag=11)
    sreq.wait(timeout=30)
    assert torch.equal(w, torch.full((3,), float(left)))
    assert_backward_refused(loss)
    w, loss = saved_by_autograd()
    rreq = world.irecv(w, left, tag=12)
    world.isend(torch.full((3,), float(me)), right, tag=12).wait(timeout=30)
    rreq.wait(timeout=30)
    assert_backward_refused(loss)


def test_untouched_tensors_keep_their_version_and_gradients(world):
    """Inputs weft only reads, and leaves that require grad written under no_grad, keep
    backward working where nothing changed what it saved."""
    x = torch.arange(1.0, 4.0, requires_grad=True)
    w = torch.full((3,), 2.0)
    loss = (x * w).sum()
    out = torch.empty(3)
    world.allreduce(w, out)  # w only read
    world.allgather(w, torch.empty(3 * world.size))
    loss.backward()
    assert torch.equal(x.grad, w)
    p = torch.nn.Parameter(torch.ones(3))  # a leaf that requires grad, written in place
    with torch.no_grad():
        world.broadcast(p, root=0)
    assert p._version > 0 and p.is_leaf and p.requires_grad
    (p * 2).sum().backward()
    assert torch.equal(p.grad, torch.full((3,), 2.0))
    with torch.inference_mode():  # inference tensors have no version counter
        t = torch.ones(3)
    world.allreduce(t)
    assert torch.equal(t, torch.full((3,), float(world.size)))
