"""The skinny kernel's wgmma loop in CTAs of two warpgroups (SkinnyConfig mainloop "wgmma2": 128 weight rows per CTA,
the CTA's tokens in shared memory serving twice the rows) against the one-warpgroup loop ("wgmma", 64 rows), the
CUTLASS NVFP4 kernel and bf16 cuBLAS, W4A16, bf16 out, 16-64 tokens on dense layer shapes; each loop at the
launcher's split and at fixed splits 1, 2, 4, 8. CUDA graphs, weights rotated past L2 (perf/nvfp4_explore.py's
`point`), one process. Outputs: the two loops checked bit for bit at each fixed split.

  python3 perf/results/h100/nvfp4_wgmma2/ab_wgmma2.py --out OUT [--tokens 16,32,64] [--shapes 4096x4096,...]
"""
import argparse
import math
import os
import sys
from dataclasses import replace

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from gemm_sweep import L2_BYTES  # noqa: E402

import scalemm  # noqa: E402
from scalemm.cutlass_kernels.configs import default_nvfp4_config, skinny_config_for_tokens  # noqa: E402
from scalemm.gemm_nvfp4 import gemm_nvfp4, skinny_splits  # noqa: E402
from scalemm.timing import bench  # noqa: E402

SHAPES = [(4096, 4096), (6144, 4096), (8192, 8192), (14336, 4096), (4096, 14336), (28672, 8192), (1024, 4096)]


def point(M, N, K, splits_list, lines):
    copies = max(1, min(8, math.ceil(2 * L2_BYTES / (N * K * 0.5625))))
    g = torch.Generator(device="cuda").manual_seed(M + N)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    base = skinny_config_for_tokens(M)
    cutlass = default_nvfp4_config(M, N, K)
    for w in ws:  # the prepared copies (wgmma loops, CUTLASS kernel) before the graphs are captured
        gemm_nvfp4(x, w, out=out, config=replace(base, mainloop="wgmma"))
        gemm_nvfp4(x, w, out=out, config=cutlass)
    fns = {"bf16": lambda i: torch.matmul(x, w16[i].T),
           "cutlass": lambda i: gemm_nvfp4(x, ws[i], out=out, config=cutlass),
           "default": lambda i: gemm_nvfp4(x, ws[i], out=out)}
    auto = {}
    same = []
    for loop in ("wgmma", "wgmma2"):
        for s in [0] + splits_list:
            c = replace(base, mainloop=loop, splits=s)
            if s == 0:
                auto[loop] = skinny_splits(x, ws[0], c)
            fns[f"{loop}_s{s or 'auto'}"] = (lambda c: lambda i: gemm_nvfp4(x, ws[i], out=out, config=c))(c)
    for s in splits_list:
        a, b = (gemm_nvfp4(x, ws[0], out_dtype=torch.float32, config=replace(base, mainloop=loop, splits=s))
                for loop in ("wgmma", "wgmma2"))
        same.append(torch.equal(a, b))
    us = bench(fns, copies)
    best = {loop: min((n for n in us if n.startswith(loop + "_")), key=us.get) for loop in ("wgmma", "wgmma2")}
    lines.append(f"M={M} N={N} K={K}: bf16 {us['bf16']:.2f} us, cutlass {us['cutlass']:.2f}, default "
                 f"{us['default']:.2f} ({us['bf16'] / us['default']:.2f}x of bf16); bit-identical at fixed splits: "
                 f"{all(same)}")
    for loop in ("wgmma", "wgmma2"):
        row = "  ".join(f"{n.split('_')[1]} {us[n]:.2f}" for n in us if n.startswith(loop + "_"))
        lines.append(f"  {loop:<7} (auto = {auto[loop]}): {row}  | best {us[best[loop]]:.2f} us "
                     f"({us['bf16'] / us[best[loop]]:.2f}x of bf16), auto {us['bf16'] / us[loop + '_sauto']:.2f}x")
    lines.append(f"  wgmma2 auto / wgmma auto: {us['wgmma_sauto'] / us['wgmma2_sauto']:.3f}x faster; best / best: "
                 f"{us[best['wgmma']] / us[best['wgmma2']]:.3f}x; wgmma2 auto vs cutlass {us['cutlass'] / us['wgmma2_sauto']:.3f}x")
    print("\n".join(lines[-4:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--tokens", default="16,32,64")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    ap.add_argument("--splits", default="1,2,4,8")
    args = ap.parse_args()
    lines = [f"device: {torch.cuda.get_device_name()}"]
    splits = [int(s) for s in args.splits.split(",")]
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        for M in (int(t) for t in args.tokens.split(",")):
            point(M, N, K, splits, lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab_wgmma2.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
