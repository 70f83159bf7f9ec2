"""What the Python fault scripts (fault_repair.py, snapshot_fault.py) share: their output
lines, the repair loop of a survivor, and the wrapper that turns any other exception into
one failed-survivor line. tests/groups/run_fault.sh counts the "SURVIVOR-OK" lines (one
per survivor) and fails on any "SURVIVOR-FAIL"."""

import os
import sys

import weft


def say(text):
    """One line in one write: the ranks share weftrun's output file."""
    os.write(1, (text + "\n").encode())


def recover(g, check=None, attempts=5):
    """Repair @p g until a repair and the call after it (check(g), else a barrier) both
    succeed: a failure during recovery fails a call, and the loop repairs again."""
    for _ in range(attempts):
        try:
            info = g.repair()
            if check is None:
                g.barrier()
            else:
                check(g)
            return info
        except weft.PeerError:
            continue
    raise AssertionError("no repair in %d attempts" % attempts)


def run_survivor(main):
    """sys.exit(main()), any exception said once as a failed survivor."""
    try:
        sys.exit(main())
    except Exception as e:
        say("SURVIVOR-FAIL: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
