"""weft element types and their NumPy and PyTorch counterparts.

| weft      | NumPy   | PyTorch        |
|-----------|---------|----------------|
| F32       | float32 | torch.float32  |
| F64       | float64 | torch.float64  |
| F16       | float16 | torch.float16  |
| BF16      | (none)  | torch.bfloat16 |
| I32       | int32   | torch.int32    |
| I64       | int64   | torch.int64    |
| U8        | uint8   | torch.uint8    |

Anything else is refused with weft.InvalidArgument. torch is never imported here: a
tensor is recognised only when the caller's program has imported torch already.
"""

from __future__ import annotations

import enum
import sys
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ._lib import lib
from .errors import invalid

if TYPE_CHECKING:
    from types import ModuleType

    import torch

    from ._types import DTypeLike


class DType(enum.IntEnum):
    """weft_dtype_t (include/weft/coll.h)."""
    F32 = 0
    F64 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I64 = 5
    U8 = 6

    @property
    def itemsize(self) -> int:
        """Bytes per element of this dtype."""
        return int(lib.weft_dtype_size(int(self)))


_BY_NAME = {
    "float32": DType.F32, "float64": DType.F64, "float16": DType.F16,
    "bfloat16": DType.BF16, "int32": DType.I32, "int64": DType.I64, "uint8": DType.U8,
    "f32": DType.F32, "f64": DType.F64, "f16": DType.F16, "bf16": DType.BF16,
    "i32": DType.I32, "i64": DType.I64, "u8": DType.U8,
}
_TO_NUMPY = {DType.F32: np.float32, DType.F64: np.float64, DType.F16: np.float16,
             DType.I32: np.int32, DType.I64: np.int64, DType.U8: np.uint8}
SUPPORTED = "float32, float64, float16, bfloat16 (torch), int32, int64, uint8"


def torch_module() -> Optional[ModuleType]:
    """The torch module if the program imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def is_tensor(obj: object) -> bool:
    """Whether @p x is a torch.Tensor (False when the program has not imported torch)."""
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


_BY_TORCH = {}  # torch.dtype -> DType, filled as tensors come (a dict hit per call)


def torch_dtype_of(t: torch.Tensor) -> DType:
    """dtype_of for a torch tensor, by its dtype object (the per-call fast path)."""
    dt = _BY_TORCH.get(t.dtype)
    if dt is None:
        dt = dtype_of(t.dtype)
        _BY_TORCH[t.dtype] = dt
    return dt


def dtype_of(x: DTypeLike) -> DType:
    """The weft DType of a NumPy array or dtype, a torch tensor or dtype, a DType, or a
    name ("float32", "f32", ...). Raises weft.InvalidArgument for others."""
    if isinstance(x, DType):
        return x
    if isinstance(x, int) and not isinstance(x, bool) and x in DType._value2member_map_:
        return DType(x)
    torch = torch_module()
    if torch is not None and isinstance(x, (torch.Tensor, torch.dtype)):
        name = str(x.dtype if isinstance(x, torch.Tensor) else x)
        key = name[len("torch."):] if name.startswith("torch.") else name
        if key in _BY_NAME:
            return _BY_NAME[key]
        raise invalid("dtype %s is not supported by weft (%s)" % (name, SUPPORTED))
    if isinstance(x, str):
        if x in _BY_NAME:
            return _BY_NAME[x]
        raise invalid("dtype '%s' is not supported by weft (%s)" % (x, SUPPORTED))
    try:
        dt = x.dtype if isinstance(x, np.ndarray) else np.dtype(x)
    except TypeError:
        raise invalid("cannot tell the weft dtype of %r" % (x,)) from None
    if dt.byteorder == ">" or dt.name not in _BY_NAME:
        raise invalid("dtype %s is not supported by weft (%s)" % (dt, SUPPORTED))
    return _BY_NAME[dt.name]


def numpy_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    """The NumPy dtype of a weft DType (BF16 has none: InvalidArgument)."""
    d = dtype_of(dtype)
    if d not in _TO_NUMPY:
        raise invalid("NumPy has no %s" % d.name.lower())
    return np.dtype(_TO_NUMPY[d])
