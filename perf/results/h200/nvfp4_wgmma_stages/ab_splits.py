"""The skinny kernel's wgmma loop at fixed split counts, W4A16, against bf16 cuBLAS, one process: microseconds per
call (CUDA-graph replays, weights rotated past L2), so that two builds compare at the same split (the default
dispatch's split follows the kernel's occupancy). `python3 ab_splits.py OUT.json [--ms 16,64] [--splits 0,1,2,4,8]`."""
import argparse
import json
from pathlib import Path

import torch

import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig
from scalemm.timing import bench, l2_copies

SHAPES = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
          (24576, 1536), (2048, 4096)]

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--ms", default="16,64")
p.add_argument("--splits", default="0,1,2,4,8")
args = p.parse_args()
points = []
for N, K in SHAPES:
    copies = l2_copies(int(N * K * 0.5625), most=64)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    for M in map(int, args.ms.split(",")):
        tiles = next(t for t in (1, 2, 4, 8) if 8 * t >= M)
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns = {}
        for s in map(int, args.splits.split(",")):
            if s > (K + 127) // 128:
                continue
            cfg = SkinnyConfig(tiles, s, "wgmma")
            for w in ws:  # prepared copies before any capture
                scalemm.gemm(x, w, out=out, config=cfg)
            fns[f"s{s}"] = (lambda cfg: lambda i: scalemm.gemm(x, ws[i], out=out, config=cfg))(cfg)
        r = bench(fns, copies)
        points.append({"M": M, "N": N, "K": K, "us": r})
        print(f"M={M:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "scalemm": scalemm.__file__,
                                      "points": points}, indent=1))
