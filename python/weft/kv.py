"""The job's key-value space (include/weft/kv.h) as methods of Context.

Keys are str (printable ASCII, 1 to KV_MAX_KEY characters) or bytes; values are bytes (a
str is encoded as UTF-8). A get that waits asks in slices, so other threads' weft calls
on the context go on meanwhile. Without a store (one process started without a launcher)
every call raises weft.Unsupported.
"""

from __future__ import annotations

import time
from typing import Optional, Union
from ctypes import byref, c_int, c_int64, c_size_t, create_string_buffer

from ._lib import lib
from .errors import Status, error_for, invalid, last_error

KV_MAX_KEY = 160
KV_MAX_VALUE = 256 << 10
_SLICE_S = 0.05


def _key(key):
    if isinstance(key, str):
        try:
            key = key.encode("ascii")
        except UnicodeEncodeError:
            raise invalid("weft kv: keys are printable ASCII, not %r" % (key,)) from None
    if not isinstance(key, (bytes, bytearray)):
        raise invalid("weft kv: a key is str or bytes, not %s" % type(key).__name__)
    if b"\0" in key:
        raise invalid("weft kv: keys are printable ASCII, not %r" % (key,))
    return bytes(key)


def _value(value):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise invalid("weft kv: a value is bytes or str, not %s" % type(value).__name__)


class KVMixin:
    """kv_set, kv_get, kv_add, kv_delete of a Context (see the module comment)."""

    def _kv_timeout_default(self):
        t = getattr(self, "_kv_default_s", None)
        if t is None:
            ms = next((int(s.value) for s in self.settings() if s.name == "WEFT_TIMEOUT_MS"),
                      60000)
            t = self._kv_default_s = ms / 1000.0
        return t

    def kv_set(self, key: Union[str, bytes, bytearray],
               value: Union[str, bytes, bytearray, memoryview]) -> None:
        """Set key to value (bytes or str), replacing what it held."""
        k, v = _key(key), _value(value)
        self._call(lib.weft_kv_set, self._h(), k, v, len(v))

    def kv_get(self, key: Union[str, bytes, bytearray],
               timeout: Optional[float] = None) -> bytes:
        """The value of key (bytes), waiting until it is set or timeout seconds pass
        (None: WEFT_TIMEOUT_MS; 0: do not wait), then raising weft.Timeout."""
        k = _key(key)
        if timeout is None:
            timeout = self._kv_timeout_default()
        if timeout < 0:
            raise invalid("timeout must be >= 0 seconds, not %r" % (timeout,))
        end = time.monotonic() + timeout
        buf, n = create_string_buffer(256), c_size_t()
        while True:
            left = max(0.0, end - time.monotonic())
            wait = min(left, _SLICE_S)
            with self._lock:
                h = self._h()
                st = lib.weft_kv_get(h, k, buf, len(buf), byref(n), int(wait * 1e9))
                if st == Status.OK and n.value > len(buf):
                    buf = create_string_buffer(n.value)
                    continue  # read it whole (it may change meanwhile: then again)
                if st == Status.OK:
                    return buf.raw[:n.value]
                if st != Status.ERR_TIMEOUT or left <= 0:
                    raise error_for(st, last_error(h))

    def kv_add(self, key: Union[str, bytes, bytearray], delta: int = 1) -> int:
        """Add delta to the decimal counter key (created at 0); the new value."""
        v = c_int64()
        self._call(lib.weft_kv_add, self._h(), _key(key), int(delta), byref(v))
        return v.value

    def kv_delete(self, key: Union[str, bytes, bytearray]) -> bool:
        """Delete key; whether it held a value."""
        existed = c_int()
        self._call(lib.weft_kv_delete, self._h(), _key(key), byref(existed))
        return bool(existed.value)
