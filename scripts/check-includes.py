#!/usr/bin/python3
"""Checks that every #include "..." of the library, the launcher, weft-perf and the
examples points down the layers of docs/DESIGN.md (Layout):

    check-includes.py [ROOT]

ROOT is the source tree (default: this script's parent folder). Prints one line per
violation, `file:line: <folder> may not include <header>`, and exits 1 if there is any,
0 if there is none. System headers (#include <...>) are not checked; tests/ may include
anything and is not checked either.
"""
import os
import re
import sys

PUBLIC = "include/weft/"
COMM_TREE = ["comm/", "comm/store/", "comm/coll/"]

# What each folder may include besides its own headers. An entry ending in '/' is a
# folder (its own files, not its subfolders: comm/ is not comm/store/), anything else
# one header. Keep in step with the Layout table of docs/DESIGN.md.
RULES = {
    PUBLIC: [],
    "util/": [],
    "transports/": [PUBLIC, "util/"],
    "comm/store/": [PUBLIC, "util/", "comm/log.h"],
    "comm/": [PUBLIC, "util/", "comm/store/", "transports/"],
    "comm/coll/": [PUBLIC, "util/", "comm/"],
    "groups/": [PUBLIC, "util/"] + COMM_TREE,
    "vocab/": [PUBLIC, "util/", "groups/"] + COMM_TREE,
    "migrate/": [PUBLIC, "util/", "groups/"] + COMM_TREE,
    "launcher/": [PUBLIC, "util/", "comm/store/", "comm/config.h", "comm/log.h",
                  "comm/shm_job.h", "comm/tag.h"],
    "perf/": [PUBLIC],
    "examples/": [PUBLIC],
}

# Includes that break the rules today, by file: the header folders or headers it still
# takes from below its layer. No other file may be listed here.
KNOWN_EXCEPTIONS = {
    # removed when weft-info uses the public diagnostic API
    "launcher/weft_info.c": ["transports/", "comm/memtype.h"],
}

SOURCE_ENDINGS = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(path):
    """The folder of RULES that @p path (relative to the root) belongs to, or None."""
    best = None
    for folder in RULES:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def resolve(root, src, spelled):
    """The included file relative to the root: next to the includer first, as the
    compiler looks, then under include/ and the root (the include path)."""
    candidates = [
        os.path.join(os.path.dirname(src), spelled),
        os.path.join("include", spelled),
        spelled,
    ]
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, c)):
            return c.replace(os.sep, "/")
    # Not there (a header of an optional part): read it as spelled on the include path.
    return os.path.normpath(candidates[1] if spelled.startswith("weft/") else spelled)


def matches(header, entry):
    if entry.endswith("/"):
        return folder_of(header) == entry
    return header == entry


def allowed(src_folder, src, header):
    if folder_of(header) == src_folder:
        return True
    if any(matches(header, e) for e in RULES[src_folder]):
        return True
    return any(header == e or (e.endswith("/") and header.startswith(e))
               for e in KNOWN_EXCEPTIONS.get(src, []))


def sources(root):
    for folder in sorted(RULES):
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_ENDINGS):
                    path = os.path.relpath(os.path.join(dirpath, name), root)
                    path = path.replace(os.sep, "/")
                    if folder_of(path) == folder:
                        yield folder, path


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print("usage: check-includes.py [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    violations = 0
    for folder, src in sources(root):
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m is None:
                    continue
                header = resolve(root, src, m.group(1))
                if not allowed(folder, src, header):
                    print(f"{src}:{lineno}: {folder} may not include {m.group(1)}")
                    violations += 1
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
