"""Grouped (MoE) FP8 GEMM sweep: scalemm.grouped_gemm vs torch._scaled_grouped_mm and bf16 torch._grouped_mm.

MoE layers of DeepSeek-V3 (256 experts top-8, hidden 7168, expert inter 2048), Qwen3-30B-A3B
(128 experts top-8, hidden 2048, inter 768) and Llama-4-Scout (16 experts top-1, hidden 5120,
inter 8192); both projections (gate_up: N = 2 * inter, K = hidden; down: N = hidden, K = inter);
decode (few tokens) and prefill; token counts per expert drawn from a skewed (Zipf-like) routing
so some experts are hot and some get nothing. Same process, same GPU, CUDA-graph timings
interleaved in rounds (scalemm.timing.bench). Writes grouped_sweep.json and .png.
With --formats nvfp4 (on by default) each point also times scalemm.grouped_gemm on stacked NVFP4
expert weights (the same values as the bf16 anchor's), W4A16 and W4A4, against bf16 _grouped_mm: the default,
and at decode the skinny kernel pinned with each main loop (*_skinny: stepped, *_wgmma: wgmma).

  python perf/grouped_sweep.py --out results/
  python perf/grouped_sweep.py --out results/ --formats nvfp4   # only the NVFP4 contenders (and the torch anchors)
  python perf/grouped_sweep.py --formats nvfp4 --phases decode --decode-tokens 2,4,8,24   # other decode batches
  python perf/grouped_sweep.py --formats fp8 --phases prefill --models other --tune   # MoE models outside the sweep
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import L2_BYTES, bench, geomean  # noqa: E402

import scalemm  # noqa: E402
from scalemm.cutlass_kernels.configs import (GROUPED_TUNING_CANDIDATES, SKINNY_MAINLOOPS, SkinnyConfig,  # noqa: E402
                                             default_grouped_config, skinny_config_for_groups)

E4M3 = torch.float8_e4m3fn
MODELS = {  # experts, top-k, hidden, expert intermediate
    "dsv3": (256, 8, 7168, 2048),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "llama4-scout": (16, 1, 5120, 8192),
}
# MoE layers outside the sweep (--models other), to check a rule on shapes it was not fitted to
OTHER_MODELS = {
    "qwen3-235b-a22b": (128, 8, 4096, 1536),
    "gpt-oss-120b": (128, 4, 2880, 2880),
    "mixtral-8x7b": (8, 2, 4096, 14336),
    "deepseek-v2-lite": (64, 6, 2048, 1408),
}
TOKENS = {"decode": (1, 16, 64), "prefill": (1024, 4096, 16384)}
NVFP4_NAMES = ("nvfp4_w4a16", "nvfp4_w4a4", "nvfp4_w4a16_skinny", "nvfp4_w4a4_skinny", "nvfp4_w4a16_wgmma",
               "nvfp4_w4a4_wgmma")


def _random_e4m3(shape, gen, chunk=16):
    """Random e4m3 weights generated a few experts at a time (an fp32 randn of a whole
    DeepSeek-V3 expert stack would be 28 GB)."""
    out = torch.empty(shape, dtype=E4M3, device="cuda")
    for g0 in range(0, shape[0], chunk):
        out[g0:g0 + chunk] = (torch.randn((min(chunk, shape[0] - g0), *shape[1:]), device="cuda", generator=gen) * 4).to(E4M3)
    return out


def routed_sizes(tokens, experts, top_k, seed):
    """Rows per expert for `tokens` tokens routed top-k with a skewed expert popularity."""
    g = torch.Generator().manual_seed(seed)
    pop = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** 1.1
    pop = pop[torch.randperm(experts, generator=g)]
    choice = torch.multinomial(pop.expand(tokens, experts), top_k, replacement=False, generator=g)
    return torch.bincount(choice.reshape(-1), minlength=experts)


def points(token_counts=TOKENS, models=MODELS):
    for model, (E, k, hidden, inter) in models.items():
        for phase, toks in token_counts.items():
            for tokens in toks:
                for proj, (N, K) in (("gate_up", (2 * inter, hidden)), ("down", (hidden, inter))):
                    yield model, phase, tokens, proj, E, k, N, K


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tune", action="store_true", help="also time GROUPED_TUNING_CANDIDATES at every point")
    p.add_argument("--formats", default="fp8,nvfp4", help="fp8, nvfp4 or both: which scalemm contenders to time")
    p.add_argument("--phases", default=None, help=f"only these phases (comma-separated: {', '.join(TOKENS)})")
    p.add_argument("--models", default="sweep", choices=("sweep", "other"),
                   help="the sweep's MoE models (DeepSeek-V3, Qwen3-30B-A3B, Llama-4-Scout) or four others (Qwen3-235B-A22B, "
                        "gpt-oss-120b, Mixtral-8x7B, DeepSeek-V2-Lite)")
    p.add_argument("--decode-tokens", default=None,
                   help=f"decode token counts instead of {TOKENS['decode']} (comma-separated; routing seeds follow the "
                        "point index, so other counts give other routings)")
    args = p.parse_args()
    token_counts = dict(TOKENS)
    if args.decode_tokens:
        try:
            token_counts["decode"] = tuple(int(t) for t in args.decode_tokens.split(","))
        except ValueError:
            raise SystemExit(f"--decode-tokens takes comma-separated integers, got {args.decode_tokens!r}")
        if min(token_counts["decode"]) < 1:
            raise SystemExit(f"--decode-tokens must be >= 1, got {args.decode_tokens!r}")
    phases = args.phases.split(",") if args.phases else None
    if phases and set(phases) - set(TOKENS):
        raise SystemExit(f"--phases takes {', '.join(TOKENS)}, got {args.phases!r}")
    formats = set(args.formats.split(","))
    if not formats or formats - {"fp8", "nvfp4"}:
        raise SystemExit(f"--formats takes fp8, nvfp4 or fp8,nvfp4, got {args.formats!r}")
    os.makedirs(args.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, torch {torch.__version__}")
    hdr = f"{'model':<15}{'phase':<8}{'tok':>6} {'proj':<8}{'G':>4}{'T':>7}{'N':>6}{'K':>6} {'empty':>5} {'config':<28}{'scalemm':>9}{'torch8':>9}{'bf16':>9} {'speedup':>7}"
    print(hdr + "\n" + "-" * len(hdr))
    rows = []
    models = MODELS if args.models == "sweep" else OTHER_MODELS
    for i, (model, phase, tokens, proj, E, k, N, K) in enumerate(points(token_counts, models)):
        if phases and phase not in phases:  # skipped points keep their index: the same routing seeds
            continue
        if args.quick and i % 5:
            continue
        sizes = routed_sizes(tokens, E, k, seed=i)
        T, G = int(sizes.sum()), E
        gen = torch.Generator(device="cuda").manual_seed(i)
        copies = max(1, min(4, math.ceil(128e6 / (G * N * K))))
        # A call reads only the experts holding rows. At decode those are few (Qwen3-30B-A3B at 1 token: 8 experts,
        # 14 MB of NVFP4 weights), and the same routing on every call kept them in L2, which a model's decode step
        # (every other layer's weights in between) does not. So the calls rotate over `routings` routings, the
        # experts' rows moved along by G / routings each, until the smallest contender's expert weights (NVFP4) read
        # per round are twice the L2.
        routed_bytes = int((sizes > 0).sum()) * N * K * 9 // 16
        routings = max(1, min(16, G, math.ceil(2 * L2_BYTES / routed_bytes)))
        offs_all = [torch.cumsum(torch.roll(sizes, r * (G // routings)), 0).to(torch.int32).cuda()
                    for r in range(routings)]
        sets = max(copies, routings)  # bench's input sets: call j reads weight copy j % copies, routing j % routings
        a = (torch.randn(T, K, device="cuda", generator=gen) * 4).to(E4M3)
        bs = [_random_e4m3((G, N, K), gen) for _ in range(copies)]
        sa = torch.rand(T, device="cuda", generator=gen) + 0.5
        sb = torch.rand(G, N, device="cuda", generator=gen) + 0.5
        out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
        a16 = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        b16 = bs[0].to(torch.bfloat16)
        fns = {
            "torch_scaled_grouped_mm": lambda j: torch._scaled_grouped_mm(
                a, bs[j % copies].transpose(-2, -1), sa, sb, offs=offs_all[j % routings], out_dtype=torch.bfloat16,
                use_fast_accum=True),
            "torch_grouped_mm_bf16": lambda j: torch._grouped_mm(a16, b16.transpose(-2, -1), offs=offs_all[j % routings]),
        }
        if "fp8" in formats:
            fns["scalemm"] = lambda j: scalemm.grouped_gemm(a, bs[j % copies], offs_all[j % routings], sa, sb, out=out,
                                                            fast_accum=True, scale_a_per="token")
        if "nvfp4" in formats:  # one weight set: every model's NVFP4 expert stack is larger than L2
            wq = scalemm.quantize_nvfp4_stacked(b16, scaling="token")
            xqs = [scalemm.quantize_nvfp4_grouped(a16, o, scaling="token") for o in offs_all]
            fns["nvfp4_w4a16"] = lambda j: scalemm.grouped_gemm(a16, wq, offs_all[j % routings], out=out)
            fns["nvfp4_w4a4"] = lambda j: scalemm.grouped_gemm(xqs[j % routings], wq, None, out=out)
            skinny = skinny_config_for_groups(T, G)
            if skinny is not None:  # the skinny kernel pinned (the default takes it up to 4 rows per expert),
                # with its default loop and with the wgmma loop (W4A4: after the bf16 decode pass)
                wg = SkinnyConfig(skinny.token_tiles, mainloop="wgmma") if "wgmma" in SKINNY_MAINLOOPS else None
                fns["nvfp4_w4a16_skinny"] = lambda j: scalemm.grouped_gemm(a16, wq, offs_all[j % routings], out=out,
                                                                           config=skinny)
                fns["nvfp4_w4a4_skinny"] = lambda j: scalemm.grouped_gemm(xqs[j % routings], wq, None, out=out,
                                                                          config=skinny)
                if "wgmma" in SKINNY_MAINLOOPS:  # (A/B runs against builds without the wgmma loop)
                    fns["nvfp4_w4a16_wgmma"] = lambda j: scalemm.grouped_gemm(a16, wq, offs_all[j % routings], out=out,
                                                                              config=wg)
                    fns["nvfp4_w4a4_wgmma"] = lambda j: scalemm.grouped_gemm(xqs[j % routings], wq, None, out=out,
                                                                             config=wg)
        if args.tune:
            for cfg in GROUPED_TUNING_CANDIDATES:
                fn = (lambda c: lambda j: scalemm.grouped_gemm(a, bs[j % copies], offs_all[j % routings], sa, sb,
                                                               out=out, fast_accum=True, scale_a_per="token",
                                                               config=c))(cfg)
                try:
                    fn(0)
                    fns[cfg.key()] = fn
                except Exception as e:
                    print(f"  {cfg.key()} failed: {str(e).splitlines()[0]}", file=sys.stderr)
        us = bench(fns, sets)
        flop = 2 * T * N * K
        row = {"model": model, "phase": phase, "tokens": tokens, "proj": proj, "G": G, "T": T, "N": N, "K": K,
               "routings": routings,
               "empty_groups": int((sizes == 0).sum()), "max_group": int(sizes.max()),
               "config": default_grouped_config(T, G, N, K).key(), "us": us,
               "tflops": {k2: flop / v / 1e6 for k2, v in us.items()},
               "speedup": us["torch_scaled_grouped_mm"] / us["scalemm"] if "scalemm" in us else None}
        for name in NVFP4_NAMES:
            if name in us:
                row[f"{name}_vs_bf16"] = us["torch_grouped_mm_bf16"] / us[name]
        if args.tune:
            cands = {k2: v for k2, v in us.items() if not k2.startswith("torch")}
            row["best"] = min(cands, key=cands.get)
            row["best_speedup"] = us["torch_scaled_grouped_mm"] / cands[row["best"]]
        rows.append(row)
        print(f"{model:<15}{phase:<8}{tokens:>6} {proj:<8}{G:>4}{T:>7}{N:>6}{K:>6} {row['empty_groups']:>5} "
              f"{row['config']:<28}{us.get('scalemm', float('nan')):>9.1f}{us['torch_scaled_grouped_mm']:>9.1f}"
              f"{us['torch_grouped_mm_bf16']:>9.1f} {row['speedup'] or float('nan'):>7.3f}"
              + "".join(f"  {n} {us[n]:.1f} us ({row[n + '_vs_bf16']:.2f}x bf16)" for n in NVFP4_NAMES if n in us)
              + (f"  best {row['best']} {row['best_speedup']:.3f}" if args.tune else ""), flush=True)
        del a, bs, a16, b16, out, fns
        wq = xqs = None
        torch.cuda.empty_cache()  # 256 experts x 4096 x 7168 weights: keep an 80 GB H100 in bounds
    summary = {}
    if "fp8" in formats:
        summary.update({"geomean_speedup_vs_scaled_grouped_mm": geomean([r["speedup"] for r in rows]),
                        "min_speedup": min(r["speedup"] for r in rows),
                        "decode_geomean": geomean([r["speedup"] for r in rows if r["phase"] == "decode"]),
                        "prefill_geomean": geomean([r["speedup"] for r in rows if r["phase"] == "prefill"])})
    for name in NVFP4_NAMES:  # vs bf16 torch._grouped_mm, per phase
        for phase in TOKENS:
            ratios = [r[f"{name}_vs_bf16"] for r in rows if r["phase"] == phase and f"{name}_vs_bf16" in r]
            if ratios:
                summary[f"{name}_{phase}_geomean_vs_bf16"] = geomean(ratios)
                summary[f"{name}_{phase}_min_vs_bf16"] = min(ratios)
    print(json.dumps(summary, indent=1))
    with open(os.path.join(args.out, "grouped_sweep.json"), "w") as f:
        json.dump({"gpu": props.name, "torch": torch.__version__, "rows": rows, "summary": summary}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(12, 4.5))
        labels = [f"{r['model']}\n{r['proj']} {r['tokens']}" for r in rows]
        series = [(key, title) for key, title in (("speedup", "FP8 vs torch._scaled_grouped_mm"),
                                                  ("nvfp4_w4a16_vs_bf16", "NVFP4 W4A16 vs bf16 _grouped_mm"),
                                                  ("nvfp4_w4a4_vs_bf16", "NVFP4 W4A4 vs bf16 _grouped_mm"))
                  if any(r.get(key) for r in rows)]
        width = 0.8 / max(1, len(series))
        for i, (key, title) in enumerate(series):
            ax.bar([x + i * width for x in range(len(rows))], [r.get(key) or 0 for r in rows], width, label=title)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
        ax.set_ylabel("anchor time / scalemm time")
        ax.legend(fontsize=7)
        ax.set_title(f"scalemm grouped GEMMs on {props.name} (decode points first within each model)")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "grouped_sweep.png"), dpi=110)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
