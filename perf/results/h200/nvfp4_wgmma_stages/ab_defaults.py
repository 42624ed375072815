"""NVFP4 GEMMs as a call without a config runs them (scalemm's default dispatch), W4A16 and W4A4, against bf16
cuBLAS, one process: microseconds per call (CUDA-graph replays, weights rotated past L2). Run once per build of
scalemm (PYTHONPATH) and compare the JSON files: `python3 ab_defaults.py OUT.json [--ms 1,8,...]`."""
import argparse
import json
import sys
from pathlib import Path

import torch

import scalemm
from scalemm.timing import bench, l2_copies

SHAPES = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
          (24576, 1536), (2048, 4096)]

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--ms", default="1,4,8,16,32,48,64")
args = p.parse_args()
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
        for w in ws:  # prepared copies (wgmma loop, CUTLASS kernel) before any capture
            scalemm.gemm(x, w, out=out)
        fns = {"bf16": lambda i: torch.matmul(x, w16[i % len(w16)].T),
               "w4a16": lambda i: scalemm.gemm(x, ws[i], out=out),
               "w4a4": lambda i: scalemm.gemm(xq, ws[i], out=out)}
        r = bench(fns, copies)
        points.append({"M": M, "N": N, "K": K, "us": r})
        print(f"M={M:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "scalemm": scalemm.__file__,
                                      "points": points}, indent=1))
