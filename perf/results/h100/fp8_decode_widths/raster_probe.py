import sys
# run from the repository root: python3 perf/results/h100/fp8_decode_widths/raster_probe.py
sys.path.insert(0, "perf")
import torch
from dataclasses import replace
from gemm_sweep import time_point
from fp8_prefill_model import config_of_key
base = [config_of_key(k, swap=True) for k in ("t64x64x128_c1x1_ping_swap", "t64x128x128_c1x1_ping", "t64x32x256_c1x1_ping_swap")]
cfgs = [replace(c, raster=r, swizzle=s) for c in base for r in ("auto", "m", "n") for s in (1, 2, 8)]
print(torch.cuda.get_device_name())
for N, K in ((18432, 16384), (10240, 8192), (4096, 14336)):
    for M in (33, 65, 96, 128):
        us = time_point(M, N, K, True, configs=cfgs, with_bf16=False)
        row = " ".join(f"{k.replace('_c1x1','').replace('x128','').replace('_ping','')}={v:.1f}" for k, v in us.items() if not k.startswith("torch"))
        print(f"N={N} K={K} M={M} tw={us['torch_tensorwise']:.1f} | {row}", flush=True)
