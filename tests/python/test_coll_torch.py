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
       "max": lambda s: s.max(0).values, "min": lambda s: s.min(0).values}


def rank_tensor(rank, count, dtype, seed=0):
    return torch.from_numpy(rank_values(rank, count, "int64", seed)).to(dtype)


def expected(n, count, dtype, op, seed=0):
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([rank_tensor(r, count, wide, seed) for r in range(n)])
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
