"""weft for Python: a ctypes binding over libweft.so, zero-copy on NumPy arrays and torch
tensors. `import weft` needs NumPy only; weft.torch (autograd layers) needs PyTorch.

    import weft, numpy as np
    with weft.init() as ctx:              # rank and size come from weftrun
        x = np.full(4, ctx.rank, np.float32)
        ctx.world.allreduce(x)            # in place: every element is the sum of ranks
"""

from __future__ import annotations

from ._lib import path as library_path
from .coll import Op
from .context import Context, Setting, default_context, finalize, init
from .dtypes import DType, dtype_of, numpy_dtype
from .errors import (Error, InvalidArgument, Mismatch, OtherError, PeerError, PeerFailed,
                     Revoked, Status, Timeout, status_str)
from .group import EditInfo, Group
from .info import info_text, memory_is_cuda, version, version_info
from . import memory
from .layout import Box, Layout, Region, TensorInfo
from .migrate import (BatchShare, batch_share, migrate, migrate_resume, imigrate,
                      replan_flat)
from .plan import Plan, PlanStats, Transfer
from .request import Request
from .snapshot import GEN_START, GenChoice, Restored, Snapshot, choose_generation
from .spill import Spill, SpillStats
from .vocab import Microbatch, Vocab, VocabRange, shard_range

__version__ = "1.0.0"

SUM, PROD, MAX, MIN = Op.SUM, Op.PROD, Op.MAX, Op.MIN
F32, F64, F16, BF16, I32, I64, U8 = (DType.F32, DType.F64, DType.F16, DType.BF16, DType.I32,
                                     DType.I64, DType.U8)


def world() -> Group:
    """The world group of the default context (weft.init()'s)."""
    return default_context().world


def rank() -> int:
    """This process's rank in the default context's world group."""
    return default_context().rank


def size() -> int:
    """Number of ranks of the default context's world group."""
    return default_context().size


__all__ = [
    "library_path", "memory", "Op", "Context", "Setting", "default_context", "finalize", "init",
    "DType", "dtype_of", "numpy_dtype", "Error", "InvalidArgument", "Mismatch", "OtherError",
    "PeerError", "PeerFailed", "Revoked", "Status", "Timeout", "status_str", "EditInfo",
    "Group", "info_text", "memory_is_cuda", "version", "version_info", "Box", "Layout",
    "Region", "TensorInfo", "BatchShare", "batch_share", "migrate", "migrate_resume",
    "imigrate", "replan_flat", "Plan", "PlanStats", "Transfer", "Request", "Restored",
    "Snapshot", "Spill", "SpillStats", "GEN_START", "GenChoice", "choose_generation", "Microbatch", "Vocab",
    "VocabRange", "shard_range", "SUM", "PROD", "MAX",
    "MIN", "F32", "F64", "F16", "BF16", "I32", "I64", "U8", "world", "rank", "size",
]
