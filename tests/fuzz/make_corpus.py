#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed-*):

    make_corpus.py [DIR]

DIR is the corpus folder (default: the one beside this script). Seeds are named
seed-<what>; inputs a campaign found (crashes, by their libFuzzer names) sit beside them
and are kept. The script formats are those in the comments of fuzz_store.c and
fuzz_decision.c; frames follow comm/store/proto.h.
"""
import os
import struct
import sys

HELLO, AUTH, SET, GET, ADD, DELETE, WATCH, RESP, EVENT, SET_NX, LEASE, SCAN = range(1, 13)


def frame(kind, body, length=None, rid=0):
    """A frame; its last three header bytes are the request id (big-endian)."""
    n = len(body) if length is None else length
    return struct.pack(">IB", n, kind) + rid.to_bytes(3, "big") + body


def kv(kind, key, rest=b"", rid=0):
    return frame(kind, struct.pack(">H", len(key)) + key + rest, rid=rid)


def feed(conn, data, piece=0):
    return bytes([conn | piece << 4]) + struct.pack(">H", len(data)) + data


def close(conn):
    return bytes([conn | 1 << 2])


def poll(conn):
    return bytes([conn | 2 << 2])


def host_set(key, val):
    return bytes([3 << 2, len(key)]) + key + bytes([len(val)]) + val


def script(nconns, authenticated, *records):
    return bytes([(nconns - 1) | authenticated << 2]) + b"".join(records)


def store_seeds():
    u32 = lambda v: struct.pack(">I", v)
    i64 = lambda v: struct.pack(">q", v)
    yield "set-get", script(1, 1, feed(0, kv(SET, b"a", b"1") + kv(GET, b"a", u32(0))))
    yield "get-miss", script(1, 1, feed(0, kv(GET, b"nope", u32(0))))
    yield "add", script(1, 1, feed(0, kv(ADD, b"n", i64(5)) + kv(ADD, b"n", i64(-7))))
    yield "add-overflow", script(1, 1, feed(0, kv(ADD, b"n", i64(2**63 - 1)) + kv(ADD, b"n", i64(1))))
    yield "add-not-number", script(1, 1, feed(0, kv(SET, b"n", b"x1") + kv(ADD, b"n", i64(1))))
    yield "delete", script(1, 1, feed(0, kv(SET, b"k", b"v") + kv(DELETE, b"k") + kv(DELETE, b"k")))
    yield "set-nx", script(2, 3, feed(0, kv(SET_NX, b"d", b"one")), feed(1, kv(SET_NX, b"d", b"two")))
    yield "park-then-set", script(
        2, 3, feed(0, kv(GET, b"w", u32(60000)) + kv(SET, b"later", b"")), feed(1, kv(SET, b"w", b"v")),
        poll(0))
    yield "watch", script(
        2, 3, feed(0, kv(SET, b"p/1", b"x")), feed(1, kv(WATCH, b"p/")), feed(0, kv(SET, b"p/2", b"y")),
        poll(1), feed(1, kv(GET, b"p/1", u32(0))))
    yield "watch-empty-prefix", script(2, 3, feed(1, kv(WATCH, b"")), host_set(b"h", b"v"), poll(1))
    yield "lease-fires", script(
        2, 3, feed(1, kv(WATCH, b"dead/")), feed(0, kv(LEASE, b"dead/0", u32(60000) + b"gone")),
        close(0), poll(1))
    yield "lease-disarm", script(1, 1, feed(0, kv(LEASE, b"k", u32(60000) + b"v") + kv(LEASE, b"k", u32(0))))
    yield "split-frames", script(1, 1, feed(0, kv(SET, b"key", b"value" * 10) + kv(GET, b"key", u32(0)), 3))
    yield "auth-wrong", script(1, 0, feed(0, frame(AUTH, b"\0" * 32)), poll(0))
    yield "auth-short", script(1, 0, feed(0, frame(AUTH, b"\0" * 31)))
    yield "request-before-auth", script(1, 0, feed(0, kv(SET, b"a", b"1")))
    yield "bad-type", script(1, 1, feed(0, frame(RESP, b"\0\0\0\0")))
    yield "request-ids", script(1, 1, feed(0, frame(SET, b"\0\1a", rid=0x000100) +
                                          kv(GET, b"a", u32(0), rid=0xffffff)))
    yield "many-waits", script(
        2, 3, feed(0, b"".join(kv(GET, b"w%d" % (i % 3), u32(60000), rid=i + 1) for i in range(70))),
        feed(1, kv(SET, b"w1", b"v")), poll(0), close(0), feed(1, kv(SET, b"w0", b"v")))
    yield "wait-then-lease", script(
        1, 1, feed(0, kv(GET, b"w", u32(60000), rid=1) + kv(LEASE, b"dead/0", u32(60000) + b"x", rid=2)
                   + kv(WATCH, b"dead/", rid=3) + kv(LEASE, b"dead/0", u32(0), rid=4)), poll(0))
    yield "oversized", script(1, 1, feed(0, frame(SET, b"", length=(1 << 20) + 1)))
    yield "truncated", script(1, 1, feed(0, frame(SET, b"\0\1a", length=100)), close(0))
    yield "key-past-body", script(1, 1, feed(0, frame(SET, b"\1\0ab")))
    yield "key-nul", script(1, 1, feed(0, kv(SET, b"a\0b", b"v")))
    yield "empty-key", script(1, 1, feed(0, kv(SET, b"", b"v")))
    yield "get-bad-rest", script(1, 1, feed(0, kv(GET, b"a", b"\0")))
    yield "request-on-watch", script(1, 1, feed(0, kv(WATCH, b"x") + kv(SET, b"x", b"") + kv(WATCH, b"")))
    yield "host-set", script(1, 1, host_set(b"from-host", b"v"), feed(0, kv(GET, b"from-host", u32(0))))
    yield "four-conns", script(
        4, 15, feed(0, kv(SET, b"a", b"1")), feed(1, kv(WATCH, b"a")), feed(2, kv(GET, b"b", u32(100))),
        feed(3, kv(SET, b"b", b"2")), close(1), poll(2))
    scan = lambda timeout, count, budget, after=b"": u32(timeout) + u32(count) + u32(budget) + after
    yield "scan", script(
        1, 1, feed(0, kv(SET, b"s/1", b"a") + kv(SET, b"s/10", b"b") + kv(SET, b"s/2", b"c")
                   + kv(SCAN, b"s/", scan(0, 0, 0), rid=1) + kv(SCAN, b"", scan(0, 0, 0), rid=2)))
    yield "scan-pages", script(
        1, 1, feed(0, b"".join(kv(SET, b"p/%d" % i, b"v" * i) for i in range(12))
                   + kv(SCAN, b"p/", scan(0, 0, 20), rid=1) + kv(SCAN, b"p/", scan(0, 0, 1, b"p/3"), rid=2)
                   + kv(SCAN, b"p/", scan(0, 0, 0, b"p/99"), rid=3)))
    yield "scan-parked", script(
        2, 3, feed(0, kv(SCAN, b"w/", scan(60000, 2, 0), rid=1) + kv(SCAN, b"w/", scan(60000, 3, 0), rid=2)),
        feed(1, kv(SET, b"w/a", b"1") + kv(SET, b"w/a", b"2") + kv(SET, b"w/b", b"3")
             + kv(DELETE, b"w/a") + kv(SET, b"w/c", b"4") + kv(SET, b"w/d", b"5")), poll(0))
    yield "scan-host-set", script(
        2, 3, feed(0, kv(SCAN, b"h/", scan(60000, 1, 0), rid=7)), host_set(b"h/1", b"v"), poll(0),
        feed(1, kv(SCAN, b"h/", scan(60000, 5, 0), rid=8)), close(1), host_set(b"h/2", b"v"))
    yield "scan-expires", script(1, 1, feed(0, kv(SCAN, b"e/", scan(1, 1, 0), rid=1)), poll(0), poll(0))
    yield "scan-many", script(
        2, 3, feed(0, b"".join(kv(SCAN, b"m/", scan(0, 0, 0), rid=i + 1) for i in range(70))),
        feed(1, kv(SET, b"m/1", b"x")), poll(0), close(0))
    yield "scan-short-args", script(1, 1, feed(0, kv(SCAN, b"s/", u32(0) + u32(0))))
    yield "scan-after-nul", script(1, 1, feed(0, kv(SCAN, b"s/", scan(0, 0, 0, b"a\0b"))))
    yield "scan-after-long", script(1, 1, feed(0, kv(SCAN, b"s/", scan(0, 0, 0, b"k" * 257))))
    yield "scan-before-auth", script(1, 0, feed(0, kv(SCAN, b"", scan(0, 0, 0))))


def decision(kind, epoch, join_hi, members, n=None, magic=0x77656674):
    n = len(members) if n is None else n
    return struct.pack("<5I", magic, kind, epoch, join_hi, n) + struct.pack(f"<{len(members)}i", *members)


def decision_seeds():
    yield "repair", decision(1, 1, 0, [0, 1, 3])
    yield "grow", decision(2, 7, 2, [0, 1, 2, 3, 4, 5])
    yield "one", decision(1, 2, 0, [65535])
    yield "empty", decision(1, 1, 0, [])
    yield "negative-member", decision(1, 1, 0, [0, -1])
    yield "member-too-large", decision(1, 1, 0, [65536])
    yield "duplicate", decision(1, 1, 0, [2, 2])
    yield "bad-kind", decision(9, 1, 0, [0])
    yield "bad-magic", decision(1, 1, 0, [0], magic=0)
    yield "count-too-large", decision(1, 1, 0, [0], n=1 << 17)
    yield "short", decision(1, 1, 0, [0, 1])[:-2]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    for target, seeds in (("store", store_seeds), ("decision", decision_seeds)):
        os.makedirs(os.path.join(root, target), exist_ok=True)
        for name, data in seeds():
            with open(os.path.join(root, target, "seed-" + name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
