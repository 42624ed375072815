# The chunk-head kernel compiled for 5 resident blocks per SM (minb_experiment.diff, SCALEMM_EXP_MINB=5) against the kept one, delayed scaling, both copies, 65536 rows over 128 experts; CUDA graphs. Not part of scalemm.
import os, sys, torch
sys.path.insert(0, "perf")
from grouped_sweep import routed_sizes
import scalemm
from scalemm.timing import bench
sizes = routed_sizes(8192, 128, 8, seed=0)
offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda(); T, E = int(sizes.sum()), 128
def knob(fn, v):
    def f(i):
        if v: os.environ["SCALEMM_EXP_MINB"] = v
        try: return fn(i)
        finally: os.environ.pop("SCALEMM_EXP_MINB", None)
    return f
bits = lambda t: t.reshape(-1).view(torch.uint8)
for K in (2048, 768, 1536):
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16); x[3, 5] = float("nan")
    amax, out = torch.rand(E, device="cuda") * 8, torch.empty(E, device="cuda")
    fn = lambda i: scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)
    a, b = knob(fn, None)(0), knob(fn, "5")(0)
    same = all(torch.equal(bits(p), bits(q)) for p, q in ((a.data, b.data), (a.columnwise.data, b.columnwise.data), (a.scale_inv, b.scale_inv)))
    t = bench({"minb1": knob(fn, None), "minb5": knob(fn, "5")}, 1)
    print(f"K={K}: minb1 {t['minb1']:.1f} us  minb5 {t['minb5']:.1f} us  {t['minb1']/t['minb5']:.3f}x  {'bit-identical' if same else 'DIFFERS'}", flush=True)
