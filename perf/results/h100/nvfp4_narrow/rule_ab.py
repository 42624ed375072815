"""The NVFP4 tile rule's two refinements of the thirty-fourth session (configs/sm90.py, before NVFP4_ONE_WAVE_MAX_K)
against the previous rule, in one process: every point of the sweep, of perf/nvfp4_mid_tokens.py (fit and check
shapes) and of other models' layers (not used for the refinements) where the two rules pick different kernels;
W4A16 and W4A4 (bf16 pass), bf16 torch.matmul as the anchor, outputs against the exact dequantized product.

  python3 perf/results/h100/nvfp4_narrow/rule_ab.py --list     (CPU: the changed points)
  python3 perf/results/h100/nvfp4_narrow/rule_ab.py --out OUT [--sets held,sweep]
Run 1 (rule_ab_run1.*): the rule with the narrow tiles bounded by tile count only; run 2 (rule_ab.*): the final rule
on the held-out points and the sweep's.
"""
import argparse
import contextlib
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
import nvfp4_mid_tokens as mt  # noqa: E402

import scalemm  # noqa: E402
from scalemm import gemm_nvfp4 as g4  # noqa: E402
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402
from scalemm.cutlass_kernels.configs.shapes import sweep_points  # noqa: E402

# other models' layers (N, K), not among the shapes the refinements were read from
OTHER = {"dsv2.q_a": (1536, 5120), "dsv2.kv_a": (576, 5120), "mistral-large-2.k": (1024, 12288),
         "qwen2.5-72b.k": (1024, 8192), "gpt-oss-120b.qkv": (5120, 2880), "gpt-oss-120b.o": (2880, 4096),
         "gemma-3-27b.qkv": (8192, 5376), "gemma-3-27b.o": (5376, 4096), "llama3-405b.k": (1024, 16384)}
OTHER_MS = (320, 640, 1024, 2048, 4096, 8192, 16384)
# held out from the refinement of the narrow rule's K bound (chosen after run 1): k / v projections and narrow layers
# of further models, at other token counts
HELD_OUT = {"qwen2.5-7b.k": (512, 3584), "qwen2.5-7b.down": (3584, 18944), "phi-3-medium.k": (1280, 5120),
            "yi-34b.k": (1024, 7168), "falcon-180b.k": (512, 14848), "gemma-2-9b.k": (2048, 3584),
            "mixtral-8x22b.k": (1024, 6144), "glm-4.5.k": (1024, 5120), "kimi-k2.q_a": (1536, 7168),
            "minimax.k": (1024, 6144), "dsv3.kv_b": (32768, 512)}
HELD_OUT_MS = (192, 288, 576, 768, 1536, 3072, 6144, 12288)
SETS = ("sweep", "fit", "check", "other", "held")


@contextlib.contextmanager
def previous_rule():
    saved = sm90.NVFP4_STREAM_K_LAST_WAVE_PREFILL, sm90.NVFP4_STREAM_K_NARROW
    sm90.NVFP4_STREAM_K_LAST_WAVE_PREFILL, sm90.NVFP4_STREAM_K_NARROW = sm90.NVFP4_STREAM_K_LAST_WAVE, math.inf
    sm90.clear_dispatch_caches()  # the rules are cached per shape
    try:
        yield
    finally:
        sm90.NVFP4_STREAM_K_LAST_WAVE_PREFILL, sm90.NVFP4_STREAM_K_NARROW = saved
        sm90.clear_dispatch_caches()


def changed_points(sets=SETS):
    pts = [("sweep." + l, M, N, K) for l, M, N, K in sweep_points(4e12) if M > 128]
    pts += [(f"fit.{s}", M, *map(int, s.split("x"))) for s in mt.SHAPES for M in mt.MS]
    pts += [(f"check.{s}", M, *map(int, s.split("x"))) for s in mt.CHECK_SHAPES for M in mt.CHECK_MS]
    pts += [(f"other.{n}", M, N, K) for n, (N, K) in OTHER.items() for M in OTHER_MS]
    pts += [(f"held.{n}", M, N, K) for n, (N, K) in HELD_OUT.items() for M in HELD_OUT_MS]
    pts = [p for p in pts if p[0].split(".")[0] in sets]
    out = []
    for label, M, N, K in pts:
        new = sm90.default_nvfp4_config(M, N, K)
        with previous_rule():
            old = sm90.default_nvfp4_config(M, N, K)
        if old != new:
            out.append((label, M, N, K, old, new))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--sets", default=",".join(SETS), help=f"which points ({', '.join(SETS)})")
    args = ap.parse_args()
    pts = changed_points(args.sets.split(","))
    if args.list:
        for p in pts:
            print(*p[:4], p[4].label(), "->", p[5].label())
        return
    from scalemm.timing import bench
    rows, lines = [], [f"device: {torch.cuda.get_device_name()}"]
    for label, M, N, K, old, new in pts:
        g = torch.Generator(device="cuda").manual_seed(M + N + K)
        copies = max(1, min(8, int(2 * 50e6 // (N * K * 2)) + 1))
        w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
        wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4(x, scaling="token")
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        exact = (x.double() @ scalemm.reference.dequantize_nvfp4(wq[0]).double().T)
        fns, err = {"bf16": lambda i: torch.matmul(x, w16[i].T)}, {}
        for rule, cfg in (("old", old), ("new", new)):
            for act, a in (("w4a16", x), ("w4a4", xq)):
                key = f"{act} {rule}"
                got = g4.gemm_nvfp4(a, wq[0], config=cfg)
                if act == "w4a16":
                    err[rule] = ((got.double() - exact).abs().max() / exact.abs().max()).item()
                for i in range(copies):
                    g4.gemm_nvfp4(a, wq[i], config=cfg)
                fns[key] = lambda i, a=a, cfg=cfg: g4.gemm_nvfp4(a, wq[i], config=cfg, out=out)
        us = bench(fns, copies)
        b = us["bf16"]
        rows.append({"layer": label, "M": M, "N": N, "K": K, "old": old.label(), "new": new.label(), "us": us,
                     "w4a16_max_err_over_max": err})
        lines.append(f"{label:<28}{M:>6}{N:>7}{K:>7}  {old.label()} -> {new.label()}: W4A16 {b / us['w4a16 old']:.3f} -> "
                     f"{b / us['w4a16 new']:.3f}x bf16 ({us['w4a16 old'] / us['w4a16 new']:.3f}x), W4A4 "
                     f"{b / us['w4a4 old']:.3f} -> {b / us['w4a4 new']:.3f}x ({us['w4a4 old'] / us['w4a4 new']:.3f}x); "
                     f"max err {err['new']:.1e}")
        print(lines[-1], flush=True)
        del w16, wq
        torch.cuda.empty_cache()
    gains = [r["us"]["w4a16 old"] / r["us"]["w4a16 new"] for r in rows]
    gains4 = [r["us"]["w4a4 old"] / r["us"]["w4a4 new"] for r in rows]
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))  # noqa: E731
    lines.append(f"{len(rows)} changed points: W4A16 new/old geomean {geo(gains):.3f}x (min {min(gains):.3f}, max "
                 f"{max(gains):.3f}); W4A4 {geo(gains4):.3f}x (min {min(gains4):.3f})")
    print(lines[-1])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rule_ab.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "rule_ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
