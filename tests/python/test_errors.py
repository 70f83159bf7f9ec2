"""Errors become exceptions of the right class, with the status and weft's detail text;
the binding refuses what weft cannot check through a pointer (dtype, contiguity,
writability, sizes) with weft.InvalidArgument."""

import numpy as np
import pytest

import weft
from helpers import torch_or_skip


def test_status_classes():
    cases = {
        weft.Status.ERR_INVALID_ARG: weft.InvalidArgument,
        weft.Status.ERR_MISMATCH: weft.Mismatch,
        weft.Status.ERR_PEER_FAILED: weft.PeerFailed,
        weft.Status.ERR_REVOKED: weft.Revoked,
        weft.Status.ERR_TIMEOUT: weft.Timeout,
        weft.Status.ERR_NO_MEMORY: weft.OtherError,
        weft.Status.ERR_UNSUPPORTED: weft.OtherError,
        weft.Status.ERR_TRANSPORT: weft.OtherError,
        weft.Status.ERR_AUTH: weft.OtherError,
        weft.Status.ERR_IO: weft.OtherError,
        weft.Status.ERR_PROTOCOL: weft.OtherError,
    }
    for status, cls in cases.items():
        e = weft.errors.error_for(status, "detail")
        assert type(e) is cls and isinstance(e, weft.Error)
        assert e.status == status and e.detail == "detail"
        assert e.status_name == weft.status_str(status)
        assert weft.status_str(status).split(":")[0] == "WEFT_" + status.name
    assert issubclass(weft.PeerFailed, weft.PeerError)
    assert issubclass(weft.Revoked, weft.PeerError)
    assert issubclass(weft.InvalidArgument, ValueError)
    assert issubclass(weft.Timeout, TimeoutError)


def test_unsupported_numpy_dtypes(world):
    for dtype in (np.complex64, np.bool_, np.int16, np.uint32, np.float128):
        with pytest.raises(weft.InvalidArgument, match="not supported") as e:
            world.allreduce(np.zeros(4, dtype))
        assert e.value.status == weft.Status.ERR_INVALID_ARG
    with pytest.raises(weft.InvalidArgument):
        world.allreduce(np.zeros(4, ">f4"))  # byte-swapped
    with pytest.raises(weft.InvalidArgument, match="numpy.ndarray or torch.Tensor"):
        world.allreduce([1.0, 2.0])


def test_non_contiguous_numpy(world):
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.allreduce(x[:, 1])
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.broadcast(x.T)
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.send(x[::2], 0)


def test_wrong_sizes(world):
    n = world.size
    f = np.zeros
    with pytest.raises(weft.InvalidArgument, match="elements"):
        world.allreduce(f(4, np.float32), f(5, np.float32))
    with pytest.raises(weft.InvalidArgument, match="dtypes differ"):
        world.allreduce(f(4, np.float32), f(4, np.float64))
    with pytest.raises(weft.InvalidArgument, match="ranks x"):
        world.reduce_scatter(f(3 * n + 1, np.float32), f(3, np.float32))
    with pytest.raises(weft.InvalidArgument, match="ranks x"):
        world.allgather(f(3, np.int32), f(3 * n + 1, np.int32))
    with pytest.raises(weft.InvalidArgument, match="entries"):
        world.alltoallv(f(4, np.int32), [1] * (n + 1), f(4, np.int32), [1] * n)
    with pytest.raises(weft.InvalidArgument, match="past the buffer"):
        world.alltoallv(f(1, np.int32), [2] * n, f(2 * n, np.int32), [2] * n)
    with pytest.raises(weft.InvalidArgument, match="operator"):
        world.allreduce(f(4, np.float32), op="mean")


def test_read_only_output(world):
    ro = np.frombuffer(bytes(16), np.float32)
    with pytest.raises(weft.InvalidArgument, match="read-only"):
        world.allreduce(ro)
    with pytest.raises(weft.InvalidArgument, match="read-only"):
        world.recv(b"immutable", 0)
    with pytest.raises(weft.InvalidArgument, match="tag"):
        world.send(b"x", 0, tag=-1)


def test_error_from_the_library_carries_its_detail(world, ctx):
    with pytest.raises(weft.InvalidArgument) as e:
        world.broadcast(np.zeros(2, np.float32), root=world.size + 3)
    assert "root" in e.value.detail and "broadcast" in e.value.detail
    assert "root" in ctx.last_error
    assert "WEFT_ERR_INVALID_ARG" in str(e.value)


def test_timeout_then_completion(world):
    me = world.rank
    buf = np.zeros(4, np.int64)
    req = world.irecv(buf, me, tag=11)
    with pytest.raises(weft.Timeout) as e:
        req.wait(timeout=0.05)
    assert e.value.status == weft.Status.ERR_TIMEOUT
    assert not req.done and not req.test()
    world.send(np.arange(4, dtype=np.int64), me, tag=11)  # to itself
    assert req.wait(timeout=30) is buf
    np.testing.assert_array_equal(buf, np.arange(4))
    assert req.nbytes == 32


def test_cancel(world):
    req = world.irecv(np.zeros(1, np.int8), world.rank, tag=12)
    req.cancel()
    assert req.done


def test_torch_refusals(world):
    torch = torch_or_skip()
    for dtype in (torch.bool, torch.complex64, torch.int16, torch.int8):
        with pytest.raises(weft.InvalidArgument, match="not supported"):
            world.allreduce(torch.zeros(4, dtype=dtype))
    x = torch.zeros(4, 4)
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.allreduce(x.t())
    with pytest.raises(weft.InvalidArgument, match="contiguous"):
        world.allreduce(x[:, 0])
    with pytest.raises(weft.InvalidArgument, match="elements"):
        world.allreduce(torch.zeros(4), torch.zeros(3))
    with pytest.raises(weft.InvalidArgument, match="dtypes differ"):
        world.allgather(torch.zeros(1, dtype=torch.bfloat16), torch.zeros(world.size))


def test_finalized_context_refuses_calls():
    c = weft.init()
    g = c.world
    c.finalize()
    c.finalize()  # twice is fine
    with pytest.raises(weft.InvalidArgument, match="finalized|freed"):
        g.allreduce(np.zeros(1, np.float32))
    with pytest.raises(weft.InvalidArgument, match="finalized"):
        c.world


def test_failed_init_says_why():
    """Ranks of another launcher without a store: weft.init() raises InvalidArgument whose
    detail (weft_last_error of the failed weft_init) names the variables and the way out,
    instead of a lone rank 0 of 1. In a child, so that no launcher variable is inherited."""
    import os
    import subprocess
    import sys

    launcher_vars = ("WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK", "WEFT_LOCAL_SIZE",
                     "WEFT_STORE", "WEFT_JOB_TOKEN", "WEFT_JOIN", "RANK", "WORLD_SIZE",
                     "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in launcher_vars}
    env.update(RANK="1", WORLD_SIZE="2", WEFT_LOG_LEVEL="error")
    code = ("import weft\n"
            "try:\n"
            "    weft.init()\n"
            "except weft.InvalidArgument as e:\n"
            "    print(e.detail)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "RANK=1 WORLD_SIZE=2 set by torchrun but no WEFT_STORE" in out.stdout
    assert "weftrun --store-only" in out.stdout


def child_env(**extra):
    """This environment without any launcher's variables, plus @p extra."""
    import os
    launcher_vars = ("WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK", "WEFT_LOCAL_SIZE",
                     "WEFT_STORE", "WEFT_JOB_TOKEN", "WEFT_JOIN", "RANK", "WORLD_SIZE",
                     "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in launcher_vars}
    env.update(extra)
    return env


def test_bad_setting_names_the_variable_and_value():
    """A WEFT_* setting that does not parse fails weft.init() with InvalidArgument whose
    text names the variable, the value and what is expected (not only the log)."""
    import subprocess
    import sys
    code = ("import weft\n"
            "try:\n"
            "    weft.init()\n"
            "except weft.InvalidArgument as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(WEFT_TIMEOUT_MS="abc", WEFT_LOG_LEVEL="error"),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "WEFT_TIMEOUT_MS='abc' is not valid" in out.stdout
    assert "milliseconds" in out.stdout and "default 300000" in out.stdout


REINIT = """
import numpy as np, weft
c = weft.init()
me, n = c.rank, c.size
try:
    weft.init()
    raise SystemExit("a second context of the job was made while the first is open")
except weft.InvalidArgument as e:
    assert "already open in this process" in str(e) and e.context is c, e
    assert "started twice" not in str(e), e
assert c.namespace == "weft"
c.finalize()
for k in (2, 3):
    c = weft.init()  # the same ranks again, in a namespace of their own
    assert (c.rank, c.size, c.namespace) == (me, n, "weft.%d" % k), (c, c.namespace)
    assert weft.default_context() is c and weft.world().size == n
    x = np.full(3, me + 1.0, np.float32)
    c.world.allreduce(x)
    assert x.tolist() == [n * (n + 1) / 2] * 3, x
    c.finalize()
print("reinit ok", me)
"""


def test_init_again_after_finalize_in_a_job():
    """Under weftrun: a second weft.init() while the context is open says so (instead of
    blaming a rank started twice); after finalize it makes the world again, twice."""
    import os
    import subprocess
    import sys
    build = os.environ.get("TEST_WEFT_BUILD_DIR")
    weftrun = os.path.join(build or "", "bin", "weftrun")
    if not build or not os.path.exists(weftrun):
        pytest.skip("TEST_WEFT_BUILD_DIR (with bin/weftrun) is set by CTest")
    out = subprocess.run([weftrun, "-n", "2", "--timeout", "60", "--", sys.executable, "-c",
                          REINIT], capture_output=True, text=True,
                         env=child_env(WEFT_TIMEOUT_MS="30000"), timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("reinit ok") == 2, out.stdout


def test_init_again_after_finalize_alone():
    """One rank without a store: a finalized context is made again (the namespace is
    kept: there is no store to share), and contexts may be open side by side."""
    c = weft.init()
    c.finalize()
    c = weft.init()
    other = weft.init()
    assert c.namespace == other.namespace == "weft"
    x = np.ones(2, np.float32)
    other.world.allreduce(x)
    other.finalize()
    c.finalize()
