#!/usr/bin/env bash
# The sanitizer job: builds everything with clang, AddressSanitizer + UndefinedBehaviorSanitizer
# (Halide instruments the generated kernels with ASan; its runtime and LLVM-generated code get no
# UBSan), runs the whole test suite, then the libFuzzer API target for a bounded time.
# Usage: scripts/test_sanitizers.sh [fuzz seconds, default 60]   (BUILD_DIR default: build-sanitize)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fuzz_seconds=${1:-60}
build_dir=${BUILD_DIR:-$root/build-sanitize}
export CC=clang CXX=clang++
# Kernels for AVX2 only: CI's x86 machines all have it, the main build (scripts/test.sh) tests the
# SSE4.1 and AVX-512 variants, and each variant left out here saves a third of the sanitizer
# build's kernel compiles (CI's whole run stays under an hour on 2 cores). The AVX-512 tiling is
# still checked here through the *_avx512_tiles test kernels.
x86_targets="x86-64-linux-sse41-avx-f16c-fma-avx2"
BUILD_DIR=$build_dir "$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTENTION_SANITIZE=ON -DATTENTION_FUZZ=ON -DATTENTION_BUILD_BENCH=OFF \
  "-DATTENTION_X86_TARGETS=$x86_targets"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$root/.venv/bin/ctest" --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
corpus="$build_dir/fuzz-corpus"
mkdir -p "$corpus"
"$build_dir/tests/sdpa_api_fuzzer" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
  -artifact_prefix="$build_dir/" "$corpus"
