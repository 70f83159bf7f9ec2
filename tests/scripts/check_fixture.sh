#!/bin/sh
# A check script on a small tree made to break its rules in known places (the fixture):
# it must exit 1 and print exactly the lines of FIXTURE_DIR/expected.txt (in any order),
# so that it finds every planted violation and leaves alone what the rules allow. What
# each fixture plants is said beside its test in CMakeLists.txt.
#   check_fixture.sh CHECK FIXTURE_DIR
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
    echo "FAILED: the lines above differ from $fixture/expected.txt"
    exit 1
fi
echo "PASSED"
