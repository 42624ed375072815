import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scalemm import epilogues as epi
from scalemm.cutlass_kernels import GemmConfig as G
TREES = {
    "acc": lambda od: epi.Acc(),
    "rowonly": lambda od: epi.RowVector("scale_a", "f32", broadcast=True) * epi.Acc(),
    "colonly": lambda od: epi.ColVector("scale_b", "f32", broadcast=True) * epi.Acc(),
    "nobias": lambda od: epi.scaled(od, bias=False),
}
KERNELS = {"c128": G(128, 128, 128, 2, 1, "cooperative"), "c256": G(128, 256, 128, 2, 1, "cooperative"),
           "p128": G(128, 128, 128, 2, 1, "pingpong")}
PAIRS = [(k, t) for k in ("c128", "c256") for t in TREES] + [("p128", "acc")]

def specs():
    import torch, importlib
    g = importlib.import_module("scalemm.gemm")
    out = [g.gemm_kernel_spec(KERNELS[k], fast_accum=True, out_dtype=torch.bfloat16, epilogue=TREES[t]("bf16"))[0] for k, t in PAIRS]
    out += [g.gemm_kernel_spec(c, fast_accum=True, out_dtype=torch.bfloat16, epilogue=g._preset(None, "bf16"))[0] for c in KERNELS.values()]
    return out
