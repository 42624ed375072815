"""The CUTLASS NVFP4 kernel's stream-K scheduler at decode: CUTLASS's own decomposition (splits = 1, what
scalemm passes) against forced split-K counts and the config's raster / swizzle knobs, beside bf16 cuBLAS,
at 16-128 tokens (CUDA-graph medians, weights rotated past L2). An experiment: the split count is not a
scalemm option, so this script patches the argument struct gemm_nvfp4 builds.

  python3 perf/nvfp4_cutlass_splits.py --ms 16,64 --splits 2,3,4,6,8
  python3 perf/nvfp4_cutlass_splits.py --ms 64 --splits 2,4 --knobs m1,n1,m2,n2,m4,n4   # raster m/n x swizzle
"""
from __future__ import annotations

import argparse
import types
from dataclasses import replace

import torch

import scalemm
import scalemm.gemm_nvfp4 as g
from scalemm import abi
from scalemm.cutlass_kernels.configs import default_nvfp4_config
from scalemm.timing import bench, l2_copies

SHAPES = "4096x4096,8192x8192,14336x4096,4096x14336"
FORCED = {"splits": 1}


class _Forced(abi.Nvfp4GemmArgs):
    """The launch arguments gemm_nvfp4 builds, with the split count replaced."""
    def __init__(self, **kw):
        kw["splits"] = FORCED["splits"]
        super().__init__(**kw)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="16,64")
    p.add_argument("--splits", default="2,3,4,6,8")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--knobs", default="", help="raster (m, n, auto) + swizzle (1, 2, 4, 8) pairs, e.g. m1,n2")
    args = p.parse_args(argv)
    g.abi = types.SimpleNamespace(**{k: getattr(abi, k) for k in dir(abi) if not k.startswith("__")})
    g.abi.Nvfp4GemmArgs = _Forced
    print(torch.cuda.get_device_name())
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        copies = l2_copies(int(N * K * 0.5625))
        gen = torch.Generator(device="cuda").manual_seed(N + K)
        ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16),
                                     scaling="token") for _ in range(copies)]
        w16 = [torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(copies)]
        for M in (int(m) for m in args.ms.split(",")):
            cfg = default_nvfp4_config(M, N, K)
            x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            for w in ws:  # the prepared weight copies, made outside the graph captures (made inside one,
                g.gemm_nvfp4(x, w, out=out, config=cfg)  # they are not cached: every replay would remake them)
            ref = g.gemm_nvfp4(x, ws[0], config=cfg).float()
            fns = {}
            for s in [1] + [int(v) for v in args.splits.split(",")]:
                def fn(i, s=s):
                    FORCED["splits"] = s
                    return g.gemm_nvfp4(x, ws[i], out=out, config=cfg)
                y = fn(0).float()
                err = ((y - ref).norm() / ref.norm()).item()
                if not err < 1e-2:
                    print(f"  M={M} {N}x{K} splits={s}: relative error {err:.2e} against splits=1, skipped")
                    continue
                fns[f"sk{s}"] = fn
            for knob in filter(None, args.knobs.split(",")):
                raster = "auto" if knob.startswith("auto") else knob[0]
                kcfg = replace(cfg, raster=raster, swizzle=int(knob[len(raster):]))
                for w in ws:
                    g.gemm_nvfp4(x, w, out=out, config=kcfg)

                def kfn(i, kcfg=kcfg):
                    FORCED["splits"] = 1
                    return g.gemm_nvfp4(x, ws[i], out=out, config=kcfg)
                fns[f"r{knob}"] = kfn
            fns["bf16"] = lambda i: torch.matmul(x, w16[i].T)
            r = bench(fns, copies)
            b = r.pop("bf16")
            print(f"M={M} N={N} K={K} {cfg.key()} bf16={b:.1f} " +
                  " ".join(f"{k}={v:.1f}({b / v:.2f}x)" for k, v in r.items()), flush=True)
            FORCED["splits"] = 1


if __name__ == "__main__":
    main()
