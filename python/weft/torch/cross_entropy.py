"""The vocabulary-parallel output layer and cross-entropy as an autograd Function and a
Module.

Forward: S (this rank's logits X W_iᵀ and statistics) and C1 (their merge over the
group), waited for: the loss. Backward: T (∇W_i, and ∇X for "alg2"), then for "naive"
and "alg1" C2 (the sum of ∇X over the group). (The passes are weft.Microbatch's logits,
merge_start, grad and dx_reduce_start; the layer runs the blocking forward and backward.) Every rank of the group runs forward and
backward (the collectives pair up across ranks). The computation is float32.
"""

import weakref

import torch

from ..errors import InvalidArgument, invalid
from ..vocab import ALGOS, DEFAULT_ALGO, REDUCTIONS, Vocab

_POOL_MAX = 4  # idle microbatch states kept for reuse
_DT = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}  # torch name -> weft DType


def _need_vocab_size(nranks, align, rows=None):
    """The refusal of a missing vocab_size where the weight's shape cannot tell V."""
    if rows is None:
        shard = "each rank's weight is its shard padded to one length (weft.torch.shard_vocab)"
    else:
        lo = max((rows - max(align, 1)) * nranks + 1, 1)
        shard = ("a weight of %d rows on each of %d ranks is the padded shard of any V from "
                 "%d to %d" % (rows, nranks, lo, rows * nranks))
    return invalid("VocabParallelCrossEntropy over %d ranks%s needs vocab_size=V, the number "
                   "of rows of the whole unsharded weight (e.g. vocab_size=W.shape[0]): %s, "
                   "and padding rows counted as vocabulary entries give a wrong loss" %
                   (nranks, " with align=%d" % align if align > 1 else "", shard))


class _Layer:
    """What the Function needs of the module: the vocabulary and microbatch states."""

    def __init__(self, group, algo, reduction, vocab_size, align, label_smoothing=0.0,
                 block_rows=0):
        self.group, self.algo, self.reduction = group, algo, reduction
        self.label_smoothing, self.block_rows = label_smoothing, block_rows
        self.vocab_size, self.align = vocab_size, align
        self.vocab = None
        self.idle = []
        self.lent = weakref.WeakSet()  # states held by forwards awaiting their backward

    def _vocab_size(self, rows):
        """V: as given, or on one rank without align the weight's rows (then kept, as the
        group may grow)."""
        if self.vocab_size is None:
            if self.group.size > 1 or self.align > 1:
                raise _need_vocab_size(self.group.size, self.align, rows)
            self.vocab_size = rows
        return self.vocab_size

    def vocab_for(self, weight):
        """The Vocab for this weight, made anew after a membership change."""
        g = self.group
        rows, hidden = weight.shape
        dtype = str(weight.dtype)[len("torch."):]
        v = self.vocab
        if v is None or v.hidden != hidden or v.epoch != g.epoch or v.dtype.name != _DT[dtype]:
            size = self._vocab_size(rows)
            for mb in self.idle:
                mb.close()
            self.idle = []
            self.vocab = v = Vocab(g, size, hidden, self.align, dtype=dtype)
        if rows != v.range.padded_length:
            raise invalid("weight: %d rows; this rank's shard of a vocabulary of %d over %d "
                          "ranks has %d (padded; see weft.torch.shard_vocab)" %
                          (rows, v.vocab_size, g.size, v.range.padded_length))
        return v

    def refuse(self, hidden):
        """This rank rejected its arguments of a forward: take part in the forward's
        collective as a refusal, so that every rank of the group fails now."""
        if self.group.size == 1:
            return
        v = self.vocab
        if v is None or v.epoch != self.group.epoch:  # the others make theirs now too
            if self.vocab_size is None:
                return  # refused at construction on more than one rank
            self.vocab = v = Vocab(self.group, self.vocab_size, max(int(hidden), 1),
                                   self.align)
        mb = self.take(v, 1)
        mb.refuse()
        self.give_back(mb)

    def take(self, vocab, n):
        for i, mb in enumerate(self.idle):
            if mb.vocab is vocab and mb.max_tokens >= n:
                return self.idle.pop(i)
        return vocab.microbatch(self.algo, self.reduction, max(n, 1),
                                label_smoothing=self.label_smoothing,
                                block_rows=self.block_rows)

    def give_back(self, mb):
        self.lent.discard(mb)
        if mb.vocab is self.vocab and len(self.idle) < _POOL_MAX:
            self.idle.append(mb)
        else:
            mb.close()

    def close(self):
        # The states of forwards still awaiting their backward too: the vocabulary cannot
        # go before them, and their graphs' backward then refuses (the Function's).
        for mb in list(self.lent) + self.idle:
            mb.close()
        self.lent = weakref.WeakSet()
        self.idle = []
        if self.vocab is not None:
            self.vocab.close()
            self.vocab = None


class VocabParallelCrossEntropyFunction(torch.autograd.Function):
    """apply(hidden [n, h] f32, weight [padded, h] f32, labels [n] int64 with ignored
    tokens negative, layer, needs_backward) -> loss (scalar, or [n] for "none")."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, layer, needs_backward):
        """The loss per token: passes S and C1 (weft_vocab_xent_forward)."""
        try:
            vocab = layer.vocab_for(weight)
        except InvalidArgument:  # this rank's weight does not fit: the others are in C1
            layer.refuse(hidden.shape[-1])
            raise
        n = labels.numel()
        mb = layer.take(vocab, n)
        none = layer.reduction == REDUCTIONS["none"]
        loss_tok = torch.empty(n, dtype=torch.float32, device=hidden.device) if none else None
        try:
            loss = mb.forward(hidden, weight, labels, loss_tok)
        except BaseException:
            mb.close()
            raise
        if needs_backward:
            ctx.mb, ctx.layer = mb, layer
            layer.lent.add(mb)
            ctx.save_for_backward(hidden, weight, labels)
        else:
            layer.give_back(mb)
        if none:
            return loss_tok
        return torch.tensor(loss, dtype=torch.float32, device=hidden.device)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        """Gradients of X and this rank's W shard: pass T (and C2 for naive and alg1)."""
        hidden, weight, _labels = ctx.saved_tensors
        mb, ctx.mb = ctx.mb, None
        if mb is None:
            raise RuntimeError("weft: backward through the vocabulary-parallel layer twice")
        if mb.closed:
            raise invalid("VocabParallelCrossEntropy.close() was called after this forward "
                          "and freed the state its backward needs: run the forward again")
        g = grad.detach().to(torch.float32).contiguous().reshape(-1)
        dx = torch.empty_like(hidden)
        dw = torch.empty_like(weight)
        try:
            mb.backward(g, dx, dw)
        except BaseException:
            mb.close()
            raise
        ctx.layer.give_back(mb)
        return (dx if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None, None, None, None)


class VocabParallelCrossEntropy(torch.nn.Module):
    """Softmax cross-entropy of the logits hidden @ Wᵀ where W [V, h] is sharded by
    vocabulary over @p group: forward(hidden [..., h], weight, labels [...]) with
    weight this rank's shard [padded_length, h] (weft.torch.shard_vocab) gives the loss
    that torch.nn.functional.cross_entropy(hidden @ W.T, labels, ...) gives, on every rank.

    algo: "alg2" (1 collective per microbatch; the default, as in C), "alg1" (2) or
    "naive" (3).
    ignore_index: labels equal to it have no loss and no gradient (the mean counts the
    others; with every token ignored the mean is 0, where PyTorch gives nan).
    reduction: "mean", "sum" or "none" (per-token losses, shaped like labels).
    vocab_size: V, the rows of the whole weight. Needed on more than one rank (or with
    align): every rank's weight is its shard padded to one length, which fits several V
    (1001 and 1002 both give shards of 501 rows over 2 ranks), so it is never guessed
    (weft.InvalidArgument says what to pass). On one rank without align it defaults to
    the weight's rows.
    align: shard length multiple, as weft_vocab_shard_range's.
    label_smoothing: in [0, 1], as torch.nn.functional.cross_entropy's: the target puts
    1 - label_smoothing on the label and label_smoothing / V on every entry (no extra
    communication).
    block_rows: > 0 ("alg1", "alg2"): the logits are computed that many vocabulary rows
    at a time and never held whole (memory n x block_rows instead of n x V/P), at the
    price of computing them again in backward. 0: the whole shard at once.
    A bfloat16 or float16 weight keeps its dtype (hidden is cast to it): weft computes
    on float32 copies and rounds the gradients once; other floating inputs compute in
    float32. Gradients come back in the inputs' dtypes."""

    def __init__(self, group, algo=DEFAULT_ALGO, ignore_index=-100, reduction="mean", *,
                 vocab_size=None, align=0, label_smoothing=0.0, block_rows=0):
        super().__init__()
        if vocab_size is None and (group.size > 1 or align > 1):
            raise _need_vocab_size(group.size, align)
        if algo not in ALGOS:
            raise invalid("algo must be one of %s, not %r" % (", ".join(ALGOS), algo))
        if reduction not in REDUCTIONS:
            raise invalid("reduction must be one of %s, not %r" %
                          (", ".join(REDUCTIONS), reduction))
        label_smoothing = float(label_smoothing)
        if not 0.0 <= label_smoothing <= 1.0:
            raise invalid("label_smoothing must be in [0, 1], not %r" % label_smoothing)
        self.group, self.algo, self.reduction = group, algo, reduction
        self.ignore_index = int(ignore_index)
        block_rows = int(block_rows)
        if block_rows < 0 or (block_rows > 0 and algo == "naive"):
            raise invalid("block_rows must be 0, or > 0 with alg1 or alg2, not %r with %s" %
                          (block_rows, algo))
        self.label_smoothing, self.block_rows = label_smoothing, block_rows
        self._layer = _Layer(group, ALGOS[algo], REDUCTIONS[reduction], vocab_size, align,
                             label_smoothing, block_rows)

    @property
    def vocab(self):
        """The weft.Vocab in use (None before the first forward)."""
        return self._layer.vocab

    def close(self):
        """Free the vocabulary and the microbatch states now (the next forward makes
        them anew). Call it on every member before making vocabularies after a
        membership change, so that members and a replacement, which has none, register
        their reduction operators alike. The states of forwards whose backward has not
        run (a loss kept without backward, a graph still alive) go too: a backward
        through such a graph raises weft.InvalidArgument afterwards, on every rank alike
        (no collective is started), and the graph can simply be dropped."""
        self._layer.close()

    def _labels(self, labels):
        if labels.dtype.is_floating_point or labels.dtype.is_complex or \
                labels.dtype == torch.bool:
            raise invalid("labels must be integers, not %s" % labels.dtype)
        lab = labels.reshape(-1).to(torch.int64)
        ignored = lab == self.ignore_index
        if bool(((lab < 0) & ~ignored).any()):
            raise invalid("labels: a negative label other than ignore_index %d" %
                          self.ignore_index)
        if self.ignore_index >= 0:
            lab = torch.where(ignored, torch.full_like(lab, -1), lab)
        return lab.contiguous()

    @staticmethod
    def _cast(t, what, dtype):
        if not t.dtype.is_floating_point:
            raise invalid("%s must be floating point, not %s" % (what, t.dtype))
        return t.to(dtype).contiguous()

    def forward(self, hidden, weight, labels):
        """The cross-entropy of X @ W^T (W this rank's vocabulary shard) against @p labels.
        Arguments this rank rejects (shapes, dtypes, labels) make every rank's forward
        fail at once (weft.InvalidArgument): this rank takes part in the collective as a
        refusal, so the others do not wait for it until their timeout."""
        try:
            x, w, lab = self._checked(hidden, weight, labels)
        except InvalidArgument:
            self._layer.refuse(hidden.shape[-1] if hidden.dim() > 0 else 1)
            raise
        needs = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
        loss = VocabParallelCrossEntropyFunction.apply(x, w, lab, self._layer, needs)
        return loss.reshape(labels.shape) if self.reduction == "none" else loss

    def _checked(self, hidden, weight, labels):
        h = hidden.shape[-1]
        if weight.dim() != 2 or weight.shape[1] != h:
            raise invalid("weight must be [padded_length, %d], not %s" %
                          (h, list(weight.shape)))
        if hidden.shape[:-1] != labels.shape:
            raise invalid("hidden %s and labels %s: one label per row of hidden" %
                          (list(hidden.shape), list(labels.shape)))
        # bf16 and f16 weights keep their dtype (weft accumulates in float32); any other
        # floating dtype computes in float32.
        dt = weight.dtype if weight.dtype in (torch.bfloat16, torch.float16) else torch.float32
        x = self._cast(hidden, "hidden", dt).reshape(-1, h)
        w = self._cast(weight, "weight", dt)
        return x, w, self._labels(labels)

    def extra_repr(self):
        """The settings, for print(module)."""
        return "algo=%s, ignore_index=%d, reduction=%s, label_smoothing=%g, block_rows=%d" % (
            self.algo, self.ignore_index, self.reduction, self.label_smoothing, self.block_rows)
