"""Which cuBLASLt kernel torch._scaled_mm runs at each FP8 prefill (or, --points decode, decode) point, read from
the profiler.

The anchor of the FP8 sweeps is torch._scaled_mm (cuBLASLt). Its kernel names say what tile, cluster and schedule
cuBLASLt chose for a shape (for example `nvjet_..._128x256_64x4_2x1_v_bz_coopA_...`: a 128x256 tile, k-blocks of 64 in
4 stages, a 2x1 cluster, cooperative); next to our own pick they show where the two designs differ:

  python perf/cublas_kernels.py --points both --out results     # rowwise and per-tensor, fast and full accumulation

Per point and mode: the kernel names of one call (a call may launch more than one) and the time of each call
(CUDA events around 20 eager calls after a warm-up, one weight: a rough figure, the sweeps time properly).
Writes cublas_kernels.json and prints a table, with our rule's pick per point beside it (default_config), and a
count of the kernels per scaling and accumulation mode.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kernel_names(fn) -> list[str]:
    """The CUDA kernel names one call of fn launches."""
    import torch
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def rough_us(fn, calls=20) -> float:
    import torch
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / calls


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="sweep", choices=("sweep", "models", "both", "decode"))
    p.add_argument("--max-tflop", type=float, default=4.0)
    p.add_argument("--out", default="results")
    args = p.parse_args()
    import torch
    from fp8_prefill_model import points
    from gemm_sweep import operands
    from scalemm.cutlass_kernels.configs import default_config
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuBLASLt {torch.backends.cuda.preferred_blas_library()}")
    rows = []
    for label, M, N, K in points(args.points, args.max_tflop * 1e12):
        a, bs, sa, sb = operands(M, N, K, 1)
        sa2, sb2, one = sa[:, None], sb[None, :], torch.ones((), device="cuda")
        row = {"layer": label, "M": M, "N": N, "K": K, "kernels": {}, "us": {}, "scalemm": {}}
        for mode, fast in (("fast", True), ("full", False)):
            for scaling, (x, y) in (("rowwise", (sa2, sb2)), ("tensorwise", (one, one))):
                fn = (lambda x, y, f: lambda: torch._scaled_mm(a, bs[0].T, scale_a=x, scale_b=y,
                                                                out_dtype=torch.bfloat16, use_fast_accum=f))(x, y, fast)
                row["kernels"][f"{scaling}_{mode}"] = kernel_names(fn)
                row["us"][mode if scaling == "rowwise" else f"{scaling}_{mode}"] = rough_us(fn)
            row["scalemm"][mode] = default_config(M, N, K, fast_accum=fast).label()
        rows.append(row)
        for mode in ("fast", "full"):
            names = " + ".join(row["kernels"][f"rowwise_{mode}"])
            print(f"{label:<30}{M:>6}{N:>7}{K:>6} {mode} {row['us'][mode]:8.1f} us  {names}  | ours "
                  f"{row['scalemm'][mode]}", flush=True)
            names = " + ".join(row["kernels"][f"tensorwise_{mode}"])
            print(f"{'':<30}{'':>6}{'':>7}{'':>6} {mode} {row['us'][f'tensorwise_{mode}']:8.1f} us  {names}  "
                  f"(per-tensor)", flush=True)
    print("\nkernels per (scaling, accumulation) over the points (memsets left out):")
    for key in rows[0]["kernels"] if rows else ():
        counts = Counter(" + ".join(k for k in r["kernels"][key] if not k.startswith("Memset")) for r in rows)
        for names, n in counts.most_common():
            print(f"  {key:<16} {n:>4}  {names}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "cublas_kernels.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, open(path, "w"),
              indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
