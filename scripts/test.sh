#!/usr/bin/env bash
# Checks the include rules, then builds weft and runs the whole test suite twice: a normal
# build (warnings are errors) and an AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh

echo "== include rules (docs/architecture.md, Layers)"
./scripts/check-includes.py

run_suite() {
    local dir=$1 skip=${2:-}
    # Unit tests in parallel; multi-rank tests one at a time (they oversubscribe 2 cores).
    ctest --test-dir "$dir" --output-on-failure -L unit -j "$(nproc)"
    ctest --test-dir "$dir" --output-on-failure -L multirank ${skip:+-E "$skip"}
}

echo "== build (warnings are errors)"
./scripts/build.sh
run_suite build

echo "== build with ASan + UBSan"
cmake -S . -B build-asan -G Ninja -DWEFT_WERROR=ON -DWEFT_SANITIZE=ON -DWEFT_WITH_CUDA=OFF \
      -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$(nproc)"
# UCX's memory hooks and its global caches are not sanitizer-friendly; leaks inside
# UCX itself are suppressed, leaks in weft are not.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The sanitizer build leaves out what adds time but no new code under the sanitizers:
# the namespace hosts (the same programs over the bridge), the 16-trial
# fault campaign (the example trainer's fault tests run here all the same), and the jobs
# in the private Slurm (the PMIx bootstrap they go through runs here under mpirun), and
# the etcd cluster's failover (the etcd client's code runs here against one member).
run_suite build-asan 'multinode|elastic_fault_random|^slurm_|^etcd_store_cluster$'
