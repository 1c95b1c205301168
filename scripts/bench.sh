#!/usr/bin/env bash
# Builds and runs the SDPA benchmark, then prints its markdown table (bench/table.py).
# Usage: scripts/bench.sh [sdpa_bench args...]   e.g. --benchmark_filter=2048
# Without arguments every benchmark runs 5 times, repetitions of all benchmarks randomly interleaved so
# a slow spell of a shared machine does not land on one implementation, and the table shows medians.
# Environment: ATTENTION_BENCH_THREADS (default: all hardware threads), BUILD_DIR (default: build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
(($#)) || set -- --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
"$build_dir/bench/sdpa_bench" --benchmark_out="$build_dir/bench.json" --benchmark_out_format=json "$@"
python3 "$root/bench/table.py" "$build_dir/bench.json"
