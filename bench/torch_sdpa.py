#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention in fp32 on the GPU: the peer of bench/gpu_bench.

Same shapes and FLOP count as gpu_bench (4·B·H·Sq·Sk·D); TF32 is disabled so the comparison is
fp32 against fp32 (non-tensor-core). Needs torch with CUDA; prints one line per shape.
Usage: python3 bench/torch_sdpa.py [peak GFLOP/s, default 66900]
"""
import sys

import torch

# (B, H, Sq, Sk, D, kv heads): the last two are gpu_bench's GQA decode pair (issue 21).
SHAPES = [(1, 16, 4096, 4096, 128, 16), (1, 8, 2048, 2048, 64, 8), (1, 16, 1024, 1024, 128, 16),
          (4, 12, 256, 256, 64, 12), (1, 32, 1, 4096, 128, 32), (1, 32, 1, 4096, 128, 8),
          (1, 8, 1, 4096, 128, 8)]


def main():
    peak = float(sys.argv[1]) if len(sys.argv) > 1 else 66900.0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for b, h, sq, sk, d, hkv in SHAPES:
        q = torch.rand(b, h, sq, d, device="cuda") * 2 - 1
        k = torch.rand(b, hkv, sk, d, device="cuda") * 2 - 1
        v = torch.rand(b, hkv, sk, d, device="cuda") * 2 - 1
        gqa = hkv != h
        for _ in range(3):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        runs = 20
        start.record()
        for _ in range(runs):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / runs
        gflops = 4.0 * b * h * sq * sk * d / (ms * 1e6)
        kv = f"_Hkv{hkv}" if gqa else ""
        print(f"torch/B{b}_H{h}{kv}_Sq{sq}_Sk{sk}_D{d}: {ms:.3f} ms, {gflops:.0f} GFLOP/s, "
              f"{100 * gflops / peak:.1f}% of peak")


if __name__ == "__main__":
    main()
