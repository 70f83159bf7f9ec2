"""weft.torch's vocabulary-parallel layers against PyTorch in float64 on the whole
(gathered) weights: the loss and both gradients of VocabParallelCrossEntropy against
torch.nn.functional.cross_entropy, and VocabParallelEmbedding against embedding.

Tolerances: the layer computes in float32, so the loss within 1e-5 relative (+1e-6),
gradients within 1e-4 relative (+1e-6) of the float64 reference."""

import pytest

from helpers import torch_or_skip

torch = torch_or_skip()
import torch.nn.functional as F  # noqa: E402

import weft  # noqa: E402
import weft.torch as wt  # noqa: E402

V, H = 37, 8  # V does not divide over 2, 3 or 4 ranks: the last shard is padded


def data(shape, ignore_index, seed=5):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(V, H, generator=g, dtype=torch.float64)
    X = torch.randn(*shape, H, generator=g, dtype=torch.float64)
    labels = torch.randint(0, V, shape, generator=g)
    flat = labels.view(-1)
    flat[::4] = ignore_index  # every fourth token ignored
    return W, X, labels


def gathered_rows(world, shard, vocab_range):
    """The whole [V, H] tensor from every rank's padded shard."""
    out = torch.zeros(world.size * shard.shape[0], shard.shape[1], dtype=shard.dtype)
    world.allgather(shard.contiguous(), out)
    p = vocab_range.padded_length
    return torch.cat([out[r * p:r * p + weft.shard_range(V, world.size, r).length]
                      for r in range(world.size)])


@pytest.mark.parametrize("algo", ["naive", "alg1", "alg2"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_matches_torch(world, algo, reduction, ignore_index):
    W, X, labels = data((3, 5), ignore_index)
    layer = wt.VocabParallelCrossEntropy(world, algo=algo, ignore_index=ignore_index,
                                         reduction=reduction, vocab_size=V)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    x = X.float().requires_grad_()
    before = world.coll_count
    loss = layer(x, w, labels)
    upstream = torch.linspace(0.5, 1.5, labels.numel()).view(labels.shape) \
        if reduction == "none" else torch.tensor(1.7)
    (loss * upstream).sum().backward()
    # forward + backward: 3 collectives (naive), 2 (alg1), 1 (alg2)
    assert world.coll_count - before == {"naive": 3, "alg1": 2, "alg2": 1}[algo]

    Wr, Xr = W.clone().requires_grad_(), X.clone().requires_grad_()
    ref = F.cross_entropy((Xr @ Wr.T).view(-1, V), labels.view(-1),
                          ignore_index=ignore_index, reduction=reduction)
    ref = ref.view(labels.shape) if reduction == "none" else ref
    (ref * upstream.double()).sum().backward()

    assert loss.shape == ref.shape and loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), Xr.grad, rtol=1e-4, atol=1e-6)
    r = layer.vocab.range
    assert (w.grad[r.length:] == 0).all()  # padding rows
    dW = gathered_rows(world, w.grad.double(), r)
    torch.testing.assert_close(dW, Wr.grad, rtol=1e-4, atol=1e-6)


def test_half_precision_inputs_and_no_grad(world):
    W, X, labels = data((6,), -100, seed=9)
    Wb = W.to(torch.bfloat16)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    w = wt.shard_vocab(Wb, world).requires_grad_()
    x = X.to(torch.bfloat16).requires_grad_()
    loss = layer(x, w, labels)
    loss.backward()
    assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.bfloat16
    ref = F.cross_entropy(x.detach().double() @ Wb.double().T, labels)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        again = layer(x, w, labels)
    torch.testing.assert_close(again, loss.detach())
    assert len(layer._layer.idle) >= 1  # the microbatch state went back at once


def test_all_ignored_mean_is_zero(world):
    W, X, labels = data((4,), -100)
    labels[:] = -100
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    x = X.float().requires_grad_()
    loss = layer(x, wt.shard_vocab(W, world).float(), labels)
    loss.backward()
    assert loss.item() == 0.0 and (x.grad == 0).all()


def test_cross_entropy_refusals(world):
    W, X, labels = data((4,), -100)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    w = wt.shard_vocab(W, world).float()
    with pytest.raises(weft.InvalidArgument, match="rows"):
        layer(X.float(), w[:-1], labels)
    with pytest.raises(weft.InvalidArgument, match="negative label"):
        layer(X.float(), w, torch.tensor([0, -5, 1, 2]))
    with pytest.raises(weft.InvalidArgument, match="vocabulary size"):
        layer(X.float(), w, torch.tensor([0, V, 1, 2]))
    with pytest.raises(weft.InvalidArgument, match="one label per row"):
        layer(X.float(), w, labels[:3])
    with pytest.raises(weft.InvalidArgument):
        wt.VocabParallelCrossEntropy(world, algo="alg3")


@pytest.mark.parametrize("grad_root", [None, 0])
def test_embedding_matches_torch(world, grad_root):
    g = torch.Generator().manual_seed(11)
    E = torch.randn(V, H, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (3, 4), generator=g)
    ids[0, :2] = V - 1  # a row of the padded last shard, twice
    emb = wt.VocabParallelEmbedding(world, V, H, grad_root=grad_root)
    with torch.no_grad():
        emb.weight.copy_(wt.shard_vocab(E.float(), world))
    out = emb(ids)
    assert out.shape == (3, 4, H)
    torch.testing.assert_close(out, F.embedding(ids, E.float()), rtol=0, atol=0)
    upstream = torch.linspace(-1, 1, out.numel()).view(out.shape)
    if grad_root is not None and world.rank != grad_root:
        upstream = torch.zeros_like(upstream)  # replaced by the root's in backward
    (out * upstream).sum().backward()
    Er = E.clone().requires_grad_()
    (F.embedding(ids, Er) * torch.linspace(-1, 1, out.numel()).view(out.shape).double()) \
        .sum().backward()
    r = emb.vocab_range
    assert (emb.weight.grad[r.length:] == 0).all()
    torch.testing.assert_close(gathered_rows(world, emb.weight.grad.double(), r), Er.grad,
                               rtol=1e-6, atol=1e-6)


def test_close_frees_operators_for_new_layers(world):
    """close() destroys the vocabularies at once, so layers made afterwards register
    their reduction operators in the slots a new process would use; a forward awaiting
    its backward keeps the cross-entropy's vocabulary alive until that graph is gone."""
    W, X, labels = data((6,), -100)
    emb = wt.VocabParallelEmbedding(world, V, H)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    loss = layer(X.float().requires_grad_(), w, labels)
    with pytest.raises(weft.InvalidArgument, match="microbatch"):
        layer.close()
    loss.backward()
    layer.close()
    emb.close()
    assert layer.vocab is None
    with pytest.raises(weft.InvalidArgument):
        emb(torch.zeros(2, dtype=torch.int64))
    again = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    ref = F.cross_entropy(X @ W.T, labels)
    got = again(X.float(), wt.shard_vocab(W, world).float(), labels)
    assert abs(got.item() - ref.item()) <= 1e-5 * abs(ref.item()) + 1e-6
