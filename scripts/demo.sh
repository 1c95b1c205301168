#!/usr/bin/env bash
# The main job: builds the kernel library for this machine and runs the demo (API call on realistic
# shapes, checked against the naive reference, time and GFLOP/s vs the naive loop).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
"${BUILD_DIR:-$root/build}/examples/demo"
