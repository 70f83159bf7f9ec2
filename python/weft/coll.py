"""Collectives (include/weft/coll.h) as methods of Group.

Each has a blocking form, which returns its output buffer, and a nonblocking twin
(`i` prefix), which returns a weft.Request whose wait() returns it. Buffers are NumPy
arrays or torch tensors, contiguous, of one weft dtype; outputs are written in place
(a torch output's version counter is bumped when the call returns, and for a
nonblocking call again when its request completes, as torch's in-place operations do).
Operators: weft.Op, its name, or torch.distributed.ReduceOp SUM, PRODUCT, MAX, MIN, AVG.
"""

from __future__ import annotations

import enum
from ctypes import byref, c_size_t, c_void_p
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

from ._buffer import as_buffer, bump_version, mark_written, same_kind
from ._lib import lib
from .dtypes import _BY_TORCH, torch_module
from .errors import error_for, invalid, last_error
from .request import Request

if TYPE_CHECKING:
    from ._types import Array, ArrayT, OpLike


class Op(enum.IntEnum):
    """Built-in reduction operators."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


_FNS = {}  # "allreduce" -> lib.weft_allreduce, looked up once
_OP_BY_NAME = {}  # "sum" -> its value, filled as names come


# torch.distributed.ReduceOp members by name: weft's operator, or why there is none.
_TORCH_OPS = {"SUM": Op.SUM, "PRODUCT": Op.PROD, "MAX": Op.MAX, "MIN": Op.MIN, "AVG": Op.AVG}
_TORCH_OPS_REFUSED = {
    "PREMUL_SUM": "weft has no pre-multiplied sum: scale the input, then reduce with SUM",
}


def _torch_op_name(op):
    """The member name ("SUM", ...) of a torch.distributed.ReduceOp, else None. torch 1.x
    gives ReduceOp objects whose .op is the RedOpType enum, torch 2 the enum itself."""
    cls = type(op)
    if cls.__name__ not in ("ReduceOp", "RedOpType") or not cls.__module__.startswith("torch"):
        return None
    name = getattr(getattr(op, "op", op), "name", None)
    return name if isinstance(name, str) else None


def _from_torch_op(op):
    name = _torch_op_name(op)
    if name is None:
        return None
    if name in _TORCH_OPS:
        return int(_TORCH_OPS[name])
    why = _TORCH_OPS_REFUSED.get(name, "weft reduces with SUM, PRODUCT, MAX, MIN and AVG only")
    raise invalid("torch.distributed.ReduceOp.%s is not supported: %s" % (name, why))


def op_value(op: OpLike) -> int:
    """An Op, its name ("sum", "prod", "max", "min", "avg"), its value, or a
    torch.distributed.ReduceOp (SUM, PRODUCT, MAX, MIN, AVG; the others are refused with
    weft.InvalidArgument saying why)."""
    v = _OP_BY_NAME.get(op) if isinstance(op, str) else None
    if v is not None:
        return v
    if isinstance(op, str):
        v = _op_by_name(op)
        _OP_BY_NAME[op] = v
        return v
    v = _from_torch_op(op)
    if v is not None:
        return v
    try:
        return int(Op(op))
    except (ValueError, TypeError):
        raise invalid("unknown reduction operator %r" % (op,)) from None


def _op_by_name(op):
    if isinstance(op, str):
        try:
            return int(Op[op.upper()])
        except KeyError:
            raise invalid("unknown reduction operator '%s' (sum, prod, max, min, avg)" % op) \
                from None
    try:
        return int(Op(op))
    except ValueError:
        raise invalid("unknown reduction operator %r" % (op,)) from None


_tensor_class = [None]  # torch.Tensor once the program imported torch


def _plain_host_pair(send, recv, op):
    """The output tensor when send (and recv, if given) are torch.Tensor objects (not
    subclasses) in contiguous CPU memory, of one dtype already seen, of equal length, and
    op is an operator name already seen; None otherwise (the general path decides)."""
    T = _tensor_class[0]
    if T is None:
        torch = torch_module()
        if torch is None:
            return None
        T = _tensor_class[0] = torch.Tensor
    if type(send) is not T or op.__class__ is not str or op not in _OP_BY_NAME or \
            send.dtype not in _BY_TORCH or not send.is_cpu or not send.is_contiguous():
        return None
    if recv is None:
        return send
    if type(recv) is not T or recv.dtype is not send.dtype or not recv.is_cpu or \
            not recv.is_contiguous() or recv.numel() != send.numel():
        return None
    return recv


def _blocks(buf, parts, what):
    if buf.count % parts:
        raise invalid("%s: %d elements do not split into %d equal blocks" %
                      (what, buf.count, parts))
    return buf.count // parts


def _size_array(values, n, what):
    vals = [int(v) for v in values]
    if len(vals) != n:
        raise invalid("%s: %d entries for %d ranks" % (what, len(vals), n))
    if any(v < 0 for v in vals):
        raise invalid("%s: negative entry" % what)
    return (c_size_t * n)(*vals)


def _displs(counts):
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


class CollectivesMixin:
    """Collective operations of a Group (see the module comment)."""

    def _run(self, name, nonblocking, args, buffers, result, extra=()):
        self._follow_torch_stream(buffers)
        if not nonblocking:
            fn = _FNS.get(name)
            if fn is None:
                fn = _FNS[name] = getattr(lib, "weft_" + name)
            self._call(fn, *args)
            mark_written(buffers)
            return result
        self._ctx._reap_orphans()
        req = c_void_p()
        self._call(getattr(lib, "weft_i" + name), *args, byref(req))
        mark_written(buffers)  # handed over for writing; again when the request completes
        return Request(self._ctx, req.value, keep=(buffers, extra), result=result, group=self)

    # -- allreduce -----------------------------------------------------------------------
    def _allreduce(self, send, recv, op, nb):
        s = as_buffer(send, "allreduce send", writable=recv is None)
        r = s if recv is None else as_buffer(recv, "allreduce recv", writable=True)
        same_kind(s, r, "allreduce")
        if r.count != s.count:
            raise invalid("allreduce: recv has %d elements, send %d" % (r.count, s.count))
        return self._run("allreduce", nb, (s.ptr, r.ptr, s.count, s.dtype, op_value(op)),
                         (s, r), r.obj)

    def allreduce(self, send: ArrayT, recv: Optional[ArrayT] = None,
                  op: OpLike = "sum") -> ArrayT:
        """recv[i] = op over ranks of send[i] on every rank; recv None: in place."""
        # The step of a training loop: plain contiguous CPU tensors of a dtype and an
        # operator name seen before, checked and called in one frame (the binding's cost
        # is paid on every call; tests/python/test_coll_torch.py covers both paths).
        if recv is None and type(send) is _tensor_class[0] and op.__class__ is str:
            dt, v = _BY_TORCH.get(send.dtype), _OP_BY_NAME.get(op)
            if dt is not None and v is not None and send.is_cpu and send.is_contiguous():
                p = send.data_ptr()
                ctx = self._ctx
                with ctx._lock:
                    h = self._handle
                    if h is None or ctx._handle is None:
                        self._h()  # raises
                    st = lib.weft_allreduce(h, p, p, send.numel(), dt, v)
                    if st < 0:
                        raise error_for(st, last_error(ctx._handle))
                bump_version(send)
                return send
        r = _plain_host_pair(send, recv, op)
        if r is None:
            return self._allreduce(send, recv, op, False)
        ctx = self._ctx
        with ctx._lock:
            h = self._handle
            if h is None or ctx._handle is None:
                self._h()  # raises
            st = lib.weft_allreduce(h, send.data_ptr(), r.data_ptr(), send.numel(),
                                    _BY_TORCH[send.dtype], _OP_BY_NAME[op])
            if st < 0:
                raise error_for(st, last_error(ctx._handle))
        bump_version(r)
        return r

    def iallreduce(self, send: Array, recv: Optional[Array] = None,
                   op: OpLike = "sum") -> Request:
        """Nonblocking allreduce: a weft.Request whose wait() returns recv."""
        return self._allreduce(send, recv, op, True)

    # -- reduce_scatter ------------------------------------------------------------------
    def _reduce_scatter(self, send, recv, op, nb):
        n = self.size
        s = as_buffer(send, "reduce_scatter send", writable=recv is None)
        if recv is None:  # in place: block `rank` lands at the start of send
            count = _blocks(s, n, "reduce_scatter")
            r = s
        else:
            r = as_buffer(recv, "reduce_scatter recv", writable=True)
            same_kind(s, r, "reduce_scatter")
            count = r.count
            if s.count != n * count:
                raise invalid("reduce_scatter: send has %d elements, not %d ranks x %d" %
                              (s.count, n, count))
        return self._run("reduce_scatter", nb, (s.ptr, r.ptr, count, s.dtype, op_value(op)),
                         (s, r), r.obj)

    def reduce_scatter(self, send: ArrayT, recv: Optional[ArrayT] = None,
                       op: OpLike = "sum") -> ArrayT:
        """Reduce size*count elements; block r (count elements) goes to rank r's recv.
        recv None: in place, the result in the first count elements of send."""
        return self._reduce_scatter(send, recv, op, False)

    def ireduce_scatter(self, send: Array, recv: Optional[Array] = None,
                        op: OpLike = "sum") -> Request:
        """Nonblocking reduce_scatter: a weft.Request whose wait() returns recv."""
        return self._reduce_scatter(send, recv, op, True)

    # -- allgather -----------------------------------------------------------------------
    def _allgather(self, send, recv, nb):
        n = self.size
        r = as_buffer(recv, "allgather recv", writable=True)
        if send is None:  # in place: this rank's block is already at its place in recv
            count = _blocks(r, n, "allgather")
            sptr, s = r.ptr + self.rank * count * r.itemsize, None
        else:
            s = as_buffer(send, "allgather send")
            same_kind(s, r, "allgather")
            count, sptr = s.count, s.ptr
            if r.count != n * count:
                raise invalid("allgather: recv has %d elements, not %d ranks x %d" %
                              (r.count, n, count))
        return self._run("allgather", nb, (sptr, r.ptr, count, r.dtype), (s, r), r.obj)

    def allgather(self, send: Optional[Array], recv: ArrayT) -> ArrayT:
        """Every rank's send (count elements) into recv (size*count) in rank order.
        send None: in place (this rank's block already in recv)."""
        return self._allgather(send, recv, False)

    def iallgather(self, send: Optional[Array], recv: Array) -> Request:
        """Nonblocking allgather: a weft.Request whose wait() returns recv."""
        return self._allgather(send, recv, True)

    # -- broadcast -----------------------------------------------------------------------
    def _broadcast(self, buf, root, nb):
        b = as_buffer(buf, "broadcast buffer", writable=True)
        return self._run("broadcast", nb, (b.ptr, b.count, b.dtype, root), (b,), b.obj)

    def broadcast(self, buf: ArrayT, root: int = 0) -> ArrayT:
        """Copy root's buf to every rank's buf."""
        return self._broadcast(buf, root, False)

    def ibroadcast(self, buf: Array, root: int = 0) -> Request:
        """Nonblocking broadcast: a weft.Request whose wait() returns buf."""
        return self._broadcast(buf, root, True)

    # -- reduce --------------------------------------------------------------------------
    def _reduce(self, send, recv, op, root, nb):
        on_root = self.rank == root
        s = as_buffer(send, "reduce send", writable=on_root and recv is None)
        if recv is None:
            r = s if on_root else None
        else:
            r = as_buffer(recv, "reduce recv", writable=True)
            r.written = r.written and on_root  # the other ranks' recv is not used
            same_kind(s, r, "reduce")
            if on_root and r.count != s.count:
                raise invalid("reduce: recv has %d elements, send %d" % (r.count, s.count))
        rptr = r.ptr if r is not None else None
        return self._run("reduce", nb, (s.ptr, rptr, s.count, s.dtype, op_value(op), root),
                         (s, r), r.obj if on_root else None)

    def reduce(self, send: ArrayT, recv: Optional[ArrayT] = None, op: OpLike = "sum",
               root: int = 0) -> Optional[ArrayT]:
        """Reduce into recv on root only (in place on root when recv is None; other
        ranks need no recv). Returns recv on root, else None."""
        return self._reduce(send, recv, op, root, False)

    def ireduce(self, send: Array, recv: Optional[Array] = None, op: OpLike = "sum",
                root: int = 0) -> Request:
        """Nonblocking reduce: a weft.Request whose wait() returns recv on root, else None."""
        return self._reduce(send, recv, op, root, True)

    # -- alltoall ------------------------------------------------------------------------
    def _alltoall(self, send, recv, nb):
        s = as_buffer(send, "alltoall send")
        r = as_buffer(recv, "alltoall recv", writable=True)
        same_kind(s, r, "alltoall")
        if s.count != r.count:
            raise invalid("alltoall: recv has %d elements, send %d" % (r.count, s.count))
        count = _blocks(s, self.size, "alltoall")
        if s.ptr == r.ptr and s.count:
            raise invalid("alltoall: not in place (send and recv are the same memory)")
        return self._run("alltoall", nb, (s.ptr, r.ptr, count, s.dtype), (s, r), r.obj)

    def alltoall(self, send: Array, recv: ArrayT) -> ArrayT:
        """Block j of send goes to rank j; block i of recv comes from rank i."""
        return self._alltoall(send, recv, False)

    def ialltoall(self, send: Array, recv: Array) -> Request:
        """Nonblocking alltoall: a weft.Request whose wait() returns recv."""
        return self._alltoall(send, recv, True)

    # -- alltoallv -----------------------------------------------------------------------
    def _alltoallv(self, send, sendcounts, recv, recvcounts, sdispls, rdispls, nb):
        n = self.size
        s = as_buffer(send, "alltoallv send")
        r = as_buffer(recv, "alltoallv recv", writable=True)
        same_kind(s, r, "alltoallv")
        sc = _size_array(sendcounts, n, "alltoallv sendcounts")
        rc = _size_array(recvcounts, n, "alltoallv recvcounts")
        sd = _size_array(_displs(sc) if sdispls is None else sdispls, n, "alltoallv sdispls")
        rd = _size_array(_displs(rc) if rdispls is None else rdispls, n, "alltoallv rdispls")
        for what, counts, displs, buf in (("send", sc, sd, s), ("recv", rc, rd, r)):
            for j in range(n):
                if counts[j] and displs[j] + counts[j] > buf.count:
                    raise invalid("alltoallv: %s block %d ends past the buffer (%d elements)"
                                  % (what, j, buf.count))
        return self._run("alltoallv", nb, (s.ptr, sc, sd, r.ptr, rc, rd, s.dtype), (s, r),
                         r.obj, extra=(sc, rc, sd, rd))

    def alltoallv(self, send: Array, sendcounts: Sequence[int], recv: ArrayT,
                  recvcounts: Sequence[int], sdispls: Optional[Sequence[int]] = None,
                  rdispls: Optional[Sequence[int]] = None) -> ArrayT:
        """sendcounts[j] elements at sdispls[j] go to rank j; recvcounts[i] from rank i
        land at rdispls[i] (displacements default to the counts packed in rank order)."""
        return self._alltoallv(send, sendcounts, recv, recvcounts, sdispls, rdispls, False)

    def ialltoallv(self, send: Array, sendcounts: Sequence[int], recv: Array,
                   recvcounts: Sequence[int], sdispls: Optional[Sequence[int]] = None,
                   rdispls: Optional[Sequence[int]] = None) -> Request:
        """Nonblocking alltoallv: a weft.Request whose wait() returns recv."""
        return self._alltoallv(send, sendcounts, recv, recvcounts, sdispls, rdispls, True)

    # -- torch.distributed's names and order: output first ----------------------------------
    # The methods above take C's order (send, then recv); these take torch.distributed's,
    # output first, under its names, so code written for torch reads the same. With
    # async_op=True they return the weft.Request (its wait() returns the output;
    # torch_future() gives a torch.futures.Future).
    def all_reduce(self, tensor: ArrayT, op: OpLike = "sum",
                   async_op: bool = False) -> Union[ArrayT, Request]:
        """In place: tensor = op over ranks of tensor (torch's all_reduce)."""
        return self._allreduce(tensor, None, op, async_op)

    def all_gather_into_tensor(self, output: ArrayT, input: Array,
                               async_op: bool = False) -> Union[ArrayT, Request]:
        """output (size x input's elements) = every rank's input in rank order."""
        return self._allgather(input, output, async_op)

    def reduce_scatter_tensor(self, output: ArrayT, input: Array, op: OpLike = "sum",
                              async_op: bool = False) -> Union[ArrayT, Request]:
        """output = block `rank` of op over ranks of input (size x output's elements)."""
        return self._reduce_scatter(input, output, op, async_op)

    def all_to_all_single(self, output: ArrayT, input: Array,
                          async_op: bool = False) -> Union[ArrayT, Request]:
        """Block j of input goes to rank j; block i of output comes from rank i."""
        return self._alltoall(input, output, async_op)

    def all_gather(self, tensor_list: List[ArrayT], tensor: Array) -> List[ArrayT]:
        """tensor_list[i] = rank i's tensor (torch's list all_gather: one allgather into
        a contiguous buffer, then a copy into each entry)."""
        n = self.size
        if len(tensor_list) != n:
            raise invalid("all_gather: %d output tensors for %d ranks" % (len(tensor_list), n))
        torch = torch_module()
        if torch is not None and isinstance(tensor, torch.Tensor):
            flat = torch.empty((n,) + tuple(tensor.shape), dtype=tensor.dtype,
                               device=tensor.device)
            self._allgather(tensor.contiguous(), flat, False)
            for out, part in zip(tensor_list, flat):
                out.copy_(part)
            return tensor_list
        import numpy as np
        arr = np.ascontiguousarray(tensor)
        flat = np.empty((n,) + arr.shape, arr.dtype)
        self._allgather(arr, flat, False)
        for out, part in zip(tensor_list, flat):
            out[...] = part
        return tensor_list

    # -- barrier -------------------------------------------------------------------------
    def barrier(self) -> None:
        """Return once every member entered the barrier."""
        self._run("barrier", False, (), (), None)

    def ibarrier(self) -> Request:
        """Nonblocking barrier: a weft.Request that completes once every member entered."""
        return self._run("barrier", True, (), (), None)
