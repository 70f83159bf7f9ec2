#!/usr/bin/env bash
# check_install.sh BUILD_DIR: install weft into a scratch prefix, run the installed tools
# from there, then build a program against the installed package four ways, with CMake's
# find_package(weft) (weft::weft and weft::weft_static) and with pkg-config (shared and
# --static), and run each on 2 ranks.
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

# The installed tools, from the prefix alone; each says the version weft.pc gives.
version=$(PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name weft.pc)") pkg-config --modversion weft)
for p in weftrun weft-info weft-example-trainer; do
    out=$("$bin/$p" --version)
    if [[ "$out" != "weft $version" ]]; then
        echo "check_install: $p --version printed '$out', not 'weft $version'" >&2
        exit 1
    fi
done
for f in LICENSE CHANGELOG.md; do
    if [[ ! -s "$prefix/share/doc/weft/$f" ]]; then
        echo "check_install: share/doc/weft/$f is not installed" >&2
        exit 1
    fi
done
"$bin/weft-info" >"$tmp/info"
grep -q '^weft ' "$tmp/info"
"$bin/weftrun" -n 2 -- "$bin/weft-perf" allreduce -b 8 -e 4096 -n 5 -w 1 >"$tmp/perf"
grep -q 'Avg bus bandwidth' "$tmp/perf"
"$bin/weftrun" -n 2 -- "$bin/weft-example-trainer" --steps 100 >"$tmp/trainer"
echo "check_install: installed weft-info, weftrun, weft-perf and weft-example-trainer ran"

mkdir "$tmp/src"
cp "$here/consumer.c" "$tmp/src/"
cp "$here/CMakeLists.txt.in" "$tmp/src/CMakeLists.txt"

# needs_no_libweft PROGRAM: a static link must not have picked libweft.so.
needs_no_libweft() {
    if readelf -d "$1" | grep -q 'NEEDED.*\[libweft\.so'; then
        echo "check_install: $1 was to link libweft.a, yet it needs libweft.so" >&2
        exit 1
    fi
}

# find_package(weft): weft::weft and weft::weft_static.
cmake -S "$tmp/src" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
needs_no_libweft "$tmp/b/consumer_static"
"$bin/weftrun" -n 2 -- "$tmp/b/consumer"
"$bin/weftrun" -n 2 -- "$tmp/b/consumer_static"
echo "check_install: find_package consumers (weft::weft, weft::weft_static) built and ran"

# pkg-config: shared, then static. Where libweft.so is installed beside libweft.a, -lweft
# picks the former: a static link names the archive.
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name weft.pc)")
libdir=$(dirname "$PKG_CONFIG_PATH")
# shellcheck disable=SC2046
cc -o "$tmp/pc" "$tmp/src/consumer.c" $(pkg-config --cflags --libs weft) -lm \
    -Wl,-rpath,"$libdir"
"$bin/weftrun" -n 2 -- "$tmp/pc"
static=$(pkg-config --cflags --static --libs weft)
static=${static/-lweft /-l:libweft.a }
# shellcheck disable=SC2086
cc -o "$tmp/pc_static" "$tmp/src/consumer.c" $static
needs_no_libweft "$tmp/pc_static"
"$bin/weftrun" -n 2 -- "$tmp/pc_static"
echo "check_install: pkg-config consumers (shared, --static) built and ran"
