"""The skinny NVFP4 kernel's time by split count against bf16 cuBLAS (CUDA-graph medians, weights rotated
past L2): each fixed split of SkinnyConfig(tiles, s) and the launcher's own choice (s0, with the split it
picked from scalemm.gemm_nvfp4.skinny_splits), to check the launcher's split model on layer shapes.

  python3 perf/skinny_splits.py                         # W4A16, M = 1 and 8, nine layer shapes
  python3 perf/skinny_splits.py --ms 1 --splits 0,2,3,4 --shapes 8192x8192,14336x4096
  python3 perf/skinny_splits.py --mainloop wgmma --ms 16,64   # the wgmma loop's splits

Prints one line per (M, N, K): bf16's microseconds, then each split's (speed-up over bf16).
Kernels: `python -m scalemm build --set skinny` (or JIT on first use).
perf/results/h100/nvfp4_loop_experiments/splits_minblocks.txt has an H100's lines.
"""
from __future__ import annotations

import argparse

import torch

import scalemm
from scalemm.cutlass_kernels.configs import SkinnyConfig, skinny_config_for_tokens
from scalemm.gemm_nvfp4 import gemm_nvfp4, skinny_splits
from scalemm.timing import bench, l2_copies

SHAPES = "4096x4096,8192x8192,14336x4096,4096x14336,28672x8192,8192x28672,5120x5120,1024x8192,6144x4096"


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="1,8", help="token counts (at most 64)")
    p.add_argument("--splits", default="0,1,2,3,4,5,6,8", help="fixed split counts; 0: the launcher's choice")
    p.add_argument("--shapes", default=SHAPES, help="NxK, comma-separated")
    p.add_argument("--mainloop", default=SkinnyConfig.mainloop, help="SkinnyConfig.mainloop (default: stepped)")
    args = p.parse_args(argv)
    ms = [int(m) for m in args.ms.split(",")]
    splits = [int(s) for s in args.splits.split(",")]
    print(torch.cuda.get_device_name())
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        copies = l2_copies(int(N * K * 0.5625))
        g = torch.Generator(device="cuda").manual_seed(N)
        ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16),
                                     scaling="token") for _ in range(copies)]
        w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
        for M in ms:
            base = skinny_config_for_tokens(M)
            if base is None:
                raise SystemExit(f"M = {M}: the skinny kernel takes at most 64 tokens")
            base = SkinnyConfig(base.token_tiles, 0, args.mainloop)
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fns = {}
            for s in splits:
                c = SkinnyConfig(base.token_tiles, s, base.mainloop)
                fns[f"s{s}"] = (lambda c: lambda i: gemm_nvfp4(x, ws[i], out=out, config=c))(c)
            # bf16 last: in the sixth session's runs s0, replayed right after bf16's graph, timed 2-5% above the
            # fixed split it most likely was (14336 x 4096: 18.7 us, no fixed split near it), although in a
            # CUDA graph s0 and its split are the same launch
            fns["bf16"] = lambda i: torch.matmul(x, w16[i].T)
            for i in range(copies):  # the wgmma loop's prepared weight copies, made before the graphs are captured
                gemm_nvfp4(x, ws[i], out=out, config=base)
            r = bench(fns, copies)
            b = r.pop("bf16")
            auto = skinny_splits(x, ws[0], base)
            print(f"M={M} N={N} K={K} bf16={b:.1f} s0->{auto} " +
                  " ".join(f"{k}={v:.1f}({b / v:.2f}x)" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
