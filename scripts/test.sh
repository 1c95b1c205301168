#!/usr/bin/env bash
# Builds everything and runs the whole test suite with CTest. Extra arguments go to ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
"$root/.venv/bin/ctest" --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
