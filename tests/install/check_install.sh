#!/usr/bin/env bash
# check_install.sh BUILD_DIR WEFTRUN: install weft into a scratch prefix, then build a
# program against it twice, with CMake's find_package(weft) and with pkg-config, and run
# both on 2 ranks.
set -euo pipefail
build=$1 weftrun=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir "$tmp/src"
cp "$here/consumer.c" "$tmp/src/"
cp "$here/CMakeLists.txt.in" "$tmp/src/CMakeLists.txt"
cmake -S "$tmp/src" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
"$weftrun" -n 2 -- "$tmp/b/consumer"
libdir=$(dirname "$(find "$tmp/prefix" -name weft.pc)")
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs weft)
# shellcheck disable=SC2086
cc -o "$tmp/pc" "$tmp/src/consumer.c" $flags -Wl,-rpath,"$(dirname "$libdir")"
"$weftrun" -n 2 -- "$tmp/pc"
echo "check_install: find_package and pkg-config consumers built and ran"
