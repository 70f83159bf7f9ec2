"""Cutting whole vocabulary tensors into the shards weft's layers hold."""

import torch

from ..vocab import shard_range


def shard_vocab(full, group, align=0, rank=None):
    """Rows [start, start + length) of @p full ([V, ...]) for @p rank of @p group (this
    process by default), in a new tensor of padded_length rows (padding rows zero), as
    VocabParallelCrossEntropy's weight and VocabParallelEmbedding's table expect."""
    size = group.size
    r = shard_range(full.shape[0], size, group.rank if rank is None else rank, align)
    out = torch.zeros((r.padded_length,) + tuple(full.shape[1:]), dtype=full.dtype,
                      device=full.device)
    out[:r.length] = full[r.start:r.start + r.length]
    return out
