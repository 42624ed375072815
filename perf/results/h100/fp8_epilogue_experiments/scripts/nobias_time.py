"""The heuristic's kernels at the sweep's 53 prefill points, both accumulation modes: the preset without its bias
leaf (what scalemm.gemm now runs without a bias) against the preset with it and a null bias (what it ran before),
one process, with torch._scaled_mm rowwise."""
import json, math, os, sys, time
sys.path.insert(0, "perf")
import torch, scalemm
from scalemm import epilogues as epi
from scalemm.cutlass_kernels.configs import default_config, sweep_points
from scalemm.timing import bench, l2_copies
from gemm_sweep import operands
out_dir = sys.argv[1]
pts = [p for p in sweep_points() if p[1] >= 1024]
with_bias_leaf = epi.scaled(torch.bfloat16, bias=True)
rows = []
t0 = time.time()
for name, M, N, K in pts:
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2 = sa[:, None], sb[None, :]
    fns = {}
    eq = {}
    for mode, fast in (("fast", True), ("full", False)):
        cfg = default_config(M, N, K, fast_accum=fast)
        fns[f"torch_{mode}"] = (lambda f: lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=f))(fast)
        fns[f"heur_{mode}"] = (lambda c, f: lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=f, config=c))(cfg, fast)
        fns[f"heur_{mode}_biasleaf"] = (lambda c, f: lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=f, config=c, epilogue=with_bias_leaf))(cfg, fast)
        x = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fast, config=cfg)
        y = scalemm.gemm(a, bs[0], sa, sb, fast_accum=fast, config=cfg, epilogue=with_bias_leaf)
        eq[mode] = bool(torch.equal(x, y))
    us = bench(fns, copies, rounds=int(sys.argv[2]) if len(sys.argv) > 2 else 9)
    rows.append({"name": name, "M": M, "N": N, "K": K, "us": us, "equal": eq,
                 "configs": {m: default_config(M, N, K, fast_accum=f).label() for m, f in (("fast", True), ("full", False))}})
    print(f"{name}@{M} {N}x{K}: " + " ".join(f"{k}={v:.1f}" for k, v in us.items()) + ("" if all(eq.values()) else f" NOT EQUAL {eq}"), flush=True)
os.makedirs(out_dir, exist_ok=True)
json.dump(rows, open(os.path.join(out_dir, "nobias_ab.json"), "w"), indent=1)
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for mode in ("fast", "full"):
    for k in (f"heur_{mode}", f"heur_{mode}_biasleaf"):
        r = [row["us"][f"torch_{mode}"] / row["us"][k] for row in rows]
        print(f"{k:<22} vs torch_{mode}: geomean {gm(r):.3f} min {min(r):.3f}")
    r = [row["us"][f"heur_{mode}_biasleaf"] / row["us"][f"heur_{mode}"] for row in rows]
    coop = [row["us"][f"heur_{mode}_biasleaf"] / row["us"][f"heur_{mode}"] for row in rows if "coop" in row["configs"][mode]]
    print(f"{mode}: no bias leaf over bias leaf: geomean {gm(r):.3f} min {min(r):.3f} max {max(r):.3f}; cooperative picks ({len(coop)}) {gm(coop):.3f}")
print(f"{time.time() - t0:.0f} s")
