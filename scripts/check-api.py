#!/usr/bin/python3
"""Checks the public API's vocabulary (include/weft/*.h, the functions marked WEFT_API):

    check-api.py [INCLUDE_DIR]

- every nonblocking operation hands back a request: a function that takes a
  `weft_req_t **` is named `weft_i<name>` (or `weft_<module>_i<name>`) when `weft_<name>`
  is its blocking twin, or `<name>_start` when it has none; and every such twin and every
  `*_start` takes one;
- completion goes through weft_test / weft_wait / weft_req_free only: no other public
  `*_test`, `*_wait`;
- one cleanup verb: no public `*_destroy`, `*_fini`, `*_close`, `*_release`.

Prints one line per violation, `header: function: why`, and exits 1 if there is any.
"""
import os
import re
import sys

DECL = re.compile(r"WEFT_API\s+([^;{]*?)\b(weft_[a-z0-9_]+)\s*\(([^;{]*?)\)\s*;", re.S)
COMPLETION = {"weft_test", "weft_wait", "weft_req_free", "weft_test_any", "weft_wait_all",
              "weft_wait_any", "weft_test_all"}
CLEANUP_WORDS = ("_destroy", "_fini", "_close", "_release")


def declarations(include_dir):
    out = {}
    for name in sorted(os.listdir(include_dir)):
        if not name.endswith(".h"):
            continue
        with open(os.path.join(include_dir, name), encoding="utf-8") as f:
            text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
        for m in DECL.finditer(text):
            out[m.group(2)] = (name, " ".join(m.group(3).split()))
    return out


def blocking_twin(fn, decls):
    """weft_<name> for weft_i<name>, weft_<module>_<name> for weft_<module>_i<name>: the
    declared function that @p fn is the nonblocking twin of, or None."""
    words = fn.split("_")
    for k in range(1, len(words)):
        if words[k].startswith("i") and len(words[k]) > 1:
            twin = "_".join(words[:k] + [words[k][1:]] + words[k + 1:])
            if twin in decls:
                return twin
    return None


def violations(decls):
    for fn, (header, params) in sorted(decls.items()):
        takes_req = re.search(r"\bweft_req_t\s*\*\s*\*", params) is not None
        has_twin = blocking_twin(fn, decls) is not None
        starts = fn.endswith("_start")
        if takes_req and not (has_twin or starts):
            yield header, fn, ("takes a weft_req_t ** but is neither weft_i<name> with a "
                               "blocking twin nor <name>_start")
        if (has_twin or starts) and not takes_req:
            yield header, fn, "a nonblocking start that hands back no weft_req_t *"
        if starts and fn[: -len("_start")] in decls:
            yield header, fn, "has a blocking twin: name it weft_i<name>"
        if re.search(r"_(test|wait)(_[a-z]+)?$", fn) and fn not in COMPLETION:
            yield header, fn, "completion is weft_test / weft_wait on a weft_req_t"
        if fn.endswith(CLEANUP_WORDS):
            yield header, fn, "the cleanup verb is _free"


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..",
                                                      "include", "weft")
    found = 0
    for header, fn, why in violations(declarations(root)):
        print(f"{header}: {fn}: {why}")
        found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
