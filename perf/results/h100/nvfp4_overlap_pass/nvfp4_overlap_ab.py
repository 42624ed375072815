"""W4A4 at 9-64 tokens: the skinny kernel's wgmma loop as the decode pass's programmatic dependent, or not.

scalemm.gemm_nvfp4.OVERLAP_DECODE_PASS launches the wgmma loop as a programmatic dependent (PDL) of the bf16 decode
pass that writes its tokens: its launch and first weight loads overlap the pass (scalemm/pdl.cuh). This script
times both launches in one process, against W4A16 through the same loop (no pass) and bf16 torch.matmul, and
checks that both launches give the same bits. Microseconds per call are medians of CUDA-graph replays with the
weights rotated past L2 (scalemm.timing.bench). Two call chains: the GEMM alone on quantized activations ("gemm"),
and quantize_nvfp4 + GEMM ("quantize+gemm", what a W4A4 layer runs; bf16 then times its matmul alone).

  python perf/nvfp4_overlap_ab.py --out results/overlap                  # the default shapes and token counts
  python perf/nvfp4_overlap_ab.py --shapes 4096x4096 --ms 16 --chain gemm
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

import torch

import scalemm
import scalemm.gemm_nvfp4 as g
from scalemm.cutlass_kernels.configs import skinny_config_for_tokens
from scalemm.timing import bench, l2_copies

SHAPES = ["4096x4096", "8192x8192", "14336x4096", "4096x14336", "2048x4096", "1024x4096"]


def point(M, N, K, chain):
    cfg = replace(skinny_config_for_tokens(M), mainloop="wgmma")
    # enough copies that the NVFP4 weights (0.5625 bytes per element with their scales) rotate past L2 too: sized
    # for bf16 weights, the smaller layers' NVFP4 copies stayed in L2 between calls (the first run of this script)
    copies = l2_copies(N * K * 9 // 16, most=64)
    torch.manual_seed(M * 7 + N + K)
    w_bf16 = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    w = [scalemm.quantize_nvfp4(t, scaling="token") for t in w_bf16]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a = scalemm.quantize_nvfp4(x, scaling="token")
    outs = {name: torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for name in ("plain", "overlap", "w4a16")}
    for t in w:  # the prepared copies, made before any capture (each weight's first call)
        scalemm.gemm(x, t, config=cfg)

    def w4a4(overlap):
        def fn(i):
            g.OVERLAP_DECODE_PASS = overlap
            act = scalemm.quantize_nvfp4(x, scaling="token") if chain == "quantize+gemm" else a
            scalemm.gemm(act, w[i], out=outs["overlap" if overlap else "plain"], config=cfg)
        return fn

    fns = {"bf16": lambda i: torch.matmul(x, w_bf16[i].T),
           "w4a16": lambda i: scalemm.gemm(x, w[i], out=outs["w4a16"], config=cfg),
           "w4a4_plain": w4a4(False), "w4a4_overlap": w4a4(True)}
    try:
        us = bench(fns, copies)
    finally:
        g.OVERLAP_DECODE_PASS = True
    for overlap in (False, True):  # the same bits either way
        w4a4(overlap)(0)
    same = torch.equal(outs["plain"], outs["overlap"])
    return {"M": M, "N": N, "K": K, "chain": chain, "us": us, "bit_identical": same,
            "overlap_speedup": us["w4a4_plain"] / us["w4a4_overlap"],
            "w4a4_overlap_vs_bf16": us["bf16"] / us["w4a4_overlap"], "w4a4_plain_vs_bf16": us["bf16"] / us["w4a4_plain"],
            "w4a16_vs_bf16": us["bf16"] / us["w4a16"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES), help="N x K list")
    p.add_argument("--ms", default="9,16,32,64", help="token counts (9-64: the wgmma loop's range)")
    p.add_argument("--chain", default="gemm,quantize+gemm")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = []
    print(f"{torch.cuda.get_device_name()}: us per call (speed-up over bf16)")
    print(f"{'chain':>14} {'N x K':>12} {'M':>3} {'bf16':>7} {'W4A16':>14} {'W4A4 plain':>14} {'W4A4 overlap':>14}"
          f" {'overlap':>8} same")
    for chain in args.chain.split(","):
        for shape in args.shapes.split(","):
            N, K = (int(v) for v in shape.split("x"))
            for M in (int(m) for m in args.ms.split(",")):
                r = point(M, N, K, chain)
                rows.append(r)
                us = r["us"]
                print(f"{chain:>14} {shape:>12} {M:>3} {us['bf16']:7.2f} {us['w4a16']:7.2f} ({r['w4a16_vs_bf16']:.2f}x)"
                      f" {us['w4a4_plain']:7.2f} ({r['w4a4_plain_vs_bf16']:.2f}x) {us['w4a4_overlap']:7.2f}"
                      f" ({r['w4a4_overlap_vs_bf16']:.2f}x) {r['overlap_speedup']:7.3f}x {r['bit_identical']}", flush=True)
    for chain in args.chain.split(","):
        sel = [r["overlap_speedup"] for r in rows if r["chain"] == chain]
        print(f"{chain}: overlap / plain geomean {math.exp(sum(map(math.log, sel)) / len(sel)):.3f}x "
              f"(min {min(sel):.3f}x, max {max(sel):.3f}x)")
    assert all(r["bit_identical"] for r in rows), "the overlapped launch changed the output"
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "nvfp4_overlap_ab.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
