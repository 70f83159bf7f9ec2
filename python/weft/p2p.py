"""Point-to-point messages (weft_send / weft_recv and their nonblocking twins) as methods
of Group. Messages are bytes: any contiguous NumPy array, CPU tensor or bytes-like object.
A torch tensor received into has its version counter bumped (see _buffer.mark_written).
"""

from __future__ import annotations

from ctypes import byref, c_size_t, c_void_p
from typing import TYPE_CHECKING

from ._buffer import as_buffer, mark_written
from ._lib import lib
from .errors import invalid
from .request import Request

if TYPE_CHECKING:
    from ._types import BytesLike

TAG_MAX = (1 << 24) - 1


def _tag(tag):
    if not 0 <= tag <= TAG_MAX:
        raise invalid("tag %r outside 0 .. %d" % (tag, TAG_MAX))
    return tag


class PointToPointMixin:
    """Messages between two members of a Group, matched by (peer, tag) in order."""

    def send(self, buf: BytesLike, peer: int, tag: int = 0) -> None:
        """Send buf to group rank @p peer (blocking, the context's default timeout)."""
        b = as_buffer(buf, "send buffer", typed=False)
        self._call(lib.weft_send, b.ptr, b.nbytes, peer, _tag(tag))

    def recv(self, buf: BytesLike, peer: int, tag: int = 0) -> int:
        """Receive at most len(buf) bytes from group rank @p peer into buf (blocking).
        Returns the number of bytes received; a longer message is weft.Mismatch."""
        b = as_buffer(buf, "recv buffer", writable=True, typed=False)
        n = c_size_t()
        self._call(lib.weft_recv, b.ptr, b.nbytes, peer, _tag(tag), byref(n))
        mark_written(b)
        return n.value

    def isend(self, buf: BytesLike, peer: int, tag: int = 0) -> Request:
        """Start sending; the Request keeps buf until the send completed."""
        b = as_buffer(buf, "send buffer", typed=False)
        self._ctx._reap_orphans()
        req = c_void_p()
        self._call(lib.weft_isend, b.ptr, b.nbytes, peer, _tag(tag), byref(req))
        return Request(self._ctx, req.value, keep=(b,), result=None, group=self)

    def irecv(self, buf: BytesLike, peer: int, tag: int = 0) -> Request:
        """Start receiving into buf; wait() returns buf, Request.nbytes the length (None
        when the message had arrived already and the receive completed inline)."""
        b = as_buffer(buf, "recv buffer", writable=True, typed=False)
        self._ctx._reap_orphans()
        req = c_void_p()
        self._call(lib.weft_irecv, b.ptr, b.nbytes, peer, _tag(tag), byref(req))
        mark_written(b)  # again when the request completes
        return Request(self._ctx, req.value, keep=(b,), result=buf, group=self)
