"""NVFP4 prefill on narrow layers (issue 11's >= 0.85x of bf16 at >= 4096 tokens): the sweep of 2026-11-28
(../sweeps_2026-11-28/) has DeepSeek-V3's kv_a (576 x 7168) at 0.63-0.72x W4A16 / 0.46-0.50x W4A4 and q_a
(1536 x 7168) at 0.81x / 0.69x. With few 128-row weight tiles the rule's tiles leave SMs idle or a short last wave,
and W4A4's bf16 pass (write + read of the activations in bf16) weighs on a short GEMM. This times, per point, bf16
torch.matmul and the NVFP4 kernel with each token tile (64 / 128 / 256, with and without stream-K), W4A16 and W4A4
(the pass, and the activations decoded in the mainloop where the tile allows), every output checked bit for bit
against the default's.

  python3 perf/results/h100/nvfp4_narrow/ab.py --build      (CPU machine)
  python3 perf/results/h100/nvfp4_narrow/ab.py --out OUT
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
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402

SHAPES = {"dsv3.kv_a": (576, 7168), "dsv3.q_a": (1536, 7168), "dsv2.kv_a": (576, 5120), "llama3-8b.k": (1024, 4096),
          "qwen3-30b-a3b.o": (2048, 4096), "mla.small": (512, 7168), "llama3-8b.o": (4096, 4096)}
TOKENS = (1024, 4096, 16384)
TILES = [sm90._nvfp4_tile(n, sk) for n in (64, 128, 256) for sk in (False, True)]


def candidates():
    """(label, config, W4A4 decode) per candidate; config None: the default."""
    out = [("default", None, "pass")]
    for c in TILES:
        out.append((c.label(), c, "pass"))
        if sm90.nvfp4_decodes_activations(c):
            out.append((c.label() + "+ml", c, "mainloop"))
    return out


def specs():
    bf16 = torch.bfloat16
    tree = epi.scaled(bf16, bias=True, activation=None)
    s = [g4.nvfp4_gemm_kernel_spec(c.compiled(), act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0] for c in TILES]
    s += [g4.nvfp4_gemm_kernel_spec(c.compiled(), act_dtype="nvfp4", out_dtype=bf16, epilogue=tree)[0]
          for c in TILES if sm90.nvfp4_decodes_activations(c)]
    for name, (N, K) in SHAPES.items():
        for M in TOKENS:
            c = sm90.default_nvfp4_config(M, N, K)
            s.append(g4.nvfp4_gemm_kernel_spec(c.compiled(), act_dtype=bf16, out_dtype=bf16, epilogue=tree)[0])
    return list({x.name: x for x in s}.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs() if not jit.is_cached(s)], jobs=2)
        return
    from scalemm.timing import bench
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    for name, (N, K) in SHAPES.items():
        for M in TOKENS:
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            copies = max(1, min(8, int(2 * 50e6 // (N * K * 2)) + 1))
            w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
            wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            xq = scalemm.quantize_nvfp4(x, scaling="token")
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fns = {"bf16": lambda i: torch.matmul(x, w16[i].T)}
            ref16 = scalemm.gemm(x, wq[0])
            ref4 = scalemm.gemm(xq, wq[0])
            same = {}
            for label, cfg, dec in candidates():
                for act, a, ref in (("w4a16", x, ref16), ("w4a4", xq, ref4)):
                    if act == "w4a16" and dec == "mainloop":
                        continue
                    key = f"{act} {label}"
                    try:
                        got = g4.gemm_nvfp4(a, wq[0], config=cfg, activation_decode=dec)
                    except Exception as e:  # noqa: BLE001
                        print(f"  {name} {M} {key}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                        continue
                    same[key] = torch.equal(got, ref)
                    for i in range(copies):  # prepared weight copies before any capture
                        g4.gemm_nvfp4(a, wq[i], config=cfg, activation_decode=dec)
                    fns[key] = (lambda i, a=a, cfg=cfg, dec=dec:
                                g4.gemm_nvfp4(a, wq[i], config=cfg, activation_decode=dec, out=out))
            us = bench(fns, copies)
            dflt = sm90.default_nvfp4_config(M, N, K)
            row = {"layer": name, "M": M, "N": N, "K": K, "default": dflt.label(), "us": us, "bit_identical": same}
            rows.append(row)
            b = us["bf16"]
            lines.append(f"{name} M={M} N={N} K={K}: bf16 {b:.1f} us, default {dflt.label()}")
            for act in ("w4a16", "w4a4"):
                ks = sorted((k for k in us if k.startswith(act)), key=us.get)
                lines.append(f"  {act}: " + ", ".join(f"{k[len(act) + 1:]} {b / us[k]:.2f}x"
                                                      + ("" if same.get(k, True) else " DIFFERS") for k in ks))
            print("\n".join(lines[-3:]), flush=True)
            del w16, wq
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
