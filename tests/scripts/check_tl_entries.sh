#!/bin/sh
# check_tl_entries.py on a small tree (tl_entries/) with two capability tables, the
# message table and one that only that tree has (as a table added by a later change
# would be), and an entry of each planted unused: filled by a designated initializer,
# named in comments and strings, called by a test and by the launcher, never by the
# library. It must exit 1 and name exactly those two (tl_entries/expected.txt), and
# count the calls the library does make (through a pointer, a struct member, a table
# held by value, with spaces before the parenthesis); a function pointer of a struct that
# is not a capability table is not checked.
#   check_tl_entries.sh CHECK_TL_ENTRIES FIXTURE_DIR
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
    echo "FAILED: the unused entries above differ from $fixture/expected.txt"
    exit 1
fi
echo "PASSED"
