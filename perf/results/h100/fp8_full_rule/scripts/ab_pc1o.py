"""A/B of the 128x128 full-accumulation kernel: two overlapped chunks of 64 columns (pc2o, the rule's) against one
chunk of 128 with two whole-tile temporaries alternating over pairs of k-tiles (pc1o), each with and without the
bias leaf, at the sweep's prefill points and the held-out models' (perf/fp8_prefill_model.py's points), one process,
with the rule and torch._scaled_mm in full accumulation. Also checks that both give the same bf16 output.
Run from the repository root: python3 perf/results/h100/fp8_full_rule/scripts/ab_pc1o.py OUT"""
import json, os, sys
sys.path.insert(0, "perf")
import torch, scalemm
from scalemm import epilogues as epi
from scalemm.cutlass_kernels.configs.sm90 import GemmConfig
from fp8_prefill_model import points, gm, held_out, full_pick
from gemm_sweep import time_point, operands
from scalemm.cutlass_kernels.configs import sm90
pc2o = GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True)
pc1o = GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=1, promotion_overlap=True)
nobias = (("_nobias", epi.scaled(torch.bfloat16, bias=False)),)
rows = []
for label, M, N, K in points("both", 4e12):
    us = time_point(M, N, K, False, configs=[pc2o, pc1o], with_bf16=False, epilogues=nobias)
    a, bs, sa, sb = operands(M, N, K, 1)
    same = torch.equal(scalemm.gemm(a, bs[0], sa, sb, config=pc2o), scalemm.gemm(a, bs[0], sa, sb, config=pc1o))
    rows.append({"layer": label, "M": M, "N": N, "K": K, "us": us, "equal": same})
    print(f"{label:<30}{M:>6}{N:>7}{K:>6}  pc1o over pc2o {us[pc2o.label()] / us[pc1o.label()]:.3f} "
          f"(no bias leaf {us[pc2o.label() + '_nobias'] / us[pc1o.label() + '_nobias']:.3f})"
          f"{'' if same else '  NOT EQUAL'}", flush=True)
for v in ("", "_nobias"):
    xs = [r["us"][pc2o.label() + v] / r["us"][pc1o.label() + v] for r in rows]
    print(f"pc1o over pc2o{v}: {gm(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}) over {len(xs)} points")
# the rule with pc1o in place of pc2o where it picks the 128-wide kernel (with the leaf, as bias_leaf plans for 128)
for name, sel in (("sweep", [r for r in rows if not held_out(r)]), ("held-out", [r for r in rows if held_out(r)]),
                  ("all", rows)):
    now = [r["us"]["torch_rowwise"] / r["us"]["scalemm"] for r in sel]
    sub = [r["us"]["torch_rowwise"] / (r["us"][pc1o.label()] if r["us"]["scalemm"] and full_pick(r, sm90.TILE_COST_FULL).startswith("t128x128x128")
                                       else r["us"]["scalemm"]) for r in sel]
    picks = sum(full_pick(r, sm90.TILE_COST_FULL).startswith("t128x128x128") for r in sel)
    print(f"{name} ({len(sel)} points, {picks} pick 128x128): rule {gm(now):.3f} (min {min(now):.3f}), with pc1o "
          f"{gm(sub):.3f} (min {min(sub):.3f})")
print("all outputs equal" if all(r["equal"] for r in rows) else "SOME OUTPUTS DIFFER")
os.makedirs(sys.argv[1], exist_ok=True)
json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, open(os.path.join(sys.argv[1], "ab_pc1o.json"), "w"), indent=1)
