#!/usr/bin/env bash
# check_headers.sh CC INCLUDE_DIR: every public header compiles on its own, as C11 and
# (where a C++ compiler is found) as C++, with nothing on the include path but the
# public headers (no CUDA, UCX or hwloc headers); and weft.h includes every one of them.
set -euo pipefail
cc=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx=$(command -v c++ || true)
fail=0 n=0
for h in "$inc"/weft/*.h; do
    n=$((n + 1))
    name=weft/$(basename "$h")
    printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' "$name" "$name" \
        >"$tmp/t.c"
    if ! "$cc" -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -I"$inc" "$tmp/t.c"; then
        echo "check_headers: $name does not compile alone as C11" >&2
        fail=1
    fi
    if [[ -n "$cxx" ]] && ! "$cxx" -x c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only \
        -I"$inc" "$tmp/t.c"; then
        echo "check_headers: $name does not compile alone as C++" >&2
        fail=1
    fi
    if [[ "$name" != weft/weft.h && "$name" != weft/export.h ]] && ! grep -q "#include \"$name\"" "$inc/weft/weft.h"; then
        echo "check_headers: weft.h does not include $name" >&2
        fail=1
    fi
done
if ((fail == 0)); then
    echo "check_headers: $n headers compile alone; weft.h includes them"
fi
exit $fail
