"""Experiment (run 3): which part of the overlapped launch slows 8192^2 in back-to-back calls. Needs the
experiment build (variants.patch: SCALEMM_EXP_TRIGGER=0 drops the pass's early trigger, SCALEMM_EXP_PREFETCH=0 makes
the loop wait before its first weight loads). gemm chain (pre-quantized activations), bit-identity checked."""
import os, sys
from dataclasses import replace
import torch
import scalemm
import scalemm.gemm_nvfp4 as g
from scalemm.cutlass_kernels.configs import skinny_config_for_tokens
from scalemm.timing import bench, l2_copies

VARIANTS = {"plain": (False, "1", "1"), "trig1_pref1": (True, "1", "1"), "trig1_pref0": (True, "1", "0"),
            "trig0_pref1": (True, "0", "1"), "trig0_pref0": (True, "0", "0")}
print(torch.cuda.get_device_name())
for shape in sys.argv[1].split(","):
    N, K = map(int, shape.split("x"))
    for M in map(int, sys.argv[2].split(",")):
        cfg = replace(skinny_config_for_tokens(M), mainloop="wgmma")
        copies = l2_copies(N * K * 9 // 16, most=64)
        w = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", dtype=torch.bfloat16), scaling="token") for _ in range(copies)]
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        a = scalemm.quantize_nvfp4(x, scaling="token")
        for t in w:
            scalemm.gemm(x, t, config=cfg)
        outs = {v: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for v in VARIANTS}
        def make(v):
            ov, trig, pref = VARIANTS[v]
            def fn(i):
                g.OVERLAP_DECODE_PASS = ov
                os.environ["SCALEMM_EXP_TRIGGER"], os.environ["SCALEMM_EXP_PREFETCH"] = trig, pref
                scalemm.gemm(a, w[i], out=outs[v], config=cfg)
            return fn
        fns = {v: make(v) for v in VARIANTS}
        us = bench(fns, copies)
        for v in VARIANTS: fns[v](0)
        same = all(torch.equal(outs[v], outs["plain"]) for v in VARIANTS)
        print(f"{shape:>11} M={M:3d} " + " ".join(f"{v} {us[v]:6.2f}" for v in VARIANTS) + f" same={same}", flush=True)
