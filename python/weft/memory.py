"""Host memory for large state on huge pages (weft_mem_alloc): a rank killed while it
holds its state is seen dead by its peers sooner, because the kernel frees 2 MiB pages far
faster than 4 KiB ones before it closes the process's sockets."""

from __future__ import annotations

import ctypes
import weakref
from ctypes import byref, c_void_p
from typing import TYPE_CHECKING, Sequence, Union

import numpy as np

from ._lib import lib
from .dtypes import numpy_dtype
from .errors import check, invalid

if TYPE_CHECKING:
    from ._types import DTypeLike


def empty(shape: Union[int, Sequence[int]], dtype: DTypeLike = "float32") -> np.ndarray:
    """A NumPy array of @p shape and @p dtype (a weft DType, a name or a NumPy dtype) in
    weft_mem_alloc memory, zeroed; the memory is freed when the last view of it is gone.
    torch.from_numpy() shares it without a copy."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = np.dtype(numpy_dtype(dtype))
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise invalid("weft.memory.empty: shape %r: dimensions must be integers >= 0"
                      % (shape,))
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    ptr = c_void_p()
    check(lib.weft_mem_alloc(nbytes, byref(ptr)))
    raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr.value)
    weakref.finalize(raw, lib.weft_mem_free, ptr.value, nbytes)
    return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dt).reshape(shape)
