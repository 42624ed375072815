"""Grouped NVFP4 (MoE) above 128 rows per expert: token tiles of 128 / 160 / 192 / 224 / 256 side by side.

default_nvfp4_grouped_config picks the token-tile width from the mean rows per expert (the rows of each expert are on
the device): 256 above 128 rows. Every expert's last token tile is partly empty (routing is ragged), and a tile is
computed whole, so a narrower tile wastes fewer columns per expert but decodes each weight tile more often. This times
grouped_gemm (W4A16, bf16 out) with each width, beside bf16 torch._grouped_mm, on the MoE layers of
perf/grouped_sweep.py (sweep and other models) with its skewed top-k routing, weights and routings rotated as there.
Every output is checked against the first width's (the same exact products: within accumulation-order noise).

  python3 perf/results/h100/nvfp4_grouped_widths/widths.py --build          (CPU machine)
  python3 perf/results/h100/nvfp4_grouped_widths/widths.py --out OUT [--tokens 512,2048]
"""
import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "perf"))

import scalemm  # noqa: E402
from scalemm import epilogues as epi  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, default_nvfp4_grouped_config  # noqa: E402

WIDTHS = (128, 160, 192, 224, 256)
TOKENS = (256, 512, 1024, 2048, 4096, 8192)


def cands():
    return {f"w{n}": GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True) for n in WIDTHS}


def specs():
    from scalemm.gemm_nvfp4 import nvfp4_grouped_kernel_spec
    bf16 = torch.bfloat16
    return [nvfp4_grouped_kernel_spec(c, act_dtype=bf16, out_dtype=bf16, epilogue=epi.scaled(bf16))[0]
            for c in cands().values()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs() if not jit.is_cached(s)], jobs=2)
        return
    from grouped_sweep import L2_BYTES, MODELS, OTHER_MODELS, routed_sizes
    from scalemm.timing import bench
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    i = 0
    for model, (E, k, hidden, inter) in {**MODELS, **OTHER_MODELS}.items():
        for tokens in (int(t) for t in args.tokens.split(",")):
            for proj, (N, K) in (("gate_up", (2 * inter, hidden)), ("down", (hidden, inter))):
                i += 1
                sizes = routed_sizes(tokens, E, k, seed=i)
                T, G = int(sizes.sum()), E
                if T / G <= 128:
                    continue
                gen = torch.Generator(device="cuda").manual_seed(i)
                routed_bytes = int((sizes > 0).sum()) * N * K * 9 // 16
                routings = max(1, min(16, G, math.ceil(2 * L2_BYTES / routed_bytes)))
                offs = [torch.cumsum(torch.roll(sizes, r * (G // routings)), 0).to(torch.int32).cuda()
                        for r in range(routings)]
                a16 = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=gen)
                b16 = torch.empty(G, N, K, device="cuda", dtype=torch.bfloat16)
                for g0 in range(0, G, 16):
                    b16[g0:g0 + 16] = torch.randn((min(16, G - g0), N, K), device="cuda", generator=gen)
                wq = scalemm.quantize_nvfp4_stacked(b16, scaling="token")
                out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
                fns = {"bf16": lambda j: torch._grouped_mm(a16, b16.transpose(-2, -1), offs=offs[j % routings])}
                ref, err = None, {}
                for label, cfg in cands().items():
                    y = scalemm.grouped_gemm(a16, wq, offs[0], config=cfg).float()
                    ref = y if ref is None else ref
                    err[label] = float((y - ref).norm() / ref.norm())
                    fns[label] = lambda j, cfg=cfg: scalemm.grouped_gemm(a16, wq, offs[j % routings], out=out,
                                                                         config=cfg)
                us = bench(fns, routings)
                dflt = default_nvfp4_grouped_config(T, G, N, K).label()
                rows.append({"model": model, "proj": proj, "tokens": tokens, "T": T, "G": G, "N": N, "K": K,
                             "per_expert": T / G, "empty": int((sizes == 0).sum()), "default": dflt, "us": us,
                             "rel_err": err})
                b = us["bf16"]
                ks = sorted((x for x in us if x != "bf16"), key=us.get)
                lines.append(f"{model} {proj} tokens={tokens} T={T} G={G} ({T / G:.0f} rows/expert) N={N} K={K}: "
                             f"bf16 {b:.1f} us, default {dflt}, max rel diff {max(err.values()):.1e}\n  "
                             + ", ".join(f"{x} {us[x]:.1f} {b / us[x]:.2f}x" for x in ks))
                print(lines[-1], flush=True)
                del b16, wq, a16
                torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "grouped_widths.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "grouped_widths.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
