#!/usr/bin/env python3
"""CPU peers of bench/sdpa_bench: PyTorch's and OpenVINO's scaled-dot-product attention, fp32 and bf16.

Times the prefill shapes below (B x H x Sq x Sk x D, the same as sdpa_bench's) with
  torch:    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...) on CPU tensors
            [B, H, S, D] under torch.no_grad(); bf16 means torch.bfloat16 tensors;
  openvino: a model of one opsetN.scaled_dot_product_attention (the newest opset that has it) over
            f32 Parameters, compiled for "CPU" with INFERENCE_PRECISION_HINT f32 or bf16 and
            PERFORMANCE_HINT LATENCY; inputs are fp32 numpy arrays. The line names the nodes the plugin
            compiled it into and the precision each ran in (from the runtime model).
Each (peer, dtype, shape) is warmed up, then timed --runs times, each run repeating the call for at least
--min-run seconds; the line gives the median ms per call and GFLOP/s. FLOPs are 4*B*H*Sq*Sk*D, for the
causal shape only the (query, key) pairs the mask lets through (Sq*(Sq+1)/2 per head, about half), as
sdpa_bench's "visible GFLOP/s" counts them. A peer whose package is missing is skipped with a note.
Usage: python3 bench/cpu_peers.py [--shapes 0,2] [--threads N] [--runs N] [--json FILE]
Normally run through scripts/cpu_peers.sh, which installs torch and openvino in .venv-peers/.
"""
import argparse
import json
import os
import statistics
import time

# (B, H, Sq, Sk, D, causal)
SHAPES = [(1, 8, 512, 512, 64, False), (1, 8, 2048, 2048, 64, False), (4, 12, 256, 256, 64, False),
          (1, 16, 1024, 1024, 128, False), (1, 8, 2048, 2048, 64, True)]


def shape_name(s):
    b, h, sq, sk, d, causal = s
    return f"B{b}_H{h}_Sq{sq}_Sk{sk}_D{d}" + ("_causal" if causal else "")


def flops(s):
    b, h, sq, sk, d, causal = s
    pairs = sum(min(i + 1, sk) for i in range(sq)) if causal else sq * sk  # top-left causal
    return 4.0 * b * h * pairs * d


def time_call(fn, runs, min_run):
    """Median seconds per call over `runs` runs, each repeating fn for at least min_run seconds."""
    for _ in range(2):
        fn()
    start, reps = time.perf_counter(), 0
    while reps < 1 or time.perf_counter() - start < min_run / 4:  # calibrate calls per run
        fn()
        reps += 1
    reps = max(1, round(reps * min_run / (time.perf_counter() - start)))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - start) / reps)
    return statistics.median(times)


def dims(s):
    """Shapes of q, k and v: [B, H, S, D]."""
    b, h, sq, sk, d, _ = s
    return [(b, h, n, d) for n in (sq, sk, sk)]


def torch_peer(threads):
    try:
        import torch
    except ImportError as e:
        print(f"# torch skipped: {e}")
        return None
    torch.set_num_threads(threads)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def bench(s, dtype, runs, min_run):
        torch.manual_seed(0)
        q, k, v = ((torch.rand(n) * 2 - 1).to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
                   for n in dims(s))
        with torch.no_grad():
            return time_call(lambda: sdpa(q, k, v, is_causal=s[5]), runs, min_run), dtype

    info = f"torch {torch.__version__} (cpu capability {torch.backends.cpu.get_cpu_capability()})"
    return "torch", bench, info


def openvino_peer(threads):
    try:
        import numpy as np
        import openvino as ov
    except ImportError as e:
        print(f"# openvino skipped: {e}")
        return None
    ops = next(getattr(ov, f"opset{n}") for n in range(30, 12, -1)
               if hasattr(getattr(ov, f"opset{n}", None), "scaled_dot_product_attention"))
    core = ov.Core()

    def bench(s, dtype, runs, min_run):
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, n).astype(np.float32) for n in dims(s)]
        params = [ops.parameter(a.shape, np.float32, name=n) for a, n in zip(arrays, "qkv")]
        model = ov.Model([ops.scaled_dot_product_attention(*params, causal=s[5])], params, "sdpa")
        compiled = core.compile_model(model, "CPU", {
            "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[dtype],
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": str(threads)})
        nodes = [(op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["runtimePrecision"].astype(str))
                 for op in compiled.get_runtime_model().get_ops()]
        ran = " ".join(f"{t}:{p}" for t, p in nodes if t not in ("Input", "Output", "Const"))
        request = compiled.create_infer_request()
        for i, a in enumerate(arrays):
            request.set_input_tensor(i, ov.Tensor(a))
        return time_call(request.infer, runs, min_run), ran

    info = f"openvino {ov.get_version()} ({ops.__name__.split('.')[-1]})"
    return "openvino", bench, info


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(map(str, range(len(SHAPES)))),
                    help="comma-separated indices into SHAPES (default: all): " +
                    ", ".join(f"{i}={shape_name(s)}" for i, s in enumerate(SHAPES)))
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per case; the median is reported")
    ap.add_argument("--min-run", type=float, default=0.2, help="least seconds per timed run")
    ap.add_argument("--json", help="also write the records to this file")
    args = ap.parse_args()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")]
    peers = [p for p in (torch_peer(args.threads), openvino_peer(args.threads)) if p]
    print(f"# {'; '.join(p[2] for p in peers) or 'no peers'}; CPU: {cpu_model()}; threads: {args.threads}")
    records = []
    for name, bench, _ in peers:
        for dtype in ("fp32", "bf16"):
            for s in shapes:
                sec, ran = bench(s, dtype, args.runs, args.min_run)
                rec = {"peer": name, "dtype": dtype, "shape": shape_name(s), "ms": sec * 1e3,
                       "gflops": flops(s) / sec * 1e-9, "flops": flops(s), "threads": args.threads}
                note = ""
                if name == "openvino":
                    rec["runtime_precision"] = ran
                    note = f"  (ran: {ran})"
                records.append(rec)
                print(f"{name:8} {dtype} {rec['shape']:28} {rec['ms']:9.3f} ms {rec['gflops']:8.1f} GFLOP/s{note}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"context": {"peers": [p[2] for p in peers], "cpu": cpu_model(), "threads": args.threads},
                       "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
