"""Same-build A/B: the preset as scalemm.gemm compiles it (per-column leaves in registers) against the same source
with CUTLASS's Sm90RowBroadcast."""
import sys, dataclasses, importlib
import torch
from scalemm import epilogues as epi
from scalemm.cutlass_kernels import GemmConfig as G
g = importlib.import_module("scalemm.gemm")
C = lambda n, **k: G(128, n, 128, 2, 1, "cooperative", **k)
CONFIGS = {"c128": (C(128), True), "c256": (C(256), True), "c192": (C(192), True), "p128": (G(128, 128, 128, 2, 1, "pingpong"), True),
           "f192o": (C(192, promotion_chunks=2, promotion_overlap=True), False), "f256": (C(256, promotion_chunks=2), False),
           "f128o": (C(128, promotion_chunks=2, promotion_overlap=True), False)}
def tree(fa, bias=False):
    return epi.scaled(torch.bfloat16, bias=g.bias_leaf(bias, fa))
def new_spec(cfg, fa, bias=False):
    return g.gemm_kernel_spec(cfg, fast_accum=fa, out_dtype=torch.bfloat16, epilogue=tree(fa, bias))[0]
def old_spec(cfg, fa, bias=False):
    s = new_spec(cfg, fa, bias)
    params = dict(s.params)
    t = params["EVT_TYPE"].replace("scalemm::sm90::RegisterRowBroadcast<TileShape,", "cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape,")
    assert "RegisterRowBroadcast" not in t
    params["EVT_TYPE"] = t
    return dataclasses.replace(s, name=s.name + "_cutlassrow", params=tuple(params.items()))
def specs():
    out = []
    for cfg, fa in CONFIGS.values():
        out += [new_spec(cfg, fa), old_spec(cfg, fa)]
    out += [new_spec(C(256), True, True), old_spec(C(256), True, True)]  # with a bias
    return out
if __name__ == "__main__":
    from scalemm.jit import build_many
    res = build_many(specs(), jobs=int(sys.argv[1]) if len(sys.argv) > 1 else 2, progress=False)
    print("built", len(res), "failed", [s.name for s, e in res if e])
