"""torch.distributed's Store over the job's store (weft.Context.kv_*)."""

from datetime import timedelta

import torch.distributed as dist

from ..errors import Timeout


class WeftStore(dist.Store):
    """torch.distributed's Store over the job's store (weft.Context.kv_*): set, get, add,
    wait, check and delete_key. compare_set and num_keys are not available."""

    def __init__(self, ctx, timeout=timedelta(seconds=300)):
        super().__init__()
        self._ctx = ctx
        self._timeout = timeout.total_seconds()

    def set(self, key, value):
        """Set @p key to @p value."""
        self._ctx.kv_set(key, value)

    def get(self, key):
        """The value of @p key, waiting for it up to the store's timeout."""
        return self._ctx.kv_get(key, timeout=self._timeout)

    def add(self, key, value):
        """Add @p value to the counter @p key; its new value."""
        return self._ctx.kv_add(key, value)

    def delete_key(self, key):
        """Delete @p key; whether it existed."""
        return self._ctx.kv_delete(key)

    def check(self, keys):
        """Whether every key of @p keys is set, without waiting."""
        for k in keys:
            try:
                self._ctx.kv_get(k, timeout=0)
            except Timeout:  # not set; other errors (a lost store) are raised
                return False
        return True

    def wait(self, keys, timeout=None):
        """Wait until every key of @p keys is set (weft.Timeout after @p timeout)."""
        t = self._timeout if timeout is None else timeout.total_seconds()
        for k in keys:
            self._ctx.kv_get(k, timeout=t)

    def set_timeout(self, timeout):
        """How long get() and wait() wait."""
        self._timeout = timeout.total_seconds()

    def compare_set(self, key, expected_value, desired_value):
        """Not available on weft's store: raises RuntimeError."""
        raise RuntimeError("weft's store for torch.distributed has no compare_set")

    def num_keys(self):
        """Not available on weft's store: raises RuntimeError."""
        raise RuntimeError("weft's store for torch.distributed does not count keys")
