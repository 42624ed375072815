"""Same-build A/B: each config's preset epilogue with the prefetched vector leaves (what scalemm.gemm runs now)
and with CUTLASS's broadcasts (the rendered source with the node names swapped back)."""
import os, sys, dataclasses, importlib
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from scalemm.cutlass_kernels import GemmConfig as G
g = importlib.import_module("scalemm.gemm")
C = lambda n, **k: G(128, n, 128, 2, 1, "cooperative", **k)
CONFIGS = {"c128": (C(128), True), "c256": (C(256), True), "p128": (G(128, 128, 128, 2, 1, "pingpong"), True),
           "f192o": (C(192, promotion_chunks=2, promotion_overlap=True), False), "f256": (C(256, promotion_chunks=2), False)}
def new_spec(cfg, fa):
    return g.gemm_kernel_spec(cfg, fast_accum=fa, out_dtype=torch.bfloat16, epilogue=g._preset(None, "bf16"))[0]
def old_spec(cfg, fa):
    s = new_spec(cfg, fa)
    params = dict(s.params)
    t = params["EVT_TYPE"]
    t = t.replace("scalemm::sm90::PrefetchedBroadcast<true, TileShape,", "cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape,")
    t = t.replace("scalemm::sm90::PrefetchedBroadcast<false, TileShape,", "cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape,")
    assert "Prefetched" not in t
    params["EVT_TYPE"] = t
    return dataclasses.replace(s, name=s.name + "_cutlassbcast", params=tuple(params.items()) if isinstance(s.params, tuple) else params)
def specs():
    out = []
    for cfg, fa in CONFIGS.values():
        out += [new_spec(cfg, fa), old_spec(cfg, fa)]
    return out
if __name__ == "__main__":
    from scalemm.jit import build_many
    build_many(specs(), jobs=2, progress=True); print("done")

EXTRA = {"c192": (C(192), True), "p192": (G(128, 192, 128, 2, 1, "pingpong"), True),
         "f128o": (C(128, promotion_chunks=2, promotion_overlap=True), False)}
def all_specs():
    return specs() + [new_spec(c, fa) for c, fa in EXTRA.values()]
