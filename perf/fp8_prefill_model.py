"""The FP8 prefill tile rule (fast accumulation, 1024+ tokens): time every PREFILL_TILE_MODEL kernel, the rule's pick
and torch._scaled_mm at a set of points in one process, and refit the model to the timings.

`default_config` picks, from 1024 tokens, the kernel of cutlass_kernels/configs/sm90.py's PREFILL_TILE_MODEL with the
least predicted time waves x (a x K + b) + c. This script measures what the model predicts:

  python perf/fp8_prefill_model.py --points sweep --fit          # the sweep's 53 prefill points; fit a, b, c per
                                                                 # kernel and print PREFILL_TILE_MODEL's rows
  python perf/fp8_prefill_model.py --points models               # held-out check: the layers of MODEL_PRESETS'
                                                                 # larger models (not in the sweep) at 1024-16384
  python perf/fp8_prefill_model.py --refit results/fp8_prefill_model.json   # fit from saved timings, no GPU
  python perf/fp8_prefill_model.py --points narrow --extra t128x96x128_c2x1_coop   # narrow outputs (NARROW_LAYERS)
  python perf/fp8_prefill_model.py --points mid --extra t64x256x128_c1x1_ping   # 256-768 tokens
  python perf/fp8_prefill_model.py --points both --fit --extra t128x128x128_c1x2_ping   # candidates beside the
                                                                 # model's: fitted on the sweep, checked held out
  python perf/fp8_prefill_model.py --full --points both --fit    # full accumulation: the TILE_COST_FULL rule
                                                                 # (above 128 tokens) and its three kernels, each
                                                                 # also without the preset's bias leaf ("_nobias")

With --full the anchor is torch._scaled_mm rowwise in full accumulation and --fit searches TILE_COST_FULL's two
relative costs (192 and 256 wide, 128 = 1) on a grid for the best geomean over the run's points. `--clusters
2x1,1x1` also times the rule's kernels in other cluster shapes (the rule's are 2x1) and prints each against the
rule's kernel of the same width.

Per point: us of every kernel, the rule's pick ("scalemm") and the anchors; summary: geomean / min over torch
rowwise for the rule, for the best kernel of the model per point, and (with --fit) how the refitted rule would pick.
Writes fp8_prefill_model.json. Kernels: `python -m scalemm build --set sweep` builds them (PREFILL_TILE_MODEL is in
the tests set too).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections import Counter
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HELD_OUT_MODELS = ("llama3-405b", "mistral-large-2", "gemma-3-27b", "gpt-oss-120b")
# --points narrow: real layers whose output is narrow (N <= 2048), unfused k / v projections and DeepSeek-V3's MLA down
# projections, where 128x128 tiles leave SMs idle at 1024-4096 tokens: (label, N, K)
NARROW_LAYERS = (("llama3-8b.k", 1024, 4096), ("llama3-70b.k", 1024, 8192), ("qwen2.5-7b.k", 512, 3584),
                 ("qwen3-30b-a3b.k", 512, 2048), ("gemma-3-27b.k", 2048, 5376), ("dsv3.q_a", 1536, 7168),
                 ("dsv3.kv_a", 576, 7168), ("qwen3-30b-a3b.o", 2048, 4096))


def points(which: str, max_flop: float, tokens=None):
    from scalemm.cutlass_kernels.configs import model_linear_shapes, sweep_points
    pts = []
    if which in ("sweep", "both"):
        pts += [p for p in sweep_points(max_flop) if p[1] >= 1024]
    if which == "decode":  # the sweep's decode points (up to 128 tokens)
        pts += [p for p in sweep_points(max_flop) if p[1] <= 128]
    if which in ("models", "both"):
        pts += [(f"{m}.{layer}", M, N, K) for m in HELD_OUT_MODELS for layer, (N, K) in model_linear_shapes(m).items()
                for M in (1024, 2048, 4096, 8192, 16384) if 2 * M * N * K <= max_flop]
    if which == "narrow":
        pts += [(f"narrow.{label}", M, N, K) for label, N, K in NARROW_LAYERS for M in tokens or (1024, 2048, 4096, 8192)]
    if which == "mid":  # below 1024 tokens: the sweep's layers and the narrow ones at 256, 384, 512 and 768 tokens
        layers = {(label, N, K) for label, M, N, K in sweep_points(max_flop) if M == 1024 and label != "square"}
        layers |= {(f"narrow.{label}", N, K) for label, N, K in NARROW_LAYERS}
        pts += [(label, M, N, K) for label, N, K in sorted(layers) for M in tokens or (256, 384, 512, 768)]
    return pts


def config_of_key(key: str, swap: bool = False):
    """The GemmConfig of a tile key such as t128x128x128_c1x2_ping or t128x128x128_c1x1_coop_sk (stream-K; no
    promotion). Swap-AB keys (t64x64x128_c1x1_ping_swap) only with `swap` (the prefill model has no swap-AB tiles;
    perf/fp8_decode_widths.py takes them)."""
    from scalemm.cutlass_kernels.configs import GemmConfig
    m = re.fullmatch(r"t(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)_(ping|coop)(_swap)?(_sk)?", key)
    if not m or (m.group(7) and not swap):
        raise SystemExit(f"--extra: {key!r} is not a key like t128x128x128_c1x2_ping"
                         + (" (swap-AB allowed: t64x64x128_c1x1_ping_swap)" if swap else ""))
    *ints, sched, swapped, sk = m.groups()
    return GemmConfig(*map(int, ints), "pingpong" if sched == "ping" else "cooperative", swap_ab=bool(swapped),
                      stream_k=bool(sk))


def fit(rows, extra=(), num_sms=132):
    """(a, b, c) per kernel (PREFILL_TILE_MODEL's and `extra`): least squares of waves x (a K + b) + c against each
    kernel's own times, in relative error; on the sweep's rows only where `rows` has any, so that the held-out
    models' rows check it."""
    import torch
    from scalemm.cutlass_kernels.configs import sm90
    rows = [r for r in rows if not held_out(r)] or rows
    out = {}
    for cfg in [c for c, *_ in sm90.PREFILL_TILE_MODEL] + list(extra):
        sel = [r for r in rows if r["us"].get(cfg.label())]
        if not sel:  # a saved run from before this kernel was in the model
            print(f"  {cfg.label():<26} not timed in these rows: left out")
            continue
        w = [sm90.tile_waves(cfg, r["M"], r["N"], num_sms) for r in sel]
        X = torch.tensor([[wi * r["K"], wi, 1.0] for wi, r in zip(w, sel)], dtype=torch.float64)
        y = torch.tensor([r["us"][cfg.label()] for r in sel], dtype=torch.float64)
        coef = torch.linalg.lstsq(X / y[:, None], torch.ones_like(y)[:, None]).solution[:, 0]
        err = X @ coef / y - 1
        out[cfg.label()] = (cfg, *map(float, coef))
        print(f"  {cfg.label():<26} a={coef[0]:.4e} b={coef[1]:.3f} c={coef[2]:.3f}  rms error "
              f"{float(err.square().mean().sqrt()):.3f}, max {float(err.abs().max()):.3f} ({len(sel)} points)")
    return out


def extra_kernels(rows):
    """The kernels timed beside PREFILL_TILE_MODEL's (--extra) in saved rows."""
    from scalemm.cutlass_kernels.configs import sm90
    model = {c.label() for c, *_ in sm90.PREFILL_TILE_MODEL}
    return [config_of_key(k) for k in sorted({k for r in rows for k in r["us"] if k.startswith("t1")} - model)]


def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def full_kernels():
    """{tile width: kernel} of the full-accumulation rule (TILE_COST_FULL's widths) in clusters of 2 (the rule's
    own cluster choice, sm90.full_cluster_m, takes clusters of 1 for one wave and odd tile counts below 1024 tokens:
    the "scalemm" column; --clusters 2x1,1x1 times both)."""
    from scalemm.cutlass_kernels.configs import sm90
    return {n: sm90.full_tile_config(n) for n in sm90.TILE_COST_FULL}


def full_pick(r, cost, num_sms=132, planned_leaf=True):
    """The full-accumulation rule's width at row r with TILE_COST_FULL = cost, in clusters of 2 (full_kernels); with
    `planned_leaf`, the variant a call without a bias runs (gemm.bias_leaf: "_nobias" where it drops the leaf), else
    the one with it."""
    from scalemm.cutlass_kernels.configs import sm90
    from scalemm.gemm import bias_leaf
    cfg = full_kernels()[sm90._tile_n_by_waves(r["M"], r["N"], num_sms, tuple(cost), cost)]
    return cfg.label() + ("_nobias" if planned_leaf and not bias_leaf(False, False, cfg) else "")


def held_out(r) -> bool:
    return r["layer"].split(".")[0] in HELD_OUT_MODELS


def print_split(rows, columns):
    """Geomean (min) of torch rowwise time / each column's time (name -> fn(row) -> us) on the sweep's rows and on the
    held-out models' rows, when `rows` has both."""
    if not any(map(held_out, rows)) or all(map(held_out, rows)):
        return
    for part, sel in (("sweep", [r for r in rows if not held_out(r)]), ("held-out", [r for r in rows if held_out(r)])):
        print(f"  {part} ({len(sel)} points): " + ", ".join(
            f"{name} {gm(xs):.3f} ({min(xs):.3f})"
            for name, xs in ((name, [r["us"]["torch_rowwise"] / us(r) for r in sel]) for name, us in columns.items())))


def fit_full(rows, num_sms=132):
    """TILE_COST_FULL (128 = 1) with the best geomean on a grid of 0.01 (the first best in grid order), each pick
    timed with the bias leaf gemm.bias_leaf plans, fitted to the sweep's rows only where `rows` has any, so that the
    held-out models' rows check it."""
    rows = [r for r in rows if not held_out(r)] or rows
    best = None
    for i in range(100, 161):
        for j in range(i, 241):
            cost = {128: 1.0, 192: i / 100, 256: j / 100}
            g = gm([r["us"]["torch_rowwise"] / r["us"][full_pick(r, cost, num_sms)] for r in rows])
            if best is None or g > best[0] + 1e-12:
                best = (g, cost)
    print(f"  grid fit: TILE_COST_FULL = {best[1]} (geomean {best[0]:.4f} over {len(rows)} points)")
    return best[1]


def summarize(rows, model=None, num_sms=132, full=False, baseline=None):
    from scalemm.cutlass_kernels.configs import sm90
    labels = ([c.label() for c in full_kernels().values()] if full
              else [cfg.label() for cfg, *_ in sm90.PREFILL_TILE_MODEL])
    ratios = {"rule (scalemm)": [r["us"]["torch_rowwise"] / r["us"]["scalemm"] for r in rows],
              "best kernel of the model": [r["us"]["torch_rowwise"] / min(r["us"][k] for k in labels if r["us"].get(k))
                                           for r in rows],
              "torch per-tensor": [r["us"]["torch_rowwise"] / r["us"]["torch_tensorwise"] for r in rows]}
    if full:
        ratios["the rule's widths in clusters of 2"] = [
            r["us"]["torch_rowwise"] / r["us"][full_pick(r, sm90.TILE_COST_FULL)] for r in rows]
        if baseline:  # other costs, every kernel with its bias leaf (the rule before a change)
            for name, sel in (("sweep", [r for r in rows if not held_out(r)]), ("held-out", [r for r in rows if held_out(r)]),
                              ("all", rows)):
                xs = [r["us"]["torch_rowwise"] / r["us"][full_pick(r, baseline, planned_leaf=False)] for r in sel]
                if xs:
                    print(f"  TILE_COST_FULL {baseline}, every bias leaf, {name} ({len(xs)} points): {gm(xs):.3f} "
                          f"({min(xs):.3f})")
        if model:
            ratios["refitted rule"] = [r["us"]["torch_rowwise"] / r["us"][full_pick(r, model)] for r in rows]
            print_split(rows, {"rule (scalemm)": lambda r: r["us"]["scalemm"],
                               "widths in clusters of 2": lambda r: r["us"][full_pick(r, sm90.TILE_COST_FULL)],
                               "refitted": lambda r: r["us"][full_pick(r, model)]})
        for label in labels:  # each kernel without its bias leaf over with it
            xs = [r["us"][label] / r["us"][label + "_nobias"] for r in rows if r["us"].get(label + "_nobias")]
            if xs:
                print(f"  {label}: no bias leaf over bias leaf {gm(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})")
        # the rule's kernels in other cluster shapes (--clusters) over the rule's own (2x1), both leaf variants
        for other in sorted({k.removesuffix("_nobias") for r in rows for k in r["us"] if k.startswith("t1")} - set(labels)):
            rule = re.sub(r"_c\d+x\d+_", "_c2x1_", other)
            for v in ("", "_nobias") if rule in labels else ():
                xs = [r["us"][rule + v] / r["us"][other + v] for r in rows if r["us"].get(other + v)]
                print(f"  {other + v} over {rule + v}: {gm(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})")
    elif model:
        base = {c.label() for c, *_ in sm90.PREFILL_TILE_MODEL}

        def pick(r, entries):
            return sm90.prefill_config(r["M"], r["N"], r["K"], num_sms, entries)
        rules = {"refitted rule": [e for k, e in model.items() if k in base]}
        if len(model) > len(base):
            rules["refitted rule + extra kernels"] = list(model.values())
            ratios["best kernel, extra included"] = [r["us"]["torch_rowwise"] / min(
                r["us"][k] for k in model if r["us"].get(k)) for r in rows]
        for name, entries in rules.items():
            ratios[name] = [r["us"]["torch_rowwise"] / r["us"][pick(r, entries).label()] for r in rows]
        print_split(rows, {"rule (scalemm)": lambda r: r["us"]["scalemm"],
                           **{name: (lambda e: lambda r: r["us"][pick(r, e).label()])(entries)
                              for name, entries in rules.items()}})
        for entries in rules.values():
            print(f"  picks: {dict(Counter(pick(r, entries).label() for r in rows))}")
    print(f"\n{len(rows)} points, geomean (min) of torch._scaled_mm rowwise time / time:")
    out = {}
    for name, xs in ratios.items():
        out[name] = {"geomean": gm(xs), "min": min(xs)}
        print(f"  {name:<26} {gm(xs):.3f} ({min(xs):.3f})")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="sweep", choices=("sweep", "models", "both", "narrow", "mid"))
    p.add_argument("--max-tflop", type=float, default=4.0)
    p.add_argument("--tokens", default="", help="with --points narrow or mid: token counts instead of the set's own, "
                   "e.g. 144,192,240")
    p.add_argument("--fit", action="store_true", help="fit a, b, c per kernel to this run's times")
    p.add_argument("--refit", default=None, help="a saved fp8_prefill_model.json or fp8_full_rule.json: fit and "
                   "summarize it, no GPU")
    p.add_argument("--full", action="store_true", help="full accumulation: the TILE_COST_FULL rule and its kernels")
    p.add_argument("--clusters", default="2x1", help="with --full: cluster shapes to time the rule's kernels in")
    p.add_argument("--extra", default="", help="without --full: more kernels to time and fit beside the model's, "
                   "keys such as t128x128x128_c1x2_ping,t128x256x128_c1x2_coop")
    p.add_argument("--baseline-costs", default="", help="with --full, e.g. 192=1.28,256=1.70: also summarize the rule "
                   "with these TILE_COST_FULL values and every kernel's bias leaf")
    p.add_argument("--out", default="results")
    args = p.parse_args()
    try:
        tokens = tuple(int(t) for t in args.tokens.split(",") if t)
    except ValueError:
        raise SystemExit(f"--tokens takes comma-separated token counts, got {args.tokens!r}") from None
    if any(t < 1 for t in tokens):
        raise SystemExit(f"--tokens takes positive token counts, got {args.tokens!r}")
    if tokens and args.points not in ("narrow", "mid"):
        raise SystemExit("--tokens goes with --points narrow or mid")
    baseline = ({128: 1.0, **{int(k): float(v) for k, v in (kv.split("=") for kv in args.baseline_costs.split(","))}}
                if args.baseline_costs else None)
    if args.refit:
        saved = json.load(open(args.refit))
        full = saved.get("full", False)
        model = fit_full(saved["rows"]) if full else fit(saved["rows"], extra_kernels(saved["rows"]))
        summarize(saved["rows"], model, full=full, baseline=baseline)
        return
    import torch
    from gemm_sweep import time_point
    from scalemm import epilogues as epi
    from scalemm.cutlass_kernels.configs import default_config, sm90
    variants = (("_nobias", epi.scaled(torch.bfloat16, bias=False)),) if args.full else ()
    extra = [config_of_key(k) for k in args.extra.split(",") if k]
    kernels = ([replace(k, cluster_m=int(c.split("x")[0]), cluster_n=int(c.split("x")[1]))
                for c in args.clusters.split(",") for k in full_kernels().values()] if args.full
               else [cfg for cfg, *_ in sm90.PREFILL_TILE_MODEL] + extra)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for label, M, N, K in points(args.points, args.max_tflop * 1e12, tokens):
        us = time_point(M, N, K, not args.full, configs=kernels, with_bf16=False, epilogues=variants)
        pick = default_config(M, N, K, fast_accum=not args.full).label()
        rows.append({"layer": label, "M": M, "N": N, "K": K, "pick": pick, "us": us})
        base = us["torch_rowwise"]
        print(f"{label:<32}{M:>6}{N:>7}{K:>6}  rule {pick:<28} {base / us['scalemm']:.3f}  "
              + " ".join(f"{k}={base / v:.3f}" for k, v in us.items() if k.startswith("t1")), flush=True)
    model = (fit_full(rows) if args.full else fit(rows, extra)) if args.fit else None
    summary = summarize(rows, model, full=args.full, baseline=baseline)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fp8_full_rule.json" if args.full else "fp8_prefill_model.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "points": args.points, "full": args.full, "rows": rows,
               "summary": summary}, open(path, "w"), indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
