#!/usr/bin/python3
"""Checks that the library calls every entry of every transport capability table:

    check_tl_entries.py [ROOT]

ROOT is the source tree (default: two folders above this script). A capability table is
any `typedef struct weft_tl_<what>_ops { ... } <name>;` in a header of transports/, so a
table added later is checked without touching this script. Its entries are the function
pointers it declares (`ret (*entry)(args);`). An entry is called when a library source
(.c, .h or .cu under comm/, migrate/, vocab/ or transports/) has `->entry(` or
`.entry(`, comments and string literals left out; a designated initializer
(`.entry = fn,`) fills an entry, it does not call it, and tests, tools and examples do
not count. Prints `header:line: table::entry is never called by the library` for each
entry that is not, and exits 1 if there is any, 0 if there is none (a summary goes to
stderr), 2 when no table is found at all (the parser lost track of the headers).

The match is by name, not by type: a call of another function pointer with the same
name (a request's `progress`) counts too. It catches the entry that nothing calls, which
is what rots; it cannot prove that each call goes through the table.
"""
import os
import re
import sys

TABLE_DIR = "transports"
LIBRARY_DIRS = ("comm", "migrate", "vocab", "transports")
SOURCE_ENDINGS = (".c", ".h", ".cu")

TABLE = re.compile(r"typedef\s+struct\s+(weft_tl_\w+_ops)\s*\{(.*?)\}\s*(\w+)\s*;", re.S)
ENTRY = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
# A C token that hides calls: a comment, a string or a character literal.
HIDING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(text):
    """@p text without comments and literals, each replaced by its newlines (so line
    numbers stay) or a space."""
    return HIDING.sub(lambda m: "\n" * m.group(0).count("\n") or " ", text)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def sources(root, folders, endings):
    for folder in folders:
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(endings):
                    yield os.path.join(dirpath, name)


def tables(root):
    """(header relative to root, line, typedef name, [(entry, line)]) for every table."""
    found = []
    for path in sources(root, (TABLE_DIR,), (".h",)):
        text = blank(read(path))
        rel = os.path.relpath(path, root)
        for t in TABLE.finditer(text):
            body_start = t.start(2)
            entries = []
            for e in ENTRY.finditer(t.group(2)):
                line = text.count("\n", 0, body_start + e.start()) + 1
                entries.append((e.group(1), line))
            found.append((rel, text.count("\n", 0, t.start()) + 1, t.group(3), entries))
    return found


def called_names(root):
    """Every name called as `->name(` or `.name(` in the library's sources."""
    call = re.compile(r"(?:->|\.)\s*(\w+)\s*\(")
    names = set()
    for path in sources(root, LIBRARY_DIRS, SOURCE_ENDINGS):
        names.update(call.findall(blank(read(path))))
    return names


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = tables(root)
    if not found:
        print("no typedef struct weft_tl_*_ops {...} in %s/*.h" % os.path.join(root, TABLE_DIR),
              file=sys.stderr)
        return 2
    called = called_names(root)
    unused = 0
    for header, _, name, entries in found:
        for entry, line in entries:
            if entry not in called:
                print("%s:%d: %s::%s is never called by the library" % (header, line, name, entry))
                unused += 1
    total = sum(len(t[3]) for t in found)
    print("%d capability tables, %d entries, %d never called (%s)" %
          (len(found), total, unused, ", ".join(t[2] for t in found)), file=sys.stderr)
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
