import json, math, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, "perf")
import torch, scalemm, importlib
from scalemm.cutlass_kernels.configs import sweep_points
from scalemm.timing import bench, l2_copies
from gemm_sweep import operands
import ab2
g = importlib.import_module("scalemm.gemm")
out_dir = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
pts = [p for p in sweep_points() if p[1] >= 1024]
dev = torch.device("cuda", 0)
rows = []
t0 = time.time()
for name, M, N, K in pts:
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2 = sa[:, None], sb[None, :]
    def new(cfg, fast, b=None):
        return lambda i: scalemm.gemm(a, bs[i], sa, sb, bias=b, out=o, fast_accum=fast, config=cfg)
    def old(cfg, fast, b=None):
        c, leaves, _, ws = g._plan(M, N, K, fast, torch.bfloat16, None, cfg, dev, g.bias_leaf(b is not None, fast))
        launch = g._launcher(ab2.old_spec(cfg, fast, b is not None))
        inputs = {"scale_a": sa, "scale_b": sb, "bias": b}
        return lambda i: g.launch_planned(c, leaves, launch, ws, a, bs[i], o, inputs, M, N, K, dev)
    fns = {"torch_fast": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=True),
           "torch_full": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16, use_fast_accum=False)}
    eq = {}
    cases = dict(ab2.CONFIGS)
    for k, (cfg, fast) in cases.items():
        fns[k] = new(cfg, fast); fns[k + "_old"] = old(cfg, fast)
        fns[k](0); x = o.clone(); fns[k + "_old"](0); eq[k] = bool(torch.equal(x, o))
    cb = ab2.C(256)
    fns["c256bias"] = new(cb, True, bias); fns["c256bias_old"] = old(cb, True, bias)
    fns["c256bias"](0); x = o.clone(); fns["c256bias_old"](0); eq["c256bias"] = bool(torch.equal(x, o))
    us = bench(fns, copies, rounds=rounds)
    rows.append({"name": name, "M": M, "N": N, "K": K, "us": us, "equal": eq})
    bad = [k for k, v in eq.items() if not v]
    print(f"{name}@{M} {N}x{K}: " + " ".join(f"{k}={v:.1f}" for k, v in us.items()) + (f" NOT EQUAL {bad}" if bad else ""), flush=True)
os.makedirs(out_dir, exist_ok=True)
json.dump(rows, open(os.path.join(out_dir, "register_columns_ab.json"), "w"), indent=1)
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for k in [*ab2.CONFIGS, "c256bias"]:
    r = [row["us"][k + "_old"] / row["us"][k] for row in rows]
    s = [row["us"][k + "_old"] / row["us"][k] for row in rows if row["K"] <= 2048]
    print(f"{k:<9} registers over CUTLASS's row broadcast: geomean {gm(r):.3f} (K <= 2048: {gm(s):.3f}) min {min(r):.3f} max {max(r):.3f}")
print(f"{time.time() - t0:.0f} s")
