#!/usr/bin/env bash
# hidden_cuda.sh CUDA_ROOT LIBWEFT BIN_DIR: a CUDA build of weft loads and runs on a
# machine without CUDA.
#
# 1. libweft.so, weft-info and weftrun need no CUDA library from the loader: the CUDA
#    runtime is linked in statically, cuBLAS is opened on first use.
# 2. In a private mount namespace (unshare -m, root), empty directories are mounted over
#    the CUDA toolkit (CUDA_ROOT and its real path) and empty files over any CUDA library
#    the loader's cache lists elsewhere; there weft-info must say that the driver and
#    cuBLAS were not found, and a 2-rank allreduce under weftrun must pass.
# Exits 77 (skipped) where mount namespaces are not permitted.
set -euo pipefail
unset LD_LIBRARY_PATH

# Link-time dependencies that must be gone: the CUDA runtime is linked statically, cuBLAS
# and NCCL are opened on first use.
hidden_libs=(libcudart libcublas libnccl)

if [[ "${1:-}" == --inside ]]; then
    shift
    tmp=$1 bin=$2
    shift 2
    for d in "$@"; do
        if [[ -d "$d" ]]; then
            mount --bind "$tmp/empty" "$d"
        else
            mount --bind "$tmp/empty_file" "$d"
        fi
    done
    while read -r f; do
        if [[ -s "$f" ]]; then
            echo "hidden_cuda: $f is still there" >&2
            exit 1
        fi
    done < <(ldconfig -p | awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl|cuda)\.so/ { print $NF }')
    "$bin/weft-info" >"$tmp/info"
    cat "$tmp/info"
    grep -q '^CUDA driver: not found' "$tmp/info"
    grep -q '^cuBLAS: *not found' "$tmp/info"
    "$bin/weftrun" -n 2 -- "$bin/weft-perf" allreduce -b 8 -e 4096 -n 5 -w 1 >"$tmp/perf"
    grep -q 'Avg bus bandwidth' "$tmp/perf"
    echo "hidden_cuda: weft-info and a 2-rank weft-perf allreduce ran with CUDA hidden"
    exit 0
fi

cuda_root=$1 lib=$2 bin=$3
fail=0
for f in "$lib" "$bin/weft-info" "$bin/weftrun" "$bin/weft-perf"; do
    for l in "${hidden_libs[@]}"; do
        if readelf -d "$f" | grep -q "NEEDED.*\[$l\."; then
            echo "hidden_cuda: $f needs $l from the loader" >&2
            fail=1
        fi
    done
done
if ((fail)); then
    exit 1
fi
echo "hidden_cuda: libweft.so, weft-info, weftrun and weft-perf need none of: ${hidden_libs[*]}"

if [[ $(id -u) -ne 0 ]] || ! unshare -m true 2>/dev/null; then
    echo "hidden_cuda: SKIP: mount namespaces are not permitted here (needs root and" \
        "unshare -m); the loader check above passed" >&2
    exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/empty"
: >"$tmp/empty_file"
# What to hide: the toolkit, and CUDA libraries the loader cache finds elsewhere.
hide=()
for d in "$cuda_root" "$(realpath "$cuda_root")"; do
    [[ -d "$d" && ! -L "$d" ]] && hide+=("$d")
done
while read -r f; do
    f=$(realpath "$f")
    case "$f" in
        "$(realpath "$cuda_root")"/*) ;;
        *) hide+=("$f") ;;
    esac
done < <(ldconfig -p | awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl|cuda)\.so/ { print $NF }')

unshare -m bash "$0" --inside "$tmp" "$bin" "${hide[@]}"
