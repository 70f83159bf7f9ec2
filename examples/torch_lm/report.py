#!/usr/bin/env python3
"""Compare a run of examples/torch_elastic_lm.py that lost a rank with one that did not,
and plot both loss curves.

    report.py REFERENCE.json FAILED.json [--png loss.png]

Exits 1 unless they match bit for bit: the same corpus and model, every step's loss
(float32 bits, the steps computed again after the restore included) and the SHA-256 of
every tensor at the end (parameters and Adam's moments). The PNG needs matplotlib; without
it the comparison still runs.
"""

import argparse
import json
import sys

SAME_CONFIG = ("steps", "layers", "d_model", "heads", "seq", "batch", "vocab", "lr", "seed",
               "corpus_mb")


def load(path):
    with open(path) as f:
        return json.load(f)


def compare(ref, run):
    """A list of differences (empty: bitwise equal)."""
    bad = []
    for key in SAME_CONFIG:
        if ref["config"][key] != run["config"][key]:
            bad.append("config %s: %r vs %r" % (key, ref["config"][key], run["config"][key]))
    if ref["corpus_digest"] != run["corpus_digest"]:
        bad.append("the corpora differ")
    for step, (loss, bits, *_rest) in ref["losses"].items():
        other = run["losses"].get(step)
        if other is None:
            bad.append("step %s: missing from the run with a failure" % step)
        elif other[1] != bits:
            bad.append("step %s: loss %.9g (%s) vs %.9g (%s)" % (step, loss, bits, other[0],
                                                                 other[1]))
    for name, digest in ref["digests"].items():
        if run["digests"].get(name) != digest:
            bad.append("tensor %s differs at the end" % name)
    return bad


def failure_of(run):
    """(step failed in, step restored) of the run's first recovery, or None."""
    ev = {e["what"]: e for e in run["events"]}
    if "repair" not in ev or "restore" not in ev:
        return None
    return ev["repair"]["step"], ev["restore"]["step"]


def plot(ref, run, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib is missing: no %s (apt-get install python3-matplotlib)" %
              path)
        return
    fig, (top, low) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 1.2]})
    for data, label, style in ((ref, "without failure", dict(color="0.6", lw=5, alpha=0.6)),
                               (run, "with a rank killed and replaced",
                                dict(color="C0", lw=1.5, marker=".", ms=4))):
        steps = sorted(int(s) for s in data["losses"])
        top.plot(steps, [data["losses"][str(s)][0] for s in steps], label=label, **style)
        low.plot(steps, [data["losses"][str(s)][4] for s in steps], label=label, **style)
    if run["discarded"]:
        xs, ys = zip(*run["discarded"])
        top.plot(xs, ys, "x", color="C3", ms=8, label="computed before the failure, lost")
    fail = failure_of(run)
    if fail:
        failed, restored = fail
        for ax in (top, low):
            ax.axvline(failed, color="C3", ls="--", lw=1)
            ax.axvspan(restored, failed, color="C3", alpha=0.08)
        top.annotate("rank killed in step %d;\nrestored step %d from snapshots" % fail,
                     xy=(failed, top.get_ylim()[1]), xytext=(6, -30),
                     textcoords="offset points", color="C3", fontsize=9)
    top.set_ylabel("training loss")
    first = ref["losses"][min(ref["losses"], key=int)]
    top.set_title("weft: the two runs are %s (vocabulary %d over %d ranks)" % (
        "bitwise equal" if not compare(ref, run) else "DIFFERENT", ref["config"]["vocab"],
        first[2]))
    top.legend(fontsize=9, loc="lower left")
    low.set_ylabel("tokens/s")
    low.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("report: wrote %s" % path)


def summary(ref, run):
    fail = failure_of(run)
    rec = [e for e in run["events"] if e["what"] == "recovered"]
    lines = ["report: %d steps; corpus %s" % (len(ref["losses"]), run["corpus"])]
    if fail:
        lines.append("report: rank killed in step %d, restored step %d, recovered in %.2f s "
                     "(steps %d-%d computed again)" % (fail[0], fail[1], rec[0]["seconds"],
                                                       fail[1] + 1, fail[0]))
    lines.append("report: run times %.1f s without failure, %.1f s with" %
                 (ref["seconds"], run["seconds"]))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reference")
    p.add_argument("failed")
    p.add_argument("--png")
    a = p.parse_args()
    ref, run = load(a.reference), load(a.failed)
    print(summary(ref, run))
    if a.png:
        plot(ref, run, a.png)
    bad = compare(ref, run)
    if bad:
        print("report: MISMATCH (%d differences)" % len(bad))
        for line in bad[:20]:
            print("  " + line)
        return 1
    print("report: bitwise equal: %d per-step losses and %d tensors (parameters and Adam "
          "moments), final loss %.4f" % (len(ref["losses"]), len(ref["digests"]),
                                         ref["losses"][str(ref["config"]["steps"])][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
