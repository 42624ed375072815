import json, math, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, "perf")
import torch, scalemm, importlib
from scalemm.cutlass_kernels.configs import default_config, sweep_points
from scalemm.timing import bench, l2_copies
from gemm_sweep import operands
import ab
g = importlib.import_module("scalemm.gemm")
out_dir = sys.argv[1]
pts = [p for p in sweep_points() if p[1] >= 1024]
dev = torch.device("cuda", 0)
rows = []
t0 = time.time()
for name, M, N, K in pts:
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2 = sa[:, None], sb[None, :]
    inputs = {"scale_a": sa, "scale_b": sb}
    def new(cfg, fast):
        return lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=fast, config=cfg)
    def old(cfg, fast):
        c, leaves, _, ws = g._plan(M, N, K, fast, torch.bfloat16, None, cfg, dev)
        launch = g._launcher(ab.old_spec(cfg, fast))
        return lambda i: g.launch_planned(c, leaves, launch, ws, a, bs[i], o, inputs, M, N, K, dev)
    fns = {"torch_fast": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=True),
           "torch_full": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=False),
           "heur_fast": new(default_config(M, N, K, fast_accum=True), True),
           "heur_full": new(default_config(M, N, K, fast_accum=False), False)}
    eq = {}
    for k, (cfg, fast) in ab.CONFIGS.items():
        fns[k] = new(cfg, fast)
        fns[k + "_old"] = old(cfg, fast)
        fns[k](0); x = o.clone(); fns[k + "_old"](0); eq[k] = bool(torch.equal(x, o))
    us = bench(fns, copies)
    rows.append({"name": name, "M": M, "N": N, "K": K, "us": us, "equal": eq})
    bad = [k for k, v in eq.items() if not v]
    print(f"{name}@{M} {N}x{K}: " + " ".join(f"{k}={v:.1f}" for k, v in us.items()) + (f" NOT EQUAL {bad}" if bad else ""), flush=True)
os.makedirs(out_dir, exist_ok=True)
json.dump(rows, open(os.path.join(out_dir, "prefetched_ab.json"), "w"), indent=1)
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for anchor, keys in (("torch_fast", ["heur_fast", "c128", "c128_old", "c256", "c256_old", "p128", "p128_old"]),
                     ("torch_full", ["heur_full", "f192o", "f192o_old", "f256", "f256_old"])):
    for k in keys:
        r = [row["us"][anchor] / row["us"][k] for row in rows]
        print(f"{k:<10} vs {anchor}: geomean {gm(r):.3f} min {min(r):.3f}")
for k in ab.CONFIGS:
    r = [row["us"][k + "_old"] / row["us"][k] for row in rows]
    print(f"{k:<6} prefetched over CUTLASS broadcasts: geomean {gm(r):.3f} min {min(r):.3f} max {max(r):.3f}")
print(f"{time.time() - t0:.0f} s")
