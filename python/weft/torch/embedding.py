"""The vocabulary-parallel input embedding as an autograd Function and a Module.

Forward: each rank looks up the ids of its shard (zeros elsewhere) and one sum over the
group completes every row on every rank. Backward: ∇out is broadcast from grad_root
(skipped when every rank holds it, the default), then each rank scatter-adds the rows of
its shard into the gradient of its table.
"""

import torch

from ..errors import invalid
from ..vocab import Vocab


class VocabParallelEmbeddingFunction(torch.autograd.Function):
    """apply(ids [n] int64, weight [padded, h] in the vocabulary's dtype, vocab, grad_root)
    -> [n, h] in that dtype."""

    @staticmethod
    def forward(ctx, ids, weight, vocab, grad_root):
        """Rows of the embedding for @p ids, from every rank's shard."""
        out = torch.empty((ids.numel(), vocab.hidden), dtype=weight.dtype, device=weight.device)
        vocab.embed_forward(weight, ids, out)
        ctx.vocab, ctx.grad_root, ctx.dtype = vocab, grad_root, weight.dtype
        ctx.save_for_backward(ids)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        """This rank's shard's gradient (weft_vocab_embed_backward)."""
        (ids,) = ctx.saved_tensors
        vocab = ctx.vocab
        g = grad_out.detach().to(ctx.dtype).contiguous()
        if ctx.grad_root is not None and g.data_ptr() == grad_out.data_ptr():
            g = g.clone()  # the broadcast writes into it
        grad_table = torch.zeros(vocab.table_shape, dtype=ctx.dtype, device=g.device)
        vocab.embed_backward(g, ids, grad_table, ctx.grad_root)
        return None, grad_table, None, None


class VocabParallelEmbedding(torch.nn.Module):
    """torch.nn.Embedding with its table [V, h] sharded by vocabulary over @p group:
    this rank holds `weight` [padded_length, h] (rows past its shard's length are padding
    and stay zero). forward(ids) gives [*ids.shape, h] on every rank.

    dtype: of the table, the output and the gradients: float32, bfloat16 or float16
    (bf16/f16 in host memory: the lookup is exact, the gradient's scatter adds in float32
    and rounds each add).
    grad_root: None when every rank computes the gradient of the output (it feeds the
    rest of the model on every rank); else the group rank that computes it, which
    broadcasts it in backward (every rank must then run backward).
    Make the modules of a job in the same order on every rank (each registers reduction
    operators with the context)."""

    def __init__(self, group, num_embeddings, embedding_dim, *, align=0, grad_root=None,
                 device=None, dtype=torch.float32):
        super().__init__()
        self.group, self.grad_root = group, grad_root
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise invalid("dtype must be float32, bfloat16 or float16, not %s" % dtype)
        self.vocab = Vocab(group, num_embeddings, embedding_dim, align,
                           dtype=str(dtype)[len("torch."):])
        r = self.vocab.range
        self.weight = torch.nn.Parameter(
            torch.zeros(r.padded_length, embedding_dim, dtype=dtype, device=device))
        self.reset_parameters()

    @property
    def vocab_range(self):
        """VocabRange(start, length, padded_length) of this rank's shard."""
        return self.vocab.range

    def close(self):
        """Free the vocabulary now (forward is refused afterwards). Call it on every
        member before making vocabularies after a membership change, so that members and
        a replacement, which has none, register their reduction operators alike."""
        self.vocab.close()

    def reset_parameters(self):
        """N(0, 1) on this shard's rows (each rank's own generator), zero padding."""
        with torch.no_grad():
            n = self.vocab.range.length
            self.weight.zero_()
            self.weight[:n].normal_()

    def forward(self, ids):
        """The embedding of @p ids (any shape of token ids), every rank's shard taking part."""
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            if self.vocab.epoch == self.group.epoch:
                self.vocab.refuse_embed_forward()  # the others are in the sum: fail them now
            raise invalid("ids must be integers, not %s" % ids.dtype)
        if self.vocab.epoch != self.group.epoch:
            raise invalid("the group changed since this embedding was made (epoch %d, now "
                          "%d): make it again over the new membership" %
                          (self.vocab.epoch, self.group.epoch))
        flat = ids.reshape(-1).to(torch.int64).contiguous()
        out = VocabParallelEmbeddingFunction.apply(flat, self.weight, self.vocab,
                                                   self.grad_root)
        return out.reshape(tuple(ids.shape) + (self.embedding_dim,))

    def extra_repr(self):
        """The settings, for print(module)."""
        r = self.vocab.range
        return "%d, %d, shard [%d, %d) of %d rows" % (
            self.num_embeddings, self.embedding_dim, r.start, r.start + r.length,
            r.padded_length)
