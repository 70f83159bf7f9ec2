#!/usr/bin/env bash
# Build weft with CUDA and NCCL and run the GPU checks on a machine with (at least) one
# NVIDIA GPU: memory-type detection of host, cudaMalloc'ed, managed and cudaMallocHost'ed
# pointers; one-rank NCCL allreduce, broadcast, allgather, reduce-scatter, a send to
# itself and point-to-point to itself (the p2p entry the migrations use) against CPU
# references, through the transport's ops table and through the comm
# layer; a two-rank communicator whose peer never comes must time out; collectives staged
# through host memory on one and two ranks (weftrun), and CUDA buffers refused by
# messages; migrations with old and new buffers on the device, the host, or both, on one
# and two ranks: device to device on two ranks with a GPU each goes through NCCL
# point-to-point (asserted by the count of chunks moved so, bytes compared with a host
# reference, a chunk corrupted once detected and resent, twice failing both ranks), and
# again with WEFT_TRANSPORT=ucx, where nothing may go through NCCL (staged through host
# memory). Two ranks on one GPU stage (NCCL needs a GPU per rank): the NCCL checks say
# so and skip. Then weft-info --topology.
#
# Usage: tests/gpu/run_gpu_checks.sh [build-dir]    (default: build-gpu)
# Exit status: 0 when every check passed on a GPU; non-zero otherwise, including when
# no GPU is visible (WEFT_GPU_REQUIRED=1 turns the tests' "skip" into a failure).
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$src/build-gpu}"
jobs="$(nproc 2>/dev/null || echo 4)"

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv || true
else
    echo "run_gpu_checks: nvidia-smi not found; the checks will tell whether CUDA sees a GPU"
fi

gen=()
if command -v ninja >/dev/null 2>&1; then
    gen=(-G Ninja)
fi
cmake -S "$src" -B "$build" ${gen[@]+"${gen[@]}"} -DWEFT_WITH_CUDA=ON -DWEFT_BUILD_TESTS=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs" --target weft-info weftrun test_gpu_memtype test_gpu_nccl \
    test_gpu_nccl_comm test_gpu_staged test_gpu_migrate test_topo test_select

export WEFT_GPU_REQUIRED=1
status=0
for t in test_gpu_memtype test_gpu_nccl test_gpu_nccl_comm test_topo test_select; do
    echo "=== $t"
    args=()
    case "$t" in
    test_gpu_nccl_comm | test_topo | test_select) args=("$src/tests/transports/topologies") ;;
    esac
    if ! timeout 300 "$build/bin/$t" ${args[@]+"${args[@]}"}; then
        echo "run_gpu_checks: $t FAILED"
        status=1
    fi
done

# Staging through host memory, and migrations of CUDA buffers: one rank, then two ranks
# on the same GPU(s).
for t in test_gpu_staged test_gpu_migrate; do
    for n in 1 2; do
        echo "=== $t (weftrun -n $n)"
        if ! timeout 300 "$build/bin/weftrun" -n "$n" --timeout 180 -- "$build/bin/$t"; then
            echo "run_gpu_checks: $t -n $n FAILED"
            status=1
        fi
    done
done

echo "=== test_gpu_migrate ucx (weftrun -n 2, WEFT_TRANSPORT=ucx: staged only)"
if ! timeout 300 "$build/bin/weftrun" -n 2 --timeout 180 -- "$build/bin/test_gpu_migrate" ucx; then
    echo "run_gpu_checks: test_gpu_migrate ucx -n 2 FAILED"
    status=1
fi

echo "=== weft-info"
"$build/bin/weft-info" || status=1
echo "=== weft-info --topology"
"$build/bin/weft-info" --topology || status=1

if [ "$status" -eq 0 ]; then
    echo "run_gpu_checks: all GPU checks passed"
else
    echo "run_gpu_checks: some GPU checks failed"
fi
exit "$status"
