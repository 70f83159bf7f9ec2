#!/usr/bin/env python3
"""Activation offload (weft.torch.ActivationOffload) against no offload on the demo's
language model body (examples/torch_lm/model.py), and the spill space's write and read
rates against dd's O_DIRECT rates on the same directory.

    perf/offload_bench.py [--dir D] [--seq 1024] [--batch 4] [--layers 8] [--d 256]
                          [--heads 4] [--steps 4] [--rounds 3] [--keep-last 1]

Each round runs both sides, alternating which goes first, each in a fresh process (so
each process's peak RSS is its own), with the same initial weights and batches. Reported
per side, medians over rounds: step time (median of the steps after the first), the
most bytes of saved activations held in memory at once (ActivationOffload's count; the
baseline counts with enabled=False); then one more run per side gives the process's peak
RSS growth over the steps, with glibc's mmap threshold fixed so that freed memory shows.
Losses and gradients are compared bit for bit through a SHA-256 of their bytes. Then the
spill space writes and reads 1 GiB in 64 MiB blocks, alternating with fio on the same
directory and the spill space's own request size and depth (1 MiB, 8 in flight, O_DIRECT,
io_uring): the device's rate, the physical limit here (dd with O_DIRECT where fio is
missing).
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(args, offload):
    """One side: steps of forward and backward, as a JSON line."""
    import torch
    import weft
    import weft.torch as wt
    from torch_lm.model import Body

    weft.init()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    body = Body(args.d, args.heads, args.layers, args.seq)
    emb = torch.nn.Embedding(1000, args.d)
    head = torch.nn.Linear(args.d, 1000)
    params = list(body.parameters()) + list(emb.parameters()) + list(head.parameters())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 1000, (args.batch, args.seq), generator=g),
                torch.randint(0, 1000, (args.batch, args.seq), generator=g))
               for _ in range(args.steps)]
    off = wt.ActivationOffload(args.dir, enabled=offload, min_bytes=1 << 20,
                               layers=body.blocks if offload else None,
                               keep_last=args.keep_last if offload else 0,
                               chunk_bytes=args.chunk_kib << 10,
                               queue_depth=args.queue_depth)
    times, fwd, digest = [], [], hashlib.sha256()
    rss0 = rss_bytes()
    for x, y in batches:
        for p in params:
            p.grad = None
        t0 = time.perf_counter()
        with off:
            logits = head(body(emb(x)))
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        fwd.append(time.perf_counter() - t0)
        loss.backward()
        times.append(time.perf_counter() - t0)
        digest.update(loss.detach().numpy().tobytes())
        for p in params:
            digest.update(p.grad.numpy().tobytes())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    s = off.stats()
    print(json.dumps({"step_s": statistics.median(times[1:] or times),
                      "forward_s": statistics.median(fwd[1:] or fwd),
                      "resident_peak": s.resident_peak, "rss_growth": max(0, peak - rss0),
                      "offloaded": s.bytes_offloaded, "kept": s.bytes_kept,
                      "forwarded": s.bytes_forwarded, "read": s.bytes_read,
                      "dedup": s.bytes_deduplicated, "written": s.bytes_written,
                      "wait_s": s.wait_s, "sha": digest.hexdigest()}))


def side(args, offload, rss=False):
    cmd = [sys.executable, __file__, "--one", "on" if offload else "off"] + args.passthru
    env = dict(os.environ)
    if rss:
        # glibc keeps freed memory below its dynamic mmap threshold (up to 32 MiB) in the
        # heap, so peak RSS would not show memory given back; a fixed threshold makes
        # every large tensor its own mapping, on both sides alike. Only for the RSS runs:
        # it also makes every allocation fault its pages anew, which is not what a
        # program sees by default, so step times come from runs without it.
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def spill_rates(d, total=1 << 30, block=64 << 20):
    import numpy as np
    import weft
    data = np.random.default_rng(0).integers(0, 255, block, dtype=np.uint8)
    blocks = total // block
    with weft.Spill(d) as sp:
        t0 = time.perf_counter()
        ids = []
        for i in range(blocks):
            data.reshape(-1, 4096)[:, :8] = i  # distinct content: nothing deduplicated
            bid = sp.write(data)
            sp.wait(bid, weft.Spill.SOURCE_FREE)
            ids.append(bid)
        for bid in ids:
            sp.wait(bid, weft.Spill.STORED)
        w = total / (time.perf_counter() - t0)
        # four reads queued at once, into buffers touched before (as fio's are)
        outs = [np.zeros(block, np.uint8) for _ in range(4)]
        t0 = time.perf_counter()
        for i, bid in enumerate(ids):
            if i >= 4:
                sp.wait(ids[i - 4], weft.Spill.LOADED)
            sp.read(bid, outs[i % 4])
        for bid in ids[-4:]:
            sp.wait(bid, weft.Spill.LOADED)
        r = total / (time.perf_counter() - t0)
        direct = sp.stats().direct
    return w, r, direct


def fio_rates(d, total=1 << 30):
    """fio with the spill space's defaults: 1 MiB requests, 8 in flight, io_uring, O_DIRECT."""
    rates = []
    for rw in ("write", "read"):
        out = subprocess.run(["fio", "--name=ref", "--directory=" + d, "--rw=" + rw,
                              "--bs=1M", "--size=%d" % total, "--direct=1",
                              "--ioengine=io_uring", "--iodepth=8", "--output-format=json"],
                             check=True, capture_output=True, text=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0][rw]
        rates.append(job["bw_bytes"])
    for f in os.listdir(d):
        if f.startswith("ref."):
            os.unlink(os.path.join(d, f))
    return tuple(rates)


def dd_rates(d, total=1 << 30):
    f = os.path.join(d, "dd.bin")
    n = total // (4 << 20)
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", "of=" + f, "bs=4M", "count=%d" % n, "oflag=direct",
                    "conv=fsync"], check=True, capture_output=True)
    w = total / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=" + f, "of=/dev/null", "bs=4M", "iflag=direct"], check=True,
                   capture_output=True)
    r = total / (time.perf_counter() - t0)
    os.unlink(f)
    return w, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep-last", type=int, default=1)
    ap.add_argument("--chunk-kib", type=int, default=0, help="spill chunk (0: its default)")
    ap.add_argument("--queue-depth", type=int, default=0, help="spill depth (0: its default)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch's compute threads on both sides (0: one per core)")
    ap.add_argument("--one", choices=["on", "off"])
    args = ap.parse_args()
    own = args.dir is None
    if own:
        args.dir = tempfile.mkdtemp(prefix="weft-offload-", dir="/var/tmp")
    if args.one:
        one(args, args.one == "on")
        return
    args.passthru = ["--dir", os.path.join(args.dir, "act"), "--seq", str(args.seq),
                     "--batch", str(args.batch), "--layers", str(args.layers), "--d",
                     str(args.d), "--heads", str(args.heads), "--steps", str(args.steps),
                     "--keep-last", str(args.keep_last), "--chunk-kib", str(args.chunk_kib),
                     "--queue-depth", str(args.queue_depth), "--threads", str(args.threads)]
    res = {True: [], False: []}
    for r in range(args.rounds):
        for offload in ((False, True) if r % 2 == 0 else (True, False)):
            res[offload].append(side(args, offload))
            x = res[offload][-1]
            print("round %d %-7s step %.3f s  resident peak %7.1f MiB  RSS growth %7.1f MiB"
                  " (default malloc)  offloaded %7.1f MiB forwarded %6.1f read %7.1f wait %.3f s" % (
                      r, "offload" if offload else "none", x["step_s"],
                      x["resident_peak"] / 2**20, x["rss_growth"] / 2**20,
                      x["offloaded"] / 2**20, x["forwarded"] / 2**20, x["read"] / 2**20,
                      x["wait_s"]), flush=True)
    rss = {}
    for offload in (False, True):  # one more run each, for peak RSS only
        rss[offload] = side(args, offload, rss=True)
    shas = {x["sha"] for x in res[True] + res[False] + list(rss.values())}
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("step_s", "resident_peak",
                                                              "wait_s")}
           for k, v in res.items()}
    for k in med:
        med[k]["rss_growth"] = rss[k]["rss_growth"]
    on, off = med[True], med[False]
    print("losses and gradients bitwise equal across every run: %s" % (len(shas) == 1))
    print("saved activations in memory, peak: %.1f MiB -> %.1f MiB (%.0f%% lower)" % (
        off["resident_peak"] / 2**20, on["resident_peak"] / 2**20,
        100 * (1 - on["resident_peak"] / off["resident_peak"])))
    print("process RSS growth, peak (fixed mmap threshold): %.1f MiB -> %.1f MiB "
          "(%.0f%% lower)" % (
        off["rss_growth"] / 2**20, on["rss_growth"] / 2**20,
        100 * (1 - on["rss_growth"] / max(off["rss_growth"], 1))))
    paired = [a["step_s"] / b["step_s"] for a, b in zip(res[True], res[False])]
    print("step time: %.3f s -> %.3f s (offload / none: %.3f of the medians, %.3f the median "
          "of each round's pair; rounds %s); backward waited %.3f s" % (
              off["step_s"], on["step_s"], on["step_s"] / off["step_s"],
              statistics.median(paired), " ".join("%.3f" % p for p in paired), on["wait_s"]))
    fwd_layer = statistics.median(x["forward_s"] for x in res[False]) / args.layers
    per_layer = statistics.median(x["offloaded"] for x in res[True]) / args.steps / \
        max(1, args.layers - args.keep_last)
    import weft
    weft.init()  # the spill space's requests belong to a context
    ref = "fio" if shutil.which("fio") else "dd"
    rates = {"spill": [], ref: []}
    sd = os.path.join(args.dir, "rate")
    os.makedirs(sd, mode=0o700, exist_ok=True)
    direct = None
    for r in range(args.rounds):
        for who in (("spill", ref) if r % 2 == 0 else (ref, "spill")):
            if who == "spill":
                w, rd, direct = spill_rates(sd)
            else:
                w, rd = fio_rates(sd) if ref == "fio" else dd_rates(sd)
            rates[who].append((w, rd))
    for who, v in rates.items():
        print("%-5s write %.2f GB/s  read %.2f GB/s" % (
            who, statistics.median(x[0] for x in v) / 1e9, statistics.median(x[1] for x in v) / 1e9))
    sw = statistics.median(x[0] for x in rates["spill"])
    sr = statistics.median(x[1] for x in rates["spill"])
    dw = statistics.median(x[0] for x in rates[ref])
    dr = statistics.median(x[1] for x in rates[ref])
    print("spill / %s: write %.2fx, read %.2fx (spill O_DIRECT: %s)" % (ref, sw / dw, sr / dr,
                                                                       direct))
    print("per layer: forward compute %.3f s (no offload), its offloaded activations %.1f MiB, "
          "written in %.3f s at the spill rate" % (fwd_layer, per_layer / 2**20, per_layer / sw))
    if own:
        shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
