"""weft.Vocab and weft.Microbatch on NumPy arrays (no torch): the passes (S, C1, T, C2:
logits, merge_start, grad, dx_reduce_start) one by one, against a NumPy float64 softmax
cross-entropy over the whole weight matrix."""

import numpy as np
import pytest

import weft

V, H, N = 29, 6, 9


def data(seed=3):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((V, H))
    X = rng.standard_normal((N, H))
    labels = rng.integers(0, V, N).astype(np.int64)
    labels[1] = -1  # ignored
    return W, X, labels


def reference(W, X, labels, grad_scale):
    """Sum-reduced loss, dX and dW (float64) scaled by grad_scale."""
    logits = X @ W.T
    m = logits.max(axis=1, keepdims=True)
    p = np.exp(logits - m)
    p /= p.sum(axis=1, keepdims=True)
    keep = labels >= 0
    loss = -np.log(p[keep, labels[keep]]).sum()
    g = p.copy()
    g[keep, labels[keep]] -= 1
    g[~keep] = 0
    g *= grad_scale
    return loss, g @ W, g.T @ X


def my_shard(W, vocab):
    r = vocab.range
    w = np.zeros((r.padded_length, H), np.float32)
    w[:r.length] = W[r.start:r.start + r.length]
    return w


@pytest.mark.parametrize("algo", ["naive", "alg1", "alg2"])
def test_passes_one_by_one(world, algo):
    W, X, labels = data()
    vocab = weft.Vocab(world, V, H)
    r = vocab.range
    assert r == weft.shard_range(V, world.size, world.rank)
    mb = vocab.microbatch(algo, "sum", max_tokens=N)
    x, w = X.astype(np.float32), my_shard(W, vocab)
    mb.logits(x, w, labels)
    req = mb.merge_start()
    assert isinstance(req, weft.Request)
    assert req.wait(timeout=30) is None
    loss_tok = np.zeros(N, np.float32)
    loss = mb.loss(loss_tok)
    want, dx_want, dw_want = reference(W, X, labels, 0.5)
    assert loss == pytest.approx(want, rel=1e-5)
    assert loss_tok[1] == 0 and loss_tok.sum() == pytest.approx(want, rel=1e-5)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    mb.grad(0.5, dx, dw)
    req = mb.dx_reduce_start()
    assert req.done or algo != "alg2"  # "alg2" has nothing to send
    while not req.test():
        pass
    assert req.wait() is dx
    np.testing.assert_allclose(dx, dx_want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dw[:r.length], dw_want[r.start:r.start + r.length],
                               rtol=1e-4, atol=1e-6)
    assert not dw[r.length:].any()
    stats = mb.stats()
    assert stats.collectives == {"naive": 3, "alg1": 2, "alg2": 1}[algo]
    assert stats.comm_bytes > 0
    mem = vocab.memory(algo, N)
    assert mem.peak == max(mem.s_to_c1, mem.c1_to_t) > 0
    mb.close()
    vocab.close()


def test_blocking_mean_and_reuse(world):
    W, X, labels = data(4)
    vocab = weft.Vocab(world, V, H, align=2)
    mb = vocab.microbatch("alg2", "mean", max_tokens=N)
    x, w = X.astype(np.float32), my_shard(W, vocab)
    valid = (labels >= 0).sum()
    want, dx_want, _ = reference(W, X, labels, 1.0 / valid)
    for _ in range(2):  # a state is reused once its last pass completed
        assert mb.forward(x, w, labels) == pytest.approx(want / valid, rel=1e-5)
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        mb.backward(np.ones(1, np.float32), dx, dw)
        np.testing.assert_allclose(dx, dx_want, rtol=1e-4, atol=1e-6)


def test_embedding(world):
    rng = np.random.default_rng(8)
    E = rng.standard_normal((V, H)).astype(np.float32)
    ids = rng.integers(0, V, 12).astype(np.int64)
    vocab = weft.Vocab(world, V, H)
    table = my_shard(E, vocab)
    out = np.zeros((12, H), np.float32)
    vocab.embed_forward(table, ids, out)
    np.testing.assert_array_equal(out, E[ids])
    out2 = np.zeros_like(out)
    vocab.iembed_forward(table, ids, out2).wait(timeout=30)
    np.testing.assert_array_equal(out2, out)
    grad = np.arange(12 * H, dtype=np.float32).reshape(12, H)
    mine = grad if world.rank == 0 else np.zeros_like(grad)
    vocab.embed_grad_bcast_start(mine, 12, root=0).wait(timeout=30)
    np.testing.assert_array_equal(mine, grad)
    gt = np.zeros_like(table)
    vocab.embed_grad_scatter(mine, ids, gt)
    want = np.zeros((V, H), np.float32)
    np.add.at(want, ids, grad)
    r = vocab.range
    np.testing.assert_allclose(gt[:r.length], want[r.start:r.start + r.length])


def test_refusals(world):
    vocab = weft.Vocab(world, V, H)
    mb = vocab.microbatch("alg1", "none", max_tokens=4)
    x = np.zeros((4, H), np.float32)
    w = np.zeros(vocab.table_shape, np.float32)
    labels = np.zeros(4, np.int64)
    with pytest.raises(weft.InvalidArgument, match="float32"):
        mb.logits(x.astype(np.float64), w, labels)
    with pytest.raises(weft.InvalidArgument, match="int64"):
        mb.logits(x, w, labels.astype(np.int32))
    with pytest.raises(weft.InvalidArgument, match="elements"):
        mb.logits(x, w[:-1], labels)
    with pytest.raises(weft.InvalidArgument):
        mb.logits(np.zeros((5, H), np.float32), w, np.zeros(5, np.int64))  # > max_tokens
    with pytest.raises(weft.InvalidArgument, match="C1"):
        mb.loss()
    with pytest.raises(weft.InvalidArgument):
        vocab.microbatch("alg9")
    # Passes out of order refuse on every rank alike (each rank refuses its own), and
    # give no request.
    with pytest.raises(weft.InvalidArgument, match="C1 must follow"):
        mb.merge_start()
    with pytest.raises(weft.InvalidArgument, match="C2 must follow"):
        mb.dx_reduce_start()


def test_default_algo_is_the_c_default(world):
    """A microbatch made without algo runs what a zero-initialised C parameter struct
    selects: one collective per microbatch."""
    W, X, labels = data(5)
    vocab = weft.Vocab(world, V, H)
    mb = vocab.microbatch(reduction="sum", max_tokens=N)
    assert mb.algo == 0
    mb.forward(X.astype(np.float32), my_shard(W, vocab), labels)
    assert mb.stats().collectives == 1
    mb.close()
    vocab.close()
