"""Vocabulary parallelism (include/weft/vocab.h) on NumPy arrays or tensors: the output
layer's passes (the paper's S, C1, T, C2: logits, merge_start, grad, dx_reduce_start)
and the embedding. weft.torch builds autograd layers on it. The passes that communicate
return a weft.Request, finished like every other one (test, wait, cancel).

Buffers are float32 (labels and ids int64), contiguous; X, W and the outputs all in host
or all in CUDA memory (torch outputs have their version counters bumped once written).
The vocabulary of V entries is cut into P shards of padded_length rows; rank i holds
rows [start, start + length) of W in a buffer of padded_length rows.
"""

from __future__ import annotations

from collections import namedtuple
from ctypes import byref, c_float, c_void_p
from typing import TYPE_CHECKING, Optional, Tuple, Union

import numpy as np

from . import _structs as S
from ._buffer import as_buffer, mark_written
from ._lib import lib
from .dtypes import DType, dtype_of
from .errors import InvalidArgument, check, invalid
from .request import Request

if TYPE_CHECKING:
    from ._types import Array, ArrayT, DTypeLike
    from .group import Group

VocabRange = namedtuple("VocabRange", "start length padded_length")
VocabMemory = namedtuple("VocabMemory", "s_to_c1 c1_to_t peak")
MicrobatchStats = namedtuple("MicrobatchStats", "compute_ns comm_ns collectives comm_bytes")
ALGOS = {"alg2": 0, "alg1": 1, "naive": 2}
# The default algorithm: the one a zero-initialised weft_vocab_mb_params_t selects in C.
DEFAULT_ALGO = "alg2"
REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def _choice(value, table, what):
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    if isinstance(value, int) and value in table.values():
        return value
    raise invalid("%s must be one of %s, not %r" % (what, ", ".join(table), value))


def shard_range(vocab_size: int, nranks: int, rank: int, align: int = 0) -> VocabRange:
    """The shard of @p rank when @p vocab_size entries are cut over @p nranks ranks."""
    r = S.VocabRange()
    check(lib.weft_vocab_shard_range(vocab_size, nranks, align, rank, byref(r)))
    return VocabRange(r.start, r.length, r.padded_length)


def _f32(x, what, count, writable=False, dtype=DType.F32):
    b = as_buffer(x, what, writable=writable)
    if b.dtype != dtype:
        raise invalid("%s: %s needed, not %s" % (what, _DT_NAMES[dtype], b.dtype.name.lower()))
    if count is not None and b.count != count:
        raise invalid("%s: %d elements, %d expected" % (what, b.count, count))
    return b


_DT_NAMES = {DType.F32: "float32", DType.BF16: "bfloat16", DType.F16: "float16"}


def _i64(x, what, count=None):
    b = as_buffer(x, what)
    if b.dtype != DType.I64:
        raise invalid("%s: int64 needed, not %s" % (what, b.dtype.name.lower()))
    if count is not None and b.count != count:
        raise invalid("%s: %d elements, %d expected" % (what, b.count, count))
    return b


def _grad(grad, reduction, n):
    if isinstance(grad, (int, float)):
        grad = np.full(1, grad, np.float32)
    return _f32(grad, "upstream gradient", n if reduction == REDUCTIONS["none"] else 1)


class Vocab:
    """A sharded vocabulary on a group (weft_vocab_t). Creating one registers reduction
    operators on the context: every rank creates its Vocab objects in the same order."""

    def __init__(self, group: Group, vocab_size: int, hidden: int, align: int = 0,
                 dtype: DTypeLike = "float32") -> None:
        dt = dtype_of(dtype)
        if dt not in _DT_NAMES:
            raise invalid("dtype: the vocabulary layers take float32, bfloat16 or float16, "
                          "not %s" % dt.name.lower())
        p = S.sized(S.VocabParams)
        p.vocab_size, p.hidden, p.align, p.dtype = vocab_size, hidden, align, int(dt)
        self.dtype = dt
        h = c_void_p()
        group._call(lib.weft_vocab_create, byref(p), byref(h))
        self._handle = h.value
        self.group, self.vocab_size, self.hidden = group, vocab_size, hidden
        self._owner_group = group
        self.epoch = group.epoch
        r = S.VocabRange()
        self._call(lib.weft_vocab_local_range, byref(r))
        self.range = VocabRange(r.start, r.length, r.padded_length)
        group._ctx._track(self)

    def _h(self):
        if self._handle is None:
            raise invalid("the vocabulary was freed")
        return self._handle

    def _call(self, fn, *args):
        return self.group._ctx._call(fn, self._h(), *args)

    def close(self) -> None:
        """weft_vocab_free() (microbatches made from it must be closed first)."""
        if self._handle is not None and not self.group._ctx.closed:
            self._call(lib.weft_vocab_free)
        self._handle = None

    def _release(self, finalizing):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def table_shape(self) -> Tuple[int, int]:
        """(padded_length, hidden): the shape of this rank's W_i / E_i buffer."""
        return (self.range.padded_length, self.hidden)

    def microbatch(self, algo: Union[str, int] = DEFAULT_ALGO,
                   reduction: Union[str, int] = "mean", max_tokens: int = 1,
                   accumulate_dw: bool = False, label_smoothing: float = 0.0,
                   block_rows: int = 0) -> Microbatch:
        """The state of one microbatch of the output layer (weft_vocab_mb_create); algo
        "alg2" (the default, as in C), "alg1" or "naive"; label_smoothing in [0, 1] as
        torch.nn.functional.cross_entropy's; block_rows > 0 (alg1, alg2): compute the
        logits that many vocabulary rows at a time, never holding them whole."""
        return Microbatch(self, algo, reduction, max_tokens, accumulate_dw, label_smoothing,
                          block_rows)

    def memory(self, algo: Union[str, int], n: int) -> VocabMemory:
        """Bytes an algorithm keeps alive per microbatch of @p n tokens."""
        m = S.sized(S.VocabMem)
        self._call(lib.weft_vocab_xent_memory, _choice(algo, ALGOS, "algo"), n, byref(m))
        return VocabMemory(m.s_to_c1, m.c1_to_t, m.peak)

    def refuse_embed_forward(self) -> None:
        """Take part in an embedding forward as a refusal (its sum over the group): every
        other rank's forward then fails with weft.InvalidArgument at once. For a caller
        that rejects its own arguments; it raises its own error afterwards."""
        try:
            self._call(lib.weft_vocab_embed_forward, None, None, 1, None)
        except InvalidArgument:
            pass  # the refusal's own status

    # -- embedding -----------------------------------------------------------------------
    def _embed_args(self, table, ids, out):
        i = _i64(ids, "ids")
        t = _f32(table, "embedding table", self.range.padded_length * self.hidden,
                 dtype=self.dtype)
        o = _f32(out, "embedding out", i.count * self.hidden, writable=True, dtype=self.dtype)
        self.group._follow_torch_stream((t, o))
        return t, i, o

    def embed_forward(self, table: Array, ids: Array, out: ArrayT) -> ArrayT:
        """out[j] = E[ids[j]] on every rank (one collective). Returns out."""
        t, i, o = self._embed_args(table, ids, out)
        self._call(lib.weft_vocab_embed_forward, t.ptr, i.ptr, i.count, o.ptr)
        mark_written(o)
        return out

    def iembed_forward(self, table: Array, ids: Array, out: Array) -> Request:
        """Nonblocking embed_forward (pass IF): a Request whose wait() returns out."""
        t, i, o = self._embed_args(table, ids, out)
        req = c_void_p()
        self._call(lib.weft_vocab_iembed_forward, t.ptr, i.ptr, i.count, o.ptr, byref(req))
        mark_written(o)
        return Request(self.group._ctx, req.value, keep=(t, i, o), result=out,
                       group=self.group)

    def embed_grad_bcast_start(self, grad_out: Array, n: int, root: int) -> Request:
        """Start the broadcast of ∇out [n, h] from @p root (pass IB); returns a Request."""
        g = _f32(grad_out, "embedding grad_out", n * self.hidden, writable=True, dtype=self.dtype)
        self.group._follow_torch_stream((g,))
        req = c_void_p()
        self._call(lib.weft_vocab_embed_grad_bcast_start, g.ptr, n, root, byref(req))
        mark_written(g)
        return Request(self.group._ctx, req.value, keep=(g,), result=grad_out,
                       group=self.group)

    def embed_grad_scatter(self, grad_out: Array, ids: Array, grad_table: ArrayT) -> ArrayT:
        """∇E_i[ids[j] - start] += ∇out[j] for the ids of this shard (no communication)."""
        i = _i64(ids, "ids")
        g = _f32(grad_out, "embedding grad_out", i.count * self.hidden, dtype=self.dtype)
        t = _f32(grad_table, "embedding grad_table", self.range.padded_length * self.hidden,
                 writable=True, dtype=self.dtype)
        self._call(lib.weft_vocab_embed_grad_scatter, g.ptr, i.ptr, i.count, t.ptr)
        mark_written(t)
        return grad_table

    def embed_backward(self, grad_out: Array, ids: Array, grad_table: ArrayT,
                       root: Optional[int] = None) -> ArrayT:
        """Broadcast ∇out from @p root (None: every rank holds it), then scatter-add."""
        i = _i64(ids, "ids")
        g = _f32(grad_out, "embedding grad_out", i.count * self.hidden,
                 writable=root is not None, dtype=self.dtype)
        t = _f32(grad_table, "embedding grad_table", self.range.padded_length * self.hidden,
                 writable=True, dtype=self.dtype)
        self.group._follow_torch_stream((g, t))
        self._call(lib.weft_vocab_embed_backward, g.ptr, i.ptr, i.count,
                   -1 if root is None else root, t.ptr)
        mark_written(g, t)
        return grad_table


class Microbatch:
    """One microbatch of the vocabulary-parallel output layer between its passes. X, W
    and the labels given to logits() stay referenced until grad() ran; ∇X until the
    request of dx_reduce_start() completed (the request keeps it)."""

    def __init__(self, vocab: Vocab, algo: Union[str, int], reduction: Union[str, int],
                 max_tokens: int, accumulate_dw: bool, label_smoothing: float = 0.0,
                 block_rows: int = 0) -> None:
        p = S.sized(S.VocabMbParams)
        p.algo = _choice(algo, ALGOS, "algo")
        p.reduction = _choice(reduction, REDUCTIONS, "reduction")
        p.max_tokens, p.accumulate_dw = max_tokens, 1 if accumulate_dw else 0
        p.label_smoothing = float(label_smoothing)
        if int(block_rows) < 0:
            raise invalid("block_rows must be >= 0, not %r" % block_rows)
        p.block_rows = int(block_rows)
        h = c_void_p()
        vocab._call(lib.weft_vocab_mb_create, byref(p), byref(h))
        self._handle, self.vocab = h.value, vocab
        self._owner_group = vocab.group
        self.algo, self.reduction, self.max_tokens = p.algo, p.reduction, max_tokens
        self.label_smoothing, self.block_rows = p.label_smoothing, p.block_rows
        self.n = 0
        self._keep, self._dx = (), None
        vocab.group._ctx._track(self)

    def _call(self, fn, *args):
        if self._handle is None:
            raise invalid("the microbatch was closed")
        return self.vocab.group._ctx._call(fn, self._handle, *args)

    @property
    def closed(self) -> bool:
        """True once closed (by close(), or by the layer that made it)."""
        return self._handle is None

    def close(self) -> None:
        """weft_vocab_mb_free() (cancels a pass in flight: its request then fails)."""
        if self._handle is not None and not self.vocab.group._ctx.closed:
            self._call(lib.weft_vocab_mb_free)
        self._handle, self._keep, self._dx = None, (), None

    def _release(self, finalizing):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- passes --------------------------------------------------------------------------
    def logits(self, x: Array, w: Array, labels: Array) -> None:
        """Local logits and statistics of X [n, h] against W_i [padded, h] (pass S; no
        communication)."""
        lab = _i64(labels, "labels")
        n, h = lab.count, self.vocab.hidden
        dt = self.vocab.dtype
        xb = _f32(x, "X", n * h, dtype=dt)
        wb = _f32(w, "W", self.vocab.range.padded_length * h, dtype=dt)
        self.vocab.group._follow_torch_stream((xb, wb))
        self._keep = (xb, wb, lab)
        self._call(lib.weft_vocab_xent_logits, xb.ptr, wb.ptr, lab.ptr, n)
        self.n = n

    def _pass_request(self, fn, keep=(), result=None):
        req = c_void_p()
        self._call(fn, byref(req))
        if not req.value:
            mark_written(keep)  # completed inline
        return Request(self.vocab.group._ctx, req.value, keep=keep, result=result,
                       group=self.vocab.group)

    def merge_start(self) -> Request:
        """Start merging the statistics over the group (pass C1): a Request; loss() once
        it completed."""
        return self._pass_request(lib.weft_vocab_xent_merge_start)

    def loss(self, loss_tok: Optional[Array] = None) -> float:
        """The reduced loss (a float) once the merge completed; per-token losses into
        @p loss_tok ([n] float32) if given."""
        lt = _f32(loss_tok, "loss_tok", self.n, writable=True) if loss_tok is not None else None
        out = c_float()
        self._call(lib.weft_vocab_xent_loss, lt.ptr if lt else None, byref(out))
        mark_written(lt)
        return out.value

    def grad(self, grad: Union[float, Array], dx: Array, dw: Array) -> None:
        """∇W_i into @p dw and ∇X (pass T; "naive"/"alg1": this rank's part until the
        request of dx_reduce_start() completed). No communication."""
        g, dxb, dwb = self._t_args(grad, dx, dw)
        self._call(lib.weft_vocab_xent_grad, g.ptr, dxb.ptr, dwb.ptr)
        mark_written(dxb, dwb)
        self._keep = (dxb,) if self.algo != ALGOS["alg2"] else ()
        self._dx = dx

    def dx_reduce_start(self) -> Request:
        """Start the sum of ∇X over the group (pass C2; "naive", "alg1"; "alg2" has
        nothing to send): a Request whose wait() returns ∇X."""
        keep, dx, self._keep, self._dx = self._keep, self._dx, (), None
        return self._pass_request(lib.weft_vocab_xent_dx_reduce_start, keep, dx)

    def _t_args(self, grad, dx, dw):
        h = self.vocab.hidden
        g = _grad(grad, self.reduction, self.n)
        dt = self.vocab.dtype
        dxb = _f32(dx, "dX", self.n * h, writable=True, dtype=dt)
        dwb = _f32(dw, "dW", self.vocab.range.padded_length * h, writable=True, dtype=dt)
        self.vocab.group._follow_torch_stream((dxb, dwb))
        return g, dxb, dwb

    # -- blocking ------------------------------------------------------------------------
    def forward(self, x: Array, w: Array, labels: Array,
                loss_tok: Optional[Array] = None) -> float:
        """logits (S), the merge (C1) and its wait: returns the reduced loss (per-token
        into loss_tok)."""
        lab = _i64(labels, "labels")
        n, h = lab.count, self.vocab.hidden
        dt = self.vocab.dtype
        xb = _f32(x, "X", n * h, dtype=dt)
        wb = _f32(w, "W", self.vocab.range.padded_length * h, dtype=dt)
        lt = _f32(loss_tok, "loss_tok", n, writable=True) if loss_tok is not None else None
        self.vocab.group._follow_torch_stream((xb, wb))
        self._keep = (xb, wb, lab)
        out = c_float()
        self._call(lib.weft_vocab_xent_forward, xb.ptr, wb.ptr, lab.ptr, n,
                   lt.ptr if lt else None, byref(out))
        mark_written(lt)
        self.n = n
        return out.value

    def backward(self, grad: Union[float, Array], dx: Array, dw: Array) -> None:
        """grad (T), the sum of ∇X (C2) and its wait: ∇X complete in @p dx, ∇W_i in @p dw."""
        g, dxb, dwb = self._t_args(grad, dx, dw)
        self._call(lib.weft_vocab_xent_backward, g.ptr, dxb.ptr, dwb.ptr)
        mark_written(dxb, dwb)
        self._keep = ()

    def refuse(self) -> None:
        """Take part in pass C1 as a refusal (weft_vocab_xent_merge_start without a
        request): every other rank's C1 then fails with weft.InvalidArgument at once,
        rather than waiting for this rank until its timeout. For a caller that rejects
        its own arguments of a forward before S; it raises its own error afterwards."""
        try:
            self._call(lib.weft_vocab_xent_merge_start, None)
        except InvalidArgument:
            pass  # the refusal's own status

    def memory(self, n: int) -> VocabMemory:
        """VocabMemory(s_to_c1, c1_to_t, peak): bytes one microbatch of @p n tokens of this
        state keeps alive between S and T (weft_vocab_mb_memory: its algorithm and
        block_rows)."""
        m = S.sized(S.VocabMem)
        self._call(lib.weft_vocab_mb_memory, n, byref(m))
        return VocabMemory(m.s_to_c1, m.c1_to_t, m.peak)

    def stats(self) -> MicrobatchStats:
        """MicrobatchStats(compute_ns, comm_ns, collectives, comm_bytes) of the current
        or last microbatch."""
        s = S.sized(S.VocabMbStats)
        self._call(lib.weft_vocab_mb_stats, byref(s))
        return MicrobatchStats(s.compute_ns, s.comm_ns, s.collectives, s.comm_bytes)
