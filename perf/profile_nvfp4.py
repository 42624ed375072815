"""One NVFP4-weight GEMM at decode, for Nsight Compute (hardware counters, no timing of our own).

The kernel under study runs inside an NVTX range "measure" after warm-up calls (builds, the CUTLASS
kernel's prepared weight copy), so ncu can profile just it:

  ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight \\
      --section MemoryWorkloadAnalysis --section WarpStateStats python3 perf/profile_nvfp4.py --kernel skinny

--kernel skinny (the default at <= 8 tokens, with the default SkinnyConfig.mainloop), a main loop's name
(SKINNY_MAINLOOPS: the skinny kernel with that loop), cutlass (the CUTLASS NVFP4 kernel), bf16 (torch.matmul on a
bf16 copy of the weight: cuBLAS, the anchor) or fp8 (scalemm's FP8 GEMM on FP8 copies, per-token x per-channel
scales); w4a4 / w4a4_pass: the CUTLASS kernel on NVFP4 activations decoded in its mainloop / by the bf16 pass first
(two kernels in the range); w4a4_on_a / w4a16_on_a: the tokens on A (default_nvfp4_tokens_on_a_config / default_nvfp4_w4a16_on_a_config), the
weights decoded by the bf16 pass first (two kernels in the range), then the tokens decoded in registers (W4A4) or a
bf16 x bf16 GEMM (W4A16). `bash scripts/device_run.sh profile` runs skinny, lean, cutlass and bf16. --prebuild
compiles every kernel of the given --kernel choices (comma-separated) in parallel and exits.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import torch

import scalemm
from scalemm import jit
from scalemm.cutlass_kernels.configs import (SKINNY_MAINLOOPS, default_nvfp4_config,
                                             default_nvfp4_tokens_on_a_config, default_nvfp4_w4a16_on_a_config,
                                             skinny_config_for_tokens)
from scalemm.gemm_nvfp4 import gemm_nvfp4

KERNELS = ("skinny", *SKINNY_MAINLOOPS, "cutlass", "bf16", "fp8", "w4a4", "w4a4_pass", "w4a4_on_a", "w4a16_on_a")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernel", default="skinny", help=f"one of {', '.join(KERNELS)} (with --prebuild: a "
                   "comma-separated list)")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--prebuild", action="store_true")
    args = p.parse_args()
    kinds = args.kernel.split(",")
    bad = [k for k in kinds if k not in KERNELS]
    if bad or (len(kinds) > 1 and not args.prebuild):
        raise SystemExit(f"--kernel: one of {', '.join(KERNELS)} (several only with --prebuild), got {args.kernel!r}")
    if args.prebuild:
        failed = jit.prebuild_calls([lambda k=k: make_run(k, args.m, args.n, args.k)() for k in kinds],
                                    modules=("gemm", "gemm_nvfp4", "quantize"))
        raise SystemExit(f"failed: {failed}" if failed else 0)
    run = make_run(args.kernel, args.m, args.n, args.k)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    run()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{args.kernel}: M={args.m} N={args.n} K={args.k} done")


def make_run(kernel, M, N, K):
    """The call under study (its inputs made here)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    w16 = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    if kernel == "bf16":
        def run():
            return torch.matmul(x, w16.T)
    elif kernel == "fp8":  # scalemm's FP8 GEMM (its heuristic's pick), per-token x per-channel scales
        a8, b8 = x.to(torch.float8_e4m3fn), w16.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device="cuda") + 0.5, torch.rand(N, device="cuda") + 0.5

        def run():
            return scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.bfloat16, fast_accum=True)
    else:
        wq = scalemm.quantize_nvfp4(w16, scaling="token")
        if kernel == "skinny" or kernel in SKINNY_MAINLOOPS:
            config = skinny_config_for_tokens(M)
            if config is None:
                raise ValueError(f"--m {M}: the skinny kernel takes at most 64 tokens")
            if kernel != "skinny":  # skinny: the default main loop
                config = replace(config, mainloop=kernel)
        elif kernel == "w4a4_on_a":
            config = default_nvfp4_tokens_on_a_config(M, N, K)
        elif kernel == "w4a16_on_a":
            config = default_nvfp4_w4a16_on_a_config(M, N, K)
        else:
            config = default_nvfp4_config(M, N, K)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")

        if kernel.startswith("w4a4"):
            xq = scalemm.quantize_nvfp4(x, scaling="token")
            how = {"w4a4_pass": "pass", "w4a4_on_a": "registers"}.get(kernel, "mainloop")

            def run():
                return gemm_nvfp4(xq, wq, out=out, config=config, activation_decode=how)
        else:
            def run():
                return scalemm.gemm(x, wq, out=out, config=config)
    return run


if __name__ == "__main__":
    main()
