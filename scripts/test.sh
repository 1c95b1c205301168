#!/usr/bin/env bash
# Builds everything and runs the whole test suite with CTest: the x86 suite natively, then the
# aarch64 suite cross-built and run under qemu (scripts/test_aarch64.sh, with this build's
# generators). Extra arguments go to both ctest runs. ATTENTION_SKIP_AARCH64=1 runs the x86 suite
# only (a quicker loop while developing; CI runs both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
status=0
"$root/.venv/bin/ctest" --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@" || status=$?
if [[ ${ATTENTION_SKIP_AARCH64:-0} != 1 ]]; then
  echo "== aarch64 suite (cross-built, run under qemu-aarch64) =="
  HOST_BUILD_DIR=$build_dir BUILD_DIR=${AARCH64_BUILD_DIR:-$root/build-aarch64} \
    "$root/scripts/test_aarch64.sh" "$@" || status=$?
fi
exit $status
