#!/usr/bin/env bash
# check_exports.sh LIBWEFT_SO INCLUDE_DIR: libweft.so exports exactly the functions that
# the public headers declare with WEFT_API, and no internal weft__ name.
set -euo pipefail
lib=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Defined dynamic symbols, without their version suffix; the version node itself (an
# absolute symbol named after the node, e.g. WEFT_1.0) is not a function.
nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' |
    sort -u >"$tmp/exported"
# WEFT_API declarations start on one line: WEFT_API <type> [*]weft_name(
cat "$inc"/weft/*.h | grep -oE 'WEFT_API[^(;]*\bweft_[a-z0-9_]+[[:space:]]*\(' |
    grep -oE 'weft_[a-z0-9_]+[[:space:]]*\($' | tr -d '( \t' | sort -u >"$tmp/declared"

fail=0
if [[ ! -s "$tmp/declared" ]]; then
    echo "check_exports: no WEFT_API declaration found under $inc/weft" >&2
    exit 1
fi
if grep -q '^weft__' "$tmp/exported"; then
    echo "check_exports: internal symbols exported:" >&2
    grep '^weft__' "$tmp/exported" | head -20 >&2
    fail=1
fi
extra=$(comm -23 "$tmp/exported" "$tmp/declared")
if [[ -n "$extra" ]]; then
    echo "check_exports: exported but not declared with WEFT_API in $inc/weft:" >&2
    echo "$extra" | head -20 >&2
    fail=1
fi
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [[ -n "$missing" ]]; then
    echo "check_exports: declared with WEFT_API but not exported:" >&2
    echo "$missing" >&2
    fail=1
fi
if ((fail == 0)); then
    echo "check_exports: $(wc -l <"$tmp/exported") symbols, all declared public, none internal"
fi
exit $fail
