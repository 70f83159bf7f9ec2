"""CUDA tensors through the binding (skipped without PyTorch, a GPU or a CUDA build of
weft): collectives on device tensors enqueued on torch's current stream, and the
vocabulary-parallel layers on the device against the same layers on the host."""

import pytest

import weft
from helpers import torch_or_skip

torch = torch_or_skip()
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for PyTorch: CUDA tests skipped", allow_module_level=True)
if not weft.memory_is_cuda(torch.zeros(1, device="cuda")):  # host memory to a CPU build
    pytest.skip("this libweft.so was built without CUDA", allow_module_level=True)

import weft.torch as wt  # noqa: E402


def test_memory_type():
    assert not weft.memory_is_cuda(torch.zeros(4))


def test_allreduce_on_a_side_stream(world):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.full((1 << 16,), world.rank + 1.0, device="cuda")
        world.allreduce(x)  # ordered after the fill on `stream`
        assert world.cuda_stream == stream.cuda_stream
    stream.synchronize()
    n = world.size
    assert torch.all(x == n * (n + 1) / 2).item()


def test_cross_entropy_device_equals_host(world):
    g = torch.Generator().manual_seed(2)
    V, H = 41, 16
    W = torch.randn(V, H, generator=g)
    X = torch.randn(10, H, generator=g)
    labels = torch.randint(0, V, (10,), generator=g)
    results = []
    for device in ("cpu", "cuda"):
        layer = wt.VocabParallelCrossEntropy(world, algo="alg2", vocab_size=V)
        x = X.to(device).requires_grad_()
        w = wt.shard_vocab(W, world).to(device).requires_grad_()
        loss = layer(x, w, labels.to(device))
        loss.backward()
        results.append((loss.cpu(), x.grad.cpu(), w.grad.cpu()))
    for host, dev in zip(*results):
        torch.testing.assert_close(dev, host, rtol=1e-4, atol=1e-5)
