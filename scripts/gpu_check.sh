#!/usr/bin/env bash
# What a session with a lent NVIDIA GPU runs first (docs/targets.md, "On a lent GPU"). The lent
# machine cannot install the project (no PyPI there for the Halide wheel), so the binaries are
# built here and carried:
#   scripts/gpu_check.sh pack [DIR]   here, after scripts/build.sh: copies the test and benchmark
#                                     binaries, the shared libraries they need that a CUDA image
#                                     may lack, and the scripts below into DIR (default .gpu,
#                                     ignored by git; about 30 MB)
#   DIR/gpu_check.sh run              there (the device tool: carry DIR): the CUDA suites (the
#                                     cuda: tests' filter and environment, CudaDevicePointers,
#                                     CudaStream), bench/gpu_bench, PyTorch's SDPA on the same
#                                     GPU (bench/torch_sdpa.py), the decode and paged kernels'
#                                     tiling sweeps (scripts/gpu_tiling_sweep.sh) and, where ncu
#                                     works, the decode kernels' (contiguous and paged)
#                                     speed-of-light sections; in 540 s at most, inside one
#                                     device call
# Everything goes to $OUT (default DIR/out): cuda_suites.txt, cuda_pointers.txt, gpu_bench.json,
# table.md (bench/gpu_table.py: GFLOP/s, % of the fp32 peak and of the memory bandwidth from the
# device's properties), torch.txt, sweeps.md, ncu.txt; copy the tables into bench/RESULTS.md. Exits 1
# without an NVIDIA GPU, else with the first failing suite's status.
set -uo pipefail
mode=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
case "$mode" in
  pack)
    root=$(cd "$here/.." && pwd)
    dir=${2:-$root/.gpu}
    mkdir -p "$dir"
    for binary in "$root/build/tests/attention_tests" "$root/build/bench/gpu_bench"; do
      [[ -x $binary ]] || { echo "gpu_check: $binary missing: run scripts/build.sh first" >&2; exit 1; }
      strip -o "$dir/$(basename "$binary")" "$binary"
    done
    # Google Benchmark is a shared library on Debian; the CUDA image has none.
    ldd "$root/build/bench/gpu_bench" | awk '/libbenchmark/ {print $3}' | xargs -r cp -L -t "$dir"
    cp "$root/bench/gpu_table.py" "$root/bench/torch_sdpa.py" "$0" "$dir/"
    # The decode and paged kernels' tiling sweeps (scripts/gpu_tiling_sweep.sh), a few MB each.
    for sweep in decode paged; do
      MODE=$sweep "$root/scripts/gpu_tiling_sweep.sh" "$dir/sweep_$sweep" >/dev/null || exit 1
    done
    du -sh "$dir"
    exit 0 ;;
  run) ;;
  *) echo "usage: scripts/gpu_check.sh pack [DIR] | DIR/gpu_check.sh run" >&2; exit 2 ;;
esac

cd "$here"
export LD_LIBRARY_PATH=$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-$here/out}
mkdir -p "$out"
if ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total,driver_version --format=csv
status=0
# Budgets: the steps' timeouts add up to 540 s, inside the device tool's 600 s per command. The
# short checks and the benchmark go first: they hold the numbers a lease is for, and
# gpu_bench checks rows of every shape against the naive loop before timing.
echo "== device pointers, streams, half precision, rotary embeddings"
pointer_tests='CudaDevicePointers.*:CudaStream.*:GpuErrors.*:*GpuStaging.*:GpuHalf.*:HalfKvCache.*:'
pointer_tests+='RotaryEmbedding.GpuBackendsMatchReference'
timeout 75 stdbuf -oL ./attention_tests --gtest_filter="$pointer_tests" \
  >"$out/cuda_pointers.txt" 2>&1 || status=$?
grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) " "$out/cuda_pointers.txt" | head -30
echo "== gpu_bench"
timeout 150 ./gpu_bench --benchmark_filter=cuda --benchmark_repetitions=3 \
  --benchmark_out="$out/gpu_bench.json" --benchmark_out_format=json >"$out/gpu_bench.txt" 2>&1 ||
  { tail -3 "$out/gpu_bench.txt"; [[ $status != 0 ]] || status=1; }
python3 gpu_table.py "$out/gpu_bench.json" | tee "$out/table.md"
# The cuda: suites (tests/CMakeLists.txt: gpu_suites, ATTENTION_TEST_BACKEND=cuda): host tensors
# on the CUDA backend, copied to the GPU and back by the library. Line-buffered (stdbuf): a suite
# stopped by its timeout still leaves its output.
suites='*Sdpa.*:Shards/SdpaSweep.*:Shards/MaskedSdpaSweep.*:Shards/SdpaFuzz.*:'
suites+='MultiHeadAttention.MatchesReference:MultiHeadAttention.MasksMatchReference:Shards/MhaSweep.*:'
suites+='PagedAttention.*:ModAttention.*'
echo "== cuda: suites"
ATTENTION_TEST_BACKEND=cuda ATTENTION_FUZZ_CASES=500 timeout 150 stdbuf -oL ./attention_tests \
  --gtest_filter="$suites" --gtest_brief=1 >"$out/cuda_suites.txt" 2>&1 ||
  { rc=$?; [[ $status != 0 ]] || status=$rc; }
grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests? ran" "$out/cuda_suites.txt" | head -20
echo "== PyTorch SDPA, fp32, same GPU"
timeout 45 python3 torch_sdpa.py 2>&1 | tee "$out/torch.txt"
echo "== decode tiling sweeps: the default tiling against its variants (kernels called directly)"
: >"$out/sweeps.md"
for sweep in decode paged; do
  [[ -x sweep_$sweep/gpu_tiling_sweep ]] || continue
  timeout 30 ./sweep_$sweep/gpu_tiling_sweep | tee -a "$out/sweeps.md"
done
if command -v ncu >/dev/null; then
  # The decode kernels (issue 21): the split kernel of the contiguous and of the paged (block 16)
  # row, one ncu run each (a run's first launches are its first row's). Benchmark names go on
  # past the shape ("/real_time"), so the filters end at the shape's "/".
  echo "== ncu: the decode split kernels, contiguous (plain, key lengths) and paged, B1_H32_Sq1_Sk4096_D128"
  : >"$out/ncu.txt"
  for row in 'cuda/B1_H32_Sq1_Sk4096_D128/' 'cuda_keylen/B1_H32_Sq1_Sk4096_D128/' \
    'cuda_paged/B1_H32_Sq1_Sk4096_D128_block16/'; do
    timeout 20 ncu --clock-control none --section SpeedOfLight --section Occupancy \
      --section LaunchStats -k regex:split_result -c 1 ./gpu_bench --benchmark_filter="$row" \
      --benchmark_min_time=0.01 >>"$out/ncu.txt" 2>&1
  done
  grep -E "^  [a-z_]|Duration|Throughput|Registers Per|Achieved Occupancy|Block Size|Grid Size" \
    "$out/ncu.txt" | head -60
fi
exit $status
