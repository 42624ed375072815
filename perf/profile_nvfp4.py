"""One NVFP4-weight GEMM at decode, for Nsight Compute (hardware counters, no timing of our own).

The kernel under study runs inside an NVTX range "measure" after warm-up calls (builds, the CUTLASS
kernel's prepared weight copy), so ncu can profile just it:

  ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight \\
      --section MemoryWorkloadAnalysis --section WarpStateStats python3 perf/profile_nvfp4.py --kernel skinny

--kernel skinny (the default at <= 8 tokens, with the default SkinnyConfig.mainloop), a main loop's name
(SKINNY_MAINLOOPS: the skinny kernel with that loop), cutlass (the CUTLASS NVFP4 kernel), bf16 (torch.matmul on a
bf16 copy of the weight: cuBLAS, the anchor) or fp8 (scalemm's FP8 GEMM on FP8 copies, per-token x per-channel
scales); w4a4 / w4a4_pass: the CUTLASS kernel on NVFP4 activations decoded in its mainloop / by the bf16 pass first
(two kernels in the range). `bash scripts/device_run.sh profile` runs skinny, lean, cutlass and bf16.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import torch

import scalemm
from scalemm.cutlass_kernels.configs import SKINNY_MAINLOOPS, default_nvfp4_config, skinny_config_for_tokens
from scalemm.gemm_nvfp4 import gemm_nvfp4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernel", choices=("skinny", *SKINNY_MAINLOOPS, "cutlass", "bf16", "fp8", "w4a4", "w4a4_pass"),
                   default="skinny")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--k", type=int, default=8192)
    args = p.parse_args()
    M, N, K = args.m, args.n, args.k
    g = torch.Generator(device="cuda").manual_seed(0)
    w16 = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    if args.kernel == "bf16":
        def run():
            return torch.matmul(x, w16.T)
    elif args.kernel == "fp8":  # scalemm's FP8 GEMM (its heuristic's pick), per-token x per-channel scales
        a8, b8 = x.to(torch.float8_e4m3fn), w16.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device="cuda") + 0.5, torch.rand(N, device="cuda") + 0.5

        def run():
            return scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.bfloat16, fast_accum=True)
    else:
        wq = scalemm.quantize_nvfp4(w16, scaling="token")
        if args.kernel == "skinny" or args.kernel in SKINNY_MAINLOOPS:
            config = skinny_config_for_tokens(M)
            if config is None:
                raise SystemExit(f"--m {M}: the skinny kernel takes at most 64 tokens")
            if args.kernel != "skinny":  # skinny: the default main loop
                config = replace(config, mainloop=args.kernel)
        else:
            config = default_nvfp4_config(M, N, K)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")

        if args.kernel.startswith("w4a4"):
            xq = scalemm.quantize_nvfp4(x, scaling="token")
            how = "pass" if args.kernel == "w4a4_pass" else "mainloop"

            def run():
                return gemm_nvfp4(xq, wq, out=out, config=config, activation_decode=how)
        else:
            def run():
                return scalemm.gemm(x, wq, out=out, config=config)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    run()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{args.kernel}: M={M} N={N} K={K} done")


if __name__ == "__main__":
    main()
