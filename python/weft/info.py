"""Version, diagnostics (weft_info_print) and memory types."""

from __future__ import annotations

from ctypes import byref, c_int
from typing import TYPE_CHECKING, Optional, Tuple, Union

from . import _structs as S
from ._buffer import as_buffer
from ._cfile import capture
from ._lib import lib
from .errors import check

if TYPE_CHECKING:
    from ._types import BytesLike

INFO_SUMMARY, INFO_CONFIG, INFO_TOPOLOGY, INFO_TOPOLOGY_GPU, INFO_ALGORITHMS = 1, 2, 4, 8, 16


def version() -> str:
    """The library's version string, e.g. "1.0.0"."""
    return lib.weft_version(None, None, None).decode()


def version_info() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    v = [c_int(), c_int(), c_int()]
    lib.weft_version(byref(v[0]), byref(v[1]), byref(v[2]))
    return tuple(x.value for x in v)


def info_text(summary: bool = True, config: bool = False, topology: bool = False,
              gpu: Optional[int] = None, topo_xml: Optional[str] = None,
              peer_xml: Optional[str] = None, algorithms: bool = False) -> str:
    """What `weft-info` prints (weft_info_print): the summary, the settings, the
    topology and transport decisions, the collectives' rule table. For people to read,
    not to parse."""
    p = S.sized(S.InfoParams)
    p.flags = ((INFO_SUMMARY if summary else 0) | (INFO_CONFIG if config else 0) |
               (INFO_TOPOLOGY if topology else 0) | (INFO_TOPOLOGY_GPU if gpu is not None else 0) |
               (INFO_ALGORITHMS if algorithms else 0))
    if p.flags == 0:
        p.flags = INFO_SUMMARY
    p.gpu = gpu or 0
    p.topo_xml = topo_xml.encode() if topo_xml else None
    p.peer_xml = peer_xml.encode() if peer_xml else None
    text, st = capture(lambda f: lib.weft_info_print(f, byref(p)))
    check(st)
    return text


def memory_is_cuda(obj: Union[int, BytesLike]) -> bool:
    """Whether a tensor's (or an int pointer's) memory is CUDA device memory, as weft
    sees it (weft_memory_is_cuda)."""
    ptr = obj if isinstance(obj, int) else as_buffer(obj, "memory_is_cuda", typed=False).ptr
    out = c_int()
    check(lib.weft_memory_is_cuda(ptr, byref(out)))
    return bool(out.value)
