#!/bin/sh
# scripts/check-doc-paths.py on a small tree (doc_paths/) whose comments and pages name
# files that exist and files that do not: it must exit 1 and name exactly the missing
# ones (doc_paths/expected.txt), and leave alone system headers, shell variables' paths
# and the reader's own files of usage examples.
#   check_doc_paths.sh CHECK_DOC_PATHS FIXTURE_DIR
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
    echo "FAILED: the missing files above differ from $fixture/expected.txt"
    exit 1
fi
echo "PASSED"
