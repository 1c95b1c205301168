#!/usr/bin/env bash
# The main job: builds the kernel library for this machine and runs the demo (API call on realistic
# shapes, checked against the naive reference, time and GFLOP/s vs the naive loop), then the
# Nadaraya–Watson example (writes its pictures into build/nadaraya_watson/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build=${BUILD_DIR:-$root/build}
"$build/examples/demo"
echo
# The Nadaraya–Watson example: errors per kernel, fits and attention-weight pictures (PNG).
"$build/examples/nadaraya_watson_demo" "$build/nadaraya_watson"
