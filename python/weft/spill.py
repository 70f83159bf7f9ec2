"""Spill space on the SSD tier (include/weft/spill.h): blocks of memory written to a
private, unlinked file in the background and read back later.

    weft.init()
    with weft.Spill("/scratch/me/spill") as sp:       # of the default context
        bid = sp.write(tensor)            # starts at once; keep tensor unchanged ...
        sp.wait(bid, weft.Spill.SOURCE_FREE)  # ... until its bytes are taken
        del tensor                        # memory back; the bytes are on their way
        out = torch.empty(...)            # later
        sp.read(bid, out); sp.wait(bid, weft.Spill.LOADED)
        sp.free(bid)

The space keeps a reference to what write() was given until the block's source is free
(poll() drops those it no longer needs), so a caller may drop its own at once. It holds
no file name: nothing is left in the directory when the process ends, however it ends.
A write's and a read's weft_req_t are waited for by wait(); STORED is polled.
"""

from __future__ import annotations

import os
import time
from ctypes import byref, c_uint32, c_uint64, c_void_p
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional

from . import _structs as S
from ._buffer import as_buffer
from ._lib import lib
from .context import Context, default_context
from .errors import Status, Timeout, check, invalid
from .request import Request

if TYPE_CHECKING:
    from ._types import BytesLike


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
    """A spill space of context @p ctx (default: weft.init()'s) in directory @p path
    (created 0700; an existing one must be yours alone). chunk_bytes (a multiple of 4096,
    default 1 MiB) and queue_depth (default 8) size the I/O; buffered=True never uses
    O_DIRECT; max_bytes caps the file (a write past it fails its block); max_rate paces
    the chunk reads and writes started, in bytes per second (leaving CPU and device time
    to a step's collectives); fail_write=n makes the n-th chunk write fail as a device
    error would (for tests)."""

    SOURCE_FREE = 1  #: every byte taken from the source
    STORED = 2       #: every byte in the file
    LOADED = 4       #: the last read filled its destination, checked

    def __init__(self, path: str, ctx: Optional[Context] = None, chunk_bytes: int = 0,
                 queue_depth: int = 0, buffered: bool = False, max_bytes: int = 0,
                 max_rate: int = 0, fail_write: int = 0) -> None:
        if min(chunk_bytes, queue_depth, max_bytes, max_rate, fail_write) < 0:
            raise invalid("Spill: sizes and counts must be >= 0")
        self._ctx = ctx if ctx is not None else default_context()
        p = S.sized(S.SpillParams)
        p.chunk_bytes, p.queue_depth, p.buffered = chunk_bytes, queue_depth, int(buffered)
        p.max_bytes, p.max_rate, p.fail_write = max_bytes, max_rate, fail_write
        h = c_void_p()
        with self._ctx._lock:
            check(lib.weft_spill_create(self._ctx._h(), os.fsencode(path), byref(p), byref(h)),
                  self._ctx._handle)
        self._handle: Optional[int] = h.value
        self._writes: Dict[int, Request] = {}  # id -> its write, until the source is free
        self._reads: Dict[int, Request] = {}   # id -> its read in flight

    def _h(self) -> int:
        if self._handle is None:
            raise invalid("Spill: the space is freed")
        return self._handle

    def _check(self, status: int) -> int:
        return check(status, self._ctx._handle)

    def write(self, data: BytesLike) -> int:
        """Start writing @p data (a contiguous NumPy array, CPU tensor or bytes-like) as a
        new block; returns its id. @p data must not change until SOURCE_FREE."""
        b = as_buffer(data, "Spill.write", typed=False)
        if b.cuda_device is not None:
            raise invalid("Spill.write: CUDA tensors are not supported: copy to the CPU first")
        bid, req = c_uint64(), c_void_p()
        with self._ctx._lock:
            self._check(lib.weft_spill_write_start(self._h(), b.ptr, b.nbytes, byref(bid),
                                                   byref(req)))
            self._writes[bid.value] = Request(self._ctx, req.value, keep=b.obj)
        return bid.value

    def read(self, bid: int, out: BytesLike) -> None:
        """Start reading block @p bid into @p out (writable, exactly the block's size); wait
        for LOADED before using it."""
        b = as_buffer(out, "Spill.read", writable=True, typed=False)
        if b.cuda_device is not None:
            raise invalid("Spill.read: CUDA tensors are not supported")
        req = c_void_p()
        with self._ctx._lock:
            self._check(lib.weft_spill_read_start(self._h(), bid, b.ptr, b.nbytes, byref(req)))
            self._reads[bid] = Request(self._ctx, req.value, keep=b)

    def state(self, bid: int) -> int:
        """The SOURCE_FREE | STORED | LOADED bits block @p bid has; raises the block's
        error (weft.OtherError with status WEFT_ERR_IO, and the reason) if it failed."""
        st = c_uint32()
        with self._ctx._lock:
            status = lib.weft_spill_state(self._h(), bid, byref(st))
            if status < 0:
                self._writes.pop(bid, None)  # its request holds the same error
            self._check(status)
        self._settle(bid, st.value)
        return st.value

    def _settle(self, bid: int, state: int) -> None:
        """Finish the requests whose state was reached (their buffers let go, a read's
        destination marked written)."""
        if state & Spill.SOURCE_FREE and bid in self._writes:
            self._writes.pop(bid).test()
        if state & Spill.LOADED and bid in self._reads:
            self._reads.pop(bid).test()

    def wait(self, bid: int, state: int, timeout: Optional[float] = None) -> None:
        """Block until @p bid has every bit of @p state (weft.Timeout after @p timeout
        seconds; None: the context's WEFT_TIMEOUT_MS for SOURCE_FREE and LOADED, which
        wait on the write's and the read's request, 300 s for STORED, which is polled)."""
        for bit, reqs in ((Spill.SOURCE_FREE, self._writes), (Spill.LOADED, self._reads)):
            if state & bit and bid in reqs:
                reqs[bid].wait(timeout)  # after a Timeout the request stays, to wait again
                del reqs[bid]
        deadline = time.monotonic() + (300.0 if timeout is None else timeout)
        pause = 1e-5
        while (self.state(bid) & state) != state:
            if time.monotonic() >= deadline:
                raise Timeout(Status.ERR_TIMEOUT, "Spill.wait: block %#x has not reached "
                              "state %#x after %s s" % (bid, state, timeout))
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def poll(self) -> None:
        """Finish the writes whose sources the space no longer needs."""
        for bid in list(self._writes):
            try:
                self.state(bid)
            except Exception:  # a failed block keeps its error for state()/wait()
                self._writes.pop(bid, None)

    def free(self, bid: int) -> None:
        """Drop block @p bid (and any write or read of it in flight)."""
        with self._ctx._lock:
            self._check(lib.weft_spill_drop(self._h(), bid))
        for reqs in (self._writes, self._reads):
            r = reqs.pop(bid, None)
            if r is not None:
                r.cancel()

    def stats(self) -> SpillStats:
        """The space's counters."""
        s = S.SpillStats()
        with self._ctx._lock:
            self._check(lib.weft_spill_stats(self._h(), byref(s)))
        return SpillStats(s.bytes_submitted, s.bytes_written, s.bytes_deduplicated,
                          s.bytes_read, s.blocks_held, s.file_bytes, s.file_bytes_peak,
                          s.write_ns / 1e9, s.read_ns / 1e9, bool(s.direct))

    def close(self) -> None:
        """weft_spill_free(): wait for the I/O in flight, then drop every block and the
        file (the context must still be alive)."""
        if self._handle is not None:
            for r in list(self._writes.values()) + list(self._reads.values()):
                r.cancel()
            self._writes.clear()
            self._reads.clear()
            with self._ctx._lock:
                if self._ctx._handle is not None:
                    lib.weft_spill_free(self._handle)
            self._handle = None

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
