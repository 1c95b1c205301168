#!/usr/bin/env bash
# Builds and runs the SDPA benchmark twice, with every hardware thread and with one, then prints the
# markdown tables (bench/table.py) and draws bench/sdpa_gflops.png (bench/plot.py, gnuplot).
# Usage: scripts/bench.sh [sdpa_bench args...]   e.g. --benchmark_filter=2048
# Without arguments every benchmark runs 5 times, repetitions of all benchmarks randomly interleaved so
# a slow spell of a shared machine does not land on one implementation, and the tables show medians.
# Environment: ATTENTION_BENCH_THREADS (the multi-thread run; default: all hardware threads),
# ATTENTION_BENCH_ISA (avx2 or sse41: cap the x86 kernel variant, e.g. to time on an AVX-512 machine
# what AVX2 machines run), BUILD_DIR (default: build). JSON goes to $BUILD_DIR/bench.json and
# $BUILD_DIR/bench-1thread.json. The tables name the kernel variant that ran and both peers' ISA.
# OPENBLAS_CORETYPE (set on some machines, e.g. to Haswell, where older OpenBLAS builds crash) is
# unset for the benchmark alone, so the OpenBLAS peer runs the best kernels it has for this CPU (the
# context line names them); ATTENTION_BENCH_KEEP_CORETYPE=1 keeps it. Tests and CI keep it as it is.
# ATTENTION_BENCH_PEERS=1 also times PyTorch's and OpenVINO's CPU SDPA on the prefill shapes
# (scripts/cpu_peers.sh: installs them in .venv-peers on first use) into $BUILD_DIR/peers.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
(($#)) || set -- --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
threads=${ATTENTION_BENCH_THREADS:-$(nproc)}
[[ ${ATTENTION_BENCH_KEEP_CORETYPE:-0} == 1 ]] || unset OPENBLAS_CORETYPE
ATTENTION_BENCH_THREADS=$threads "$build_dir/bench/sdpa_bench" \
  --benchmark_out="$build_dir/bench.json" --benchmark_out_format=json "$@"
ATTENTION_BENCH_THREADS=1 "$build_dir/bench/sdpa_bench" \
  --benchmark_out="$build_dir/bench-1thread.json" --benchmark_out_format=json "$@"
if [[ ${ATTENTION_BENCH_PEERS:-0} == 1 ]]; then
  "$root/scripts/cpu_peers.sh" --threads "$threads" --json "$build_dir/peers.json"
fi
python3 "$root/bench/table.py" "$build_dir/bench.json" "$build_dir/bench-1thread.json"
python3 "$root/bench/plot.py" "$build_dir/bench.json" "$build_dir/bench-1thread.json" \
  -o "$root/bench/sdpa_gflops.png"
