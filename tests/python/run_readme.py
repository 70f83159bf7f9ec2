"""Runs every Python snippet of python/README.md the way the guide says: each ```python
block preceded by a line `<!-- run: weftrun ARGS -->` is written to a file and run as
`WEFTRUN ARGS --timeout 100 -- PYTHON FILE`, which must exit 0. A snippet without its run
line fails the test (every snippet in the guide runs).

    run_readme.py README WEFTRUN PYTHON
"""

import os
import re
import subprocess
import sys
import tempfile


def snippets(text):
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        before = text[:m.start()].rstrip().splitlines()
        run = re.fullmatch(r"<!-- run: weftrun (.*) -->", before[-1]) if before else None
        line = text.count("\n", 0, m.start()) + 1
        out.append((line, run.group(1).split() if run else None, m.group(1)))
    return out


def main():
    readme, weftrun, python = sys.argv[1:4]
    with open(readme) as f:
        found = snippets(f.read())
    if not found:
        sys.exit("run_readme: no snippet in %s" % readme)
    failed = 0
    env = {k: v for k, v in os.environ.items() if k != "MASTER_ADDR"}
    for line, args, code in found:
        if args is None:
            print("run_readme: FAIL: the snippet at line %d has no run line" % line)
            failed += 1
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
        try:
            r = subprocess.run([weftrun] + args + ["--timeout", "100", "--", python, f.name],
                               env=env, capture_output=True, text=True, timeout=150)
        finally:
            os.unlink(f.name)
        ok = r.returncode == 0
        print("run_readme: %s: the snippet at line %d (weftrun %s)" %
              ("ok" if ok else "FAIL", line, " ".join(args)))
        if not ok:
            print(r.stdout + r.stderr)
            failed += 1
    print("run_readme: %d of %d snippets ran" % (len(found) - failed, len(found)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
