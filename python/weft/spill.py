"""Spill space on the SSD tier (include/weft/spill.h): blocks of memory written to a
private, unlinked file in the background and read back later.

    with weft.Spill("/scratch/me/spill") as sp:
        bid = sp.write(tensor)            # starts at once; keep tensor unchanged ...
        sp.wait(bid, weft.Spill.SOURCE_FREE)  # ... until its bytes are taken
        del tensor                        # memory back; the bytes are on their way
        out = torch.empty(...)            # later
        sp.read(bid, out); sp.wait(bid, weft.Spill.LOADED)
        sp.free(bid)

The space keeps a reference to what write() was given until the block's source is free
(poll() drops those it no longer needs), so a caller may drop its own at once. It holds
no file name: nothing is left in the directory when the process ends, however it ends.
"""

from __future__ import annotations

import os
from ctypes import byref, c_uint32, c_uint64, c_void_p
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional

from . import _structs as S
from ._buffer import as_buffer, mark_written
from ._lib import lib
from .errors import check, invalid

if TYPE_CHECKING:
    from ._types import BytesLike

_DEFAULT_TIMEOUT = (1 << 64) - 1  # WEFT_TIMEOUT_DEFAULT: the space's timeout_ms


class SpillStats(NamedTuple):
    """Counters of a spill space since it was opened (weft_spill_stats_t)."""
    bytes_submitted: int     #: bytes of every block written
    bytes_written: int       #: chunk bytes written to the file
    bytes_deduplicated: int  #: chunk bytes not written: the content was held
    bytes_read: int          #: chunk bytes read back
    blocks_held: int         #: blocks written and not freed
    file_bytes: int          #: the file's length now
    file_bytes_peak: int     #: and at its longest
    write_s: float           #: seconds with a write in flight
    read_s: float            #: seconds with a read in flight
    direct: bool             #: the file is written with O_DIRECT


class Spill:
    """A spill space in directory @p path (created 0700; an existing one must be yours
    alone). chunk_bytes (a multiple of 4096, default 1 MiB) and queue_depth (default 8)
    size the I/O; buffered=True never uses O_DIRECT; max_bytes caps the file (a write past
    it fails its block); timeout_ms bounds wait() (default 300 s); fail_write=n makes the
    n-th chunk write fail as a device error would (for tests)."""

    SOURCE_FREE = 1  #: every byte taken from the source
    STORED = 2       #: every byte in the file
    LOADED = 4       #: the last read filled its destination, checked

    def __init__(self, path: str, chunk_bytes: int = 0, queue_depth: int = 0,
                 buffered: bool = False, max_bytes: int = 0, timeout_ms: int = 0,
                 fail_write: int = 0) -> None:
        if min(chunk_bytes, queue_depth, max_bytes, timeout_ms, fail_write) < 0:
            raise invalid("Spill: sizes, counts and timeouts must be >= 0")
        p = S.sized(S.SpillParams)
        p.chunk_bytes, p.queue_depth, p.buffered = chunk_bytes, queue_depth, int(buffered)
        p.max_bytes, p.timeout_ms, p.fail_write = max_bytes, timeout_ms, fail_write
        h = c_void_p()
        check(lib.weft_spill_open(os.fsencode(path), byref(p), byref(h)))
        self._handle: Optional[int] = h.value
        self._sources: Dict[int, object] = {}  # id -> what write() was given, until free
        self._dests: Dict[int, object] = {}    # id -> what read() writes into

    def _h(self) -> int:
        if self._handle is None:
            raise invalid("Spill: the space is closed")
        return self._handle

    def write(self, data: BytesLike) -> int:
        """Start writing @p data (a contiguous NumPy array, CPU tensor or bytes-like) as a
        new block; returns its id. @p data must not change until SOURCE_FREE."""
        b = as_buffer(data, "Spill.write", typed=False)
        if b.cuda_device is not None:
            raise invalid("Spill.write: CUDA tensors are not supported: copy to the CPU first")
        bid = c_uint64()
        check(lib.weft_spill_write(self._h(), b.ptr, b.nbytes, byref(bid)))
        if b.nbytes:
            self._sources[bid.value] = b.obj
        return bid.value

    def read(self, bid: int, out: BytesLike) -> None:
        """Start reading block @p bid into @p out (writable, exactly the block's size); wait
        for LOADED before using it."""
        b = as_buffer(out, "Spill.read", writable=True, typed=False)
        if b.cuda_device is not None:
            raise invalid("Spill.read: CUDA tensors are not supported")
        check(lib.weft_spill_read(self._h(), bid, b.ptr, b.nbytes))
        self._dests[bid] = b

    def state(self, bid: int) -> int:
        """The SOURCE_FREE | STORED | LOADED bits block @p bid has; raises the block's
        error (weft.OtherError with status WEFT_ERR_IO, and the reason) if it failed."""
        st = c_uint32()
        check(lib.weft_spill_state(self._h(), bid, byref(st)))
        self._settle(bid, st.value)
        return st.value

    def wait(self, bid: int, state: int, timeout: Optional[float] = None) -> None:
        """Block until @p bid has every bit of @p state (weft.Timeout after @p timeout
        seconds; None: the space's timeout_ms)."""
        ns = _DEFAULT_TIMEOUT if timeout is None else max(0, int(timeout * 1e9))
        check(lib.weft_spill_wait(self._h(), bid, state, ns))
        self._settle(bid, state)

    def _settle(self, bid: int, state: int) -> None:
        if state & Spill.SOURCE_FREE:
            self._sources.pop(bid, None)
        if state & Spill.LOADED:
            dest = self._dests.pop(bid, None)
            if dest is not None:
                mark_written(dest)

    def poll(self) -> None:
        """Drop the references to sources the space no longer needs."""
        for bid in list(self._sources):
            try:
                self.state(bid)
            except Exception:  # a failed block keeps its error for state()/wait()
                self._sources.pop(bid, None)

    def free(self, bid: int) -> None:
        """Drop block @p bid (and any read of it in flight)."""
        check(lib.weft_spill_free(self._h(), bid))
        self._sources.pop(bid, None)
        self._dests.pop(bid, None)

    def stats(self) -> SpillStats:
        """The space's counters."""
        s = S.SpillStats()
        check(lib.weft_spill_stats(self._h(), byref(s)))
        return SpillStats(s.bytes_submitted, s.bytes_written, s.bytes_deduplicated,
                          s.bytes_read, s.blocks_held, s.file_bytes, s.file_bytes_peak,
                          s.write_ns / 1e9, s.read_ns / 1e9, bool(s.direct))

    def close(self) -> None:
        """Wait for the I/O in flight, then drop every block and the file."""
        if self._handle is not None:
            lib.weft_spill_close(self._handle)
            self._handle = None
            self._sources.clear()
            self._dests.clear()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
