"""Per-kernel GPU times of the quantizers (torch.profiler), to see which pass costs what.

  python scripts/profile_quant.py          # 16384 x 7168 over 64 groups: NVFP4 and FP8 rowwise
  python scripts/profile_quant.py --moe    # the FP8 training quantizations (both copies) of the Qwen3-30B-A3B
                                           # expert operands, 65536 rows routed over 128 experts
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import scalemm


def moe_cases():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "perf"))
    from grouped_sweep import routed_sizes
    offs = torch.cumsum(routed_sizes(8192, 128, 8, seed=0), 0).to(torch.int32).cuda()
    T = int(offs[-1])
    cases = {}
    for K in (2048, 768, 1536):
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        amax = torch.rand(128, device="cuda") * 8
        cases[f"fp8 [{T}, {K}] tensor both"] = lambda x=x: scalemm.quantize_fp8_grouped(x, offs, columnwise=True)
        cases[f"fp8 [{T}, {K}] token both"] = lambda x=x: scalemm.quantize_fp8_grouped(x, offs, scaling="token",
                                                                                      columnwise=True)
        cases[f"fp8 [{T}, {K}] delayed both"] = lambda x=x, a=amax: scalemm.quantize_fp8_grouped(
            x, offs, columnwise=True, amax=a, amax_out=torch.empty_like(a))
    return cases


def main():
    if "--moe" in sys.argv:
        return profile_cases(moe_cases())
    T, K, G = 16384, 7168, 64
    x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    w = torch.rand(G, generator=g) ** 3
    w[5] = 0
    sizes = (w / w.sum() * T).floor().long()
    sizes[int(w.argmax())] += T - int(sizes.sum())
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    amax = x.abs().amax().float()
    cases = {
        "nvfp4 single fused": lambda: scalemm.quantize_nvfp4(x),
        "nvfp4 single given amax": lambda: scalemm.quantize_nvfp4(x, amax=amax),
        "nvfp4 grouped tensor": lambda: scalemm.quantize_nvfp4_grouped(x, offs),
        "nvfp4 grouped token": lambda: scalemm.quantize_nvfp4_grouped(x, offs, scaling="token"),
        "fp8 grouped tensor": lambda: scalemm.quantize_fp8_grouped(x, offs),
    }
    profile_cases(cases)


def profile_cases(cases):
    for name, fn in cases.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
        print(f"== {name}")
        for ev in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:6]:
            if ev.device_time_total > 0:
                print(f"   {ev.key[:70]:<70} {ev.device_time_total / ev.count:8.1f} us x{ev.count // 10}")


if __name__ == "__main__":
    main()
