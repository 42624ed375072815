"""DRAM bytes read by the swap-AB 64x64 FP8 kernel at 65 and 128 tokens, in clusters of 1 and of 2 along the
tokens (TMA multicast of the weight tile to both token tiles' CTAs). Run under ncu from the repository root:
  ncu --clock-control none --kernel-name regex:device_kernel \
      --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct \
      python3 perf/results/h100/fp8_decode_clusters/imbalance_ncu.py
Each call is one kernel launch; ncu flushes the caches before each (--cache-control all, its default)."""
import sys
sys.path.insert(0, "perf")
import torch
import scalemm
from fp8_prefill_model import config_of_key
N, K = 18432, 16384  # Llama-3-405B qkv: 302 MB of FP8 weights
b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
sb = torch.rand(N, device="cuda") + 0.5
for key in ("t64x64x128_c1x1_ping_swap", "t64x64x128_c1x2_ping_swap"):
    cfg = config_of_key(key, swap=True)
    for M in (65, 128):
        a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(M, device="cuda") + 0.5
        scalemm.gemm(a, b, sa, sb, out_dtype=torch.bfloat16, config=cfg)
        torch.cuda.synchronize()
        print(f"{key} M={M} launched", flush=True)
