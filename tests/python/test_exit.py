"""A rank that dies of an uncaught exception ends with Python's exit status 1, not a
signal: Python's hashlib and torch start OpenSSL before weft does, so OpenSSL's own exit
handler runs at exit, and weft's threads (the heartbeat's lease renewals, the progress
thread's failure notices) must be stopped before it (weft's exit handler, comm/ctx/ctx_exit.c)
or they crash the process in an OpenSSL call.

Each case starts `weftrun -n 2 --keep-going` (every rank raises and exits by itself) a few
times, with a heartbeat every millisecond so that a renewal falls in the exit handlers: a
crash at exit is a race that one run may miss. weftrun comes from TEST_WEFT_WEFTRUN.
"""

import os
import subprocess
import sys

import pytest

from helpers import torch_or_skip

RUNS = 3

RANK = """
import {module}
import numpy as np
import weft
world = weft.init().world
world.allreduce(np.ones(4, np.float32))
raise RuntimeError("rank %d dies of an uncaught exception" % world.rank)
"""


def weftrun():
    path = os.environ.get("TEST_WEFT_WEFTRUN")
    if not path:
        pytest.skip("TEST_WEFT_WEFTRUN is not set (CTest sets it to this build's weftrun)")
    return path


# Without the progress thread the heartbeat alone crashed it; torch (2 s to import) once.
@pytest.mark.parametrize("module,progress_thread",
                         [("hashlib", "on"), ("hashlib", "off"), ("torch", "on")])
def test_uncaught_exception_exits_1(module, progress_thread):
    if module == "torch":
        torch_or_skip()
    env = dict(os.environ, WEFT_HEARTBEAT_MS="1", WEFT_PROGRESS_THREAD=progress_thread)
    cmd = [weftrun(), "-n", "2", "--keep-going", "--timeout", "60", "--", sys.executable,
           "-c", RANK.format(module=module)]
    for run in range(1, RUNS + 1):
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=90)
        out = p.stdout
        assert "signal" not in out and p.returncode == 1, (
            "import %s, run %d of %d: weftrun exited %d (expected 1, every rank's uncaught "
            "exception):\n%s" % (module, run, RUNS, p.returncode, out))
        assert out.count("dies of an uncaught exception") == 2, out
