#!/usr/bin/env bash
# The sanitizer job: builds the runtime, the tests and the libFuzzer API target with clang,
# AddressSanitizer + UndefinedBehaviorSanitizer, linked with the kernels of the x86 build (built
# first if needed) rather than generating them again (ATTENTION_KERNELS_FROM, cmake/AttentionKernels.cmake:
# the kernels are uninstrumented, Halide's own bounds checks guard their buffers), runs the whole
# test suite, then the fuzzer for a bounded time.
# Usage: scripts/test_sanitizers.sh [fuzz seconds, default 60]
# Environment: BUILD_DIR (default build-sanitize), HOST_BUILD_DIR (the x86 build; default build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fuzz_seconds=${1:-60}
build_dir=${BUILD_DIR:-$root/build-sanitize}
host_build=${HOST_BUILD_DIR:-$root/build}
BUILD_DIR=$host_build "$root/scripts/build.sh"
export CC=clang CXX=clang++
BUILD_DIR=$build_dir "$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTENTION_SANITIZE=ON -DATTENTION_FUZZ=ON -DATTENTION_BUILD_BENCH=OFF \
  "-DATTENTION_KERNELS_FROM=$host_build"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$root/.venv/bin/ctest" --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
corpus="$build_dir/fuzz-corpus"
mkdir -p "$corpus"
"$build_dir/tests/sdpa_api_fuzzer" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
  -artifact_prefix="$build_dir/" "$corpus"
