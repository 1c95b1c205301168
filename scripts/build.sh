#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds everything into build/ (or $BUILD_DIR).
# Extra arguments go to the CMake configure step, e.g. -DCMAKE_BUILD_TYPE=Debug.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/install_deps.sh"
"$root/scripts/configure.sh" "$build_dir" "$@"
"$root/.venv/bin/cmake" --build "$build_dir"
