#!/usr/bin/env python3
"""Checks that the ARM SDPA prefill kernel's inner loops are NEON vector code.

Usage: check_neon_assembly.py <sdpa_f32_prefill assembly listing (Halide's ASSEMBLY output)>

The listing names each basic block after Halide's loop (``// %"8_for_scores.s1.r_d$x..."``). The
two loops that do the kernel's arithmetic are the Q·Kᵀ reduction over d (``scores.s1.r_d``) and the
P·V reduction over a chunk of keys (``weighted_sum_intm.s1.key_r``). Every block of those loops must
hold whole register blocks of ``fmla vN.4s`` (4 fp32 lanes) and no scalar floating-point arithmetic
(``fmadd s0, ...`` and friends): scalar code there would mean the schedule's vectorization was lost.
Exit status 0 when it holds, 1 with the offending blocks otherwise.
"""

import re
import sys

INNER_LOOPS = {
    "Q·Kᵀ over d": re.compile(r'for_scores\.s1\.r_d'),
    "P·V over keys": re.compile(r'for_weighted_sum_intm\.s1\.key_r'),
}
# A block starts at a label line, e.g. `.LBB0_285:   // %"8_for_scores.s1.r_d$x.d_outer.us"` or
# `// %bb.294:   // %"10_for_scores..."`; its name is the IR block name in the trailing comment.
BLOCK_START = re.compile(r'^(?:\.LBB\w+:|// %bb\.\d+:)\s*(?://\s*%"?([^"\s]*)"?)?')
# Blocks around a loop (its preheader, exits) carry the loop's name too; only the body counts.
NOT_BODY = re.compile(r'preheader|loopexit|crit_edge|end_for')
VECTOR_FMA = re.compile(r'^\s*fmla\s+v\d+\.4s\s*,')
SCALAR_FP = re.compile(r'^\s*(fmadd|fmsub|fnmadd|fnmsub|fmul|fadd|fsub|fdiv|fmax|fmin)\s+s\d+\s*,')
# Fewest vector FMAs in one block of each loop: the smaller register block of each (Q·Kᵀ: 3 query
# vectors × 8 keys when d is not unrolled; P·V: 6 rows × 4 vectors), from schedule/cpu.h.
MIN_VECTOR_FMAS = {"Q·Kᵀ over d": 24, "P·V over keys": 24}


def blocks(lines):
    """Yields (block name, instruction lines) for every basic block of the listing."""
    name, body = None, []
    for line in lines:
        match = BLOCK_START.match(line)
        if match:
            if name is not None:
                yield name, body
            name, body = match.group(1) or "", []
        elif name is not None:
            body.append(line)
    if name is not None:
        yield name, body


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as listing:
        lines = listing.read().splitlines()
    found = {loop: 0 for loop in INNER_LOOPS}
    failures = []
    for name, body in blocks(lines):
        for loop, pattern in INNER_LOOPS.items():
            if not pattern.search(name) or NOT_BODY.search(name):
                continue
            vector = sum(1 for line in body if VECTOR_FMA.match(line))
            scalar = [line.strip() for line in body if SCALAR_FP.match(line)]
            found[loop] += 1
            print(f"{loop:14} {name}: {vector} fmla .4s, {len(scalar)} scalar fp")
            if vector < MIN_VECTOR_FMAS[loop] or scalar:
                failures.append(f"{loop} block {name}: {vector} fmla .4s (expected >= "
                                f"{MIN_VECTOR_FMAS[loop]}), scalar: {scalar[:4]}")
    for loop, count in found.items():
        if count == 0:
            failures.append(f"no block of the {loop} loop ({INNER_LOOPS[loop].pattern}) in "
                            f"{argv[1]}: loop names changed, or not an SDPA prefill listing")
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
