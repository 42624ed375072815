"""One FP8 GEMM (scalemm's pick) inside NVTX "measure", for ncu beside perf/profile_nvfp4.py:
  ncu --clock-control none --nvtx --nvtx-include "measure/" --section ... python3 fp8_measure.py M N K"""
import sys
import torch
import scalemm
M, N, K = map(int, sys.argv[1:4])
a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
sa, sb = torch.rand(M, device="cuda") + 0.5, torch.rand(N, device="cuda") + 0.5
run = lambda: scalemm.gemm(a, b, sa, sb, out_dtype=torch.bfloat16, fast_accum=True)
for _ in range(3):
    run()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("measure")
run()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print(f"fp8: M={M} N={N} K={K} done")
