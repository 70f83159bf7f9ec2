#!/usr/bin/env bash
# Configures and builds weft into build/ (binaries in build/bin/). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DWEFT_WERROR=ON "$@" >/dev/null
cmake --build build -j "$(nproc)"
