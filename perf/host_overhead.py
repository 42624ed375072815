"""Host time per eager call of scalemm's public ops next to torch's (what an eager caller pays on the CPU).

Each op is called in a loop of 200 calls without synchronising inside it (its GPU work is tiny: one token, K = 4096),
five times; the best round's microseconds per call are printed and written to host_overhead.json. Names given on
the command line are profiled afterwards (cProfile over 500 calls, sorted by own time).

    python perf/host_overhead.py --out DIR
    python perf/host_overhead.py --out DIR --profile "quantize_fp8 token M=1" "scalemm.gemm fp8 M=1"

Kernels: the quantizers (`python -m scalemm build --set default` has them) and the FP8 decode GEMM of
default_config(1, 4096, 4096) with fast accumulation.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time

import torch


def ops():
    import scalemm
    from scalemm.cutlass_kernels.configs import default_config
    dev = "cuda"
    x1 = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    x16 = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16)
    w8 = (torch.randn(4096, 4096, device=dev) * 4).to(torch.float8_e4m3fn)
    a8 = (torch.randn(1, 4096, device=dev) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(1, device=dev) + 0.5, torch.rand(4096, device=dev) + 0.5
    cfg = default_config(1, 4096, 4096)
    return {
        "torch.empty": lambda: torch.empty(4096, device=dev),
        "torch mul": lambda: x1.mul(2.0),
        "torch._scaled_mm rowwise M=1": lambda: torch._scaled_mm(a8, w8.T, scale_a=sa[:, None], scale_b=sb[None, :],
                                                                 out_dtype=torch.bfloat16, use_fast_accum=True),
        "scalemm.gemm fp8 M=1 (config)": lambda: scalemm.gemm(a8, w8, sa, sb, fast_accum=True, config=cfg),
        "scalemm.gemm fp8 M=1": lambda: scalemm.gemm(a8, w8, sa, sb, fast_accum=True),
        "quantize_fp8 token M=1": lambda: scalemm.quantize_fp8(x1, scaling="token"),
        "quantize_fp8 tensor M=1": lambda: scalemm.quantize_fp8(x1, scaling="tensor"),
        "quantize_fp8 token M=16 row+col": lambda: scalemm.quantize_fp8(x16, scaling="token", columnwise=True),
        "quantize_nvfp4 token M=1": lambda: scalemm.quantize_nvfp4(x1, scaling="token"),
        "quantize_mxfp8 M=1": lambda: scalemm.quantize_mxfp8(x1),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--profile", nargs="*", default=[])
    args = p.parse_args()
    fns = ops()
    res = {}
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, f in fns.items():
        for _ in range(20):
            f()
        torch.cuda.synchronize()
        rounds = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(200):
                f()
            rounds.append((time.perf_counter() - t) / 200 * 1e6)
            torch.cuda.synchronize()
        res[name] = min(rounds)
        print(f"{name:<36} host {res[name]:7.1f} us per call", flush=True)
    for name in args.profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(500):
            fns[name]()
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
        print(f"== {name}\n" + s.getvalue()[:4500])
    os.makedirs(args.out, exist_ok=True)
    json.dump({"gpu": torch.cuda.get_device_name(), "host_us": res}, open(os.path.join(args.out, "host_overhead.json"),
                                                                            "w"), indent=1)


if __name__ == "__main__":
    main()
