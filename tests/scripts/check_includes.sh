#!/bin/sh
# scripts/check-includes.py on a small tree (includes/) whose files break the layer rules
# in known places: it must exit 1 and name exactly those includes (includes/expected.txt),
# and leave alone what the rules allow (own headers, "perf.h" beside its file, the public
# API from launcher/, comm/core.h from migrate/ and vocab/). The core's private header,
# comm/core_impl.h, is planted in migrate/ (directly) and in vocab/ (through a header of
# the core): both must be named. No file is an exception.
#   check_includes.sh CHECK_INCLUDES FIXTURE_DIR
check=$1 fixture=$2
got=$(mktemp)
trap 'rm -f "$got"' EXIT
"$check" "$fixture" >"$got"
rc=$?
if [ "$rc" != 1 ]; then
    echo "FAILED: exit status $rc, expected 1"
    cat "$got"
    exit 1
fi
if ! sort "$got" | diff -u "$fixture/expected.txt" -; then
    echo "FAILED: the violations above differ from $fixture/expected.txt"
    exit 1
fi
echo "PASSED"
