import json, math, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, "perf")
import torch, scalemm
from scalemm.cutlass_kernels.configs import sweep_points
from scalemm.timing import bench, l2_copies
from gemm_sweep import operands
from trees import TREES, KERNELS, PAIRS
out_dir = sys.argv[1]
pts = [p for p in sweep_points() if p[1] >= 1024]
pts = [p for p in pts if p[1] in (4096, 16384)][::2] + [("square", 8192, 8192, 8192)]
rows = []
for name, M, N, K in pts:
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    mm = lambda cfg, tree: (lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=True, config=cfg, epilogue=tree))
    fns = {"torch": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)}
    fns.update({f"{k}_preset": mm(KERNELS[k], None) for k in KERNELS})
    fns.update({f"{k}_{t}": mm(KERNELS[k], TREES[t]("bf16")) for k, t in PAIRS})
    us = bench(fns, copies)
    rows.append({"name": name, "M": M, "N": N, "K": K, "us": us})
    print(f"{name}@{M} {N}x{K}: " + " ".join(f"{k}={v:.1f}" for k, v in us.items()), flush=True)
os.makedirs(out_dir, exist_ok=True)
json.dump(rows, open(os.path.join(out_dir, "trees.json"), "w"), indent=1)
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
for k, t in PAIRS:
    r = [row["us"][f"{k}_preset"] / row["us"][f"{k}_{t}"] for row in rows]
    print(f"{k}_{t:<8} speed-up over {k}_preset: geomean {gm(r):.3f} min {min(r):.3f} max {max(r):.3f}")
