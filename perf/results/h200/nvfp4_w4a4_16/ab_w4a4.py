"""W4A4 at 9-16 tokens: the default (the bf16 decode pass, then the skinny kernel's wgmma loop) against the skinny
kernel's stepped mma.sync loop decoding the NVFP4 tokens in its registers (SkinnyConfig(2), splits chosen by the
launcher), and bf16 cuBLAS; one process, CUDA-graph replays, weights rotated past L2. Outputs of the two paths are
compared first (exactly equal: same numerics, same split-K order is not guaranteed, so also the max abs difference).
`python3 ab_w4a4.py OUT.json [--shapes NxK,...] [--ms 9,12,16]` (token tiles: 2 up to 16 tokens, 4 up to 32)"""
import argparse
import json
from pathlib import Path

import torch

import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig
from scalemm.timing import bench, l2_copies

SHAPES = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
          (24576, 1536), (2048, 4096), (3072, 4096), (1536, 7168), (7168, 2048), (2880, 2880), (5120, 5120),
          (1024, 4096), (4096, 1024), (2048, 7168), (10240, 8192)]
p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--shapes", default=None)
p.add_argument("--ms", default="9,12,16")
args = p.parse_args()
if args.shapes:
    SHAPES = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]
points = []
for N, K in SHAPES:
    copies = l2_copies(int(N * K * 0.5625), most=64)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(min(copies, 8))]
    for M in map(int, args.ms.split(",")):
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4(x, scaling="token")
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        stepped = SkinnyConfig(2 if M <= 16 else 4)
        for w in ws:  # prepared copies (wgmma loop) before any capture
            scalemm.gemm(xq, w, out=out)
        a, b = scalemm.gemm(xq, ws[0]), scalemm.gemm(xq, ws[0], config=stepped)
        diff = (a.float() - b.float()).abs().max().item()
        fns = {"bf16": lambda i: torch.matmul(x, w16[i % len(w16)].T),
               "default": lambda i: scalemm.gemm(xq, ws[i], out=out),
               "stepped_x4": lambda i: scalemm.gemm(xq, ws[i], out=out, config=stepped),
               "default_b": lambda i: scalemm.gemm(xq, ws[i], out=out),
               "stepped_x4_b": lambda i: scalemm.gemm(xq, ws[i], out=out, config=stepped)}
        r = bench(fns, copies)
        points.append({"M": M, "N": N, "K": K, "us": r, "max_abs_diff": diff})
        d, s = min(r["default"], r["default_b"]), min(r["stepped_x4"], r["stepped_x4_b"])
        print(f"M={M:3d} N={N:5d} K={K:5d} bf16={r['bf16']:.2f} default={d:.2f} stepped_x4={s:.2f} "
              f"default/stepped={d / s:.3f} diff={diff:.3g}", flush=True)
Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "points": points}, indent=1))
