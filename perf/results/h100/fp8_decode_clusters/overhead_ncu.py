"""Where the FP8 decode GEMM's last microsecond goes on small layers: kernel time (ncu gpu__time_duration) of
scalemm.gemm's pick and of cuBLASLt's per-tensor and rowwise kernels (torch._scaled_mm), one launch each, caches
flushed. Run from the repository root under
  ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,\
launch__registers_per_thread,launch__shared_mem_per_block_dynamic,sm__cycles_active.avg \
      python3 perf/results/h100/fp8_decode_clusters/overhead_ncu.py"""
import torch
import scalemm
from scalemm.cutlass_kernels.configs import default_config
for M, N, K in ((128, 5120, 2048), (128, 4096, 4096), (64, 6144, 4096), (1, 4096, 4096), (128, 7168, 2048)):
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M, device="cuda") + 0.5, torch.rand(N, device="cuda") + 0.5
    one = torch.ones((), device="cuda")
    print(f"M={M} N={N} K={K} pick {default_config(M, N, K).key()}", flush=True)
    torch.cuda.nvtx.range_push(f"scalemm {M}x{N}x{K}")
    scalemm.gemm(a, b, sa, sb, out_dtype=torch.bfloat16, fast_accum=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)
    torch._scaled_mm(a, b.T, scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)
    torch.cuda.synchronize()
