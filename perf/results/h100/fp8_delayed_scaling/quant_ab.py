"""The FP8 grouped quantizers with current scaling (amax pass + quantize pass) against delayed scaling (a given
amax, the amax recorded by the quantize pass), on the Qwen3-30B-A3B expert layer's operands (perf/train_bench.py's
MoE block: 65536 rows routed over 128 experts). CUDA graphs, perf/gemm_sweep.py's bench (interleaved rounds).

  python perf/results/h100/fp8_delayed_scaling/quant_ab.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from gemm_sweep import bench  # noqa: E402
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402

E = 128
sizes = routed_sizes(8192, E, 8, 0)
offsets = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32).cuda()
T = int(offsets[-1])
cases = {"x / dy [T, 2048]": 2048, "h [T, 768]": 768, "dh [T, 1536]": 1536}
for name, K in cases.items():
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    amax, out = torch.full((E,), 4.0, device="cuda"), torch.empty(E, device="cuda")
    fns = {"current": lambda i: scalemm.quantize_fp8_grouped(x, offsets, columnwise=True),
           "delayed": lambda i: scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)}
    t = bench(fns, 1)
    mb = x.numel() * 2 / 1e6
    print(f"{name:24s} current {t['current']:8.1f} us  delayed {t['delayed']:8.1f} us  ({t['current'] / t['delayed']:.2f}x;"
          f" {mb:.0f} MB of x)", flush=True)
for name, (N, K) in {"W gate_up [128, 1536, 2048]": (1536, 2048), "W down [128, 2048, 768]": (2048, 768)}.items():
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) * 0.02
    amax, out = torch.full((E,), 0.1, device="cuda"), torch.empty(E, device="cuda")
    fns = {"current": lambda i: scalemm.quantize_fp8_stacked_pair(w),
           "delayed": lambda i: scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)}
    t = bench(fns, 1)
    print(f"{name:24s} current {t['current']:8.1f} us  delayed {t['delayed']:8.1f} us  ({t['current'] / t['delayed']:.2f}x;"
          f" {w.numel() * 2 / 1e6:.0f} MB of W)", flush=True)
