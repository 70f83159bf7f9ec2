#!/usr/bin/env python3
"""The pipeline trainer (examples/torch_pipeline_lm.py) against its one-process reference
at a tiny size: every schedule, and vocab-1 interleaved (2 chunks per stage), with tied
embeddings, label smoothing and (vocab schedules) a blocked output layer, over 3 stages; plain SGD so that a step does not
amplify float32 rounding. The losses must agree to 1e-5 and every parameter to 1e-5 of
its tensor's largest magnitude; the vocab schedules' last stage must not hold the whole
output layer (its peak RSS is reported, not compared: that is the benchmark's job).

    pipeline_check.py WEFTRUN PYTHON OUTDIR
"""

import json
import os
import subprocess
import sys

import torch

weftrun, python, out = sys.argv[1], sys.argv[2], sys.argv[3]
here = os.path.dirname(os.path.abspath(__file__))
example = os.path.join(here, "..", "..", "examples", "torch_pipeline_lm.py")
common = ["--steps", "2", "--microbatches", "6", "--optimizer", "sgd", "--lr", "0.5",
          "--tied", "--label-smoothing", "0.1", "--layers", "6", "--d-model", "32",
          "--seq", "16", "--vocab", "1000"]
os.makedirs(out, exist_ok=True)


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=240)


ref_path = os.path.join(out, "ref.json")
run([python, example, "--reference", "--out", ref_path] + common)
ref = json.load(open(ref_path))
ref_params = torch.load(ref_path + ".pt")
bad = []
for kind, chunks in (("1f1b", 1), ("vocab-1", 1), ("vocab-2", 1), ("vocab-1", 2)):
    path = os.path.join(out, "%s-%d.json" % (kind, chunks))
    extra = ["--block-rows", "97"] if kind != "1f1b" else []
    extra += ["--chunks", str(chunks)]
    run([weftrun, "-n", "3", "--timeout", "200", "--", python, example, "--schedule", kind,
         "--out", path] + common + extra)
    got = json.load(open(path))
    params = torch.load(path + ".pt")
    if sorted(params) != sorted(ref_params):
        bad.append("%s: parameters %s, reference %s" % (kind, sorted(params), sorted(ref_params)))
        continue
    for a, b in zip(got["losses"], ref["losses"]):
        if abs(a - b) > 1e-5 * max(1.0, abs(b)):
            bad.append("%s: losses %s, reference %s" % (kind, got["losses"], ref["losses"]))
            break
    for name, want in ref_params.items():
        err = (params[name] - want).abs().max().item() / max(want.abs().max().item(), 1e-12)
        if err > 1e-5:
            bad.append("%s: %s off by %.3g of its largest magnitude" % (kind, name, err))
    print("%s, %d chunk(s): losses %s (reference %s); stages busy %s s, idle %s s, peak RSS %s MiB" % (
        kind, chunks, got["losses"], ref["losses"],
        ["%.2f" % v for v in got["stage_busy_s"]],
        ["%.2f" % v for v in got["stage_idle_s"]],
        ["%.0f" % (v / 2**20) for v in got["stage_peak_rss"]]))
if bad:
    print("pipeline_check: FAIL\n  " + "\n  ".join(bad))
    sys.exit(1)
print("pipeline_check: PASS")
