"""weft.Spill and weft.torch.ActivationOffload: a small transformer-like model trained a few
steps with its saved activations offloaded gives losses and gradients bitwise equal to
the run without; storage dedup, forwarding and prefetch counted; a failing write, a full
space and a full filesystem raise from backward with the reason; a dropped graph and a
killed process leave nothing behind; bad arguments."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import torch_or_skip

import weft  # noqa: E402

torch = torch_or_skip()
import weft.torch as wt  # noqa: E402

D = 64

pytestmark = pytest.mark.usefixtures("ctx")  # spill spaces belong to a context


class Block(torch.nn.Module):
    """LayerNorm, q/k/v from one input (saved three times: dedup), an MLP, residuals."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(D)
        self.q, self.k, self.v = (torch.nn.Linear(D, D) for _ in range(3))
        self.up, self.down = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        h = self.ln(x)
        a = torch.softmax(self.q(h) @ self.k(h).transpose(-1, -2) / D ** 0.5, -1) @ self.v(h)
        x = x + a
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Model(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(n))
        self.head = torch.nn.Linear(D, 7)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return torch.nn.functional.cross_entropy(self.head(x).flatten(0, 1), y.flatten())


def batches(steps, seq=96):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, seq, D, generator=g), torch.randint(0, 7, (2, seq), generator=g))
            for _ in range(steps)]


def train(make_off, steps=3):
    """Losses, and the parameters and gradients of the last step; make_off(model) gives the
    ActivationOffload (or None)."""
    model = Model()
    off = make_off(model) if make_off is not None else None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches(steps):
        opt.zero_grad()
        if off is None:
            loss = model(x, y)
        else:
            with off:
                loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses, [p.detach().clone() for p in model.parameters()], \
        [p.grad.clone() for p in model.parameters()]


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.fixture
def space(tmp_path):
    return str(tmp_path / "spill")


def test_spill_round_trip(space):
    with weft.Spill(space, chunk_bytes=8192, queue_depth=2) as sp:
        data = np.random.default_rng(0).random(50000)
        bid = sp.write(data)
        sp.wait(bid, weft.Spill.SOURCE_FREE)
        out = np.empty_like(data)
        sp.read(bid, out)
        sp.wait(bid, weft.Spill.LOADED | weft.Spill.STORED)
        assert np.array_equal(out, data)
        t = torch.arange(1000, dtype=torch.float32)
        tid = sp.write(t)
        back = torch.empty(1000)
        v = back._version
        sp.read(tid, back)
        sp.wait(tid, weft.Spill.LOADED)
        assert torch.equal(back, t) and back._version > v
        st = sp.stats()
        assert st.bytes_submitted == data.nbytes + 4000 and st.blocks_held == 2
        sp.free(bid)
        with pytest.raises(weft.InvalidArgument, match="no block"):
            sp.state(bid)
        with pytest.raises(weft.InvalidArgument, match="holds"):
            sp.read(tid, torch.empty(999))
    assert os.listdir(space) == []
    with pytest.raises(weft.InvalidArgument, match="freed"):
        sp.write(data)


@pytest.mark.parametrize("keep_last", [0, 1])
def test_offload_bitwise(space, keep_last):
    ref = train(None)
    offs = []

    def make(model):
        offs.append(wt.ActivationOffload(space, min_bytes=16 << 10, layers=model.blocks,
                                         keep_last=keep_last, chunk_bytes=16 << 10))
        return offs[0]

    got = train(make)
    for r, g in zip(ref, got):
        assert_bitwise(r, g)
    s = offs[0].stats()
    assert s.bytes_offloaded > 0 and s.bytes_kept > 0
    assert s.bytes_read + s.bytes_forwarded == s.bytes_offloaded
    assert offs[0].spill.stats().blocks_held == 0


def test_keep_last(space):
    """The last k blocks' saves stay in memory (and what runs after the last block, the
    head and the loss, with them): each block kept moves its bytes from offloaded to
    kept."""
    got = {}
    for k in (0, 1, 2):
        offs = []

        def make(model):
            offs.append(wt.ActivationOffload("%s%d" % (space, k), min_bytes=16 << 10,
                                             layers=model.blocks, keep_last=k))
            return offs[0]

        train(make, steps=1)
        got[k] = offs[0].stats()
    block = got[1].bytes_offloaded - got[2].bytes_offloaded
    assert block > 0
    assert got[0].bytes_offloaded - got[1].bytes_offloaded > block  # a block and the head
    for s in got.values():
        assert s.bytes_saved == got[0].bytes_saved
        assert s.bytes_kept + s.bytes_offloaded + s.bytes_deduplicated == s.bytes_saved


def test_offload_counts_and_memory(space):
    base = wt.ActivationOffload(space + "0", enabled=False)
    train(lambda m: base, steps=1)
    b = base.stats()
    assert b.bytes_offloaded == 0 and b.resident_peak > 0
    off = wt.ActivationOffload(space, min_bytes=16 << 10, prefetch_bytes=0)
    train(lambda m: off, steps=1)
    s = off.stats()
    assert s.bytes_saved == b.bytes_saved
    # q, k and v each save the LayerNorm's output: written once, twice deduplicated
    per_block = 2 * 96 * D * 4
    assert s.bytes_deduplicated >= 2 * 4 * per_block
    assert s.bytes_read + s.bytes_forwarded == s.bytes_offloaded
    assert s.resident_peak < b.resident_peak
    assert os.listdir(space) == []


def test_forwarding(space):
    """A tensor whose bytes are not yet taken is handed back from memory."""
    off = wt.ActivationOffload(space, min_bytes=16 << 10)
    stalled = {"on": True}
    real_state = off.spill.state
    off.spill.state = lambda bid: 0 if stalled["on"] else real_state(bid)
    ref = train(None, steps=1)
    got = train(lambda m: off, steps=1)
    for r, g in zip(ref, got):
        assert_bitwise(r, g)
    s = off.stats()
    assert s.bytes_forwarded == s.bytes_offloaded > 0 and s.bytes_read == 0


def test_dropped_graph_frees(space):
    off = wt.ActivationOffload(space, min_bytes=16 << 10)
    model = Model()
    x, y = batches(1)[0]
    with off:
        loss = model(x, y)
    assert off.spill.stats().blocks_held > 0
    del loss
    import gc
    gc.collect()
    assert off.spill.stats().blocks_held == 0


@pytest.mark.parametrize("how,says", [("fail_write", "Input/output error"),
                                      ("max_bytes", "max_bytes")])
def test_failure_raises(space, how, says):
    args = {"fail_write": 5} if how == "fail_write" else {"max_bytes": 64 << 10}
    off = wt.ActivationOffload(space, min_bytes=16 << 10, chunk_bytes=16 << 10, **args)
    # torch's engine hands an error of a hook on as a RuntimeError carrying its text
    with pytest.raises(RuntimeError, match="WEFT_ERR_IO.*cannot be read back.*" + says):
        train(lambda m: off, steps=1)


def test_full_filesystem(tmp_path):
    """A real full directory: a 256 KiB tmpfs in a user and mount namespace."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not allowed here")
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = textwrap.dedent("""
        import sys, weft, weft.torch as wt
        sys.path.insert(0, %r)
        from test_offload import train
        weft.init()
        off = wt.ActivationOffload(%r, min_bytes=16 << 10, buffered=True)
        try:
            train(lambda m: off, steps=1)
        except RuntimeError as e:
            print("RAISED", e)
    """) % (os.path.dirname(__file__), str(mnt / "spill"))
    cmd = "mount -t tmpfs -o size=256k none %s && exec %s -c %s" % (
        mnt, sys.executable, subprocess.list2cmdline([script]))
    r = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=120, env=os.environ)
    assert "RAISED" in r.stdout and "No space left on device" in r.stdout, r.stdout + r.stderr


def test_killed_leaves_nothing(tmp_path):
    d = tmp_path / "spill"
    script = textwrap.dedent("""
        import sys, weft, weft.torch as wt
        sys.path.insert(0, %r)
        from test_offload import Model, batches
        weft.init()
        model = Model()
        off = wt.ActivationOffload(%r, min_bytes=16 << 10)
        x, y = batches(1, seq=512)[0]
        with off:
            loss = model(x, y)
        print("forward done", off.spill.stats().blocks_held, flush=True)
        sys.stdin.read()
    """) % (os.path.dirname(__file__), str(d))
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=os.environ)
    line = p.stdout.readline()
    assert line.startswith("forward done") and int(line.split()[2]) > 0, line
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert os.listdir(d) == []


def test_bad_arguments(space):
    with pytest.raises(ValueError, match="keep_last needs layers"):
        wt.ActivationOffload(space, keep_last=1)
    with pytest.raises(ValueError):
        wt.ActivationOffload(space, min_bytes=-1)
    with pytest.raises(weft.InvalidArgument, match="chunk size"):
        wt.ActivationOffload(space, chunk_bytes=1000)
    off = wt.ActivationOffload(space)
    with pytest.raises(RuntimeError, match="already active"):
        with off:
            with off:
                pass
    os.chmod(space, 0o755)
    with pytest.raises(weft.InvalidArgument, match="0755"):
        weft.Spill(space)
