"""Context.kv_* (weft_kv_*): the job's key-value space. Under weftrun every rank sets its
own keys and reads the others' (waiting for those not set yet), adds to one counter, and
reads a value longer than the binding's first buffer; alone (no store) every call raises
weft.OtherError with WEFT_ERR_UNSUPPORTED."""

import pytest

import weft


def test_peers_and_counter(ctx, world):
    if world.size < 2:
        pytest.skip("needs a store (weftrun)")
    me, n = world.rank, world.size
    ctx.kv_set("py/rank/%d" % me, "rank %d" % me)
    ctx.kv_set(b"py/bytes/%d" % me, bytes(range(256)) * 3 + bytes([me]))  # 769 bytes
    for r in range(n):
        assert ctx.kv_get("py/rank/%d" % r, timeout=30) == b"rank %d" % r
        assert ctx.kv_get("py/bytes/%d" % r, timeout=30) == bytes(range(256)) * 3 + bytes([r])
    total = ctx.kv_add("py/sum", me + 1)
    assert me + 1 <= total <= n * (n + 1) // 2
    ctx.kv_add("py/added")
    while ctx.kv_add("py/added", 0) < n:
        pass
    assert ctx.kv_add("py/sum", 0) == n * (n + 1) // 2
    world.barrier()


def test_edges(ctx, world):
    if world.size < 2:
        pytest.skip("needs a store (weftrun)")
    key = "py/edge/%d" % world.rank
    with pytest.raises(weft.Timeout):
        ctx.kv_get(key, timeout=0)
    with pytest.raises(weft.Timeout):
        ctx.kv_get(key, timeout=0.12)
    ctx.kv_set(key, b"")
    assert ctx.kv_get(key, timeout=0) == b""
    assert ctx.kv_delete(key) is True
    assert ctx.kv_delete(key) is False
    ctx.kv_set(key, "text")
    with pytest.raises(weft.InvalidArgument, match="no decimal counter"):
        ctx.kv_add(key, 1)
    for bad in ("", "é", "a\nb", b"a\0b", "k" * (weft.kv.KV_MAX_KEY + 1)):
        with pytest.raises(weft.InvalidArgument):
            ctx.kv_set(bad, b"v")
    with pytest.raises(weft.InvalidArgument):
        ctx.kv_set(3, b"v")
    with pytest.raises(weft.InvalidArgument):
        ctx.kv_set(key, 3)
    with pytest.raises(weft.InvalidArgument):
        ctx.kv_set(key, b"v" * (weft.kv.KV_MAX_VALUE + 1))
    with pytest.raises(weft.InvalidArgument):
        ctx.kv_get(key, timeout=-1)


def test_without_store(ctx, world):
    if world.size > 1:
        pytest.skip("one process without a launcher")
    with pytest.raises(weft.Error) as e:
        ctx.kv_set("a", b"b")
    assert e.value.status == weft.Status.ERR_UNSUPPORTED and "no store" in e.value.detail
    with pytest.raises(weft.Error):
        ctx.kv_get("a", timeout=0)
