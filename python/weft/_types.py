"""Names used in the package's type hints, for type checkers only.

Every module of weft starts with `from __future__ import annotations` and imports these
names under `if typing.TYPE_CHECKING:`, so this module is never imported when a program
runs, and naming torch here does not make it a dependency. A checker that cannot find
torch takes its types as Any.
"""

import ctypes
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch

    from .coll import Op
    from .dtypes import DType
    from .layout import Box

#: Memory that collectives and the vocabulary layers read and write: a contiguous NumPy
#: array, or a contiguous torch tensor in CPU or CUDA memory, of a weft dtype
#: (weft.dtype_of). Checked at run time, not by these hints: contiguity, the dtype, that
#: an output is writable.
Array = Union[np.ndarray, "torch.Tensor"]

#: Memory taken as bytes (point-to-point messages, packed buffers of a migration or a
#: snapshot): an Array of any element type, or any object with the buffer protocol
#: (bytes, bytearray, memoryview, array.array, mmap, ...), contiguous. The buffer
#: protocol's type is collections.abc.Buffer from Python 3.12, typing_extensions.Buffer
#: for checkers before it (their stubs ship it; the package does not need it to run).
#: A checker whose stubs lack it takes that part as Any.
if TYPE_CHECKING:
    from typing_extensions import Buffer as _BufferProtocol
    BytesLike = Union[np.ndarray, "torch.Tensor", _BufferProtocol]
else:
    BytesLike = Any

#: A call that returns the buffer it was given returns it with the type it came with.
ArrayT = TypeVar("ArrayT", bound=Array)
#: The same for BytesLike arguments that may also be None.
OptBytesT = TypeVar("OptBytesT", bound=Optional[BytesLike])
#: What a callback returns (_cfile.capture).
T = TypeVar("T")
#: A ctypes struct of _structs (_structs.sized).
StructT = TypeVar("StructT", bound=ctypes.Structure)

#: A reduction operator: a weft.Op, its name ("sum", "prod", "max", "min", "avg"), its
#: value, or a torch.distributed.ReduceOp (SUM, PRODUCT, MAX, MIN, AVG). The last is Any:
#: torch's stubs do not type its members alike across versions (1.x leaves ReduceOp.SUM
#: untyped, `...`), and naming the class would refuse them.
OpLike = Union["Op", str, int, Any]

#: What weft.dtype_of() takes: a weft.DType or its value, a name ("float32", "f32", ...),
#: a NumPy array or anything numpy.dtype() takes, a torch tensor or torch.dtype.
DTypeLike = Union["DType", str, int, np.ndarray, "npt.DTypeLike", "torch.dtype",
                  "torch.Tensor"]

#: A tensor of a weft.Layout: its index or its name.
TensorRef = Union[int, str]

#: A box of a tensor: a weft.Box or an (offset, extent) pair of equal-length sequences.
BoxLike = Union["Box", Tuple[Sequence[int], Sequence[int]]]
