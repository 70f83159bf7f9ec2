#!/usr/bin/python3
"""Checks that every #include "..." of the library, the launcher, weft-perf and the
examples points down the layers of docs/architecture.md (Layers):

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
# The core's private header: the definitions of the context, group and request structs.
# Only the core (comm/ and its folders) may include it, directly or through another
# header; every layer above reaches the core through comm/core.h.
PRIVATE = "comm/core_impl.h"
CORE = "comm/"
# The folders held to that rule.
CONTRACT_CHECKED = ("vocab/", "migrate/", "launcher/", "perf/", "examples/")

# What each folder may include besides its own headers. An entry ending in '/' is a
# folder (its own files, not its subfolders), one ending in '/**' a folder with every
# folder under it, anything else one header. A folder of the tree that is not named here
# follows the rule of the nearest folder above it that is (comm/ctx/ follows comm/). Keep
# in step with docs/architecture.md (Layers).
RULES = {
    PUBLIC: [],
    "util/": [],
    "transports/": [PUBLIC, "util/"],
    "comm/store/": [PUBLIC, "util/", "comm/ctx/log.h"],
    "comm/": [PUBLIC, "util/", "transports/", "comm/**"],
    "vocab/": [PUBLIC, "util/", "transports/", "comm/**"],
    "migrate/": [PUBLIC, "util/", "transports/", "comm/**"],
    "launcher/": [PUBLIC, "util/", "comm/store/", "comm/ctx/config.h", "comm/ctx/log.h",
                  "comm/shm/shm_job.h", "comm/ctx/tag.h"],
    "perf/": [PUBLIC],
    "examples/": [PUBLIC],
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
    if entry.endswith("/**"):
        return header.startswith(entry[:-2])
    if entry.endswith("/"):
        return folder_of(header) == entry
    return header == entry


def allowed(src_folder, header):
    if folder_of(header) == src_folder:
        return True
    return any(matches(header, e) for e in RULES[src_folder])


def includes_of(root, path):
    """(line number, spelled, resolved) of each #include "..." of @p path."""
    try:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for lineno, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        if m is not None:
            out.append((lineno, m.group(1), resolve(root, path, m.group(1))))
    return out


def reaches_private(root, header, seen):
    """The chain of headers by which @p header reaches PRIVATE, or None."""
    if header == PRIVATE:
        return [header]
    if header in seen or not os.path.isfile(os.path.join(root, header)):
        return None
    seen.add(header)
    for _, _, inc in includes_of(root, header):
        chain = reaches_private(root, inc, seen)
        if chain is not None:
            return [header] + chain
    return None


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
        in_core = src.startswith(CORE)
        for lineno, spelled, header in includes_of(root, src):
            if not allowed(folder, header):
                print(f"{src}:{lineno}: {folder} may not include {spelled}")
                violations += 1
                continue
            chain = None if in_core else reaches_private(root, header, set())
            if chain is not None and folder in CONTRACT_CHECKED:
                through = f" (through {' -> '.join(chain[:-1])})" if len(chain) > 1 else ""
                print(f"{src}:{lineno}: {folder} may not include {PRIVATE}{through}")
                violations += 1
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
