"""NVFP4 above 128 tokens: token tiles of 160 / 192 / 224 (data-parallel and stream-K) beside the rule's pick.

The rule (configs/sm90.py, _nvfp4_mid_tokens_config) tiles the tokens in 64, 128 or 256. A token count that is not a
multiple of the width leaves the last token tile partly empty, and the kernel computes it whole: 384 tokens in two
tiles of 256 compute 512 (25% waste), 192 in one of 256 too. A narrower tile with the same number of token tiles
(2 x 192, 1 x 192) keeps the tile count (so the waves) and decodes each weight tile as often, with a quarter fewer
MMAs. The 160 and 224 widths are CUTLASS's extended wgmma shapes. W4A16 (W4A4 runs the same kernels after its decode
pass), bf16 out, CUDA graphs, weights rotated past L2; every output checked against the exact dequantized product.

  python3 perf/results/h100/nvfp4_mid_widths/widths.py --build       (CPU machine)
  python3 perf/results/h100/nvfp4_mid_widths/widths.py --out OUT [--tokens 192,384] [--shapes llama3-8b.o,...]
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

import scalemm  # noqa: E402
from scalemm import epilogues as epi  # noqa: E402
from scalemm import gemm_nvfp4 as g4  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, sm90  # noqa: E402

SHAPES = {"llama3-8b.o": (4096, 4096), "llama3-8b.qkv": (6144, 4096), "qwen2.5-7b.o": (3584, 3584),
          "qwen2.5-7b.qkv": (4608, 3584), "gpt-oss-120b.o": (2880, 4096), "gpt-oss-120b.qkv": (5120, 2880),
          "gemma3-27b.o": (5376, 4096), "kimi-k2.q_a": (1536, 7168), "qwen3-30b-a3b.o": (2048, 4096),
          "qwen3-235b.qkv": (9216, 4096), "dsv3.shared_down": (7168, 2048), "gemma3-27b.qkv": (8192, 5376),
          "llama3-70b.o": (8192, 8192), "dsv3.shared_gate_up": (4096, 7168), "llama3-8b.gate_up": (28672, 4096),
          "llama3-8b.down": (4096, 14336), "dsv3.kv_a": (576, 7168)}
TOKENS = (160, 192, 320, 384, 448, 576, 640, 896)
WIDTHS = (160, 192, 224)


def cands():
    return {f"w{n}{'sk' if sk else ''}": GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True, stream_k=sk,
                                                    raster="m" if sk else "auto")
            for n in WIDTHS for sk in (False, True)}


def specs(tokens=TOKENS, shapes=SHAPES):
    bf16 = torch.bfloat16
    tree = epi.scaled(bf16, bias=True, activation=None)
    cfgs = [c.compiled() for c in cands().values()]
    for N, K in shapes.values():
        for M in tokens:
            cfgs.append(sm90.default_nvfp4_config(M, N, K).compiled())
    out = [g4.nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0] for c in cfgs]
    for N, K in shapes.values():
        for M in tokens:
            sk = sm90.default_nvfp4_skinny_config(M, N, K)
            if sk is not None:
                out.append(g4.skinny_kernel_spec(sk, act_dtype=bf16, out_dtype=bf16))
    return list({x.name: x for x in out}.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--shapes", default="", help="names of SHAPES (default: all)")
    ap.add_argument("--name", default="widths")
    args = ap.parse_args()
    tokens = tuple(int(t) for t in args.tokens.split(","))
    shapes = {k: SHAPES[k] for k in args.shapes.split(",")} if args.shapes else SHAPES
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs(tokens, shapes) if not jit.is_cached(s)], jobs=args.jobs)
        return
    from scalemm.timing import bench, l2_copies
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
            for label, cfg in [("default", None), ("cutlass", sm90.default_nvfp4_config(M, N, K))] + list(cands().items()):
                got = scalemm.gemm(x, wq[0], config=cfg).float()
                err[label] = float((got - exact).norm() / exact.norm())
                for i in range(copies):
                    scalemm.gemm(x, wq[i], config=cfg, out=out)
                fns[label] = lambda i, cfg=cfg, wq=wq: scalemm.gemm(x, wq[i], config=cfg, out=out)
            us = bench(fns, copies)
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
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, f"{args.name}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
