"""The FP8 prefill tile rule (fast accumulation, 1024+ tokens): time every PREFILL_TILE_MODEL kernel, the rule's pick
and torch._scaled_mm at a set of points in one process, and refit the model to the timings.

`default_config` picks, from 1024 tokens, the kernel of cutlass_kernels/configs/sm90.py's PREFILL_TILE_MODEL with the
least predicted time waves x (a x K + b) + c. This script measures what the model predicts:

  python perf/fp8_prefill_model.py --points sweep --fit          # the sweep's 53 prefill points; fit a, b, c per
                                                                 # kernel and print PREFILL_TILE_MODEL's rows
  python perf/fp8_prefill_model.py --points models               # held-out check: the layers of MODEL_PRESETS'
                                                                 # larger models (not in the sweep) at 1024-16384
  python perf/fp8_prefill_model.py --refit results/fp8_prefill_model.json   # fit from saved timings, no GPU

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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HELD_OUT_MODELS = ("llama3-405b", "mistral-large-2", "gemma-3-27b", "gpt-oss-120b")


def points(which: str, max_flop: float):
    from scalemm.cutlass_kernels.configs import model_linear_shapes, sweep_points
    pts = []
    if which in ("sweep", "both"):
        pts += [p for p in sweep_points(max_flop) if p[1] >= 1024]
    if which in ("models", "both"):
        pts += [(f"{m}.{layer}", M, N, K) for m in HELD_OUT_MODELS for layer, (N, K) in model_linear_shapes(m).items()
                for M in (1024, 2048, 4096, 8192, 16384) if 2 * M * N * K <= max_flop]
    return pts


def fit(rows, num_sms=132):
    """(a, b, c) per kernel label: least squares of waves x (a K + b) + c against each kernel's own times,
    in relative error."""
    import torch
    from scalemm.cutlass_kernels.configs import sm90
    out = {}
    for cfg, *_ in sm90.PREFILL_TILE_MODEL:
        sel = [r for r in rows if r["us"].get(cfg.label())]
        w = [sm90.tile_waves(cfg, r["M"], r["N"], num_sms) for r in sel]
        X = torch.tensor([[wi * r["K"], wi, 1.0] for wi, r in zip(w, sel)], dtype=torch.float64)
        y = torch.tensor([r["us"][cfg.label()] for r in sel], dtype=torch.float64)
        coef = torch.linalg.lstsq(X / y[:, None], torch.ones_like(y)[:, None]).solution[:, 0]
        err = X @ coef / y - 1
        out[cfg.label()] = (cfg, *map(float, coef))
        print(f"  {cfg.label():<26} a={coef[0]:.4e} b={coef[1]:.3f} c={coef[2]:.3f}  rms error "
              f"{float(err.square().mean().sqrt()):.3f}, max {float(err.abs().max()):.3f} ({len(sel)} points)")
    return out


def summarize(rows, model=None, num_sms=132):
    from scalemm.cutlass_kernels.configs import sm90
    labels = [cfg.label() for cfg, *_ in sm90.PREFILL_TILE_MODEL]

    def gm(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))
    ratios = {"rule (scalemm)": [r["us"]["torch_rowwise"] / r["us"]["scalemm"] for r in rows],
              "best kernel of the model": [r["us"]["torch_rowwise"] / min(r["us"][k] for k in labels if r["us"].get(k))
                                           for r in rows],
              "torch per-tensor": [r["us"]["torch_rowwise"] / r["us"]["torch_tensorwise"] for r in rows]}
    if model:
        def pick(r):
            return min(model.values(), key=lambda e: sm90.predicted_prefill_us(*e, r["M"], r["N"], r["K"], num_sms))
        ratios["refitted rule"] = [r["us"]["torch_rowwise"] / r["us"][pick(r)[0].label()] for r in rows]
    print(f"\n{len(rows)} points, geomean (min) of torch._scaled_mm rowwise time / time:")
    out = {}
    for name, xs in ratios.items():
        out[name] = {"geomean": gm(xs), "min": min(xs)}
        print(f"  {name:<26} {gm(xs):.3f} ({min(xs):.3f})")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="sweep", choices=("sweep", "models", "both"))
    p.add_argument("--max-tflop", type=float, default=4.0)
    p.add_argument("--fit", action="store_true", help="fit a, b, c per kernel to this run's times")
    p.add_argument("--refit", default=None, help="a saved fp8_prefill_model.json: fit and summarize it, no GPU")
    p.add_argument("--out", default="results")
    args = p.parse_args()
    if args.refit:
        rows = json.load(open(args.refit))["rows"]
        summarize(rows, fit(rows))
        return
    import torch
    from gemm_sweep import time_point
    from scalemm.cutlass_kernels.configs import default_config, sm90
    kernels = [cfg for cfg, *_ in sm90.PREFILL_TILE_MODEL]
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for label, M, N, K in points(args.points, args.max_tflop * 1e12):
        us = time_point(M, N, K, True, configs=kernels, with_bf16=False)
        pick = default_config(M, N, K).label()
        rows.append({"layer": label, "M": M, "N": N, "K": K, "pick": pick, "us": us})
        base = us["torch_rowwise"]
        print(f"{label:<32}{M:>6}{N:>7}{K:>6}  rule {pick:<24}{base / us['scalemm']:.3f}  "
              + " ".join(f"{k}={base / us[k]:.3f}" for k in (c.label() for c in kernels) if us.get(k)), flush=True)
    summary = summarize(rows, fit(rows) if args.fit else None)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fp8_prefill_model.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "points": args.points, "rows": rows, "summary": summary},
              open(path, "w"), indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
