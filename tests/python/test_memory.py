"""weft.memory.empty: arrays in weft_mem_alloc memory, zeroed, writable, 2 MiB aligned from
2 MiB up and backed by huge pages where the kernel gives them, shared by torch without a
copy, freed with their last view; bad shapes refused."""

import gc

import numpy as np
import pytest

import weft


def _thp_on():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def _huge_kb_at(addr):
    """AnonHugePages (kB) of the mapping holding @p addr, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return -1


def test_zeroed_writable_aligned():
    a = weft.memory.empty((1024, 1024), "float32")
    assert a.shape == (1024, 1024) and a.dtype == np.float32
    assert not a.any()
    a[:] = 3.5
    assert float(a.sum()) == 3.5 * 1024 * 1024
    assert a.ctypes.data % (2 << 20) == 0
    small = weft.memory.empty(7, np.int64)
    assert small.shape == (7,) and not small.any()
    assert weft.memory.empty((0, 5), weft.F64).size == 0


def test_huge_pages_where_the_kernel_gives_them():
    if not _thp_on():
        pytest.skip("transparent huge pages are off")
    a = weft.memory.empty(16 << 20, np.uint8)
    a[:] = 1
    assert _huge_kb_at(a.ctypes.data) >= 2048


def test_freed_with_the_last_view():
    a = weft.memory.empty(4 << 20, np.uint8)
    view = a[10:20]
    addr = a.ctypes.data
    del a
    gc.collect()
    view[:] = 7  # the view keeps the memory
    assert _huge_kb_at(addr) != -1
    del view
    gc.collect()
    assert _huge_kb_at(addr) == -1  # unmapped


def test_torch_shares_it():
    torch = pytest.importorskip("torch")
    a = weft.memory.empty((256, 256), "float32")
    t = torch.from_numpy(a)
    t += 2
    assert float(a[0, 0]) == 2.0 and t.data_ptr() == a.ctypes.data


def test_bad_shapes_refused():
    with pytest.raises(weft.InvalidArgument):
        weft.memory.empty((-1, 4))
    with pytest.raises(weft.InvalidArgument):
        weft.memory.empty((2.5,))
