#!/usr/bin/env python3
"""Checks that an SDPA prefill kernel's inner loops are the vector code its schedule asks for.

Usage: check_inner_loops.py <neon|bf16|amx> <prefill assembly listing (Halide's ASSEMBLY output)>

  neon: the ARM sdpa_f32_prefill: whole register blocks of ``fmla vN.4s`` (4 fp32 lanes), no
        scalar floating-point arithmetic (``fmadd s0, ...`` and friends).
  bf16: the x86 sdpa_bf16_prefill: whole register blocks of ``vdpbf16ps`` (16 lanes, two
        bfloat16 products each), no fp32 FMA and no widening of bfloat16 (``vpslld``,
        ``vpmovzxwd``): either would mean the products no longer go through vdpbf16ps.
  amx:  the x86 sdpa_bf16_amx_prefill: four ``tdpbf16ps`` into four different accumulator tiles
        per step of each reduction (the 2 × 2 block generators/lowering/amx_jam.h makes; one tile
        would run every product at the instruction's latency), no ``tilestored`` (a spill).

The listing names each basic block after Halide's loop (``%"8_for_scores.s1.r_d$x..."``). The two
loops that do the kernel's arithmetic are the Q·Kᵀ reduction over d (``scores.s1.r_d``) and the P·V
reduction over a chunk of keys (``weighted_sum_intm.s1.key_r``). Every block of those loops must
hold the expected instructions. Exit status 0 when it holds, 1 with the offending blocks otherwise.
"""

import re
import sys

INNER_LOOPS = {
    "Q·Kᵀ over d": re.compile(r'for_scores\.s1\.r_d'),
    "P·V over keys": re.compile(r'for_weighted_sum_intm\.s1\.key_r'),
}
# The AMX generator's reductions: features in steps of 32 (rd), keys in steps of 32 (rj).
AMX_LOOPS = {
    "Q·Kᵀ over d": re.compile(r'for_scores\.s1\.rd\$y'),
    "P·V over keys": re.compile(r'for_pv\.s1\.rj\$y'),
}
# Blocks around a loop (its preheader, exits) carry the loop's name too; only the body counts.
NOT_BODY = re.compile(r'preheader|loopexit|crit_edge|end_for')


class Isa:
    """What one listing's inner loops must hold: `want` at least `least` times per block (the
    smallest register block of each loop, from schedule/cpu.h), never `refuse`."""

    def __init__(self, comment, want, want_name, refuse, least, loops=None, accumulators=0):
        # A block starts at a label line, e.g. `.LBB0_285:   // %"8_for_scores.s1.r_d$x.d_outer"`
        # or `# %bb.294:   # %"10_for_scores..."`; its name is the IR block name in the comment.
        self.block_start = re.compile(
            rf'^(?:\.LBB\w+:|{comment} %bb\.\d+:)\s*(?:{comment}\s*%"?([^"\s]*)"?)?')
        self.want, self.want_name, self.refuse, self.least = want, want_name, refuse, least
        self.loops = loops or INNER_LOOPS
        # At least this many distinct destination registers among the wanted instructions.
        self.accumulators = accumulators


ISAS = {
    # Q·Kᵀ: 3 query vectors × 8 keys when d is not unrolled; P·V: 6 rows × 4 vectors.
    "neon": Isa("//", re.compile(r'^\s*fmla\s+v\d+\.4s\s*,'), "fmla .4s",
                re.compile(r'^\s*(fmadd|fmsub|fnmadd|fnmsub|fmul|fadd|fsub|fdiv|fmax|fmin)\s+s\d+\s*,'),
                {"Q·Kᵀ over d": 24, "P·V over keys": 24}),
    # Q·Kᵀ: 6 queries × 4 key vectors; P·V: 6 rows × 4 value vectors.
    "bf16": Isa("#", re.compile(r'^\s*vdpbf16ps\s'), "vdpbf16ps",
                re.compile(r'^\s*(vfn?m(add|sub)\d+[ps]s|vmulps|vaddps|vpslld|vpmovzxwd)\s'),
                {"Q·Kᵀ over d": 24, "P·V over keys": 24}),
    "amx": Isa("#", re.compile(r'^\s*tdpbf16ps\s'), "tdpbf16ps", re.compile(r'^\s*tilestored\s'),
               {"Q·Kᵀ over d": 4, "P·V over keys": 4}, AMX_LOOPS, accumulators=4),
}


def blocks(lines, isa):
    """Yields (block name, instruction lines) for every basic block of the listing."""
    name, body = None, []
    for line in lines:
        match = isa.block_start.match(line)
        if match:
            if name is not None:
                yield name, body
            name, body = match.group(1) or "", []
        elif name is not None:
            body.append(line)
    if name is not None:
        yield name, body


def main(argv):
    if len(argv) != 3 or argv[1] not in ISAS:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    isa = ISAS[argv[1]]
    with open(argv[2], encoding="utf-8", errors="replace") as listing:
        lines = listing.read().splitlines()
    found = {loop: 0 for loop in isa.loops}
    failures = []
    for name, body in blocks(lines, isa):
        for loop, pattern in isa.loops.items():
            if not pattern.search(name) or NOT_BODY.search(name):
                continue
            wanted_lines = [line for line in body if isa.want.match(line)]
            wanted = len(wanted_lines)
            # AT&T operand order: the destination is the last operand.
            destinations = {line.split(",")[-1].strip() for line in wanted_lines}
            refused = [line.strip() for line in body if isa.refuse.match(line)]
            found[loop] += 1
            print(f"{loop:14} {name}: {wanted} {isa.want_name} into {len(destinations)} "
                  f"registers, {len(refused)} refused")
            if wanted < isa.least[loop] or refused or len(destinations) < isa.accumulators:
                failures.append(f"{loop} block {name}: {wanted} {isa.want_name} (expected >= "
                                f"{isa.least[loop]}) into {sorted(destinations)} (expected >= "
                                f"{isa.accumulators} registers), refused: {refused[:4]}")
    for loop, count in found.items():
        if count == 0:
            failures.append(f"no block of the {loop} loop ({isa.loops[loop].pattern}) in "
                            f"{argv[2]}: loop names changed, or not an SDPA prefill listing")
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
