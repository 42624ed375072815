"""FP8 GEMM with full accumulation: CUTLASS's promotion against scalemm's chunked promotion.

Full (non-fast) accumulation promotes the wgmma accumulators into fp32 every 128 k. CUTLASS keeps a
second accumulator as large as the tile's, so its widest usable cooperative tile is 128x192;
scalemm's mainloop (cutlass_kernels/include/scalemm/sm90/fp8_promotion.hpp, GemmConfig.promotion_chunks)
promotes N in slices and keeps 128x256. Per shape this script

  - checks every full-accumulation config against CUTLASS's 128x128 kernel (the same promotion:
    the bf16 outputs should agree bit for bit) and against an fp64 product;
  - times them in one bench (CUDA graphs, weights rotated past L2, interleaved rounds) with
    torch._scaled_mm rowwise and per-tensor in full accumulation, and the fast-accumulation
    128x256 kernel and torch rowwise fast accumulation as the ceiling.

    python3 perf/fp8_full_accum.py [--shapes 8192,8192,8192;4096,14336,4096 | --sweep] [--configs a,b] [--out DIR]
    python3 perf/fp8_full_accum.py --grouped T,E,N,K [--grouped ...]   # grouped fprop and wgrad
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import scalemm
from scalemm.cutlass_kernels.configs import GemmConfig, default_config, sweep_points
from scalemm.timing import bench, l2_copies

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import geomean, operands  # noqa: E402

G = GemmConfig
FULL = {  # label -> config, full accumulation
    "cutlass_128x128": G(128, 128, 128, 2, 1, "cooperative"),
    "cutlass_128x192": G(128, 192, 128, 2, 1, "cooperative"),
    "chunked_128x128": G(128, 128, 128, 2, 1, "cooperative", promotion_chunks=1),
    "chunked_128x192": G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=1),
    "chunked_128x192_pc2": G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2),
    "chunked_128x256": G(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2),
    "chunked_64x256_ping": G(64, 256, 128, 1, 1, "pingpong", promotion_chunks=2),
    # two temporaries: a chunk's adds beside the next chunk's wgmmas (promotion_overlap)
    "chunked_128x128_pc2o": G(128, 128, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True),
    "chunked_128x192_pc2o": G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True),
    "chunked_128x256_pc4o": G(128, 256, 128, 2, 1, "cooperative", promotion_chunks=4, promotion_overlap=True),
    # at most 128 tokens (the heuristic: ping-pong 64x128, or swap-AB ping-pong 64 x 16/32/64, CUTLASS's promotion)
    "cutlass_swap_128x64": G(128, 64, 128, 1, 1, "cooperative", swap_ab=True),
    "chunked_swap_128x64": G(128, 64, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1),
    "chunked_swap_128x32": G(128, 32, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1),
    "chunked_128x64": G(128, 64, 128, 1, 1, "cooperative", promotion_chunks=1),
    # stream-K (few tiles, or a last wave far from full)
    "chunked_128x128_sk": G(128, 128, 128, 1, 1, "cooperative", stream_k=True, promotion_chunks=1),
    "chunked_128x192_sk": G(128, 192, 128, 1, 1, "cooperative", stream_k=True, promotion_chunks=1),
    "chunked_128x256_sk": G(128, 256, 128, 1, 1, "cooperative", stream_k=True, promotion_chunks=2),
}
FAST = {"fast_128x256": G(128, 256, 128, 2, 1, "cooperative"),
        # fast accumulation at 17-128 tokens, beside the heuristic's ping-pong tiles ("heuristic_fast")
        "fast_swap_128x64": G(128, 64, 128, 1, 1, "cooperative", swap_ab=True),
        "fast_swap_128x32": G(128, 32, 128, 1, 1, "cooperative", swap_ab=True)}
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336), (16384, 4096, 4096),
          (4096, 28672, 4096), (16384, 2048, 7168), (2048, 8192, 8192), (1024, 8192, 8192), (4096, 5376, 4096)]


def check(M, N, K, labels):
    """Per full-accumulation config: the fraction of its bf16 outputs equal to CUTLASS 128x128's, and its
    largest error relative to the largest output of an fp64 product."""
    a, bs, sa, sb = operands(M, N, K, 1)
    b = bs[0]
    ref = ((a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T)
    base = scalemm.gemm(a, b, sa, sb, fast_accum=False, config=FULL["cutlass_128x128"])
    out = {}
    for label, cfg in FULL.items():
        if label not in labels:
            continue
        y = scalemm.gemm(a, b, sa, sb, fast_accum=False, config=cfg)
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        out[label] = {"equal_to_cutlass_128x128": (y == base).float().mean().item(), "max_rel_err_fp64": err}
    return out


def time_shape(M, N, K, labels, tuned=False):
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2, one = sa[:, None], sb[None, :], torch.ones((), device="cuda")

    def mm(cfg, fast):
        return lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=fast, config=cfg)
    fns = {"torch_rowwise_full": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2,
                                                            out_dtype=torch.bfloat16, use_fast_accum=False),
           "torch_tensorwise_full": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16, use_fast_accum=False),
           "torch_rowwise_fast": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2,
                                                            out_dtype=torch.bfloat16, use_fast_accum=True),
           "heuristic_full": mm(default_config(M, N, K, fast_accum=False), False)}
    fns.update({k: mm(c, False) for k, c in FULL.items() if k in labels})
    fns.update({k: mm(c, True) for k, c in FAST.items() if k in labels})
    if any(k in FAST for k in labels):
        fns["heuristic_fast"] = mm(default_config(M, N, K, fast_accum=True), True)
    if tuned:  # what scalemm.gemm runs without config=: the tuned-config cache first
        fns["tuned_full"] = lambda i: scalemm.gemm(a, bs[i], sa, sb, out=o, fast_accum=False)
    return bench(fns, copies)


GROUPED = {  # label -> config, grouped fprop and wgrad with full accumulation
    "cutlass_128x128": G(128, 128, 128, 1, 1, "cooperative"),
    "chunked_128x128": G(128, 128, 128, 1, 1, "cooperative", promotion_chunks=1),
    "chunked_128x192": G(128, 192, 128, 1, 1, "cooperative", promotion_chunks=1),
    "chunked_128x256": G(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2),
}


def time_grouped(T, E, N, K):
    """Grouped fprop (T rows over E experts of [N, K]) and wgrad (dW_e [N, K] over each expert's rows), full
    accumulation: every GROUPED config, the heuristic's, and torch._scaled_grouped_mm (fprop)."""
    from scalemm.cutlass_kernels.configs import default_grouped_config, default_wgrad_config
    from scalemm.grouped import pad_groups_transposed
    gen = torch.Generator(device="cuda").manual_seed(T + N)
    sizes = torch.full((E,), T // E, dtype=torch.int64)
    sizes[: T - int(sizes.sum())] += 1
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    copies = min(4, l2_copies(E * N * K))
    a = (torch.randn(T, K, device="cuda", generator=gen) * 4).to(torch.float8_e4m3fn)
    bs = [(torch.randn(E, N, K, device="cuda", generator=gen) * 4).to(torch.float8_e4m3fn) for _ in range(copies)]
    sa, sb = torch.rand(T, device="cuda") + 0.5, torch.rand(E, N, device="cuda") + 0.5
    out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")

    def fprop(cfg):
        return lambda i: scalemm.grouped_gemm(a, bs[i], offs, sa, sb, out=out, fast_accum=False, config=cfg,
                                              scale_a_per="token")
    fns = {"torch_scaled_grouped_mm": lambda i: torch._scaled_grouped_mm(
        a, bs[i].transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=False),
        "heuristic": fprop(default_grouped_config(T, E, N, K, fast_accum=False))}
    fns.update({k: fprop(c) for k, c in GROUPED.items()})
    res = {"fprop": bench(fns, copies)}
    width = (T + 15 * E + 15) // 16 * 16
    dy = (torch.randn(T, N, device="cuda", generator=gen) * 4).to(torch.float8_e4m3fn)
    dy_t, x_t = pad_groups_transposed(dy, offs, width), pad_groups_transposed(a, offs, width)
    s = torch.ones(E, device="cuda")
    dw = torch.empty(E, N, K, dtype=torch.bfloat16, device="cuda")

    def wgrad(cfg):
        return lambda i: scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, s, out=dw, config=cfg)
    fns = {"heuristic": wgrad(default_wgrad_config(N, K, fast_accum=False))}
    fns.update({k: wgrad(c) for k, c in GROUPED.items()})
    res["wgrad"] = bench(fns, 1)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=None, help="M,N,K;M,N,K;... (default: a prefill set)")
    p.add_argument("--out", default="results")
    p.add_argument("--sweep", action="store_true", help="the prefill points (M >= 1024) of perf/gemm_sweep.py instead")
    p.add_argument("--configs", default=",".join([*FULL, *FAST]), help="labels of the configs to run (comma-separated)")
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--tune", action="store_true", help="run scalemm.tune (full accumulation) over the shapes first "
                   "and time its pick too (tuned_full)")
    p.add_argument("--grouped", action="append", default=[], help="T,E,N,K: time grouped fprop and wgrad instead "
                   "(repeatable)")
    args = p.parse_args()
    if args.grouped:
        return run_grouped(args)
    labels = args.configs.split(",")
    if set(labels) - set(FULL) - set(FAST):
        raise SystemExit(f"unknown configs {sorted(set(labels) - set(FULL) - set(FAST))}: {', '.join([*FULL, *FAST])}")
    if args.sweep:
        shapes = [(M, N, K) for _, M, N, K in sweep_points() if M >= 1024]
    elif args.shapes:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")]
    else:
        shapes = SHAPES
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}, torch {torch.__version__}, scalemm {scalemm.__version__}", flush=True)
    if args.tune:
        scalemm.tune(shapes, fast_accum=(False,))
    rows = []
    for M, N, K in shapes:
        row = {"M": M, "N": N, "K": K}
        if not args.no_check:
            row["check"] = check(M, N, K, labels)
            print(f"{M}x{N}x{K} check: " + ", ".join(f"{k} eq {v['equal_to_cutlass_128x128']:.4f} err "
                                                     f"{v['max_rel_err_fp64']:.1e}" for k, v in row["check"].items()))
        us = time_shape(M, N, K, labels, tuned=args.tune)
        row["us"] = us
        tflops = {k: 2 * M * N * K / v / 1e6 for k, v in us.items()}
        row["tflops"] = tflops
        base = us["torch_rowwise_full"]
        print(f"{M}x{N}x{K} TFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in tflops.items())
              + " | x vs torch rowwise full: " + ", ".join(f"{k} {base / v:.3f}" for k, v in us.items()
                                                            if not k.startswith("torch")), flush=True)
        rows.append(row)
    labels = [k for k in rows[0]["us"] if not k.startswith("torch")]
    summary = {k: {"geomean_vs_torch_rowwise_full": geomean([r["us"]["torch_rowwise_full"] / r["us"][k] for r in rows]),
                   "geomean_vs_torch_tensorwise_full": geomean([r["us"]["torch_tensorwise_full"] / r["us"][k]
                                                                for r in rows])} for k in labels}
    print("geomean over the shapes:")
    for k, v in summary.items():
        print(f"  {k:<22} vs rowwise full {v['geomean_vs_torch_rowwise_full']:.3f}   vs per-tensor full "
              f"{v['geomean_vs_torch_tensorwise_full']:.3f}")
    with open(os.path.join(args.out, "fp8_full_accum.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows, "summary": summary}, f, indent=1)


def run_grouped(args):
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}, torch {torch.__version__}, scalemm {scalemm.__version__}", flush=True)
    rows = []
    for spec in args.grouped:
        T, E, N, K = (int(x) for x in spec.split(","))
        res = time_grouped(T, E, N, K)
        for which, us in res.items():
            tflops = {k: 2 * T * N * K / v / 1e6 for k, v in us.items()}
            print(f"{which} T={T} E={E} N={N} K={K} TFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in tflops.items()),
                  flush=True)
        rows.append({"T": T, "E": E, "N": N, "K": K, "us": res})
    with open(os.path.join(args.out, "fp8_full_accum_grouped.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
