"""Host (CPU) cost of scalemm's eager calls next to torch's, and where it goes (cProfile).

    python scripts/profile_host.py            # on a GPU machine

Prints microseconds per eager call (mean of many calls, one sync at the end) for the quantizers,
the GEMM and FP8Linear at decode size, the same for a few torch ops as a yardstick, and the top
functions by own time for quantize_nvfp4 and quantize_fp8.
"""
import cProfile
import io
import pstats
import time

import torch

import scalemm


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    dev = torch.device("cuda")
    x = torch.randn(1, 7168, device=dev).to(torch.bfloat16)
    big = torch.randn(128, 7168, device=dev).to(torch.bfloat16)
    w8 = torch.randn(4096, 7168, device=dev).to(torch.float8_e4m3fn)
    a8 = x.to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev)
    sa, sb = torch.ones(1, 1, device=dev), torch.ones(1, 4096, device=dev)
    lin = scalemm.nn.FP8Linear.from_linear(torch.nn.Linear(7168, 4096, bias=False, device=dev,
                                                           dtype=torch.bfloat16))
    amax = x.float().abs().amax()
    cases = {
        "torch.empty": lambda: torch.empty(1, 3584, dtype=torch.uint8, device=dev),
        "torch abs().amax()": lambda: x.abs().amax(),
        "torch x.to(fp8)": lambda: x.to(torch.float8_e4m3fn),
        "torch._scaled_mm 1x4096x7168": lambda: torch._scaled_mm(a8, w8.t(), one, one, out_dtype=torch.bfloat16),
        "torch._scaled_mm rowwise": lambda: torch._scaled_mm(a8, w8.t(), sa, sb, out_dtype=torch.bfloat16),
        "torch.nn.functional.linear bf16": lambda: torch.nn.functional.linear(x, w8[:1].to(torch.bfloat16)),
        "scalemm.quantize_fp8": lambda: scalemm.quantize_fp8(x),
        "scalemm.quantize_fp8 token": lambda: scalemm.quantize_fp8(x, scaling="token"),
        "scalemm.quantize_nvfp4": lambda: scalemm.quantize_nvfp4(x),
        "scalemm.quantize_nvfp4 amax": lambda: scalemm.quantize_nvfp4(x, amax=amax),
        "scalemm.quantize_mxfp8": lambda: scalemm.quantize_mxfp8(x),
        "scalemm.gemm 1x4096x7168": lambda: scalemm.gemm(a8, w8, one, one),
        "scalemm.FP8Linear 1x7168->4096": lambda: lin(x),
        "scalemm.quantize_nvfp4 128 rows": lambda: scalemm.quantize_nvfp4(big),
    }
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, fn in cases.items():
        print(f"{name:36s} {per_call_us(fn):8.1f} us/call")
    for name in ("scalemm.quantize_nvfp4", "scalemm.quantize_fp8", "scalemm.FP8Linear 1x7168->4096"):
        fn = cases[name]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3000):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
        print(f"\n=== cProfile: {name} (3000 calls) ===")
        print("\n".join(s.getvalue().splitlines()[6:34]))


if __name__ == "__main__":
    main()
