"""ProcessGroupWeft: a torch.distributed process group on a weft group (see
weft.torch.distributed for what it does and how it is registered)."""

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from ..coll import op_value
from ..errors import invalid
from ._completer import _completer

BACKEND = "weft"

# torch.distributed.ReduceOp member name -> weft operator name.
_OPS = {"SUM": "sum", "PRODUCT": "prod", "MIN": "min", "MAX": "max", "AVG": "avg"}


def _op_name(op):
    name = getattr(getattr(op, "op", op), "name", None)
    if name not in _OPS:
        op_value(op)  # raises, saying which operators weft has
        raise invalid("torch.distributed.ReduceOp %r is not supported by weft" % (op,))
    return name


def _done(result):
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _contiguous(t, what):
    if not isinstance(t, torch.Tensor):
        raise invalid("%s: a torch.Tensor, not %s" % (what, type(t).__name__))
    if t.is_cuda:
        raise invalid("%s: the weft process group takes CPU tensors (a CUDA tensor was "
                      "given)" % what)
    return t


class ProcessGroupWeft(dist.ProcessGroup):
    """A torch.distributed process group on a weft group (see the module comment)."""

    def __init__(self, group, timeout=None):
        super().__init__(group.rank, group.size)
        self._group = group
        self._timeout = timeout

    @property
    def weft_group(self):
        """The weft.Group the process group runs on."""
        return self._group

    def getBackendName(self):
        """"weft"."""
        return BACKEND

    # torch 2.x asks a Python process group for these (its trampoline); 1.13 keeps the
    # values given to the constructor.
    def getRank(self):
        """This process's rank in the weft group."""
        return self._group.rank

    def getSize(self):
        """Number of ranks of the weft group."""
        return self._group.size

    # -- collectives -----------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        """In place on each tensor; SUM, PRODUCT, MIN, MAX or AVG (weft's WEFT_AVG)."""
        tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        if isinstance(opts, dist.AllreduceOptions) or opts is None:
            op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        else:
            op = opts  # the ReduceOp overload
        name = _op_name(op)
        for t in tensors:
            _contiguous(t, "allreduce")
            self._group.allreduce(t, op=_OPS[name])
        return _done(list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        """allreduce of each tensor in turn."""
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        """Each tensor from rank opts.rootRank to every rank."""
        if isinstance(tensors, torch.Tensor):  # the (tensor, root) overload
            tensors, root = [tensors], opts
        else:
            root = opts.rootRank if opts is not None else 0
        for t in tensors:
            self._group.broadcast(_contiguous(t, "broadcast"), root=root)
        return _done(list(tensors))

    def reduce(self, tensors, opts=None):
        """Each tensor reduced into rank opts.rootRank's (in place there)."""
        tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        name = _op_name(opts.reduceOp)
        for t in tensors:
            _contiguous(t, "reduce")
            self._group.reduce(t, op=_OPS[name], root=opts.rootRank)
        return _done(list(tensors))

    def _allgather_base(self, output, input, opts=None):
        _contiguous(output, "_allgather_base output")
        self._group.allgather(_contiguous(input, "_allgather_base input").contiguous(), output)
        return _done([output])

    def allgather(self, output_tensors, input_tensors, opts=None):
        """output_tensors[k][r] = rank r's input_tensors[k] (one allgather into a
        contiguous buffer, then copies)."""
        if isinstance(input_tensors, torch.Tensor):
            output_tensors, input_tensors = [output_tensors], [input_tensors]
        n = self._group.size
        for outs, inp in zip(output_tensors, input_tensors):
            if len(outs) != n:
                raise invalid("allgather: %d output tensors for %d ranks" % (len(outs), n))
            flat = torch.empty((n,) + tuple(inp.shape), dtype=inp.dtype)
            self._group.allgather(_contiguous(inp, "allgather input").contiguous(), flat)
            for out, part in zip(outs, flat):
                out.copy_(part)
        return _done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        name = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        self._group.reduce_scatter(_contiguous(input, "_reduce_scatter_base input").contiguous(),
                                   _contiguous(output, "_reduce_scatter_base output"),
                                   op=_OPS[name])
        return _done([output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        """output_tensors[k] = this rank's block of the reduction of input_tensors[k]
        (stacked into one buffer first)."""
        name = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        for out, ins in zip(output_tensors, input_tensors):
            if len(ins) != self._group.size:
                raise invalid("reduce_scatter: %d input tensors for %d ranks" %
                              (len(ins), self._group.size))
            flat = torch.stack([t.reshape(out.shape) for t in ins]).contiguous()
            self._group.reduce_scatter(flat, _contiguous(out, "reduce_scatter output"),
                                       op=_OPS[name])
        return _done(list(output_tensors))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """Rows of input to each rank, rows of output from each (equal blocks, or the
        split sizes given)."""
        n = self._group.size
        _contiguous(output, "alltoall_base output")
        _contiguous(input, "alltoall_base input")
        if not output_split_sizes and not input_split_sizes:
            self._group.alltoall(input.contiguous(), output)
            return _done([output])
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] else 0
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 0
        osz = output_split_sizes or [output.shape[0] // n] * n
        isz = input_split_sizes or [input.shape[0] // n] * n
        self._group.alltoallv(input.contiguous(), [s * row_in for s in isz], output,
                              [s * row_out for s in osz])
        return _done([output])

    def barrier(self, opts=None):
        """Returns once every member entered."""
        self._group.barrier()
        return _done([])

    # -- point to point: nonblocking (batch_isend_irecv posts sends and receives before
    # waiting for any of them) ------------------------------------------------------
    def _p2p(self, tensors, start, what):
        if len(tensors) != 1:
            raise invalid("%s: one tensor at a time, not %d" % (what, len(tensors)))
        fut = torch.futures.Future()
        _completer.add(start(tensors[0]), fut, list(tensors))
        return _create_work_from_future(fut)

    def send(self, tensors, dstRank, tag=0):
        """Nonblocking send of one tensor to @p dstRank with @p tag (weft's isend)."""
        return self._p2p(tensors, lambda t: self._group.isend(
            _contiguous(t, "send").contiguous(), dstRank, tag=tag), "send")

    def recv(self, tensors, srcRank, tag=0):
        """Nonblocking receive of one tensor from @p srcRank with @p tag (weft's irecv)."""
        return self._p2p(tensors, lambda t: self._group.irecv(
            _contiguous(t, "recv"), srcRank, tag=tag), "recv")
