"""Cluster shapes for the FP8 prefill kernels: the prefill model's tiles in clusters of 2x2 and 1x2 against the 2x1
clusters they use, in both accumulation modes, at the sweep's prefill points (or the held-out models'), one process.

A 2x1 cluster multicasts the weight tile (B) to the two CTAs along M; 2x2 multicasts both operands, which halves each
CTA's A and B loads from L2 again. Each other-cluster kernel is first checked bit for bit against its 2x1 twin (same
tile, same k order) at four shapes, then every kernel is timed with perf/gemm_sweep.py's time_point.

  python perf/fp8_cluster_shapes.py                     # the sweep's 53 prefill points, fast and full accumulation
  python perf/fp8_cluster_shapes.py --points models --modes fast

Kernels (16) compile on first use: the JIT cache keeps them. Writes fp8_cluster_shapes.json (per point and mode: us
of every kernel, the heuristic's pick "scalemm" and the torch anchors).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CLUSTERS = ((2, 2), (1, 2))


def kernels():
    """{mode: (2x1 kernels, other-cluster kernels)}: fast accumulation, the prefill model's tiles (ping-pong
    128 x 128 / 192 in 1x2 and 2x2, cooperative 128 x 256 in 2x2); full accumulation, the chunked cooperative
    128 x (128, 192, 256) of the full-accumulation rule in 2x2."""
    from scalemm.cutlass_kernels.configs import GemmConfig
    from scalemm.cutlass_kernels.configs.sm90 import PREFILL_TILE_MODEL, full_accumulation
    fast = [c for c, *_ in PREFILL_TILE_MODEL]
    fast_new = [replace(c, cluster_m=m, cluster_n=n) for m, n in CLUSTERS for c in fast
                if c.schedule == "pingpong" or ((m, n) == (2, 2) and c.tile_n == 256)]
    full = [full_accumulation(GemmConfig(128, n, 128, 2, 1, "cooperative")) for n in (128, 192, 256)]
    return {"fast": (fast, fast_new), "full": (full, [replace(c, cluster_n=2) for c in full])}


def twin(config, base):
    return next(c for c in base if (c.tile_n, c.schedule, c.promotion_chunks)
                == (config.tile_n, config.schedule, config.promotion_chunks))


def check(modes):
    import torch
    import scalemm
    from gemm_sweep import operands
    bad = 0
    for M, N, K in ((1100, 4096, 4096), (2049, 3088, 1040), (4096, 576, 7168), (1024, 5120, 2048)):
        a, bs, sa, sb = operands(M, N, K, 1)
        for mode in modes:
            base, new = kernels()[mode]
            for c in new:
                fa = mode == "fast"
                y0 = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fa, config=twin(c, base))
                y1 = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fa, config=c)
                if not torch.equal(y0, y1):
                    bad += 1
                    print(f"MISMATCH {c.label()} against {twin(c, base).label()} at {M}x{N}x{K}")
    print("bit for bit against the 2x1 twins:", "all equal" if not bad else f"{bad} mismatches", flush=True)
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="sweep", choices=("sweep", "models", "both"))
    p.add_argument("--modes", default="fast,full")
    p.add_argument("--max-tflop", type=float, default=4.0)
    p.add_argument("--out", default="results")
    args = p.parse_args()
    import torch
    from fp8_prefill_model import points
    from gemm_sweep import time_point
    modes = args.modes.split(",")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = check(modes)
    rows = []
    for label, M, N, K in points(args.points, args.max_tflop * 1e12):
        row = {"layer": label, "M": M, "N": N, "K": K}
        for mode in modes:
            cfgs = [c for cs in kernels()[mode] for c in cs]
            us = row[mode] = time_point(M, N, K, mode == "fast", configs=cfgs, with_bf16=False)
            base = us["torch_rowwise"]
            print(f"{mode} {label:<30}{M:>6}{N:>7}{K:>6} rule={base / us['scalemm']:.3f} "
                  + " ".join(f"{c.label()}={base / us[c.label()]:.3f}" for c in cfgs if c.label() in us), flush=True)
        rows.append(row)

    def gm(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))
    summary = {}
    for mode in modes:
        base, new = kernels()[mode]
        print(f"\n{mode} accumulation, {len(rows)} points, geomean (min) of torch._scaled_mm rowwise time / time:")
        ratio = {k: [r[mode]["torch_rowwise"] / r[mode][k] for r in rows if k in r[mode]]
                 for k in ["scalemm", "torch_tensorwise"] + [c.label() for c in base + new]}
        for name, labels in (("best 2x1 kernel per point", [c.label() for c in base]),
                             ("best kernel per point", [c.label() for c in base + new])):
            ratio[name] = [max(r[mode]["torch_rowwise"] / r[mode][k] for k in labels if k in r[mode]) for r in rows]
        summary[mode] = {k: {"geomean": gm(v), "min": min(v)} for k, v in ratio.items() if v}
        for k, s in summary[mode].items():
            print(f"  {k:<34} {s['geomean']:.3f} ({s['min']:.3f})")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fp8_cluster_shapes.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "points": args.points, "bit_mismatches": bad, "rows": rows,
               "summary": summary}, open(path, "w"), indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
