"""Status codes and the exceptions that failed weft calls raise.

Every exception is a weft.Error carrying `status` (the weft_status_t value), `status_name`
(weft_status_str()) and `detail` (weft_last_error()'s text: which call, which rank, why;
for a refusal by the binding itself, its own reason).
"""

from __future__ import annotations

import enum
from typing import Optional

from ._lib import lib


class Status(enum.IntEnum):
    """weft_status_t (include/weft/status.h)."""
    OK = 0
    INPROGRESS = 1
    ERR_INVALID_ARG = -1
    ERR_MISMATCH = -2
    ERR_NO_MEMORY = -10
    ERR_UNSUPPORTED = -11
    ERR_PEER_FAILED = -20
    ERR_REVOKED = -21
    ERR_TIMEOUT = -22
    ERR_TRANSPORT = -30
    ERR_AUTH = -31
    ERR_IO = -32
    ERR_PROTOCOL = -33


def status_str(status: int) -> str:
    """weft_status_str(): e.g. "WEFT_ERR_TIMEOUT: operation timed out"."""
    return lib.weft_status_str(int(status)).decode()


class Error(Exception):
    """A weft call failed."""

    def __init__(self, status: int, detail: str = "") -> None:
        self.status = int(status)
        self.status_name = status_str(self.status)
        self.detail = detail or ""
        text = self.status_name + (" (" + self.detail + ")" if self.detail else "")
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.status, self.detail))


class InvalidArgument(Error, ValueError):
    """WEFT_ERR_INVALID_ARG: an argument is wrong (also raised by the binding's own
    checks: a dtype weft lacks, a non-contiguous tensor, a buffer of the wrong size)."""


class Mismatch(Error):
    """WEFT_ERR_MISMATCH: ranks disagree on count, dtype, op, root or plan."""


class PeerError(Error):
    """A member is gone or the group was revoked: repair the group (base of PeerFailed
    and Revoked)."""


class PeerFailed(PeerError):
    """WEFT_ERR_PEER_FAILED: a peer process died or became unreachable."""


class Revoked(PeerError):
    """WEFT_ERR_REVOKED: the group was revoked after a failure elsewhere."""


class Timeout(Error, TimeoutError):
    """WEFT_ERR_TIMEOUT: the operation did not complete in time."""


class OtherError(Error):
    """Any other status: NO_MEMORY, UNSUPPORTED, TRANSPORT, AUTH, IO, PROTOCOL
    (`status` says which)."""


_BY_STATUS = {
    Status.ERR_INVALID_ARG: InvalidArgument,
    Status.ERR_MISMATCH: Mismatch,
    Status.ERR_PEER_FAILED: PeerFailed,
    Status.ERR_REVOKED: Revoked,
    Status.ERR_TIMEOUT: Timeout,
}


def error_for(status: int, detail: str = "") -> Error:
    """The exception for a negative status."""
    return _BY_STATUS.get(status, OtherError)(status, detail)


def invalid(detail: str) -> InvalidArgument:
    """The exception for an argument the binding refuses before calling weft."""
    return InvalidArgument(Status.ERR_INVALID_ARG, detail)


def last_error(ctx_handle: Optional[int] = None) -> str:
    """weft_last_error(): the context's detail text, or the thread's for ctx None."""
    text = lib.weft_last_error(ctx_handle)
    return text.decode(errors="replace") if text else ""


def check(status: int, ctx_handle: Optional[int] = None) -> int:
    """Raise for a negative status (reading the detail text at once); return it else."""
    if status < 0:
        raise error_for(status, last_error(ctx_handle))
    return status
