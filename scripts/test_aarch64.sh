#!/usr/bin/env bash
# The aarch64 suite: cross-builds the runtime and the tests for 64-bit ARM Linux
# (cmake/toolchain-aarch64.cmake), with kernels that the host build's generators emit for
# arm-64-linux, and runs them under qemu-aarch64 on one thread (HL_NUM_THREADS=1) with a smaller
# random sweep (ATTENTION_FUZZ_CASES=1000), plus the NEON check of the prefill kernel's assembly.
# Usage: scripts/test_aarch64.sh [ctest arguments]
# Environment: HOST_BUILD_DIR (the x86 build whose generators run; default build), BUILD_DIR
# (default build-aarch64).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
host_build=${HOST_BUILD_DIR:-$root/build}
build_dir=${BUILD_DIR:-$root/build-aarch64}
"$root/scripts/install_deps.sh"
venv_bin="$root/.venv/bin"
# The generators run on this machine: build them in the host build, with attention-gen and the
# package, which the consumer test installs (its mod generator is built against that package).
[[ -f $host_build/CMakeCache.txt ]] || "$root/scripts/configure.sh" "$host_build"
"$venv_bin/cmake" --build "$host_build" --target attention_generators attention-gen attention_package
"$root/scripts/configure.sh" "$build_dir" \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-aarch64.cmake" \
  "-Dattention_kernels-halide_generators_ROOT=$host_build"
"$venv_bin/cmake" --build "$build_dir"
"$venv_bin/ctest" --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
