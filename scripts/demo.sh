#!/usr/bin/env bash
# The main job: builds the kernel library for this machine and runs the demo (API call on realistic
# shapes, checked against the naive reference, time and GFLOP/s vs the naive loop), then the
# Nadaraya–Watson example (writes its pictures into build/nadaraya_watson/), then the three examples.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build=${BUILD_DIR:-$root/build}
"$build/examples/demo"
echo
# The Nadaraya–Watson example: errors per kernel, fits and attention-weight pictures (PNG).
"$build/examples/nadaraya_watson_demo" "$build/nadaraya_watson"
echo
# The examples (docs/api.md "Examples"): an encoder layer, a decoder loop with a KV cache
# (tokens/s), and the attention map of a sentence as a PNG.
"$build/examples/encoder_layer"
echo
"$build/examples/decoder_loop"
echo
"$build/examples/attention_map" "$build/attention_map.png"
