#!/usr/bin/env bash
# What a session with a lent NVIDIA GPU runs first, in one command (DEVELOPERS.md): builds everything
# (every core of the device machine), runs the CUDA suites (the cuda: tests, CudaDevicePointers and
# the offline CudaPtxAssembles), then bench/gpu_bench, and prints a markdown table
# (bench/gpu_table.py): the GPU model, the fp32 peak and memory bandwidth computed from its
# properties, and per shape GFLOP/s, % of peak and, for decode, % of bandwidth. Everything also goes
# to $OUT (default build/gpu_check/): ctest.txt, gpu_bench.json, table.md; copy the table into
# bench/RESULTS.md. Exits 1 without an NVIDIA GPU, with the ctest status when a suite fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
out=${OUT:-$build/gpu_check}
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 1
fi
nvidia-smi -L
"$root/scripts/build.sh"
mkdir -p "$out"
status=0
"$root/.venv/bin/ctest" --test-dir "$build" --output-on-failure -j "$(nproc)" \
  -R '^(cuda:|CudaDevicePointers|CudaPtxAssembles)' 2>&1 | tee "$out/ctest.txt" || status=$?
"$build/bench/gpu_bench" --benchmark_repetitions=3 --benchmark_out="$out/gpu_bench.json" \
  --benchmark_out_format=json
python3 "$root/bench/gpu_table.py" "$out/gpu_bench.json" | tee "$out/table.md"
exit $status
