"""Held-out check of the token-width rule (configs/sm90.py, NVFP4_WIDE_TOKEN_WIDTHS): layers and token counts that
widths.py did not time, every point where the rule's pick differs from the previous rule's, W4A16 and W4A4 (the
exact bf16 decode pass, then the same kernel), beside bf16. CUDA graphs, weights rotated past L2; every output
checked against the exact dequantized product.

  python3 perf/results/h100/nvfp4_mid_widths/check.py --out OUT
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

import scalemm  # noqa: E402
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402
from scalemm.cutlass_kernels.configs.sm90 import (  # noqa: E402
    NVFP4_ONE_WAVE_MAX_K, NVFP4_STREAM_K_LAST_WAVE, NVFP4_STREAM_K_LAST_WAVE_PREFILL, NVFP4_STREAM_K_MAX_WAVES,
    NVFP4_STREAM_K_NARROW, NVFP4_STREAM_K_NARROW_K, NVFP4_STREAM_K_PREFILL_TOKENS, _nvfp4_tile)

SHAPES = {"qwen2.5-7b.down": (3584, 18944), "mistral-large-2.o": (12288, 12288), "llama3-8b.k": (1024, 4096),
          "mla.small": (512, 7168), "qwen3-30b-a3b.expert": (1536, 2048), "phi3-mini.qkv": (9216, 3072),
          "yi-34b.qkv": (9216, 7168), "phi3-medium.qkv": (7680, 5120), "internlm2-20b.qkv": (8192, 6144),
          "qwen2.5-32b.qkv": (7168, 5120), "mistral-nemo.gate_up": (28672, 5120), "dsv3.q_b": (24576, 1536),
          "llama3-70b.qkv": (10240, 8192), "llama3-70b.down": (8192, 28672), "dsv2.kv_a": (576, 5120),
          "dsv3.q_a": (1536, 7168)}
TOKENS = (136, 200, 240, 288, 352, 416, 480, 544, 720, 800, 960, 1200, 2500, 3000, 6000)


def previous_config(M, N, K, num_sms=132):
    """The rule above 128 tokens before the token widths (thirty-fifth session)."""
    rows = -(-N // 128)
    wide = rows * -(-M // 256)
    if wide >= num_sms:
        last = wide / num_sms % 1
        bound = NVFP4_STREAM_K_LAST_WAVE_PREFILL if M >= NVFP4_STREAM_K_PREFILL_TOKENS else NVFP4_STREAM_K_LAST_WAVE
        return _nvfp4_tile(256, 0 < last <= bound and wide < NVFP4_STREAM_K_MAX_WAVES * num_sms)
    if K <= NVFP4_ONE_WAVE_MAX_K:
        for tile_n in (256, 128, 64):
            tiles = rows * -(-M // tile_n)
            if num_sms <= 2 * tiles <= 2 * num_sms:
                return _nvfp4_tile(tile_n, False)
    narrow = NVFP4_STREAM_K_NARROW * wide <= num_sms and wide * K <= NVFP4_STREAM_K_NARROW_K * num_sms
    return _nvfp4_tile(128 if narrow else 256, True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    from scalemm.timing import bench, l2_copies
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    for name, (N, K) in SHAPES.items():
        for M in (int(t) for t in args.tokens.split(",")):
            old, new = previous_config(M, N, K), sm90.default_nvfp4_config(M, N, K)
            if old == new:
                continue
            g = torch.Generator(device="cuda").manual_seed(M + N + K)
            copies = l2_copies(N * K * 2)
            w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
            wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
            x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
            xq = scalemm.quantize_nvfp4(x, scaling="token")
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fns = {"bf16": lambda i, w16=w16: torch.matmul(x, w16[i].T)}
            err = {}
            for act, a in (("w4a16", x), ("w4a4", xq)):
                xa = a.dequantize().float() if act == "w4a4" else a.float()
                exact = xa @ wq[0].dequantize().float().T
                for label, cfg in (("old", old), ("new", new)):
                    got = scalemm.gemm(a, wq[0], config=cfg).float()
                    err[f"{act} {label}"] = float((got - exact).norm() / exact.norm())
                    for i in range(copies):
                        scalemm.gemm(a, wq[i], config=cfg, out=out)
                    fns[f"{act} {label}"] = lambda i, a=a, cfg=cfg, wq=wq: scalemm.gemm(a, wq[i], config=cfg, out=out)
            us = bench(fns, copies)
            rows.append({"layer": name, "M": M, "N": N, "K": K, "old": old.label(), "new": new.label(), "us": us,
                         "rel_err": err})
            b = us["bf16"]
            lines.append(f"{name} M={M} N={N} K={K}: {old.label()} -> {new.label()}, max rel err {max(err.values()):.1e}; "
                         f"bf16 {b:.1f} us; " + "; ".join(
                             f"{act} {us[f'{act} old']:.1f} -> {us[f'{act} new']:.1f} us "
                             f"({us[f'{act} old'] / us[f'{act} new']:.2f}x, {b / us[f'{act} new']:.2f}x of bf16)"
                             for act in ("w4a16", "w4a4")))
            print(lines[-1], flush=True)
            del w16, wq
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "check.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
