#!/usr/bin/env python3
"""Prints sdpa_bench's Google Benchmark JSON as markdown tables, one row per attention shape.

Usage: python3 bench/table.py RUN.json [ONE_THREAD.json]
  (RUN.json from `sdpa_bench --benchmark_out=RUN.json --benchmark_out_format=json`, `-` reads
   stdin; ONE_THREAD.json: the same benchmark run with ATTENTION_BENCH_THREADS=1.)

Main table (from RUN.json): our GFLOP/s (tuned kernels on, as shipped), the same with the default
tilings only and the ratio of the two (1.00 where no tuned kernel serves the shape), Halide's best
autoscheduler on the same generator (Adams2019, greedy; unmasked shapes up to 50 GFLOP), the oneDNN and OpenBLAS math paths', the naive loops'
(– where not run), ours / oneDNN and ours / OpenBLAS, ours as % of the FMA probe (the arithmetic
peak of the ISA variant our kernels ran, named in the table's header) and of the best sgemm probe of
the same run; for masked shapes the GFLOP/s of the visible (query, key) pairs only, as % of the FMA
peak; for decode (Sq == 1) the K+V bandwidth of ours and both math paths, and ours as % of the copy
probe of the same run. A second table does the same for multi-head attention with projections; a
third sets ours in Float16 and BFloat16 (q, k, v, out) beside fp32: GFLOP/s, each half type's time
as a fraction of fp32's, the oneDNN math path in bf16 and ours bf16 over it, and for decode the K+V
GB/s (at the type's own size) as % of the copy probe.
With ONE_THREAD.json a last table gives each shape's 1-thread and multi-thread GFLOP/s and their
ratio. With --benchmark_repetitions the median is used. Python 3 standard library only.
"""
import json
import statistics
import sys
from collections import OrderedDict

SHAPE_KEYS = ("B", "H", "Hkv", "Sq", "Sk", "D")
IMPLS = ("ours", "ours_default", "ours_f16", "ours_bf16", "autoscheduled", "onednn_math",
         "onednn_math_bf16", "openblas_math", "naive")
HALF_IMPLS = ("ours_f16", "ours_bf16")
PEERS = ("onednn_math", "openblas_math")  # the scaling table's
COUNTERS = ("GFLOP/s", "visible GFLOP/s", "GB/s")


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
    return parts[1] if parts[0] in ("sdpa", "mha") and len(parts) > 1 else parts[0]


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
        for counter in COUNTERS:
            values = [r[counter] for r in runs if counter in r]
            if values:
                merged[counter] = statistics.median(values)
        result.append(merged)
    return result


def shape_id(run):
    """The shape part of "sdpa/<impl>/<shape>/...", e.g. 1x8x2048x2048x64_causal."""
    return run.get("run_name", run["name"]).split("/")[2]


def mask_of(run):
    """The mask suffix of the shape id ("causal", "padded", "window256"), or ""."""
    parts = shape_id(run).split("_")[1:]
    return " ".join(p for p in parts if not p.startswith("kv"))


def shape_label(run):
    b, h, hkv, sq, sk, d = (int(run[k]) for k in SHAPE_KEYS)
    label = f"{b}×{h}×{sq}×{sk}×{d}"
    if hkv != h:
        label += f" (Hkv={hkv})"
    if mask_of(run):
        label += " " + mask_of(run)
    return label + (" decode" if sq == 1 else "")


def fmt(value, digits=1):
    return "–" if value is None else f"{value:.{digits}f}"


def ratio(num, den):
    return None if num is None or not den else num / den


def percent(fraction):
    return "–" if fraction is None else f"{100 * fraction:.0f}%"


class Run:
    """The representative runs of one JSON file, grouped for the tables."""

    def __init__(self, data):
        runs = representative_runs(data.get("benchmarks", []))
        self.context = data.get("context", {})
        self.sgemm = {int(r["M"]): r["GFLOP/s"] for r in runs
                      if impl_of(r) == "sgemm" and "M" in r}
        self.peak = max(self.sgemm.values()) if self.sgemm else None
        copies = [r["GB/s"] for r in runs if impl_of(r) == "copy" and "GB/s" in r]
        self.copy = max(copies) if copies else None
        fma = [r["GFLOP/s"] for r in runs if impl_of(r) == "fma_peak" and "GFLOP/s" in r]
        self.fma = max(fma) if fma else None
        # MHA shape id ("1x512_E512_H8") -> impl -> GFLOP/s
        self.mha = OrderedDict()
        for run in runs:
            parts = run.get("run_name", run["name"]).split("/")
            if parts[0] == "mha" and len(parts) > 2 and "GFLOP/s" in run:
                self.mha.setdefault(parts[2], {})[parts[1]] = run["GFLOP/s"]
        # shape id -> impl -> run
        self.by_shape = OrderedDict()
        for run in runs:
            impl = impl_of(run)
            if impl in IMPLS and all(k in run for k in SHAPE_KEYS):
                self.by_shape.setdefault(shape_id(run), {})[impl] = run

    def ordered_shapes(self):
        """Prefill shapes by work, masked after their twins, decode last (random interleaving makes
        the run order meaningless)."""
        def key(item):
            run = next(iter(item[1].values()))
            b, h, _, sq, sk, d = (int(run[k]) for k in SHAPE_KEYS)
            return (sq == 1, b * h * sq * sk * d, mask_of(run))
        return sorted(self.by_shape.items(), key=key)

    def counter(self, shape, impl, name):
        run = self.by_shape.get(shape, {}).get(impl)
        return None if run is None else run.get(name)


def header(run):
    """Who ran and the run's limits: the threads, the variant of our kernels (and of the FMA probe),
    the peers' own ISA, the probes."""
    c = run.context
    probe = ", ".join(f"{n}³: {g:.1f}" for n, g in sorted(run.sgemm.items())) or "not run"
    return [f"threads: {c.get('threads', '?')} · our kernels' variant: "
            f"`{c.get('cpu_kernel_target', '?')}` · {c.get('onednn', 'oneDNN ?')} · "
            f"OpenBLAS: {c.get('openblas', '?')}",
            "",
            f"FMA probe GFLOP/s: {fmt(run.fma)} · sgemm probe GFLOP/s: {probe} · "
            f"copy probe GB/s (read + write): {fmt(run.copy)}",
            ""]


def main_table(run):
    lines = header(run)
    lines.append("| shape (B×H×Sq×Sk×D) | ours GFLOP/s | default tiling | tuned / default "
                 "| autoscheduled | oneDNN math | OpenBLAS math | naive | ours / oneDNN | ours / OpenBLAS | ours % of FMA peak | ours % of sgemm "
                 "| visible GFLOP/s (ours, % of FMA peak) "
                 "| decode GB/s (ours / oneDNN / OpenBLAS) | decode % of copy |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, impls in run.ordered_shapes():
        gflops = {impl: run.counter(shape, impl, "GFLOP/s") for impl in IMPLS}
        any_run = next(iter(impls.values()))
        visible = run.counter(shape, "ours", "visible GFLOP/s")
        visible_cell = "–" if visible is None else \
            f"{fmt(visible)} ({percent(ratio(visible, run.fma))})"
        bandwidth, of_copy = "–", "–"
        if int(any_run["Sq"]) == 1:
            gbs = [run.counter(shape, i, "GB/s") for i in ("ours",) + PEERS]
            bandwidth = " / ".join(fmt(g) for g in gbs)
            of_copy = percent(ratio(gbs[0], run.copy))
        ours = gflops["ours"]
        lines.append(
            f"| {shape_label(any_run)} | {fmt(ours)} | {fmt(gflops['ours_default'])} "
            f"| {fmt(ratio(ours, gflops['ours_default']), 2)} | {fmt(gflops['autoscheduled'])} "
            f"| {fmt(gflops['onednn_math'])} "
            f"| {fmt(gflops['openblas_math'])} | {fmt(gflops['naive'])} "
            f"| {fmt(ratio(ours, gflops['onednn_math']), 2)} "
            f"| {fmt(ratio(ours, gflops['openblas_math']), 2)} "
            f"| {percent(ratio(ours, run.fma))} | {percent(ratio(ours, run.peak))} "
            f"| {visible_cell} | {bandwidth} | {of_copy} |")
    return lines


def mha_table(run):
    if not run.mha:
        return []
    lines = ["", "Multi-head attention with projections (GFLOP/s: projections + attention)", "",
             "| shape (B×S, E, H) | ours | oneDNN | OpenBLAS | ours / oneDNN | ours / OpenBLAS "
             "| ours % of FMA peak |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for shape, impls in run.mha.items():
        ours, onednn, openblas = (impls.get(i) for i in ("ours", "onednn", "openblas"))
        lines.append(f"| {shape.replace('_', ', ')} | {fmt(ours)} | {fmt(onednn)} | {fmt(openblas)} "
                     f"| {fmt(ratio(ours, onednn), 2)} | {fmt(ratio(ours, openblas), 2)} "
                     f"| {percent(ratio(ours, run.fma))} |")
    return lines


def half_table(run):
    shapes = [(shape, impls) for shape, impls in run.ordered_shapes()
              if any(run.counter(shape, h, "GFLOP/s") for h in HALF_IMPLS)]
    if not shapes:
        return []
    lines = ["", "Half precision: q, k, v and out in Float16 / BFloat16 beside fp32 (ours)", "",
             "| shape (B×H×Sq×Sk×D) | fp32 GFLOP/s | f16 GFLOP/s | bf16 GFLOP/s "
             "| f16 time / fp32 | bf16 time / fp32 | oneDNN bf16 GFLOP/s | ours bf16 / oneDNN bf16 "
             "| decode GB/s (fp32 / f16 / bf16) | decode % of copy (fp32 / f16 / bf16) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, impls in shapes:
        any_run = next(iter(impls.values()))
        names = ("ours",) + HALF_IMPLS
        gflops = [run.counter(shape, i, "GFLOP/s") for i in names]
        times = [ratio(gflops[0], g) for g in gflops[1:]]  # time ratio = inverse GFLOP/s ratio
        bandwidth, of_copy = "–", "–"
        if int(any_run["Sq"]) == 1:
            gbs = [run.counter(shape, i, "GB/s") for i in names]
            bandwidth = " / ".join(fmt(g) for g in gbs)
            of_copy = " / ".join(percent(ratio(g, run.copy)) for g in gbs)
        onednn = run.counter(shape, "onednn_math_bf16", "GFLOP/s")
        lines.append(f"| {shape_label(any_run)} | {' | '.join(fmt(g) for g in gflops)} "
                     f"| {' | '.join(fmt(t, 2) for t in times)} | {fmt(onednn)} "
                     f"| {fmt(ratio(gflops[2], onednn), 2)} | {bandwidth} | {of_copy} |")
    return lines


def scaling_table(run, one):
    threads = run.context.get("threads", "?")
    lines = ["", f"Thread scaling: 1 thread vs {threads} (GFLOP/s; decode: GB/s)", ""]
    lines.append(f"| shape | ours 1t | ours {threads}t | ours speed-up | oneDNN 1t "
                 f"| oneDNN {threads}t | oneDNN speed-up | OpenBLAS 1t | OpenBLAS {threads}t "
                 "| OpenBLAS speed-up |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, impls in run.ordered_shapes():
        any_run = next(iter(impls.values()))
        name = "GB/s" if int(any_run["Sq"]) == 1 else "GFLOP/s"
        cells = []
        for impl in ("ours",) + PEERS:
            single, multi = one.counter(shape, impl, name), run.counter(shape, impl, name)
            cells += [fmt(single), fmt(multi), fmt(ratio(multi, single), 2)]
        lines.append(f"| {shape_label(any_run)} | " + " | ".join(cells) + " |")
    probes = [("FMA probe", one.fma, run.fma), ("sgemm probe (best)", one.peak, run.peak),
              ("copy probe GB/s", one.copy, run.copy)]
    for label, single, multi in probes:
        lines.append(f"| {label} | {fmt(single)} | {fmt(multi)} | {fmt(ratio(multi, single), 2)} "
                     "| | | | | | |")
    return lines


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    run = Run(load(argv[1]))
    lines = main_table(run) + mha_table(run) + half_table(run)
    if len(argv) == 3:
        lines += scaling_table(run, Run(load(argv[2])))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
