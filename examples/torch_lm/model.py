"""The language model: a small decoder-only transformer whose body is data-parallel
(replicated, each rank runs its share of the global batch) and whose input embedding and
output layer are vocabulary-parallel over the same ranks (weft.torch: each rank holds a
shard of the vocabulary's rows and every rank sees every token of the global batch).

The two meet through Share (every rank holds the whole batch; it keeps its rows, and in
backward the rows' gradients are summed over the group so that each rank has the whole
gradient again) and Gather (the converse: each rank's rows become the whole batch on every
rank, and backward keeps this rank's rows of a gradient every rank holds whole).
"""

import math

import torch
import torch.nn.functional as F


class Share(torch.autograd.Function):
    """x [N, ...] (the same on every rank) -> x[first:first + n]."""

    @staticmethod
    def forward(ctx, x, group, first, n):
        ctx.group, ctx.first, ctx.n, ctx.shape = group, first, n, x.shape
        return x[first:first + n].clone()

    @staticmethod
    def backward(ctx, grad):
        whole = torch.zeros(ctx.shape, dtype=grad.dtype)
        whole[ctx.first:ctx.first + ctx.n] = grad
        ctx.group.allreduce(whole)
        return whole, None, None, None


class Gather(torch.autograd.Function):
    """Each rank's rows x [n, ...] at offset first -> the whole [total, ...] everywhere."""

    @staticmethod
    def forward(ctx, x, group, first, total):
        ctx.first, ctx.n = first, x.shape[0]
        whole = torch.zeros((total,) + tuple(x.shape[1:]), dtype=x.dtype)
        whole[first:first + x.shape[0]] = x
        group.allreduce(whole)
        return whole

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.first:ctx.first + ctx.n].contiguous(), None, None, None


class Block(torch.nn.Module):
    """Pre-norm causal self-attention and a GELU MLP, each with a residual."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Body(torch.nn.Module):
    """Learned positions, the blocks and a final norm: [n, T, d] -> [n, T, d]."""

    def __init__(self, d, heads, layers, length):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.zeros(length, d))
        torch.nn.init.normal_(self.pos, std=0.02)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x):
        x = x + self.pos[:x.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln(x)


def loss_of_batch(state, inputs, targets):
    """The global batch's mean next-token loss, on every rank, with autograd through the
    vocabulary-parallel layers and this rank's share of the body."""
    group, share = state.group, state.share
    b, t = inputs.shape
    emb = state.embed(inputs)                          # [B, T, d] on every rank
    mine = Share.apply(emb, group, share.first, share.samples)
    hidden = Gather.apply(state.body(mine), group, share.first, b)
    return state.xent(hidden.reshape(b * t, -1), state.head, targets.reshape(-1))
