#!/usr/bin/python3
"""Checks that the file names written in comments and documentation still exist:

    check-doc-paths.py [ROOT]

ROOT is the source tree (default: this script's parent folder). Reads the Markdown pages
(but CHANGELOG.md, which is history) and the comments of C, CUDA, Python, shell and CMake
files, takes every token that looks like a path of a source file (`comm/group/edit.c`,
`ssd*.c`, `proto.h`) and looks for it: as written from the root, next to the file that
names it, under include/, as the tail of a path in the tree, or (a bare name) as the name
of any file in the tree or of a system header. The relative links of the Markdown pages
must lead to a file or folder. Prints `file:line: no such file: TOKEN` for each one not
found and exits 1 if there is any, 0 if there is none.
"""
import fnmatch
import glob
import os
import re
import sys

TOKEN = re.compile(
    r"(?<![\w./*${-])((?:\.\.?/)*[A-Za-z0-9_*][A-Za-z0-9_./*-]*\.(?:c|h|py|sh|cu|cuh))(?![\w*])")
# A relative link of a Markdown page: [text](target), target without its #anchor.
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)(?:#[^)]*)?\)")
SKIP_DIRS = {".git", "build", "__pycache__", "node_modules"}
# Trees made up for a test: their paths name files of the fixture, not of weft.
SKIP_TREES = ("tests/scripts/includes/", "tests/scripts/doc_paths/")
SKIP_FILES = {"CHANGELOG.md"}
# The reader's own files in usage examples ("cc app.c ..."), not files of weft.
EXAMPLE_NAMES = {"app.c", "train.py"}
# Files named ahead of the change that adds them. Remove an entry once the file exists
# (the check says so).
PLANNED = set()
# Debian keeps PMIx's headers (pmix.h) in a folder of their own.
SYSTEM_DIRS = ("/usr/include", "/usr/local/include", "/usr/local/cuda/include") + tuple(
    sorted(glob.glob("/usr/include/*-linux-gnu") + glob.glob("/usr/lib/*-linux-gnu/pmix*/include")))
COMMENT_ENDINGS = {
    ".c": "c", ".h": "c", ".cu": "c", ".cuh": "c",
    ".py": "hash", ".sh": "hash", ".cmake": "hash",
}


def tree_files(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if "CMakeCache.txt" in filenames:  # a build tree, whatever its name
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            out.append(rel)
    return out


def comment_lines(path, kind):
    """(line number, text) of the comment parts of a source file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    in_block = False
    for n, line in enumerate(lines, 1):
        if kind == "hash":
            if line.lstrip().startswith("#!"):
                continue
            i = line.find("#")
            if i >= 0:
                out.append((n, line[i:]))
            # Python docstrings and echo lines name files too.
            elif '"""' in line or line.lstrip().startswith(("echo", '"', "'")):
                out.append((n, line))
            continue
        text = ""
        i = 0
        while i < len(line):
            if in_block:
                j = line.find("*/", i)
                if j < 0:
                    text += line[i:]
                    i = len(line)
                else:
                    text += line[i:j]
                    i = j + 2
                    in_block = False
            else:
                j = line.find("/*", i)
                k = line.find("//", i)
                if k >= 0 and (j < 0 or k < j) and not line[:k].rstrip().endswith(":"):
                    text += line[k + 2:]
                    break
                if j < 0:
                    break
                in_block = True
                i = j + 2
        if text:
            out.append((n, text))
    return out


def system_header(token):
    return any(os.path.isfile(os.path.join(d, token)) for d in SYSTEM_DIRS)


def exists(token, src, files, names):
    pat = token.lstrip("./")
    if pat in EXAMPLE_NAMES or pat in PLANNED:
        return True
    if "*" in pat:
        if "/" in pat:
            return any(fnmatch.fnmatch(f, pat) or fnmatch.fnmatch(f, "*/" + pat) for f in files)
        return any(fnmatch.fnmatch(n, pat) for n in names)
    if "/" not in pat:
        return pat in names or system_header(pat)
    here = os.path.normpath(os.path.join(os.path.dirname(src), token)).replace(os.sep, "/")
    if pat in files or here in files or ("include/" + pat) in files:
        return True
    if any(f.endswith("/" + pat) for f in files):
        return True
    return system_header(pat)


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print("usage: check-doc-paths.py [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    files = tree_files(root)
    fileset = set(files)
    names = {os.path.basename(f) for f in files}
    bad = 0
    for name in sorted(PLANNED & fileset):
        print(f"{name} exists now: take it out of PLANNED in {os.path.basename(__file__)}")
        bad += 1
    for rel in files:
        if rel.startswith(SKIP_TREES) or os.path.basename(rel) in SKIP_FILES:
            continue
        base = os.path.basename(rel)
        ending = os.path.splitext(base)[1]
        path = os.path.join(root, rel)
        if ending == ".md":
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = list(enumerate(f.read().split("\n"), 1))
        elif base == "CMakeLists.txt" or ending in COMMENT_ENDINGS:
            lines = comment_lines(path, COMMENT_ENDINGS.get(ending, "hash"))
        else:
            continue
        for n, text in lines:
            said = set()
            if ending == ".md":
                for m in LINK.finditer(text):
                    target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                    if not os.path.exists(target):
                        print(f"{rel}:{n}: no such file: {m.group(1)}")
                        said.add(m.group(1))
                        bad += 1
            text = re.sub(r"https?://\S+", "", text)
            for m in TOKEN.finditer(text):
                token = m.group(1)
                if token not in said and not exists(token, rel, fileset, names):
                    print(f"{rel}:{n}: no such file: {token}")
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
