#!/usr/bin/env bash
# Builds bench/gpu_tiling_sweep.cpp here (after scripts/build.sh) into DIR (default .gpu/sweep,
# ignored by git) with the CUDA prefill kernel generated once per GpuTiling variant below; then, on
# a machine with an NVIDIA GPU (the device tool: carry .gpu), `DIR/gpu_tiling_sweep` prints each
# variant's time and GFLOP/s at the benchmark's prefill shapes and its difference from the
# default tiling (the first row). Variants: "name gpu_param=value ..." (kernel_contract.h), around
# the default (8 × 4 score tiles, 16 features staged per step) and the one it replaced.
# MODE=decode: the decode kernel (query_tiling=decode) at decode shapes instead (DIR default
# .gpu/sweep_decode), with variants around the default (one warp on one query, 64 keys, P·V
# passes of 32 × 4 features) and the one it replaced (2 queries, 128 keys, 64 threads). MODE=paged: the same variants of the paged decode kernel (paged_sdpa) on pools of
# shuffled blocks of 16 and 64 keys (DIR default .gpu/sweep_paged).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${MODE:-prefill}
dir=${1:-$root/.gpu/sweep}
[[ $mode != prefill && -z ${1:-} ]] && dir=$root/.gpu/sweep_$mode
generator=$root/build/generators/attention_generators
halide=$(echo "$root"/.venv/lib/python3*/site-packages/halide)
# API=opencl: the same variants for OpenCL (PoCL here), run with `small` to check their outputs.
api=${API:-cuda}
target=x86-64-linux-sse41-cuda-cuda_capability_80-user_context-no_runtime
defines=""
if [[ $api == opencl ]]; then
  target=x86-64-linux-sse41-opencl-user_context-no_runtime
  defines=-DSWEEP_OPENCL=1
  dir=$dir-opencl
fi
generator_name=sdpa
query_tiling=$mode
if [[ $mode == paged ]]; then
  generator_name=paged_sdpa
  query_tiling=decode
  defines+=" -DSWEEP_PAGED=1"
fi
if [[ $mode != prefill ]]; then
  defines+=" -DSWEEP_DECODE=1"
  variants=(
    "default"
    "previous gpu_query_tile=2 gpu_score_queries=2 gpu_pv_queries=2 gpu_feature_threads=64 gpu_split_keys=128"
    "k128 gpu_split_keys=128"
    "k32 gpu_split_keys=32"
    "q2 gpu_query_tile=2 gpu_score_queries=2 gpu_pv_queries=2"
    "ft64 gpu_feature_threads=64"
    "sk1 gpu_score_keys=1"
    "fb16 gpu_feature_block=16"
  )
else
  variants=(
    "default"
    "previous gpu_feature_block=8 gpu_score_queries=4"
    "score4x4 gpu_score_queries=4"
    "score8x8 gpu_score_keys=8"
    "q32_k128 gpu_query_tile=32 gpu_split_keys=128"
    "q128_k32 gpu_query_tile=128 gpu_split_keys=32"
    "pv16x4 gpu_pv_queries=16"
    "pv8x8 gpu_pv_features=8 gpu_feature_threads=16"
  )
fi
mkdir -p "$dir"
header=$dir/sweep_variants.h
printf '// Written by scripts/gpu_tiling_sweep.sh.\n#pragma once\n' >"$header"
rows=""
objects=()
for entry in "${variants[@]}"; do
  read -r name params <<<"$entry"
  fn=sweep_$name
  # shellcheck disable=SC2086
  "$generator" -g $generator_name -n "$fn" -f "$fn" -e object,c_header -o "$dir" target=$target \
    query_tiling=$query_tiling $params
  split=$(sed -n 's/.*gpu_split_keys=\([0-9]*\).*/\1/p' <<<"$params")
  echo "#include \"$fn.h\"" >>"$header"
  rows+="  {\"$name${params:+ ($params)}\", $fn, ${split:-64}},"$'\n'  # 64: both tilings' split_keys
  objects+=("$dir/$fn.o")
done
# Every variant has the generator's arguments: the first one's declaration gives their type.
echo "struct Variant { const char* name; decltype(&sweep_default) function; int split_keys; };" \
  >>"$header"
printf 'const Variant kVariants[] = {\n%s};\n' "$rows" >>"$header"
g++ -std=c++17 -O2 $defines -I "$dir" -I "$halide/include" "$root/bench/gpu_tiling_sweep.cpp" "${objects[@]}" \
  "$root/build/libattention_halide_runtime.a" -ldl -lpthread -o "$dir/gpu_tiling_sweep"
echo "built $dir/gpu_tiling_sweep (${#variants[@]} variants)"
