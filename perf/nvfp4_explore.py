"""Exploration bench for the NVFP4 kernels: every candidate config against bf16 cuBLAS, one process.

  python perf/nvfp4_explore.py [--quick]
Prints a table of microseconds per call (CUDA-graph medians, weights rotated past L2).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_sweep import L2_BYTES, bench  # noqa: E402

import scalemm  # noqa: E402
from scalemm.cutlass_kernels import GemmConfig  # noqa: E402
from scalemm.gemm_nvfp4 import default_nvfp4_config, gemm_nvfp4, grouped_gemm_nvfp4  # noqa: E402


def candidates(M):
    tn = [16] if M <= 16 else [32, 64] if M <= 64 else [128] if M <= 128 else [256]
    out = []
    for n in tn:
        out += [GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True),
                GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True, stream_k=True)]
        if n <= 128:  # a ping-pong warpgroup holds all 128 x n accumulators: 256 spills
            out.append(GemmConfig(128, n, 64, 1, 1, "pingpong", swap_ab=True))
    if M > 128:
        out += [GemmConfig(128, 256, 64, 2, 1, "cooperative", swap_ab=True)]
    return out


def point(M, N, K, tune=True):
    copies = max(1, min(8, math.ceil(2 * L2_BYTES / (N * K * 0.5625))))
    g = torch.Generator(device="cuda").manual_seed(M + N)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    xq = scalemm.quantize_nvfp4(x, scaling="token")
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    for w in ws:  # prepare every weight copy before the graphs are captured
        gemm_nvfp4(x, w, out=out)
    fns = {"torch_bf16": lambda i: torch.matmul(x, w16[i].T),
           "w4a16": lambda i: gemm_nvfp4(x, ws[i], out=out),
           "w4a4": lambda i: gemm_nvfp4(xq, ws[i], out=out)}
    if tune:
        for c in candidates(M):
            fn = (lambda c: lambda i: gemm_nvfp4(x, ws[i], out=out, config=c))(c)
            try:
                fn(0)
                fns[c.label()] = fn
            except Exception as e:
                print(f"  {c.label()} failed: {str(e).splitlines()[0]}", file=sys.stderr)
    return bench(fns, copies)


def grouped_point(G, per, N, K):
    T = G * per
    g = torch.Generator(device="cuda").manual_seed(G + per)
    w16 = torch.randn(G, N, K, device="cuda", generator=g).to(torch.bfloat16)
    wq = scalemm.quantize_nvfp4_stacked(w16, scaling="token")
    x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
    offs = (torch.arange(1, G + 1, device="cuda") * per).to(torch.int32)
    out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
    grouped_gemm_nvfp4(x, wq, offs, out=out)
    w16t = w16.transpose(-2, -1)
    fns = {"torch_grouped_bf16": lambda i: torch._grouped_mm(x, w16t, offs=offs),
           "w4a16_grouped": lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out)}
    for n in (16, 32, 64, 128, 256):
        c = GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True)
        fns[c.label()] = (lambda c: lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out, config=c))(c)
        fns[c.label()](0)
    return bench(fns, 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    shapes = [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336)]
    ms = [1, 16, 64, 128, 1024, 4096] if not args.quick else [16, 4096]
    print(f"{torch.cuda.get_device_name()}")
    for N, K in shapes:
        for M in ms:
            r = point(M, N, K, tune=not args.quick)
            base = r["torch_bf16"]
            cfg = default_nvfp4_config(M, N, K).label()
            row = "  ".join(f"{k}={v:.1f}({base / v:.2f}x)" for k, v in sorted(r.items(), key=lambda kv: kv[1]))
            print(f"M={M:5d} N={N:5d} K={K:5d} default={cfg}: {row}", flush=True)
    for G, per, N, K in ((8, 2048, 2048, 7168), (64, 2, 2048, 7168), (64, 32, 1536, 4096), (128, 1, 1536, 4096)):
        r = grouped_point(G, per, N, K)
        base = r["torch_grouped_bf16"]
        row = "  ".join(f"{k}={v:.1f}({base / v:.2f}x)" for k, v in sorted(r.items(), key=lambda kv: kv[1]))
        print(f"grouped G={G} per={per} N={N} K={K}: {row}", flush=True)


if __name__ == "__main__":
    main()
