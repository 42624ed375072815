"""NVFP4 at 65-512 tokens: the skinny kernel's token blocks side by side (grid z) against the CUTLASS kernel.

The sweep of 2026-11-28 (../sweeps_2026-11-28/dense_nvfp4.log) has the dense NVFP4 GEMM at 128 tokens at 0.38-0.92x
of bf16 on every layer with N <= 10240 (DeepSeek-V3's kv_a 30 us against 8 us at 64 tokens, where the skinny kernel's
wgmma loop runs). The skinny kernel now takes any token count, in blocks of 8 x token_tiles tokens that run as
separate CTAs (each streams its weights again; L2 serves the repeats). This times, per point, bf16 torch.matmul, the
default (the rule of the commit that runs it) and the skinny wgmma loop at 16 / 32 / 64-token blocks and the CUTLASS kernel's pick (the default before), W4A16 and W4A4
(NVFP4 activations: the exact bf16 decode pass, then the same kernels), CUDA graphs, weights rotated past L2. Every
output is checked against the exact dequantized product (relative error of the bf16 output).

  python3 perf/results/h100/nvfp4_token_blocks/ab.py --build          (CPU machine)
  python3 perf/results/h100/nvfp4_token_blocks/ab.py --out OUT [--set sweep|held|all|check] [--tokens 65,128]
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
from scalemm.cutlass_kernels.configs import SkinnyConfig, sm90  # noqa: E402
from scalemm.cutlass_kernels.configs.shapes import MODEL_LINEAR_SHAPES  # noqa: E402

# held out of any rule fitted on the sweep's layers: other models' projections (N, K)
HELD = {"qwen2.5-7b.qkv": (4608, 3584), "qwen2.5-7b.o": (3584, 3584), "qwen2.5-7b.down": (3584, 18944),
        "gemma3-27b.qkv": (8192, 5376), "gemma3-27b.o": (5376, 4096), "gpt-oss-120b.qkv": (5120, 2880),
        "gpt-oss-120b.o": (2880, 4096), "mistral-large-2.o": (12288, 12288), "llama3-8b.k": (1024, 4096),
        "dsv2.kv_a": (576, 5120), "kimi-k2.q_a": (1536, 7168), "mla.small": (512, 7168),
        "qwen3-30b-a3b.expert": (1536, 2048), "phi3-mini.qkv": (9216, 3072)}
# checked after the 33-64-token rule was fitted on both sets above (neither model nor layer in them)
CHECK = {"yi-34b.qkv": (9216, 7168), "falcon-40b.qkv": (9216, 8192), "phi3-medium.qkv": (7680, 5120),
         "internlm2-20b.qkv": (8192, 6144), "qwen2.5-32b.qkv": (7168, 5120), "command-r.o": (8192, 8192),
         "mistral-nemo.gate_up": (28672, 5120), "llama3-405b.qkv": (18432, 16384)}
TOKENS = (65, 96, 128, 192, 256, 384, 512)  # the first run (sweep set): 65, 128, 192, 256
BLOCKS = {"t2": SkinnyConfig(2, mainloop="wgmma"), "t4": SkinnyConfig(4, mainloop="wgmma"),
          "t8": SkinnyConfig(8, mainloop="wgmma")}


def shapes(which):
    s = {}
    if which in ("sweep", "all"):
        s.update(MODEL_LINEAR_SHAPES)
    if which in ("held", "all"):
        s.update(HELD)
    if which == "check":
        s.update(CHECK)
    return s


def specs(which="all", tokens=TOKENS):
    bf16 = torch.bfloat16
    tree = epi.scaled(bf16, bias=True, activation=None)
    out = [g4.skinny_kernel_spec(c, act_dtype=bf16, out_dtype=bf16) for c in BLOCKS.values()]
    for N, K in shapes(which).values():
        for M in tokens:
            sk = sm90.default_nvfp4_skinny_config(M, N, K)
            if sk is not None:
                out.append(g4.skinny_kernel_spec(sk, act_dtype=bf16, out_dtype=bf16))
            c = sm90.default_nvfp4_config(M, N, K).compiled()
            out.append(g4.nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0])
    out.append(g4.dequant_kernel_spec())
    return list({x.name: x for x in out}.values())


def _exact(a, w):
    xa = a.dequantize().float() if hasattr(a, "dequantize") else a.float()
    return xa @ w.dequantize().float().T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--set", default="all", choices=("sweep", "held", "all", "check"))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    tokens = tuple(int(t) for t in args.tokens.split(","))
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs(args.set, tokens) if not jit.is_cached(s)], jobs=2)
        return
    from scalemm.timing import bench, l2_copies
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    for name, (N, K) in shapes(args.set).items():
        for M in tokens:
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            copies = l2_copies(N * K * 2)  # bf16 weight copies (the runs here: min(8, 2 x 50 MB // bytes + 1))
            w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
            wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            xq = scalemm.quantize_nvfp4(x, scaling="token")
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fns = {"bf16": lambda i, w16=w16: torch.matmul(x, w16[i].T)}
            err = {}
            for act, a in (("w4a16", x), ("w4a4", xq)):
                exact = _exact(a, wq[0])
                cutlass = sm90.default_nvfp4_config(M, N, K)  # the CUTLASS kernel's pick (the default before)
                for label, cfg in [("default", None), ("cutlass", cutlass)] + list(BLOCKS.items()):
                    key = f"{act} {label}"
                    got = scalemm.gemm(a, wq[0], config=cfg).float()  # bf16 out: rounding ~2^-9 relative
                    err[key] = float((got - exact).norm() / exact.norm())
                    for i in range(copies):  # prepared copies (CUTLASS kernel) before any capture
                        scalemm.gemm(a, wq[i], config=cfg, out=out)
                    fns[key] = lambda i, a=a, cfg=cfg, wq=wq: scalemm.gemm(a, wq[i], config=cfg, out=out)
            us = bench(fns, copies)
            dflt = {x4: sm90.default_nvfp4_skinny_config(M, N, K, nvfp4_activations=x4) or sm90.default_nvfp4_config(M, N, K)
                    for x4 in (False, True)}
            row = {"layer": name, "M": M, "N": N, "K": K, "default_w4a16": dflt[False].label(),
                   "default_w4a4": dflt[True].label(), "us": us, "rel_err": err}
            rows.append(row)
            b = us["bf16"]
            lines.append(f"{name} M={M} N={N} K={K}: bf16 {b:.1f} us, default {dflt[False].label()} / {dflt[True].label()}"
                         f", max rel err {max(err.values()):.1e}")
            for act in ("w4a16", "w4a4"):
                ks = sorted((k for k in us if k.startswith(act)), key=us.get)
                lines.append(f"  {act}: " + ", ".join(f"{k[len(act) + 1:]} {us[k]:.1f} us {b / us[k]:.2f}x" for k in ks))
            print("\n".join(lines[-3:]), flush=True)
            del w16, wq
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"ab_{args.set}.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, f"ab_{args.set}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
