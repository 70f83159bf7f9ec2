#!/usr/bin/env bash
# check_install.sh BUILD_DIR: install weft into a scratch prefix, run the installed tools
# from there, then build a program against the installed package with CMake's
# find_package(weft) and with pkg-config, and run it on 2 ranks.
#
# LD_LIBRARY_PATH is cleared: the installed programs must find libweft.so through their
# RPATH ($ORIGIN/../lib), and the consumers through theirs.
set -euo pipefail
unset LD_LIBRARY_PATH
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
bin=$prefix/bin

# The installed tools, from the prefix alone.
"$bin/weft-info" >"$tmp/info"
grep -q '^weft ' "$tmp/info"
"$bin/weftrun" -n 2 -- "$bin/weft-perf" allreduce -b 8 -e 4096 -n 5 -w 1 >"$tmp/perf"
grep -q 'Avg bus bandwidth' "$tmp/perf"
"$bin/weftrun" -n 2 -- "$bin/weft-example-trainer" --steps 100 >"$tmp/trainer"
echo "check_install: installed weft-info, weftrun, weft-perf and weft-example-trainer ran"

mkdir "$tmp/src"
cp "$here/consumer.c" "$tmp/src/"
cp "$here/CMakeLists.txt.in" "$tmp/src/CMakeLists.txt"
cmake -S "$tmp/src" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
"$bin/weftrun" -n 2 -- "$tmp/b/consumer"
libdir=$(dirname "$(find "$prefix" -name weft.pc)")
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs weft)
# shellcheck disable=SC2086
cc -o "$tmp/pc" "$tmp/src/consumer.c" $flags -Wl,-rpath,"$(dirname "$libdir")"
"$bin/weftrun" -n 2 -- "$tmp/pc"
echo "check_install: find_package and pkg-config consumers built and ran"
