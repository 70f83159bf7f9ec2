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
@pytest.mark.parametrize("label_smoothing", [0.0, 0.25])
def test_cross_entropy_matches_torch(world, algo, reduction, ignore_index, label_smoothing):
    W, X, labels = data((3, 5), ignore_index)
    layer = wt.VocabParallelCrossEntropy(world, algo=algo, ignore_index=ignore_index,
                                         reduction=reduction, vocab_size=V,
                                         label_smoothing=label_smoothing)
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
                          ignore_index=ignore_index, reduction=reduction,
                          label_smoothing=label_smoothing)
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
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(weft.InvalidArgument, match="label_smoothing"):
            wt.VocabParallelCrossEntropy(world, vocab_size=V, label_smoothing=bad)
    with pytest.raises(weft.InvalidArgument):  # the C library refuses it too
        weft.Vocab(world, V, H).microbatch(label_smoothing=2.0)


@pytest.mark.parametrize("algo", ["alg1", "alg2"])
@pytest.mark.parametrize("block_rows", [1, 4])
def test_blocked_cross_entropy_matches_torch(world, algo, block_rows):
    """The output layer that never holds its logits: the same loss and gradients, the
    same collectives, and block_rows rows of logits held instead of the whole shard."""
    W, X, labels = data((3, 5), -100, seed=8)
    layer = wt.VocabParallelCrossEntropy(world, algo=algo, vocab_size=V, block_rows=block_rows,
                                         label_smoothing=0.1)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    x = X.float().requires_grad_()
    before = world.coll_count
    layer(x, w, labels).mul(1.3).backward()
    assert world.coll_count - before == {"alg1": 2, "alg2": 1}[algo]
    Wr, Xr = W.clone().requires_grad_(), X.clone().requires_grad_()
    ref = F.cross_entropy((Xr @ Wr.T).view(-1, V), labels.view(-1), label_smoothing=0.1)
    ref.mul(1.3).backward()
    torch.testing.assert_close(x.grad.double(), Xr.grad, rtol=1e-4, atol=1e-6)
    dW = gathered_rows(world, w.grad.double(), layer.vocab.range)
    torch.testing.assert_close(dW, Wr.grad, rtol=1e-4, atol=1e-6)
    n, r = labels.numel(), layer.vocab.range
    whole = layer.vocab.memory(algo, n).peak
    mb = layer.vocab.microbatch(algo, max_tokens=n, block_rows=block_rows)
    held = min(block_rows, r.length) if r.length else 0
    assert whole - mb.memory(n).peak == n * (r.length - held) * 4
    mb.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("algo", ["naive", "alg2"])
def test_half_cross_entropy_matches_torch(world, dtype, algo):
    """bf16 and f16 weights keep their dtype: the loss is the float32-accumulated one of
    the rounded values (checked against PyTorch in float64 on those values, 1e-5), the
    gradients come back in the dtype within one rounding of it (bf16 2^-8, f16 2^-11,
    relative to the largest) and against PyTorch's own computation in that dtype."""
    W, X, labels = data((3, 5), -100, seed=9)
    W, X = W.to(dtype), X.to(dtype)  # the values both sides see
    layer = wt.VocabParallelCrossEntropy(world, algo=algo, vocab_size=V, label_smoothing=0.1)
    w = wt.shard_vocab(W, world).requires_grad_()
    x = X.clone().requires_grad_()
    loss = layer(x, w, labels)
    loss.backward()
    assert layer.vocab.dtype.name == {torch.bfloat16: "BF16", torch.float16: "F16"}[dtype]
    assert x.grad.dtype == dtype and w.grad.dtype == dtype and loss.dtype == torch.float32
    Wr, Xr = W.double().requires_grad_(), X.double().requires_grad_()
    ref = F.cross_entropy((Xr @ Wr.T).view(-1, V), labels.view(-1), label_smoothing=0.1)
    ref.backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    dW = gathered_rows(world, w.grad, layer.vocab.range).double()
    for got, want in ((x.grad.double(), Xr.grad), (dW, Wr.grad)):
        assert (got - want).abs().max() <= tol * want.abs().max()
    if dtype == torch.bfloat16:  # PyTorch 1.13's CPU matmul has no float16
        Wt, Xt = W.clone().requires_grad_(), X.clone().requires_grad_()
        F.cross_entropy((Xt @ Wt.T).view(-1, V).float(), labels.view(-1),
                        label_smoothing=0.1).backward()
        assert (x.grad.double() - Xt.grad.double()).abs().max() <= \
            2 * tol * Xt.grad.double().abs().max()


def test_one_rank_refuses_and_every_rank_fails_at_once(world):
    """Arguments that only the last rank rejects in Python (a negative label, labels not
    matching hidden, a weight of the wrong rows, float ids): that rank takes part in the
    pass's collective as a refusal, so every rank fails now with weft.InvalidArgument
    instead of the others waiting for it until their timeout; a good forward after each
    works on every rank."""
    import time
    if world.size == 1:
        pytest.skip("needs ranks that wait for the one that refuses")
    W, X, labels = data((4,), -100, seed=3)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    emb = wt.VocabParallelEmbedding(world, V, H)
    w = wt.shard_vocab(W, world).float()
    last = world.rank == world.size - 1
    cases = [
        lambda: layer(X.float(), w, torch.tensor([0, -5, 1, 2]) if last else labels),
        lambda: layer(X.float(), w, labels[:3] if last else labels),
        lambda: layer(X.float(), w[:-1] if last else w, labels),
        lambda: emb(torch.tensor([1.0, 2.0]) if last else torch.tensor([1, 2])),
    ]
    for case in cases:
        t0 = time.monotonic()
        with pytest.raises(weft.InvalidArgument):
            case()
        assert time.monotonic() - t0 < 20.0  # the refusal, not a timeout
        ref = F.cross_entropy(X @ W.T, labels)
        torch.testing.assert_close(layer(X.float(), w, labels).double(), ref, rtol=1e-5,
                                   atol=1e-6)


def test_blocked_refusals(world):
    with pytest.raises(weft.InvalidArgument, match="block_rows"):
        wt.VocabParallelCrossEntropy(world, algo="naive", vocab_size=V, block_rows=2)
    with pytest.raises(weft.InvalidArgument, match="block_rows"):
        wt.VocabParallelCrossEntropy(world, vocab_size=V, block_rows=-1)
    with pytest.raises(weft.InvalidArgument):  # the library refuses naive blocked too
        weft.Vocab(world, V, H).microbatch("naive", block_rows=2)
    with pytest.raises(weft.InvalidArgument, match="float32, bfloat16 or float16"):
        weft.Vocab(world, V, H, dtype="float64")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_embedding_matches_torch(world, dtype):
    """A bf16 or f16 table: the rows come back exactly; the table's gradient within one
    rounding per add of the float64 sum (ids repeat)."""
    g = torch.Generator().manual_seed(13)
    E = torch.randn(V, H, generator=g, dtype=torch.float64).to(dtype)
    ids = torch.tensor([[0, V - 1, 5, 5], [11, 0, 5, V - 1]])
    emb = wt.VocabParallelEmbedding(world, V, H, dtype=dtype, grad_root=0)
    with torch.no_grad():
        emb.weight.copy_(wt.shard_vocab(E, world))
    out = emb(ids)
    assert out.dtype == dtype
    assert torch.equal(out, F.embedding(ids, E))
    up = torch.randn(*ids.shape, H, generator=g).to(dtype)
    out.backward(up if world.rank == 0 else torch.full_like(up, 7.0))  # root 0's counts
    assert emb.weight.grad.dtype == dtype
    Er = E.double().requires_grad_()
    F.embedding(ids, Er).backward(up.double())
    dE = gathered_rows(world, emb.weight.grad.double(), emb.vocab_range)
    tol = (1 / 256 if dtype == torch.bfloat16 else 1 / 2048) * 3  # up to 3 adds a row
    assert (dE - Er.grad).abs().max() <= tol * Er.grad.abs().max()


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
    """close() frees the vocabularies at once, so layers made afterwards register
    their reduction operators in the slots a new process would use."""
    W, X, labels = data((6,), -100)
    emb = wt.VocabParallelEmbedding(world, V, H)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    loss = layer(X.float().requires_grad_(), w, labels)
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


def test_close_with_a_forward_only_graph_alive(world):
    """A forward whose backward never ran (its graph still alive) does not stop close():
    its state goes with the vocabulary, a backward through that graph then raises
    InvalidArgument on every rank (no collective starts), and the layer works again."""
    W, X, labels = data((6,), -100)
    layer = wt.VocabParallelCrossEntropy(world, vocab_size=V)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    x = X.float().requires_grad_()
    kept = [layer(x, w, labels), layer(x, w, labels)]  # two graphs, neither backward
    layer.close()
    assert layer.vocab is None
    with pytest.raises(weft.InvalidArgument, match="close"):
        kept[0].backward()
    ref = F.cross_entropy(X @ W.T, labels)
    loss = layer(x, w, labels)  # a new vocabulary; every rank's collectives still pair
    loss.backward()
    assert abs(loss.item() - ref.item()) <= 1e-5 * abs(ref.item()) + 1e-6
    del kept  # the closed states are dropped with their graphs
    layer.close()


V_ODD = 1001  # over 2, 3 and 4 ranks the last shard is shorter than the others


def small_logits(n, seed=21):
    """Logits near 0, where padding rows taken for entries (logit 0) move the loss."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(V_ODD, H, generator=g, dtype=torch.float64)
    X = 0.05 * torch.randn(n, H, generator=g, dtype=torch.float64)
    return W, X, torch.randint(0, V_ODD, (n,), generator=g)


@pytest.mark.parametrize("algo", ["naive", "alg2"])
def test_vocabulary_not_dividing_over_the_ranks(world, algo):
    W, X, labels = small_logits(10)
    layer = wt.VocabParallelCrossEntropy(world, algo=algo, vocab_size=V_ODD)
    w = wt.shard_vocab(W, world).float().requires_grad_()
    x = X.float().requires_grad_()
    loss = layer(x, w, labels)
    loss.backward()
    Xr = X.clone().requires_grad_()
    ref = F.cross_entropy(Xr @ W.T, labels)
    ref.backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.double(), Xr.grad, rtol=1e-4, atol=1e-6)
    layer.close()


def test_missing_vocab_size_is_never_guessed(world):
    """Padded shards fit several V: without vocab_size the layer refuses (saying what to
    pass) on more than one rank or with align, and on one rank takes the weight's rows."""
    W, X, labels = small_logits(10)
    w = wt.shard_vocab(W, world).float()
    if world.size == 1:
        layer = wt.VocabParallelCrossEntropy(world)
        got = layer(X.float(), w, labels)
        ref = F.cross_entropy(X @ W.T, labels)
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6)
        assert layer.vocab.vocab_size == V_ODD
        layer.close()
    else:
        with pytest.raises(weft.InvalidArgument,
                           match=r"over %d ranks needs vocab_size=V.*W\.shape\[0\]" %
                           world.size):
            wt.VocabParallelCrossEntropy(world)
    with pytest.raises(weft.InvalidArgument, match="align=8 needs vocab_size"):
        wt.VocabParallelCrossEntropy(world, align=8)
