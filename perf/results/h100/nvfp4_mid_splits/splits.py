"""NVFP4 at 128-512 tokens: the CUTLASS kernel's 128x256 / 128x128 tiles with stream-K (CUTLASS's own
decomposition) against forced split-K counts, beside the default, the skinny kernel's 64-token blocks and bf16.

At these token counts most layers have fewer 128 x 256 output tiles than SMs: the rule
(configs/sm90.py, _nvfp4_mid_tokens_config) then takes narrower token tiles in one wave (each weight tile decoded
once per 64 or 128 tokens) or stream-K. Split-K in equal parts (CUTLASS's StreamKScheduler with splits > 1: the
same kernels, a run-time argument) keeps one decode of each weight tile per 256 tokens without stream-K's uneven
chains. The split count is not a scalemm option: this script patches the launch argument struct (as
perf/nvfp4_cutlass_splits.py does). W4A16 only (W4A4 runs the same kernels after its decode pass). CUDA graphs,
weights rotated past L2; every output checked against the exact dequantized product.

  python3 perf/results/h100/nvfp4_mid_splits/splits.py --build       (CPU machine)
  python3 perf/results/h100/nvfp4_mid_splits/splits.py --out OUT [--tokens 128,256] [--shapes 4096x4096,...]
"""
import argparse
import json
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

import scalemm  # noqa: E402
from scalemm import abi  # noqa: E402
from scalemm import epilogues as epi  # noqa: E402
from scalemm import gemm_nvfp4 as g4  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, SkinnyConfig, sm90  # noqa: E402

SHAPES = {"llama3-8b.o": (4096, 4096), "llama3-8b.qkv": (6144, 4096), "qwen2.5-7b.o": (3584, 3584),
          "qwen2.5-7b.qkv": (4608, 3584), "gpt-oss-120b.o": (2880, 4096), "gpt-oss-120b.qkv": (5120, 2880),
          "gemma3-27b.o": (5376, 4096), "kimi-k2.q_a": (1536, 7168), "qwen3-30b-a3b.o": (2048, 4096),
          "qwen3-235b.qkv": (9216, 4096), "dsv3.shared_down": (7168, 2048), "gemma3-27b.qkv": (8192, 5376),
          "llama3-70b.o": (8192, 8192), "dsv3.shared_gate_up": (4096, 7168)}
TOKENS = (128, 192, 256, 384, 512)
SK = {256: GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True, stream_k=True, raster="m"),
      128: GemmConfig(128, 128, 64, 1, 1, "cooperative", swap_ab=True, stream_k=True, raster="m")}
SPLITS = {256: (1, 2, 3, 4, 6), 128: (1, 2, 4)}
FORCED = {"splits": 1}


class _Forced(abi.Nvfp4GemmArgs):
    def __init__(self, **kw):
        kw["splits"] = FORCED["splits"]
        super().__init__(**kw)


def specs(tokens=TOKENS, shapes=SHAPES):
    bf16 = torch.bfloat16
    tree = epi.scaled(bf16, bias=True, activation=None)
    out = [g4.nvfp4_gemm_kernel_spec(c.compiled(), act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0] for c in SK.values()]
    out.append(g4.skinny_kernel_spec(SkinnyConfig(8, mainloop="wgmma"), act_dtype=bf16, out_dtype=bf16))
    for N, K in shapes.values():
        for M in tokens:
            sk = sm90.default_nvfp4_skinny_config(M, N, K)
            if sk is not None:
                out.append(g4.skinny_kernel_spec(sk, act_dtype=bf16, out_dtype=bf16))
            c = sm90.default_nvfp4_config(M, N, K).compiled()
            out.append(g4.nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0])
    return list({x.name: x for x in out}.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--shapes", default="", help="names of SHAPES (default: all)")
    args = ap.parse_args()
    tokens = tuple(int(t) for t in args.tokens.split(","))
    shapes = {k: SHAPES[k] for k in args.shapes.split(",")} if args.shapes else SHAPES
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs(tokens, shapes) if not jit.is_cached(s)], jobs=2)
        return
    from scalemm.timing import bench, l2_copies
    g4.abi = types.SimpleNamespace(**{k: getattr(abi, k) for k in dir(abi) if not k.startswith("__")})
    g4.abi.Nvfp4GemmArgs = _Forced
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    for name, (N, K) in shapes.items():
        for M in tokens:
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            copies = l2_copies(N * K * 2)
            w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
            wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            exact = x.float() @ wq[0].dequantize().float().T
            fns = {"bf16": lambda i, w16=w16: torch.matmul(x, w16[i].T)}
            err = {}
            cands = [("default", None, 1), ("cutlass", sm90.default_nvfp4_config(M, N, K), 1),
                     ("t8", SkinnyConfig(8, mainloop="wgmma"), 1)]
            cands += [(f"sk{n}x{s}", SK[n], s) for n in SK for s in SPLITS[n]]
            for label, cfg, s in cands:
                FORCED["splits"] = s
                got = scalemm.gemm(x, wq[0], config=cfg).float()
                err[label] = float((got - exact).norm() / exact.norm())
                for i in range(copies):
                    scalemm.gemm(x, wq[i], config=cfg, out=out)

                def fn(i, cfg=cfg, s=s, wq=wq):
                    FORCED["splits"] = s
                    return scalemm.gemm(x, wq[i], config=cfg, out=out)
                fns[label] = fn
            FORCED["splits"] = 1
            us = bench(fns, copies)
            FORCED["splits"] = 1
            d = sm90.default_nvfp4_skinny_config(M, N, K) or sm90.default_nvfp4_config(M, N, K)
            rows.append({"layer": name, "M": M, "N": N, "K": K, "default": d.label(),
                         "cutlass": sm90.default_nvfp4_config(M, N, K).label(), "us": us, "rel_err": err})
            b = us["bf16"]
            ks = sorted((k for k in us if k != "bf16"), key=us.get)
            lines.append(f"{name} M={M} N={N} K={K}: bf16 {b:.1f} us, default {d.label()}, max rel err "
                         f"{max(err.values()):.1e}\n  " + ", ".join(f"{k} {us[k]:.1f} {b / us[k]:.2f}x" for k in ks))
            print(lines[-1], flush=True)
            del w16, wq
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "splits.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "splits.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
