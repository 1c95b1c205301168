#!/usr/bin/env bash
# Builds and runs the SDPA benchmark, then prints its markdown table (bench/table.py).
# Usage: scripts/bench.sh [sdpa_bench args...]   e.g. --benchmark_filter=2048 --benchmark_repetitions=3
# Environment: ATTENTION_BENCH_THREADS (default: all hardware threads), BUILD_DIR (default: build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
"$build_dir/bench/sdpa_bench" --benchmark_out="$build_dir/bench.json" --benchmark_out_format=json "$@"
python3 "$root/bench/table.py" "$build_dir/bench.json"
