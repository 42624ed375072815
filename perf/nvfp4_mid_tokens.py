"""NVFP4-weight GEMMs at 129-1023 tokens (batched decode, chunked prefill): the CUTLASS kernel's tiles against bf16.

default_nvfp4_config takes 128 weight rows x 256 tokens above 128 tokens (stream-K where those tiles do not fill
the GPU); nothing had timed other tiles there. This script times, per point, bf16 torch.matmul, the default and
every candidate of CANDIDATES (W4A16, bf16 out, the bias leaf as scalemm.gemm builds it), weights rotated past L2
(NVFP4 bytes), CUDA-graph medians in one process (scalemm.timing.bench), and prints the best candidate per point.

  python perf/nvfp4_mid_tokens.py --out results/mid                 # the default points
  python perf/nvfp4_mid_tokens.py --ms 256,512 --shapes 4096x4096
  python perf/nvfp4_mid_tokens.py --check --out results/check       # held-out layers and token counts: the rule
                                                                    # (default) against the previous one and bf16
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

import scalemm
from scalemm.cutlass_kernels import GemmConfig
from scalemm.gemm_nvfp4 import default_nvfp4_config, gemm_nvfp4, nvfp4_gemm_kernel_spec
from scalemm import epilogues as epi
from scalemm.timing import bench, l2_copies

SHAPES = ["4096x4096", "6144x4096", "14336x4096", "4096x14336", "28672x4096", "8192x8192", "2048x7168", "7168x2048"]
MS = [192, 256, 384, 512, 768, 1024]
# --check: layers of models outside SHAPES (Qwen2.5-7B, Llama-3-70B, Gemma-3-27B, DeepSeek-V3, gpt-oss-120b,
# Qwen3-30B-A3B) at token counts outside MS
CHECK_SHAPES = ["4608x3584", "3584x3584", "37888x3584", "3584x18944", "10240x8192", "57344x8192", "8192x5376",
                "5376x4096", "43008x5376", "1536x7168", "24576x1536", "5120x2880", "2880x4096", "5120x2048"]
CHECK_MS = [160, 320, 448, 640, 896]
CANDIDATES = [GemmConfig(128, n, 64, 1, 1, s, swap_ab=True, stream_k=sk)
              for n in (64, 128, 256) for s, sk in (("cooperative", False), ("cooperative", True), ("pingpong", False))
              if not (s == "pingpong" and n == 256)] + [GemmConfig(128, 256, 64, 2, 1, "cooperative", swap_ab=True)]


def specs():
    """The kernels this script launches (for prebuilding: scalemm.jit.build_many(specs()))."""
    tree = epi.scaled(torch.bfloat16, bias=True, activation=None)
    return [nvfp4_gemm_kernel_spec(c.compiled(), act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)[0]
            for c in CANDIDATES]


def previous_config(M, N, K, num_sms=132) -> GemmConfig:
    """The rule before the twenty-seventh session above 128 tokens: 128x256, stream-K below one wave."""
    sk = -(-N // 128) * -(-M // 256) < num_sms
    return GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True, stream_k=sk, raster="m" if sk else "auto")


def point(M, N, K, check=False):
    copies = l2_copies(N * K * 9 // 16, most=64)
    torch.manual_seed(M + N + K)
    w16 = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(max(1, l2_copies(N * K * 2)))]
    wq = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", dtype=torch.bfloat16), scaling="token")
          for _ in range(copies)]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    default = default_nvfp4_config(M, N, K, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    fns = {"bf16": lambda i: torch.matmul(x, w16[i % len(w16)].T)}
    contenders = ([("previous", previous_config(M, N, K))] if check else
                  [(c.label(), c) for c in CANDIDATES]) + [("default", default)]
    for name, c in contenders:
        fn = (lambda c: lambda i: gemm_nvfp4(x, wq[i], out=out, config=c))(c)
        fn(0)  # the prepared copies, outside the capture
        fns[name] = fn
    for i in range(copies):
        gemm_nvfp4(x, wq[i], out=out, config=default)
    us = bench(fns, copies)
    cands = {k: v for k, v in us.items() if k not in ("bf16", "default")}
    best = min(cands, key=cands.get)
    return {"M": M, "N": N, "K": K, "default": default.label(), "us": us, "best": best,
            "default_vs_bf16": us["bf16"] / us["default"], "best_vs_bf16": us["bf16"] / us[best],
            "best_over_default": us["default"] / us[best]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--ms", default=",".join(map(str, MS)))
    p.add_argument("--check", action="store_true", help="CHECK_SHAPES x CHECK_MS: the rule against the previous one")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.check:
        args.shapes, args.ms = ",".join(CHECK_SHAPES), ",".join(map(str, CHECK_MS))
    rows = []
    print(f"{torch.cuda.get_device_name()}: NVFP4 W4A16 at 129-1023 tokens, us (speed-up over bf16)")
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        for M in (int(m) for m in args.ms.split(",")):
            r = point(M, N, K, args.check)
            rows.append(r)
            us = r["us"]
            print(f"{shape:>11} M={M:5d} bf16 {us['bf16']:8.1f}  default {r['default']:<34} {us['default']:8.1f} "
                  f"({r['default_vs_bf16']:.2f}x)  best {r['best']:<34} {us[r['best']]:8.1f} ({r['best_vs_bf16']:.2f}x, "
                  f"{r['best_over_default']:.3f}x default)  " + " ".join(
                      f"{k}={v:.1f}" for k, v in us.items() if k not in ("bf16", "default")), flush=True)
    g = lambda key: math.exp(sum(math.log(r[key]) for r in rows) / len(rows))  # noqa: E731
    print(f"geomean: default {g('default_vs_bf16'):.3f}x of bf16, best {g('best_vs_bf16'):.3f}x, "
          f"best over default {g('best_over_default'):.3f}x")
    if args.check:
        ratios = [r["us"]["previous"] / r["us"]["default"] for r in rows]
        print(f"the rule over the previous one: geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x, "
              f"min {min(ratios):.3f}x, max {max(ratios):.3f}x")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "nvfp4_mid_tokens.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "check": args.check, "candidates": [c.label() for c in CANDIDATES],
             "rows": rows},
            indent=1))


if __name__ == "__main__":
    main()
