"""Checks what libattention.so exports (cmake/attention.map): the public API (attention::...,
outside attention::detail and attention::kernels, but for the one registration entry point
generated code calls) and Halide's runtime (halide_*), and that the public entry points are there.

Usage: check_shared_exports.py <libattention.so>
Exit status 0 when it holds, 1 with the offending symbols otherwise.
"""

import subprocess
import sys

REQUIRED = ["attention::scaled_dot_product_attention(", "attention::multi_head_attention(",
            "attention::register_kernel_library(", "attention::kernel_libraries()",
            "attention::detail::register_kernel_library_at_first_use(", "halide_set_error_handler"]


def allowed(name):
    if name.startswith("halide_"):
        return True
    for prefix in ("typeinfo for ", "typeinfo name for ", "vtable for "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name.startswith("attention::detail::register_kernel_library_at_first_use("):
        return True
    return name.startswith("attention::") and not name.startswith(
        ("attention::detail::", "attention::kernels::"))


def main(argv):
    if len(argv) != 2:
        print(next(l for l in __doc__.splitlines() if l.startswith("Usage")), file=sys.stderr)
        return 2
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", argv[1]], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    bad = [n for n in names if not allowed(n)]
    missing = [r for r in REQUIRED if not any(n.startswith(r) for n in names)]
    public = sum(n.startswith("attention::") for n in names)
    print(f"{len(names)} exported symbols: {public} attention::, "
          f"{sum(n.startswith('halide_') for n in names)} halide_*")
    for n in bad:
        print(f"exported but not public: {n}")
    for r in missing:
        print(f"missing: {r}")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
