"""The CUTLASS NVFP4 kernel's stream-K fixup at decode: scalemm's parallel fixup (the peers' partial sums
stored at once, added by the final peer: scalemm/sm90/stream_k.hpp, what scalemm runs) against CUTLASS's
deterministic chain (each peer waits for the one before it: cutlass::gemm::StreamKScheduler), the same
kernel otherwise, beside bf16 cuBLAS (CUDA-graph medians, weights rotated past L2). The two fixups add the
partials in different orders, so their bf16 outputs are compared by relative difference (a few bf16
roundings flip), and each against itself for run-to-run identity.

  python3 perf/nvfp4_stream_k_fixup.py --ms 16,64,128 --out results/
  python3 perf/nvfp4_stream_k_fixup.py --specs          # list the kernels it needs (build them first)
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch

import scalemm
import scalemm.gemm_nvfp4 as g
from scalemm import epilogues as epi
from scalemm.cutlass_kernels.configs import default_nvfp4_config
from scalemm.timing import bench, l2_copies

SHAPES = "4096x4096,8192x8192,14336x4096,4096x14336"
CHAIN = {"on": False}
_spec = g.nvfp4_gemm_kernel_spec


def _chain_spec(*args, **kwargs):
    """nvfp4_gemm_kernel_spec, rendered with CUTLASS's own stream-K scheduler when CHAIN["on"]."""
    spec, emitted = _spec(*args, **kwargs)
    if CHAIN["on"] and dict(spec.params).get("TILE_SCHEDULER", "void") != "void":
        params = dict(spec.params, TILE_SCHEDULER="cutlass::gemm::StreamKScheduler")
        spec = replace(spec, name=spec.name + "_chain", params=params)
    return spec, emitted


def specs(ms, shapes):
    out = {}
    for M in ms:
        for N, K in shapes:
            cfg = default_nvfp4_config(M, N, K)
            if not cfg.stream_k:
                continue
            for chain in (False, True):
                CHAIN["on"] = chain
                s = _chain_spec(cfg, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
                                epilogue=epi.scaled(torch.bfloat16))[0]
                out[s.name] = s
    CHAIN["on"] = False
    return list(out.values())


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="16,64,128")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--specs", action="store_true", help="print the kernels' names and exit")
    p.add_argument("--out", default=None)
    p.add_argument("--profile", default=None, metavar="M,N,K",
                   help="no timing: launch parallel, chain, parallel, chain once each (for ncu)")
    args = p.parse_args(argv)
    ms = [int(v) for v in args.ms.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.specs:
        print("\n".join(s.name for s in specs(ms, shapes)))
        return
    g.nvfp4_gemm_kernel_spec = _chain_spec
    if args.profile:
        M, N, K = (int(v) for v in args.profile.split(","))
        w = scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda").to(torch.bfloat16), scaling="token")
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        for chain in (False, True, False, True):
            CHAIN["on"] = chain
            g.gemm_nvfp4(x, w, config=default_nvfp4_config(M, N, K))
        torch.cuda.synchronize()
        return
    device = torch.cuda.get_device_name()
    print(device)
    rows = []
    for N, K in shapes:
        copies = l2_copies(int(N * K * 0.5625))
        gen = torch.Generator(device="cuda").manual_seed(N + K)
        ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16),
                                     scaling="token") for _ in range(copies)]
        w16 = [torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(copies)]
        for M in ms:
            cfg = default_nvfp4_config(M, N, K)
            if not cfg.stream_k:
                print(f"M={M} {N}x{K}: {cfg.key()} is not stream-K, skipped")
                continue
            x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            outs = {}
            for chain in (False, True):
                CHAIN["on"] = chain
                for w in ws:  # prepared weight copies made outside the graph captures
                    g.gemm_nvfp4(x, w, out=out, config=cfg)
                first = g.gemm_nvfp4(x, ws[0], config=cfg)
                again = g.gemm_nvfp4(x, ws[0], config=cfg)
                outs[chain] = (first, bool(torch.equal(first, again)))
            CHAIN["on"] = False
            a, b = outs[False][0].double(), outs[True][0].double()
            diff = ((a - b).norm() / b.norm()).item()

            def run(chain):
                def fn(i):
                    CHAIN["on"] = chain
                    return g.gemm_nvfp4(x, ws[i], out=out, config=cfg)
                return fn
            r = bench({"parallel": run(False), "chain": run(True), "bf16": lambda i: torch.matmul(x, w16[i].T)},
                      copies)
            CHAIN["on"] = False
            row = {"device": device, "M": M, "N": N, "K": K, "config": cfg.key(), "us": r,
                   "parallel_over_bf16": r["bf16"] / r["parallel"], "chain_over_bf16": r["bf16"] / r["chain"],
                   "chain_over_parallel_time": r["chain"] / r["parallel"], "rel_diff_bf16_out": diff,
                   "parallel_deterministic": outs[False][1], "chain_deterministic": outs[True][1]}
            rows.append(row)
            print(f"M={M} N={N} K={K} {cfg.key()} bf16={r['bf16']:.1f} parallel={r['parallel']:.1f}"
                  f"({row['parallel_over_bf16']:.2f}x) chain={r['chain']:.1f}({row['chain_over_bf16']:.2f}x) "
                  f"chain/parallel={row['chain_over_parallel_time']:.3f} diff={diff:.1e} "
                  f"same-bits parallel={outs[False][1]} chain={outs[True][1]}", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "nvfp4_stream_k_fixup.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
