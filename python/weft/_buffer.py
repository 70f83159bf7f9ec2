"""Memory handed to weft without a copy: NumPy arrays, torch tensors (CPU or CUDA, through
data_ptr()), and for point-to-point messages any contiguous bytes-like object.

The binding checks what weft cannot see through a pointer: contiguity, the dtype, that
an output is writable. Sizes are checked by each call.

A torch tensor that weft writes into (an output, or an in-place buffer) has its version
counter bumped once the write is done (mark_written), as torch's own in-place operations
do: a tensor that autograd saved for backward and weft changed since then makes backward
raise "one of the variables needed for gradient computation has been modified by an
inplace operation" instead of computing a wrong gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from .dtypes import dtype_of, is_tensor, torch_dtype_of, torch_module
from .errors import invalid

if TYPE_CHECKING:
    import torch

    from ._types import BytesLike
    from .dtypes import DType


class Buffer:
    """A contiguous region: pointer, bytes, element count and dtype, and the object that
    owns the memory (kept referenced while weft may use the pointer)."""

    __slots__ = ("obj", "ptr", "nbytes", "count", "dtype", "cuda_device", "written")

    def __init__(self, obj: object, ptr: int, nbytes: int, count: int,
                 dtype: Optional[DType], cuda_device: Optional[torch.device] = None) -> None:
        self.obj = obj
        self.ptr = ptr
        self.nbytes = nbytes
        self.count = count
        self.dtype = dtype
        self.cuda_device = cuda_device  # a torch.device for CUDA tensors, else None
        self.written = False  # a torch tensor weft writes into (see mark_written)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.nbytes // self.count if self.count else self.dtype.itemsize


def _from_tensor(t, what, typed):
    cuda = None
    if t.is_cuda:
        cuda = t.device
    elif not t.is_cpu:
        raise invalid("%s: tensors on %s are not supported (cpu or cuda)" % (what, t.device))
    if not t.is_contiguous():
        raise invalid("%s: tensor is not contiguous (call .contiguous())" % what)
    dtype = torch_dtype_of(t) if typed else None
    return Buffer(t, t.data_ptr(), t.numel() * t.element_size(), t.numel(), dtype, cuda)


def _from_array(a, what, writable, typed):
    if not a.flags.c_contiguous:
        raise invalid("%s: array is not C-contiguous (use np.ascontiguousarray)" % what)
    if writable and not a.flags.writeable:
        raise invalid("%s: array is read-only" % what)
    dtype = dtype_of(a) if typed else None
    return Buffer(a, a.ctypes.data, a.nbytes, a.size, dtype)


def as_buffer(obj: BytesLike, what: str, writable: bool = False, typed: bool = True) -> Buffer:
    """A Buffer over @p obj. typed: the dtype must be a weft dtype (collectives); else
    any element type (point-to-point bytes). Raises weft.InvalidArgument."""
    if obj is None:
        raise invalid("%s: a buffer is needed, not None" % what)
    if is_tensor(obj):
        b = _from_tensor(obj, what, typed)
        b.written = writable
        return b
    if isinstance(obj, np.ndarray):
        return _from_array(obj, what, writable, typed)
    if not typed:
        try:
            view = memoryview(obj)
        except TypeError:
            view = None
        if view is not None:
            if not view.c_contiguous:
                raise invalid("%s: buffer is not contiguous" % what)
            arr = np.frombuffer(view.cast("B"), dtype=np.uint8) if view.nbytes else \
                np.empty(0, np.uint8)
            if writable and view.readonly:
                raise invalid("%s: buffer is read-only" % what)
            b = _from_array(arr, what, False, False)
            b.obj = (obj, arr)
            return b
    raise invalid("%s: expected a numpy.ndarray or torch.Tensor, got %s" %
                  (what, type(obj).__name__))


def same_kind(a: Buffer, b: Buffer, what: str) -> None:
    """a and b have the same dtype (both typed buffers)."""
    if a.dtype != b.dtype:
        raise invalid("%s: dtypes differ (%s and %s)" % (what, a.dtype.name, b.dtype.name))


def bump_version(t: torch.Tensor) -> None:
    """Bump torch tensor @p t's version counter without touching its data: set_() onto
    its own storage, size and strides changes nothing but counts as an in-place
    operation (a fraction of a microsecond). Inference tensors have no counter."""
    try:
        if t.requires_grad:  # a leaf that requires grad refuses in-place operations else
            with torch_module().no_grad():
                t.set_(t)
        else:
            t.set_(t)
    except RuntimeError:
        if not t.is_inference():  # refused outside inference mode: nothing to bump
            raise


def mark_written(*buffers: object) -> None:
    """After weft wrote into them: bump the version counter of each torch tensor among
    @p buffers (Buffer objects, None, or tuples and lists of them) given as an output."""
    last = None
    for b in buffers:
        if b.__class__ is Buffer:
            if b.written and b is not last:  # (send, recv) of an in-place call: once
                bump_version(b.obj)
            last = b
        elif isinstance(b, (tuple, list)):
            mark_written(*b)
