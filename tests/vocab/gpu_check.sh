#!/bin/sh
# Check the CUDA kernels of vocab/ against the CPU path on a machine with a GPU.
#
#   tests/vocab/gpu_check.sh [BUILD_DIR]      (default: build-gpu)
#
# Configures and builds weft with CUDA, then runs test_vocab_cuda alone and under
# weftrun with 2 ranks (they share the GPU when there is one), and finally the CPU
# vocab tests so both paths are seen passing in one place. Exit status non-zero on any
# failure; 77 from test_vocab_cuda means no GPU was usable.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build-gpu}
cmake -S "$here" -B "$build" -G Ninja -DWEFT_WITH_CUDA=ON >/dev/null
ninja -C "$build" test_vocab_cuda test_vocab_mp test_vocab_kernels weftrun
nvidia-smi -L || true
echo "== test_vocab_cuda, 1 process"
"$build/bin/test_vocab_cuda"
echo "== test_vocab_cuda, 2 ranks through weftrun"
"$build/bin/weftrun" -n 2 --timeout 300 -- "$build/bin/test_vocab_cuda"
echo "== CPU vocab tests"
ctest --test-dir "$build" -R 'test_vocab_(kernels|mp_n2|torch_n2)' --output-on-failure
echo "gpu_check: all passed"
