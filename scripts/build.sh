#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds everything into build/ (or $BUILD_DIR).
# Extra arguments go to the CMake configure step, e.g. -DCMAKE_BUILD_TYPE=Debug.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/install_deps.sh"
venv_bin="$root/.venv/bin"
werror=OFF
[[ ${CI:-} == true ]] && werror=ON
"$venv_bin/cmake" -S "$root" -B "$build_dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$venv_bin/ninja" \
  -DATTENTION_WERROR=$werror "$@"
"$venv_bin/cmake" --build "$build_dir"
