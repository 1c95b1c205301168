#!/usr/bin/env python3
"""Draws GFLOP/s against sequence length from sdpa_bench's JSON, as a PNG, with gnuplot.

Usage: python3 bench/plot.py RUN.json [ONE_THREAD.json] -o OUT.png

The sweep is every unmasked prefill shape B=1, H=8, D=64 with Sq = Sk (sdpa_bench runs S = 256 ..
8192). Lines: ours and the OpenBLAS math path from RUN.json, ours from ONE_THREAD.json when given,
and the sgemm probe of RUN.json as the machine's practical peak. Medians when repetitions were run.
Needs gnuplot (Debian gnuplot-nox, installed by scripts/install_deps.sh).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from table import Run, load  # bench/table.py: the same median selection as the tables

SWEEP = {"B": 1, "H": 8, "Hkv": 8, "D": 64}


def sweep(run, impl):
    """{S: GFLOP/s} of impl over the sweep shapes of run."""
    points = {}
    for shape, impls in run.by_shape.items():
        r = impls.get(impl)
        if r is None or "_" in shape or int(r["Sq"]) != int(r["Sk"]):
            continue
        if all(int(r[k]) == v for k, v in SWEEP.items()):
            points[int(r["Sq"])] = r["GFLOP/s"]
    return points


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run")
    parser.add_argument("one_thread", nargs="?")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv[1:])
    if shutil.which("gnuplot") is None:
        print("plot.py: gnuplot not found (scripts/install_deps.sh installs gnuplot-nox)",
              file=sys.stderr)
        return 1

    run = Run(load(args.run))
    threads = run.context.get("threads", "?")
    series = [(f"ours, {threads} threads", sweep(run, "ours")),
              (f"OpenBLAS math path, {threads} threads", sweep(run, "openblas_math"))]
    if args.one_thread:
        series.append(("ours, 1 thread", sweep(Run(load(args.one_thread)), "ours")))
    lengths = sorted(set().union(*(points for _, points in series)))
    if not lengths:
        print("plot.py: no sweep shapes (1×8×S×S×64) in the JSON", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "sweep.dat")
        with open(data, "w", encoding="utf-8") as f:
            for s in lengths:
                values = [points.get(s) for _, points in series]
                f.write(f"{s} " + " ".join("NaN" if v is None else f"{v:.3f}" for v in values) +
                        "\n")
        plots = [f"'{data}' using 1:{col + 2} with linespoints lw 2 pt 7 title '{title}'"
                 for col, (title, _) in enumerate(series)]
        if run.peak:
            plots.append(f"{run.peak:.3f} with lines dt 2 lw 2 title 'sgemm probe, {threads} "
                         "threads'")
        script = "\n".join([
            "set terminal pngcairo size 900,560 font ',11'",
            f"set output '{os.path.abspath(args.output)}'",
            "set title 'fp32 attention, B=1, H=8, D=64, Sq = Sk = S'",
            "set xlabel 'sequence length S'",
            "set ylabel 'GFLOP/s (4·B·H·S²·D per call)'",
            "set logscale x 2",
            f"set xrange [{lengths[0] / 1.3}:{lengths[-1] * 1.3}]",
            "set yrange [0:*]",
            "set grid",
            "set key bottom right",
            "set datafile missing 'NaN'",
            "plot " + ", ".join(plots),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
