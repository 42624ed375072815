"""The grouped FP8 quantizer with current scaling, as the expert layers run it (x [65536, 2048] routed over 128 experts
as perf/train_bench.py's MoE block; both copies; SCALING=tensor (FP8Tensorwise) or token (FP8Rowwise)), for ncu; and,
without ncu (--time), the stats pass's read rate beside torch.amax over the same x (a read-only anchor) under CUDA
graphs:

  ncu --kernel-name regex:"grouped_stats_kernel|grouped_quantize_kernel" --launch-skip 4 -c 2 --section ... \
      python3 one_quant.py
  python3 one_quant.py --time
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm.timing import bench  # noqa: E402

sizes = routed_sizes(8192, 128, 8, seed=0)
T, K = int(sizes.sum()), int(os.environ.get("K", "2048"))
offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
scaling = os.environ.get("SCALING", "tensor")
if "--time" not in sys.argv:
    for _ in range(3):
        scalemm.quantize_fp8_grouped(x, offs, scaling=scaling, columnwise=True)
    torch.cuda.synchronize()
else:
    amax = torch.rand(128, device="cuda") * 4 + 1
    fns = {"current": lambda i: scalemm.quantize_fp8_grouped(x, offs, scaling=scaling, columnwise=True),
           "torch.amax": lambda i: torch.amax(x),
           "copy": lambda i: x.clone()}
    if scaling == "tensor":
        fns["delayed"] = lambda i: scalemm.quantize_fp8_grouped(x, offs, columnwise=True, amax=amax)
    us = bench(fns, 1)
    mb = x.numel() * 2 / 1e6
    print(f"{torch.cuda.get_device_name()}: x [{T}, {K}] bf16 ({mb:.0f} MB), {scaling} scaling, both copies")
    for n, t in us.items():
        print(f"  {n:<12}{t:8.1f} us" + (f"  read {mb / t:.2f} TB/s" if n == "torch.amax" else "")
              + (f"  read + written {2 * mb / t:.2f} TB/s" if n == "copy" else ""))
    if "delayed" in us:
        print(f"  current - delayed (the stats pass and its launch): {us['current'] - us['delayed']:.1f} us "
              f"= a read at {mb / (us['current'] - us['delayed']):.2f} TB/s")
