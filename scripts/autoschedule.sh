#!/usr/bin/env bash
# Runs one of Halide's autoschedulers on the SDPA generator for one x86 target and writes the schedule
# it found to autoschedules/ (see autoschedules/README.md). Not part of the build or CI: Adams2019
# searches for ~10 minutes on 2 cores.
# Usage: scripts/autoschedule.sh [Mullapudi2016|Adams2019] [prefill|decode] [halide-target]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scheduler=${1:-Mullapudi2016}
tiling=${2:-prefill}
target=${3:-x86-64-linux-sse41-avx-f16c-fma-avx2}
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >/dev/null
plugin_dir=$("$root/.venv/bin/python" -c "import halide, os; print(os.path.join(halide.install_dir(), 'lib64'))")
plugin="$plugin_dir/libautoschedule_$(echo "$scheduler" | tr '[:upper:]' '[:lower:]').so"
name="sdpa_${tiling}_${scheduler}"
out="$build_dir/autoschedules"
mkdir -p "$out"
"$build_dir/generators/attention_generators" -g sdpa -f "$name" -e static_library,h,schedule -o "$out" \
  -p "$plugin" "target=$target" "query_tiling=$tiling" "autoscheduler=$scheduler" \
  autoscheduler.parallelism="$(nproc)"
cp "$out/$name.schedule.h" "$root/autoschedules/"
echo "wrote autoschedules/$name.schedule.h and $out/$name.a (C function $name, same signature as the kernels)"
