"""Offline check of the GPU kernels' launches, without a GPU.

Usage: check_gpu_launch.py <attention_generators> <target> <name>:<generator>[:<param>=<value>...]...

Halide launches a GPU block with, per dimension, the largest thread extent over the block's
stages, so stages whose threads are shaped differently can launch far more threads than any of
them uses (PoCL runs that; CUDA refuses blocks over 1024 threads with CUDA_ERROR_INVALID_VALUE).
For each kernel this runs the generator for `target` with the lowered statement as output
(`-e stmt`) and reads every halide_cuda_run / halide_opencl_run call: its threads per block (x ×
y × z) must be at most the 256 threads every kernel's tiling designs (kernel_contract.h,
schedule/cuda.h; CUDA's own limit is 1024), and its shared memory at most 48 KiB where it is a
constant (CUDA's limit without an opt-in, which Halide's runtime does not make).
"""

import os
import re
import subprocess
import sys
import tempfile

RUN = re.compile(r'halide_(?:cuda|opencl)_run\(')
DESIGNED_THREADS, MAX_SHARED = 256, 48 * 1024


def call_arguments(text, start):
    """The top-level comma-separated arguments of the call whose '(' ends at text[start - 1]."""
    args, depth, current = [], 0, []
    for ch in text[start:]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append("".join(current).strip())
                return args
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    return args


def constant(expr):
    """The value of an integer expression of constants (Halide prints `0 + (8832*4)`)."""
    if not re.fullmatch(r"[0-9+*() ]+", expr):
        return None
    return eval(expr)  # digits, +, * and parentheses only


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    generator, target, failures, launches = argv[1], argv[2], [], 0
    with tempfile.TemporaryDirectory() as out:
        for spec in argv[3:]:
            name, gen, *params = spec.split(":")
            cmd = [generator, "-g", gen, "-n", name, "-f", name, "-e", "stmt", "-o", out,
                   "target=" + target] + params
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                failures.append(f"{name}: the generator failed:\n{result.stderr[-2000:]}")
                continue
            text = open(os.path.join(out, name + ".stmt"), encoding="utf-8",
                        errors="replace").read()
            for match in RUN.finditer(text):
                args = call_arguments(text, match.end())
                # (state, kernel name, blocks x y z, threads x y z, shared bytes, ...)
                kernel = args[1].strip('"')
                threads = [constant(a) for a in args[5:8]]
                shared = constant(args[8])
                if None in threads:
                    failures.append(f"{name} {kernel}: threads per block not constant: "
                                    f"{args[5:8]}")
                    continue
                launches += 1
                total = threads[0] * threads[1] * threads[2]
                # The projections stage a reduced extent of min(k, k_block): shared memory
                # bounded by the tiling (gpu_linear_tiling_error), not a constant.
                shown = f"{shared} bytes" if shared is not None else f"({args[8]}) bytes"
                print(f"{name:32} {kernel:48} threads {threads[0]}x{threads[1]}x{threads[2]}"
                      f" = {total:4}, shared {shown}")
                if total > DESIGNED_THREADS:
                    failures.append(f"{name} {kernel}: {total} threads per block, more than "
                                    f"{DESIGNED_THREADS}")
                if shared is not None and shared > MAX_SHARED:
                    failures.append(f"{name} {kernel}: {shared} bytes of shared memory, more "
                                    f"than {MAX_SHARED}")
    if launches == 0:
        failures.append("no GPU launch found in the statements")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
