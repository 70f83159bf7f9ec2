"""torch.distributed's Store over the job's store (weft.Context.kv_*)."""

from datetime import timedelta

import torch.distributed as dist


class WeftStore(dist.Store):
    """torch.distributed's Store over the job's store (weft.Context.kv_*): set, get, add,
    wait, check and delete_key. compare_set and num_keys are not available."""

    def __init__(self, ctx, timeout=timedelta(seconds=300)):
        super().__init__()
        self._ctx = ctx
        self._timeout = timeout.total_seconds()

    def set(self, key, value):
        self._ctx.kv_set(key, value)

    def get(self, key):
        return self._ctx.kv_get(key, timeout=self._timeout)

    def add(self, key, value):
        return self._ctx.kv_add(key, value)

    def delete_key(self, key):
        return self._ctx.kv_delete(key)

    def check(self, keys):
        for k in keys:
            try:
                self._ctx.kv_get(k, timeout=0)
            except Exception:  # weft.Timeout: not set
                return False
        return True

    def wait(self, keys, timeout=None):
        t = self._timeout if timeout is None else timeout.total_seconds()
        for k in keys:
            self._ctx.kv_get(k, timeout=t)

    def set_timeout(self, timeout):
        self._timeout = timeout.total_seconds()

    def compare_set(self, key, expected_value, desired_value):
        raise RuntimeError("weft's store for torch.distributed has no compare_set")

    def num_keys(self):
        raise RuntimeError("weft's store for torch.distributed does not count keys")
