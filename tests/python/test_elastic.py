"""weft.torch.ElasticState's per-rank state (rng=True, data=...) without a failure: each
rank's row goes to every member and back into a generator and a data object bit for
bit, and what cannot be carried as fixed-size numbers is refused, on every rank alike.
Recovery itself: ddp_elastic.py --per-rank (python_ddp_elastic_per_rank_n4)."""

import pytest

import weft
from helpers import torch_or_skip

torch = torch_or_skip()
import torch.distributed as dist  # noqa: E402

import weft.torch as wt  # noqa: E402


class Data:
    """A data position whose state_dict() is whatever the test gives it."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        """The state as given."""
        return dict(self.state)

    def load_state_dict(self, d):
        """Keep what ElasticState loads."""
        self.state = dict(d)


def rank_state(rank):
    """Every kind of entry a data state may hold, with values that differ per rank."""
    return {"position": 1000 * rank + 7, "epoch": -rank, "shuffled": rank % 2 == 1,
            "order": torch.randperm(5, generator=torch.Generator().manual_seed(rank)),
            "scale": torch.tensor(0.5 + rank, dtype=torch.bfloat16),
            "seen": torch.arange(6, dtype=torch.float64).reshape(2, 3) * rank}


def same(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        if torch.is_tensor(a[k]):
            assert b[k].dtype == a[k].dtype and torch.equal(b[k], a[k]), k
        else:
            assert type(b[k]) is type(a[k]) and b[k] == a[k], k


@pytest.fixture(scope="module")
def pg():
    group = wt.init_process_group()
    yield group
    dist.destroy_process_group()


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_every_rank_row_reaches_every_member_and_loads_back(pg):
    rank, size = dist.get_rank(), dist.get_world_size()
    data = Data(rank_state(rank))
    model, opt = model_and_optimizer()
    torch.manual_seed(50 + rank)
    rng = torch.get_rng_state()
    state = wt.ElasticState(model, opt, pg, rng=True, data=data)
    state.start(0)
    assert tuple(state._rows.shape) == (size, state._own_row().numel())
    for r in range(size):  # any member could hand rank r its row
        state.data = Data({})
        state._load_row(state._rows[r])
        same(rank_state(r), state.data.state)
    state.data = data
    torch.rand(100)  # the generator and the data move on
    data.state = rank_state(rank + size)
    state._load_row(state._rows[rank])
    assert torch.equal(torch.get_rng_state(), rng)
    same(rank_state(rank), data.state)
    state.wait()


@pytest.mark.parametrize("value", ["text", 1.5, None, [1, 2], 2**63],
                         ids=["str", "float", "None", "list", "int-overflow"])
def test_a_value_that_is_not_an_int_or_tensor_is_refused(pg, value):
    state = wt.ElasticState(*model_and_optimizer(), pg, data=Data({"position": value}))
    with pytest.raises(weft.InvalidArgument, match="position"):
        state.commit(1)


def test_bad_arguments_are_refused(pg):
    m, o = model_and_optimizer()
    with pytest.raises(weft.InvalidArgument, match="rng"):
        wt.ElasticState(m, o, pg, rng=1)
    with pytest.raises(weft.InvalidArgument, match="load_state_dict"):
        wt.ElasticState(m, o, pg, data=object())

    class NotADict(Data):
        def state_dict(self):
            return [("position", 1)]
    for data, match in [(NotADict({}), "not a dict"), (Data({3: 1}), "not a str"),
                        (Data({}), "no per-rank state")]:
        with pytest.raises(weft.InvalidArgument, match=match):
            wt.ElasticState(m, o, pg, data=data).commit(1)


def test_a_state_that_changes_shape_is_refused(pg):
    data = Data({"order": torch.arange(4)})
    state = wt.ElasticState(*model_and_optimizer(), pg, data=data)
    state.start(0)
    data.state = {"order": torch.arange(5)}
    with pytest.raises(weft.InvalidArgument, match="changed since the first commit"):
        state.commit(1)
    state.wait()


def test_ranks_that_carry_different_states_are_refused_on_every_rank(pg):
    rank = dist.get_rank()
    if dist.get_world_size() < 2:
        pytest.skip("needs two ranks")
    # Sizes differ: refused before the allgather.
    longer = Data({"order": torch.arange(4 + (rank == 1))})
    with pytest.raises(weft.InvalidArgument, match="differ in size"):
        wt.ElasticState(*model_and_optimizer(), pg, data=longer).commit(0)
    # One size, other contents (an int against a float64 tensor): refused after it.
    other = Data({"x": torch.tensor(1.0, dtype=torch.float64) if rank == 1 else 1})
    with pytest.raises(weft.InvalidArgument, match="different entries"):
        wt.ElasticState(*model_and_optimizer(), pg, data=other).commit(0)
