"""Nonblocking operations in flight (weft_req_t).

A Request keeps every buffer of its operation referenced until the operation completes,
so a tensor handed to weft.iallreduce() cannot be freed under weft's feet. The torch
tensors it writes into have their version counters bumped when it completes (or is
cancelled), so that autograd refuses a backward through a tensor saved meanwhile. A Request
dropped while in flight is not cancelled: its buffers stay referenced and weft frees it
once it completes (or at finalize). cancel() cancels it.
"""

from __future__ import annotations

from ctypes import byref, c_size_t
from typing import TYPE_CHECKING, Any, Optional

from ._buffer import mark_written
from ._lib import lib
from .context import timeout_ns
from .errors import Status, Timeout, error_for, last_error

if TYPE_CHECKING:
    import torch

    from .context import Context
    from .group import Group
    from .plan import Plan


class Request:
    """A nonblocking weft operation: test(), wait(timeout=None), cancel()."""

    def __init__(self, ctx: Context, handle: Optional[int], keep: object = (),
                 result: Any = None, keep_on_failure: object = None,
                 group: Optional[Group] = None, resumable: Optional[Plan] = None) -> None:
        self._ctx = ctx
        self._owner_group = group  # freeing that group frees the request (Group.free)
        self._handle = handle      # None once complete (or completed inline)
        self._keep = keep if handle else None
        self._keep_on_failure = keep_on_failure  # kept by the context if it fails
        self._result = result
        self._error = None
        self._nbytes = None
        # A migration's request is kept by weft after a failure, for weft.migrate_resume:
        # _resumable is its plan until then, _failed its weft_req_t once it failed.
        self._resumable = resumable
        self._failed = None
        if handle:
            ctx._track(self)

    def _finish(self, status):
        """Record the outcome of a completed request and free it (under the lock); a
        failed migration's stays allocated for weft.migrate_resume."""
        h, self._handle = self._handle, None
        if status < 0:
            self._error = error_for(status, last_error(self._ctx._handle))
            if self._keep_on_failure is not None:
                self._ctx._retired.append(self._keep_on_failure)
            if self._resumable is not None:
                self._failed, h = h, None
        else:
            n = c_size_t()
            if lib.weft_req_bytes(h, byref(n)) == Status.OK:
                self._nbytes = n.value
        if h is not None:
            lib.weft_req_free(h)
        mark_written(self._keep)
        self._keep = self._keep_on_failure = None
        if self._failed is None:
            self._resumable = None

    def _free_failed(self):
        """Free a failed migration's weft_req_t (under the lock, context alive)."""
        h, self._failed, self._resumable = self._failed, None, None
        if h is not None and self._ctx._handle is not None:
            lib.weft_req_free(h)

    def _outcome(self):
        if self._error is not None:
            raise self._error
        return self._result

    @property
    def done(self) -> bool:
        """True once the operation completed (successfully or not)."""
        return self._handle is None

    @property
    def result(self) -> Any:
        """The output buffer(s) of the operation (what wait() returns)."""
        return self._result

    @property
    def nbytes(self) -> Optional[int]:
        """Bytes transferred (the received length of a receive); None before completion."""
        return self._nbytes

    def test(self) -> bool:
        """Advance without blocking: True when complete, False when not yet. Raises the
        operation's error (a weft.Error) if it failed."""
        if self._handle is not None:
            with self._ctx._lock:
                if self._handle is not None:
                    self._ctx._h()
                    st = lib.weft_test(self._handle)
                    if st == Status.INPROGRESS:
                        return False
                    self._finish(st)
        self._outcome()
        return True

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Wait until complete or @p timeout seconds passed (None: the context's
        WEFT_TIMEOUT_MS). Returns the output (the result buffer, or for a receive the
        buffer); raises weft.Timeout if still in flight (the request stays valid: wait
        again or cancel), or the operation's error."""
        ns = timeout_ns(timeout)
        if self._handle is not None:
            with self._ctx._lock:
                if self._handle is not None:
                    self._ctx._h()
                    st = lib.weft_wait(self._handle, ns)
                    if st == Status.ERR_TIMEOUT:
                        st = lib.weft_test(self._handle)
                        if st == Status.INPROGRESS:
                            raise Timeout(Status.ERR_TIMEOUT,
                                          "request still in flight after %s s" % timeout)
                    self._finish(st)
        return self._outcome()

    def torch_future(self) -> torch.futures.Future[Any]:
        """A torch.futures.Future of this request: its value is what wait() returns, or
        it raises the request's error. One thread of the process completes the futures of
        requests in flight (weft.torch.distributed's completer), so `fut.wait()`,
        `fut.then(...)` and `torch.futures.wait_all` work as with torch's own; calling
        test() or wait() on the request as well is allowed. Needs PyTorch."""
        from .torch._completer import _completer
        import torch
        fut = torch.futures.Future()
        if self.done:
            try:
                fut.set_result(self._outcome())
            except Exception as e:  # noqa: BLE001 (the request's own error)
                fut.set_exception(e)
            return fut
        _completer.add(self, fut, self._result)
        return fut

    def cancel(self) -> None:
        """weft_req_free(): cancel the operation if still in flight (a collective left
        half done makes the group's next collectives fail with weft.Revoked until it is
        repaired). Its buffers may be reused afterwards. A failed migration can no longer
        be resumed after this."""
        if self._handle is not None or self._failed is not None:
            with self._ctx._lock:
                if self._handle is not None and self._ctx._handle is not None:
                    lib.weft_req_free(self._handle)
                self._handle = None
                mark_written(self._keep)  # it may have written part of them
                self._keep = None
                self._free_failed()

    def _release(self, finalizing):
        self.cancel()

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h is not None and self._ctx._handle is not None:
            # Dropped in flight: the context keeps the buffers and frees it when done.
            self._ctx._orphans.append((h, self._keep, self._owner_group))
            self._handle = None
        failed = getattr(self, "_failed", None)
        if failed is not None and self._ctx._handle is not None:
            # A failed migration's request, complete: the context frees it at its next
            # reap (taking the lock here could deadlock a collector in another thread).
            self._ctx._orphans.append((failed, None, self._owner_group))
            self._failed = None

    def __repr__(self):
        if self._failed is not None:
            return "<weft.Request failed, resumable>"
        return "<weft.Request %s>" % ("done" if self.done else "in flight")
