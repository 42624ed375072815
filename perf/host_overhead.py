"""Host time per eager call of scalemm's public ops next to torch's (what an eager caller pays on the CPU).

Each op is called in a loop of 200 calls without synchronising inside it (its GPU work is tiny: one token, K = 4096),
in rounds; the best round's microseconds per call are printed and written to host_overhead.json. Names given with
--profile are profiled afterwards (cProfile over 500 calls, sorted by own time).

    python perf/host_overhead.py --out DIR
    python perf/host_overhead.py --out DIR --profile "quantize_fp8 token M=1" "scalemm.gemm fp8 M=1"
    python perf/host_overhead.py --out DIR --compare scalemm_old   # A/B in one process (see below)

Host time moves by up to 2x between processes and machine starts (the same op, the same code), so compare two
versions in one process: --compare NAME imports a second copy of the package installed under another top-level
name (e.g. `pip install --target /tmp/old-site <old checkout>` then `mv /tmp/old-site/scalemm
/tmp/old-site/scalemm_old`; the package imports itself relatively) and times its ops and this copy's in
alternating rounds; the table gives both and their ratio. The "C launcher alone" rows call the kernels' extern "C"
entry points with a prepared struct (no Python checks, no allocation): the floor of an eager call.

Kernels: the quantizers (`python -m scalemm build --set default` has them); the FP8 decode GEMM of
default_config(1, 4096, 4096) with fast accumulation (FP8Linear's, with its bias, is the same kernel); the NVFP4
skinny kernels of one token on 4096 x 4096 (`--set decode` has them); the grouped FP8 GEMM the heuristic picks for 64
rows in 128 experts of 1536 x 2048 with fast accumulation.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import os
import pstats
import time

import torch


def ops(sm, torch_ops: bool = True):
    """name -> a call of package `sm` (scalemm or a second copy), with torch's anchors when torch_ops."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    x1 = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    x16 = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    w8 = (torch.randn(4096, 4096, device=dev, generator=g) * 4).to(torch.float8_e4m3fn)
    a8 = (torch.randn(1, 4096, device=dev, generator=g) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(1, device=dev, generator=g) + 0.5, torch.rand(4096, device=dev, generator=g) + 0.5
    cfg = sm.cutlass_kernels.configs.default_config(1, 4096, 4096)
    linear = torch.nn.Linear(4096, 4096, device=dev, dtype=torch.bfloat16)
    lin = sm.nn.FP8Linear.from_linear(linear)
    w4 = sm.quantize_nvfp4(torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, generator=g), scaling="token")
    x4 = sm.quantize_nvfp4(x1, scaling="token")
    # MoE decode: 64 rows (8 tokens, top-8) over 128 experts of Qwen3-30B-A3B's gate_up (N = 1536, K = 2048)
    ag = (torch.randn(64, 2048, device=dev, generator=g) * 4).to(torch.float8_e4m3fn)
    bg = torch.empty(128, 1536, 2048, device=dev, dtype=torch.float8_e4m3fn)
    offs = torch.cumsum(torch.bincount(torch.randperm(128, generator=torch.Generator().manual_seed(0))[:64],
                                       minlength=128), 0).to(torch.int32).to(dev)
    sag, sbg = torch.rand(64, device=dev, generator=g) + 0.5, torch.rand(128, 1536, device=dev, generator=g) + 0.5
    anchors = {
        "torch.empty": lambda: torch.empty(4096, device=dev),
        "torch mul": lambda: x1.mul(2.0),
        "torch._scaled_mm rowwise M=1": lambda: torch._scaled_mm(a8, w8.T, scale_a=sa[:, None], scale_b=sb[None, :],
                                                                 out_dtype=torch.bfloat16, use_fast_accum=True),
        "torch F.linear bf16 M=1": lambda: torch.nn.functional.linear(x1, linear.weight, linear.bias),
    }
    ours = {
        "scalemm.gemm fp8 M=1 (config)": lambda: sm.gemm(a8, w8, sa, sb, fast_accum=True, config=cfg),
        "scalemm.gemm fp8 M=1": lambda: sm.gemm(a8, w8, sa, sb, fast_accum=True),
        "quantize_fp8 token M=1": lambda: sm.quantize_fp8(x1, scaling="token"),
        "quantize_fp8 tensor M=1": lambda: sm.quantize_fp8(x1, scaling="tensor"),
        "quantize_fp8 token M=16 row+col": lambda: sm.quantize_fp8(x16, scaling="token", columnwise=True),
        "quantize_nvfp4 token M=1": lambda: sm.quantize_nvfp4(x1, scaling="token"),
        "quantize_mxfp8 M=1": lambda: sm.quantize_mxfp8(x1),
        "FP8Linear M=1 (quantize + gemm)": lambda: lin(x1),
        "scalemm.gemm nvfp4 W4A16 M=1": lambda: sm.gemm(x1, w4),
        "scalemm.gemm nvfp4 W4A4 M=1": lambda: sm.gemm(x4, w4),
        "scalemm.grouped_gemm fp8 T=64 G=128": lambda: sm.grouped_gemm(ag, bg, offs, sag, sbg, fast_accum=True),
    }
    if torch_ops:  # the C launchers alone (ctypes call with a prepared struct): what no Python change can remove
        ours.update(_launchers(sm, a8, w8, sa, sb, x1))
    return {**anchors, **ours} if torch_ops else ours


def _launchers(sm, a8, w8, sa, sb, x1):
    import ctypes
    import sys
    abi, g, q = sm.abi, sys.modules[sm.__name__ + ".gemm"], sys.modules[sm.__name__ + ".quantize"]
    dev = a8.device
    out = torch.empty(1, 4096, dtype=torch.bfloat16, device=dev)
    cfg, leaves, launch, workspace = g._plan(1, 4096, 4096, True, torch.bfloat16, None, None, dev)
    args, _ = g._gemm_args(cfg, leaves, workspace, a8, w8, out, {"scale_a": sa, "scale_b": sb}, 1, 4096, 4096, dev)
    stream = args.stream
    qd = torch.empty(1, 4096, dtype=torch.float8_e4m3fn, device=dev)
    qs = torch.empty(1, device=dev)
    qargs = abi.QuantizeFp8Args(x=x1.data_ptr(), m=1, k=4096, q_row=qd.data_ptr(), scale_inv_row=qs.data_ptr(),
                                row_token=1, col_token=1, stream=stream)
    qlaunch = q._launcher(torch.bfloat16, "scalemm_quantize_fp8")
    gp, qp = ctypes.byref(args), ctypes.byref(qargs)
    keep = (out, qd, qs)
    return {"C launcher alone: FP8 GEMM M=1": lambda: launch(gp) or keep,
            "C launcher alone: quantize_fp8 token M=1": lambda: qlaunch(qp) or keep}


def best_round(f, rounds: int, calls: int = 200) -> float:
    """Microseconds per call of the fastest of `rounds` rounds of `calls` back-to-back calls."""
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--profile", nargs="*", default=[])
    p.add_argument("--only", nargs="*", default=[], help="time only the ops whose name contains one of these")
    p.add_argument("--compare", default=None, help="a second copy of scalemm, by package name, timed alongside")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import scalemm
    fns = ops(scalemm)
    other = ops(importlib.import_module(args.compare), torch_ops=False) if args.compare else {}
    if args.only:
        fns = {k: f for k, f in fns.items() if any(o in k for o in args.only) or k in args.profile}
    res, res_other = {}, {}
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, f in fns.items():
        pair = [f] + ([other[name]] if name in other else [])
        for g in pair:
            for _ in range(20):
                g()
        torch.cuda.synchronize()
        times = [[] for _ in pair]
        for _ in range(args.rounds):  # alternating rounds, so both copies see the same machine state
            for i, g in enumerate(pair):
                times[i].append(best_round(g, 1))
        res[name] = min(times[0])
        line = f"{name:<36} host {res[name]:7.1f} us per call"
        if len(pair) == 2:
            res_other[name] = min(times[1])
            line += f"   {args.compare} {res_other[name]:7.1f} us   (this / {args.compare} {res[name] / res_other[name]:.2f})"
        print(line, flush=True)
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
    out = {"gpu": torch.cuda.get_device_name(), "host_us": res}
    if args.compare:
        out["compare"] = {"package": args.compare, "host_us": res_other}
    json.dump(out, open(os.path.join(args.out, "host_overhead.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
