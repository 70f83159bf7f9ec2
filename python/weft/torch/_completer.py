"""The thread that completes torch futures of weft requests in flight (one per process),
for the torch.distributed backend's send and recv and for weft.Request.torch_future()."""

import threading
import time

class _Completer:
    """Completes the torch futures of weft requests in flight, for a process's
    nonblocking point-to-point calls: one thread for all of them (started at the first),
    which tests the oldest requests, backing off while none completes, and sleeps while
    none is in flight. A Work made from such a future completes when its request does;
    Work.wait() releases the GIL, so this thread can run meanwhile."""

    def __init__(self):
        self._cond = threading.Condition()
        self._items = []  # (weft.Request, torch.futures.Future, result)
        self._thread = None

    def add(self, req, fut, result):
        with self._cond:
            self._items.append((req, fut, result))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="weft-torch-completer",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self):
        pause = 1e-5
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                items = list(self._items)
            done = []
            for item in items:
                req, fut, result = item
                try:
                    if not req.test():
                        continue
                    fut.set_result(result if result is not None else req.result)
                except Exception as e:  # the request failed: the Work raises it
                    fut.set_exception(e)
                done.append(item)
            with self._cond:
                self._items = [i for i in self._items if i not in done]
            pause = 1e-5 if done else min(pause * 2, 1e-3)
            if not done:
                time.sleep(pause)


_completer = _Completer()
