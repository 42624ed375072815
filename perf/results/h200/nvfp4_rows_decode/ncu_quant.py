"""One per-token NVFP4 quantization of M x K (bf16) for ncu: `python3 ncu_quant.py M K`; the build on PYTHONPATH
decides whether exact rows are written (quantize.exact_rows_wanted)."""
import sys

import torch

import scalemm
from scalemm.quantize import exact_rows_wanted

M, K = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
for _ in range(3):
    q = scalemm.quantize_nvfp4(x, scaling="token")
torch.cuda.synchronize()
print(f"M={M} K={K} exact rows written: {exact_rows_wanted(M)}")
