"""Epilogue stages A/B: every variant in devtmp/variants.py at the sweep's prefill points, with torch rowwise
in both modes and the heuristic's picks, one process, interleaved (scalemm.timing.bench)."""
import json, math, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, "perf")
import torch, scalemm
from scalemm.cutlass_kernels.configs import default_config, sweep_points
from scalemm.timing import bench, l2_copies
from gemm_sweep import operands
from variants import FAST, FULL
out_dir = sys.argv[1]
which = sys.argv[2] if len(sys.argv) > 2 else "all"
pts = [p for p in sweep_points() if p[1] >= 1024]
if which != "all":
    pts = [p for p in pts if f"{p[0]}@{p[1]}" in which.split(",")]
rows = []
t0 = time.time()
for name, M, N, K in pts:
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2 = sa[:, None], sb[None, :]
    mm = lambda cfg, fast: (lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=fast, config=cfg))
    fns = {"torch_fast": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=True),
           "torch_full": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=False),
           "heur_fast": mm(default_config(M, N, K, fast_accum=True), True),
           "heur_full": mm(default_config(M, N, K, fast_accum=False), False)}
    fns.update({k: mm(c, True) for k, c in FAST.items()})
    fns.update({k: mm(c, False) for k, c in FULL.items()})
    # bit-identity of every epilogue-stage variant with its CUTLASS-default twin
    eq = {}
    for d, fast in ((FAST, True), (FULL, False)):
        for k, c in d.items():
            if "_e" in k:
                base = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fast, config=d[k.split("_e")[0]])
                y = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fast, config=c)
                eq[k] = bool(torch.equal(base, y))
    us = bench(fns, copies)
    rows.append({"name": name, "M": M, "N": N, "K": K, "us": us, "equal": eq})
    bad = [k for k, v in eq.items() if not v]
    print(f"{name}@{M} {N}x{K}: " + " ".join(f"{k}={v:.1f}" for k, v in us.items()) + (f" NOT EQUAL {bad}" if bad else ""), flush=True)
os.makedirs(out_dir, exist_ok=True)
json.dump(rows, open(os.path.join(out_dir, "epi_stages.json"), "w"), indent=1)
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for anchor, keys in (("torch_fast", ["heur_fast", *FAST]), ("torch_full", ["heur_full", *FULL])):
    for k in keys:
        r = [row["us"][anchor] / row["us"][k] for row in rows]
        print(f"{k:<10} vs {anchor}: geomean {gm(r):.3f} min {min(r):.3f}")
for k in [*FAST, *FULL]:
    if "_e" in k:
        b = k.split("_e")[0]
        r = [row["us"][b] / row["us"][k] for row in rows]
        print(f"{k:<10} speed-up over {b}: geomean {gm(r):.3f} min {min(r):.3f} max {max(r):.3f}")
print(f"{time.time() - t0:.0f} s")
