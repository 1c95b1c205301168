#!/usr/bin/env python3
"""Prints gpu_bench's Google Benchmark JSON as a markdown table (scripts/gpu_check.sh).

Usage: python3 bench/gpu_table.py GPU_BENCH.json

The header names the GPU with the fp32 peak and memory bandwidth gpu_bench computed from its
properties; one row per benchmark: backend, shape, milliseconds, GFLOP/s, % of the fp32 peak, and
for decode (Sq = 1) the K+V bandwidth and its % of the memory bandwidth. A benchmark that did not
run shows its reason. With --benchmark_repetitions the median is used. Standard library only.
"""
import json
import statistics
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        run = json.load(f)
    context = run["context"]
    peak = float(context.get("gpu_fp32_peak_gflops", "0"))
    bandwidth = float(context.get("gpu_bandwidth_gbs", "0"))
    print(f"GPU: {context.get('gpu', '?')}, fp32 peak {peak:.0f} GFLOP/s, memory bandwidth "
          f"{bandwidth:.0f} GB/s ({context.get('date', '')})\n")
    rows = {}
    for b in run["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":  # repetitions: the median of the runs
            continue
        rows.setdefault(b["run_name"] if "run_name" in b else b["name"], []).append(b)
    print("| backend | shape | ms | GFLOP/s | % of fp32 peak | GB/s | % of bandwidth |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        backend, shape = name.split("/")[0], name.split("/")[1]
        errors = [r.get("error_message") for r in runs if r.get("error_occurred")]
        if errors:
            print(f"| {backend} | {shape} | – | not run: {errors[0]} | | | |")
            continue
        median = lambda key: statistics.median(r[key] for r in runs) if key in runs[0] else None
        ms, gflops, gbs = median("real_time"), median("GFLOP/s"), median("GB/s")
        pct_peak = f"{100 * gflops / peak:.1f}" if gflops and peak else "–"
        pct_bw = f"{100 * gbs / bandwidth:.1f}" if gbs and bandwidth else "–"
        print(f"| {backend} | {shape} | {ms:.3f} | {gflops:.1f} | {pct_peak} | "
              f"{'%.1f' % gbs if gbs else '–'} | {pct_bw} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
