"""Offline checks of the CUDA kernels' device code, without a GPU (issue 23).

Usage: check_cuda_ptx.py <ptxas or ""> <min multiply-adds per load> <kernel library (.a/.o)>...

Halide embeds each CUDA kernel's PTX as text in the host object. For every library this extracts
that PTX, assembles it with ptxas for sm_80 and sm_90 (-v), and fails when an entry spills, needs a
stack frame or does not assemble. It then reports, for the two loops that do the attention's
arithmetic, the Q·Kᵀ reduction over d (``scores.s1.r_d``, or its rfactor ``scores_intm``) and the P·V reduction over keys
(``weighted_sum.s1.r_j``), the multiply-adds per load of their innermost loops (shared or global
memory: a 4-wide load counts once), and fails when one is below the given minimum (0: report
only). Without ptxas it exits 77 (CTest skip).
"""

import re
import subprocess
import sys
import tempfile

ARCHS = ["sm_80", "sm_90"]
INNER_LOOPS = {
    "Q·Kᵀ over d": re.compile(r'for_scores(_intm)?\.s1\.r_d'),
    "P·V over keys": re.compile(r'for_weighted_sum\.s1\.r_j'),
}
LABEL = re.compile(r'^(\$L__BB\d+_\d+):\s*(?://\s*(.*))?')
BRANCH = re.compile(r'\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);')


def extract_ptx(path):
    """The PTX texts embedded in an object or archive (NUL-terminated, from '//' to '.version')."""
    data = open(path, "rb").read()
    texts, at = [], 0
    while True:
        version = data.find(b".version", at)
        if version < 0:
            return texts
        start = data.rfind(b"\0", 0, version) + 1
        end = data.find(b"\0", version)
        texts.append(data[start:end].decode("ascii", errors="replace"))
        at = end


def assemble(ptxas, ptx, arch):
    """ptxas -v for arch: (ok, {entry: (registers, spill bytes, stack bytes)}, log)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as src:
        src.write(ptx)
        src.flush()
        result = subprocess.run([ptxas, f"-arch={arch}", "-v", src.name, "-o", "/dev/null"],
                                capture_output=True, text=True)
    log = result.stdout + result.stderr
    entries, current = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and current:
            entries[current] = [0, int(m.group(2)) + int(m.group(3)), int(m.group(1))]
        m = re.search(r"Used (\d+) registers", line)
        if m and current in entries:
            entries[current][0] = int(m.group(1))
    return result.returncode == 0, entries, log


def inner_loop_ratios(ptx):
    """{loop kind: [multiply-adds per load of each innermost loop of that kind]}.

    LLVM's PTX marks each loop's blocks ("in Loop: Header=BB0_74", "This Inner Loop Header"), laid
    out in any order; Halide names each loop's header block after its loop. A multiply-add is an
    fma.rn.f32, or a mul.f32 (the NaN-safe masked P·V multiplies, then selects, then adds).
    """
    blocks = {}  # header -> lines of every block in that loop
    names, innermost = {}, set()
    current_header, block_name = None, None
    for line in ptx.splitlines():
        m = LABEL.match(line) or re.match(r'^// (%bb\.\d+):\s*(?://\s*(.*))?', line)
        if m:
            block_name = m.group(1).replace("$L__", "").replace("%bb.", "BB?_")
            names[block_name] = m.group(2) or ""
            current_header = None
            continue
        m = re.search(r'in Loop: Header=(BB\d+_\d+)', line)
        if m and current_header is None:
            current_header = m.group(1)
        if "This Inner Loop Header" in line:
            current_header = block_name
            innermost.add(block_name)
        if current_header is not None:
            blocks.setdefault(current_header, []).append(line)
    ratios = {kind: [] for kind in INNER_LOOPS}
    for header in innermost:
        for kind, pattern in INNER_LOOPS.items():
            if pattern.search(names.get(header, "")):
                body = blocks.get(header, [])
                madds = sum(("fma.rn.f32" in line or re.search(r'\bmul(\.rn)?\.f32\b', line) is not
                             None) for line in body)
                loads = sum(re.search(r'\bld\.(shared|global|local)', line) is not None
                            for line in body)
                if madds:  # the loop that does the arithmetic (not a copy or a skip)
                    ratios[kind].append(madds / max(loads, 1))
    return ratios


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    ptxas, minimum, libraries = argv[1], float(argv[2]), argv[3:]
    if not ptxas:
        print("SKIP: ptxas not found (the CUDA toolkit's assembler); nothing checked")
        return 77
    failures = []
    for library in libraries:
        name = library.rsplit("/", 1)[-1]
        texts = extract_ptx(library)
        if not texts:
            failures.append(f"{name}: no PTX found")
            continue
        for ptx in texts:
            for arch in ARCHS:
                ok, entries, log = assemble(ptxas, ptx, arch)
                if not ok or not entries:
                    failures.append(f"{name}: ptxas failed for {arch}:\n{log}")
                    continue
                worst = max(r for r, _, _ in entries.values())
                print(f"{name} {arch}: {len(entries)} kernels, at most {worst} registers, "
                      f"spills {sum(s for _, s, _ in entries.values())} B")
                for entry, (registers, spill, stack) in entries.items():
                    if spill or stack:
                        failures.append(f"{name} {arch} {entry}: {spill} B spilled, "
                                        f"{stack} B stack frame, {registers} registers")
            ratios = inner_loop_ratios(ptx)
            if not any(ratios.values()):
                failures.append(f"{name}: neither inner loop found in the PTX")
            for kind, values in ratios.items():
                if not values:
                    # LLVM may lay a loop's latch out before its header (the masked kernels' P·V):
                    # its body is then not one stretch of text.
                    print(f"{name}: {kind}: not identified in the PTX's block layout")
                    continue
                print(f"{name}: {kind}: {min(values):.2f} multiply-adds per load "
                      f"({len(values)} innermost loops)")
                if min(values) < minimum:
                    failures.append(f"{name}: {kind}: {min(values):.2f} multiply-adds per "
                                    f"load, expected >= {minimum}")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
