"""One call each of the grouped FP8 quantizer (delayed scaling, both copies, x [65536 routed rows, 2048] over 128
experts, the wgrad layout) and the dense one (x [8192, 28672]), for ncu:

  ncu --kernel-name regex:quantize --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis python3 probe.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402

sizes = routed_sizes(8192, 128, 8, seed=0)
offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
T, E = int(sizes.sum()), sizes.numel()
x = torch.randn(T, 2048, device="cuda", dtype=torch.bfloat16)
amax, out = torch.full((E,), 4.0, device="cuda"), torch.empty(E, device="cuda")
xd = torch.randn(8192, 28672, device="cuda", dtype=torch.bfloat16)
a0, o0 = torch.tensor(4.0, device="cuda"), torch.empty((), device="cuda")
for _ in range(2):  # the first call builds / loads the libraries
    scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)
    scalemm.quantize_fp8(xd, columnwise=True, amax=a0, amax_out=o0)
torch.cuda.synchronize()
