import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, importlib
from trees import TREES, KERNELS, PAIRS
from scalemm.jit import build_many
g = importlib.import_module("scalemm.gemm")
specs = [g.gemm_kernel_spec(KERNELS[k], fast_accum=True, out_dtype=torch.bfloat16, epilogue=TREES[t]("bf16"))[0] for k, t in PAIRS]
build_many(specs, jobs=2, progress=True); print("done")
