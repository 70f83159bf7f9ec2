#!/usr/bin/python3
"""Generate the PyTorch reference data of test_vocab_torch.

Writes tests/vocab/data/*.bin: small inputs of softmax cross-entropy over logits X Wᵀ and
what torch.nn.functional.cross_entropy (ignore_index=-100) gives for them: the per-token
loss, the reduced loss, and the gradients of X and W under an upstream gradient g,
computed by autograd in float64 from the float32 inputs.

Regenerate (Debian's python3-torch; any torch >= 1.10 gives the same files up to
float64 rounding of the expected values):

    /usr/bin/python3 tests/vocab/gen_torch_data.py tests/vocab/data

File layout, little-endian:
    char[8]   magic "WEFTVX01"
    int32     n, h, V, reduction (0 mean, 1 sum, 2 none), ngrad (1, or n for none)
    float32   X[n*h], W[V*h]
    int64     labels[n]          (-100: ignored)
    float32   grad[ngrad]
    float64   loss_tok[n], loss, dX[n*h], dW[V*h]
For reduction "none" the stored loss is the sum of the per-token losses and the
gradients are those of sum(g * loss_tok).
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def write_case(path, x, w, labels, reduction, grad):
    x64 = x.double().requires_grad_(True)
    w64 = w.double().requires_grad_(True)
    logits = x64 @ w64.t()
    loss_tok = F.cross_entropy(logits, labels, ignore_index=-100, reduction="none")
    if reduction == "none":
        loss = loss_tok.sum()
        (loss_tok * grad.double()).sum().backward()
    else:
        loss = F.cross_entropy(logits, labels, ignore_index=-100, reduction=reduction)
        (loss * grad.double()[0]).backward()
    n, h = x.shape
    V = w.shape[0]
    with open(path, "wb") as f:
        f.write(b"WEFTVX01")
        f.write(struct.pack("<5i", n, h, V, REDUCTIONS[reduction], grad.numel()))
        f.write(x.float().contiguous().numpy().tobytes())
        f.write(w.float().contiguous().numpy().tobytes())
        f.write(labels.long().numpy().astype("<i8").tobytes())
        f.write(grad.float().numpy().tobytes())
        f.write(loss_tok.detach().double().numpy().tobytes())
        f.write(struct.pack("<d", float(loss)))
        f.write(x64.grad.detach().numpy().tobytes())
        f.write(w64.grad.detach().numpy().tobytes())


def random_case(gen, n, h, V, ignored, scale):
    x = (torch.rand(n, h, generator=gen) * 2 - 1) * scale
    w = (torch.rand(V, h, generator=gen) * 2 - 1) * scale
    labels = torch.randint(0, V, (n,), generator=gen)
    for j in ignored:
        labels[j] = -100
    return x.float(), w.float(), labels


def extreme_case(gen, n, h, V):
    """Logits of +-1e4 that float32 holds exactly (see tests/vocab/vocab_ref.h)."""
    x = torch.randint(-16, 17, (n, h), generator=gen).float() / 16
    w = torch.randint(-16, 17, (V, h), generator=gen).float() / 16
    x[:, 0] = 1.0
    big = torch.tensor([1e4, -1e4, 0.0, -1e4])
    w[:, 0] = big[torch.randint(0, 4, (V,), generator=gen)]
    labels = torch.randint(0, V, (n,), generator=gen)
    labels[n - 1] = -100
    return x, w, labels


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(20241108)
    x, w, y = random_case(gen, 8, 8, 23, [2, 5], 0.8)
    write_case(os.path.join(out, "mean.bin"), x, w, y, "mean", torch.tensor([1.0]))
    x, w, y = random_case(gen, 6, 4, 17, [0], 1.0)
    write_case(os.path.join(out, "sum.bin"), x, w, y, "sum", torch.tensor([0.5]))
    x, w, y = random_case(gen, 7, 6, 11, [6], 1.2)
    g = torch.rand(7, generator=gen) + 0.25
    write_case(os.path.join(out, "none.bin"), x, w, y, "none", g.float())
    x, w, y = extreme_case(gen, 5, 4, 13)
    write_case(os.path.join(out, "extreme.bin"), x, w, y, "mean", torch.tensor([1.0]))


if __name__ == "__main__":
    main()
