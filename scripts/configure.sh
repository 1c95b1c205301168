#!/usr/bin/env bash
# Configures a CMake build directory the way every script does: Ninja from .venv, and warnings as
# errors under CI (CI=true). Usage: scripts/configure.sh BUILD_DIR [cmake arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$1
shift
venv_bin="$root/.venv/bin"
werror=OFF
[[ ${CI:-} == true ]] && werror=ON
"$venv_bin/cmake" -S "$root" -B "$build_dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$venv_bin/ninja" \
  -DATTENTION_WERROR=$werror "$@"
