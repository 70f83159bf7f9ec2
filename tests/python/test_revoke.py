"""Group.revoke from Python: rank 0 revokes the world while the others wait on a receive
from it (or enter a barrier); every member gets weft.Revoked, and a repair raises the
epoch and keeps them all. A vocabulary-parallel layer used before the repair makes its
vocabulary anew after it. (A file of its own: the world's epoch changes.)"""

import numpy as np
import pytest

import weft


def revoke_when_all_ready(world):
    """Rank 0 revokes once every other rank said it finished what came before (a rank
    still inside the previous collective would see that collective revoked)."""
    if world.rank == 0:
        for r in range(1, world.size):
            world.recv(bytearray(1), r, tag=8)
        world.revoke()
    else:
        world.send(b"r", 0, tag=8)


def test_revoke_then_repair(world):
    n, me = world.size, world.rank
    if n < 2:
        pytest.skip("needs two ranks")
    assert world.epoch == 0
    revoke_when_all_ready(world)
    with pytest.raises(weft.Revoked) as e:
        if me == 0:
            world.allreduce(np.ones(1, np.float32))
        else:
            world.recv(bytearray(1), 0, tag=9)  # never sent: ended by the revocation
    assert e.value.status == weft.Status.ERR_REVOKED
    info = world.repair()
    assert info.removed == [] and info.added == []
    assert info.new_size == info.old_size == n == world.size
    assert info.new_epoch == info.old_epoch + 1 == world.epoch
    assert info.rank_map == list(range(n)) and info.changed
    x = np.full(3, me + 1, np.int64)
    world.allreduce(x)
    assert (x == n * (n + 1) // 2).all()


def test_layer_follows_the_new_epoch(world):
    torch = pytest.importorskip("torch", reason="PyTorch is not importable: skipped")
    import torch.nn.functional as F
    import weft.torch as wt
    g = torch.Generator().manual_seed(4)
    W = torch.randn(13, 3, generator=g, dtype=torch.float64)
    X = torch.randn(4, 3, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 13, (4,), generator=g)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=13)
    ref = F.cross_entropy(X @ W.T, labels).item()
    assert layer(X.float(), wt.shard_vocab(W, world).float(), labels).item() == \
        pytest.approx(ref, rel=1e-5)
    first = layer.vocab
    revoke_when_all_ready(world)
    with pytest.raises(weft.Revoked):
        world.barrier()
    world.repair()
    assert layer(X.float(), wt.shard_vocab(W, world).float(), labels).item() == \
        pytest.approx(ref, rel=1e-5)
    assert layer.vocab is not first and layer.vocab.epoch == world.epoch
