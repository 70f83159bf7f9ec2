"""Text that a weft call writes to a C FILE*, read back as a str (weft_info_print,
weft_plan_print): the call writes into a temporary file opened with the C library's
fopen."""

from __future__ import annotations

import ctypes
import os
import tempfile
from typing import TYPE_CHECKING, Callable, Tuple

if TYPE_CHECKING:
    from ._types import T

_libc = ctypes.CDLL(None)
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.restype = ctypes.c_int
_libc.fclose.argtypes = [ctypes.c_void_p]


def capture(write: Callable[[int], T]) -> Tuple[str, T]:
    """Call write(FILE*) and return what it wrote, and its return value."""
    fd, path = tempfile.mkstemp(prefix="weft-", suffix=".txt")
    os.close(fd)
    try:
        f = _libc.fopen(path.encode(), b"w")
        if not f:
            raise OSError(ctypes.get_errno(), "fopen %s failed" % path)
        try:
            result = write(f)
        finally:
            _libc.fclose(f)
        with open(path, encoding="utf-8", errors="replace") as text:
            return text.read(), result
    finally:
        os.unlink(path)
