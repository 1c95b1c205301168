#!/usr/bin/env python3
"""Prints sdpa_bench's Google Benchmark JSON as a markdown table, one row per attention shape.

Usage: python3 bench/table.py BENCH.json
  (BENCH.json from `sdpa_bench --benchmark_out=BENCH.json --benchmark_out_format=json`,
   or `sdpa_bench --benchmark_format=json > BENCH.json`; `-` reads stdin.)

Columns: our GFLOP/s, the OpenBLAS math path's, the naive loops' (– where not run), ours / OpenBLAS,
ours as % of the best sgemm probe of the same run, and for decode (Sq == 1) the K+V bandwidth.
With --benchmark_repetitions the median is used. Python 3 standard library only.
"""
import json
import statistics
import sys
from collections import OrderedDict

SHAPE_KEYS = ("B", "H", "Hkv", "Sq", "Sk", "D")
IMPLS = ("ours", "openblas_math", "naive")


def load(path):
    if path == "-":
        return json.load(sys.stdin)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def impl_of(run):
    """The implementation: the label sdpa_bench sets, else the second part of "sdpa/<impl>/<shape>"."""
    if run.get("label"):
        return run["label"]
    parts = run["name"].split("/")
    return parts[1] if parts[0] == "sdpa" and len(parts) > 1 else parts[0]


def representative_runs(benchmarks):
    """One dict per benchmark: the median aggregate when repetitions were run, else the median of its
    iterations' counters. Failed runs are reported on stderr and left out."""
    iterations, medians = OrderedDict(), {}
    for run in benchmarks:
        if run.get("error_occurred"):
            print(f"warning: {run['name']}: {run.get('error_message', 'error')}", file=sys.stderr)
            continue
        key = run.get("run_name", run["name"])
        if run.get("run_type") == "aggregate":
            if run.get("aggregate_name") == "median":
                medians[key] = run
        else:
            iterations.setdefault(key, []).append(run)
    result = []
    for key, runs in iterations.items():
        if key in medians:
            result.append(medians[key])
            continue
        merged = dict(runs[0])
        for counter in ("GFLOP/s", "GB/s"):
            values = [r[counter] for r in runs if counter in r]
            if values:
                merged[counter] = statistics.median(values)
        result.append(merged)
    return result


def shape_of(run):
    return tuple(int(run[k]) for k in SHAPE_KEYS)


def shape_label(shape):
    b, h, hkv, sq, sk, d = shape
    label = f"{b}×{h}×{sq}×{sk}×{d}"
    if hkv != h:
        label += f" (Hkv={hkv})"
    return label + (" decode" if sq == 1 else "")


def fmt(value, digits=1):
    return "–" if value is None else f"{value:.{digits}f}"


def ratio(num, den):
    return None if num is None or not den else num / den


def percent(fraction):
    return "–" if fraction is None else f"{100 * fraction:.0f}%"


def table(data):
    runs = representative_runs(data.get("benchmarks", []))
    sgemm = {int(r["M"]): r["GFLOP/s"] for r in runs if impl_of(r) == "sgemm" and "M" in r}
    peak = max(sgemm.values()) if sgemm else None

    # shape -> impl -> run
    by_shape = OrderedDict()
    for run in runs:
        impl = impl_of(run)
        if impl in IMPLS and all(k in run for k in SHAPE_KEYS):
            by_shape.setdefault(shape_of(run), {})[impl] = run

    lines = []
    context = data.get("context", {})
    probe = ", ".join(f"{n}³: {g:.1f}" for n, g in sorted(sgemm.items())) or "not run"
    lines.append(f"threads: {context.get('threads', '?')} · sgemm probe GFLOP/s: {probe}")
    lines.append("")
    lines.append("| shape (B×H×Sq×Sk×D) | ours GFLOP/s | OpenBLAS math GFLOP/s | naive GFLOP/s "
                 "| ours / OpenBLAS | ours % of sgemm | decode GB/s (ours / math) |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    # Prefill shapes by work, decode last: random interleaving makes the run order meaningless.
    def row_order(shape):
        b, h, _, sq, sk, d = shape
        return (sq == 1, b * h * sq * sk * d)

    for shape, impls in sorted(by_shape.items(), key=lambda item: row_order(item[0])):
        gflops = {impl: impls[impl]["GFLOP/s"] if impl in impls else None for impl in IMPLS}
        bandwidth = "–"
        if shape[3] == 1:
            gbs = [impls[i].get("GB/s") if i in impls else None for i in ("ours", "openblas_math")]
            bandwidth = " / ".join(fmt(g) for g in gbs)
        lines.append(
            f"| {shape_label(shape)} | {fmt(gflops['ours'])} | {fmt(gflops['openblas_math'])} "
            f"| {fmt(gflops['naive'])} | {fmt(ratio(gflops['ours'], gflops['openblas_math']), 2)} "
            f"| {percent(ratio(gflops['ours'], peak))} "
            f"| {bandwidth} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(table(load(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
