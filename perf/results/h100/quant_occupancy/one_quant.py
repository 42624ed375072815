"""One grouped FP8 quantization as FP8DelayedScaling runs it in the expert layers' backward (dy [65536, 2048] routed
over 128 experts as perf/train_bench.py's MoE block; both copies, a given amax, amax_out recorded), for ncu:

  ncu --kernel-name regex:grouped_quantize_kernel -c 1 --section SpeedOfLight ... python3 one_quant.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402

sizes = routed_sizes(8192, 128, 8, seed=0)
T, K = int(sizes.sum()), int(os.environ.get("K", "2048"))
offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
amax = torch.full((128,), 4.0, device="cuda")
out = torch.empty(128, device="cuda")
for _ in range(3):
    scalemm.quantize_fp8_grouped(x, offs, columnwise=True, amax=amax, amax_out=out)
torch.cuda.synchronize()
