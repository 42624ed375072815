"""GEMM-only sweep: scalemm's FP8 per-token x per-channel GEMM against cuBLASLt, same run, same GPU.

For every (model layer, M) point it times, in one process:
  scalemm.gemm with the heuristic's config (explicit config=: a tuned cache never changes it)
  torch._scaled_mm rowwise (the same scaling; the anchor)
  torch._scaled_mm per-tensor (cuBLASLt FP8 with scalar scales)
  torch.matmul bf16
in both FP8 accumulation modes (fast accumulation on / off; torch's use_fast_accum follows), shown
side by side. NVFP4 rows (--formats nvfp4, on by default) time, at the same points, scalemm's
NVFP4-weight GEMM as scalemm.gemm picks it (W4A16 with bf16 activations, W4A4 with NVFP4 ones), the
skinny kernel explicitly where it can run (<= 64 tokens), scalemm's FP8 GEMM (fast accumulation),
bf16 torch.matmul (the anchor) and torchao's NVFP4 weight-only linear where torchao imports; their
summary gives geomeans vs bf16 for decode (M <= 16, N and K >= 4096), M = 64 and prefill (M >= 4096). Timings are medians of CUDA-graph replays (each graph holds several calls, rotating
among weight copies so L2 does not serve repeats: scalemm.timing). Prints a table and the geomean
speed-ups over all points, decode (M <= 128) and prefill (M >= 1024) per mode; writes
gemm_sweep.json and gemm_sweep.png.

  python perf/gemm_sweep.py --out results/            # the sweep
  python perf/gemm_sweep.py --out results/ --tuned    # scalemm.tune over the points first (writes the
                                                      # tuned-config cache), then tuned vs heuristic
  python perf/gemm_sweep.py --out results/ --tune     # + time every TUNING_CANDIDATES entry per point
  python perf/gemm_sweep.py --out results/ --quick    # a few points
  python perf/gemm_sweep.py --m-min 1024 --layers llama3-8b,square --tuned   # some layers' prefill points
  python perf/gemm_sweep.py --out results/ --formats nvfp4   # only the NVFP4 rows
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

import scalemm
from scalemm.cutlass_kernels.configs import TUNING_CANDIDATES, default_config, sweep_points
from scalemm.timing import L2_BYTES, bench, l2_copies  # noqa: F401 (grouped_sweep / nvfp4_explore import them here)

E4M3 = torch.float8_e4m3fn
ANCHORS = ("torch_rowwise", "torch_tensorwise", "torch_bf16")


def operands(M, N, K, copies):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    a = (torch.randn(M, K, device="cuda", generator=g) * 4).to(E4M3)
    bs = [(torch.randn(N, K, device="cuda", generator=g) * 4).to(E4M3) for _ in range(copies)]
    sa = torch.rand(M, device="cuda", generator=g) + 0.5
    sb = torch.rand(N, device="cuda", generator=g) + 0.5
    return a, bs, sa, sb


def time_point(M, N, K, fast_accum, configs=(), with_bf16=True, tuned=False, num_sms=132, epilogues=()):
    """Microseconds per call of every contender at one point: scalemm with the heuristic's config
    ("scalemm"), with what scalemm.gemm resolves itself, the tuned cache first ("scalemm_tuned", when
    `tuned`), with each of `configs` (and each of them again with each (suffix, tree) of `epilogues`, as
    label + suffix), and the torch anchors."""
    copies = l2_copies(N * K)
    a, bs, sa, sb = operands(M, N, K, copies)
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    sa2, sb2, one = sa[:, None], sb[None, :], torch.ones((), device="cuda")
    heuristic = default_config(M, N, K, fast_accum=fast_accum, num_sms=num_sms)
    fns = {"scalemm": lambda i: scalemm.gemm(a, bs[i], sa, sb, out=out, fast_accum=fast_accum, config=heuristic),
           "torch_rowwise": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=sa2, scale_b=sb2, out_dtype=torch.bfloat16,
                                                       use_fast_accum=fast_accum),
           "torch_tensorwise": lambda i: torch._scaled_mm(a, bs[i].T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                          use_fast_accum=fast_accum)}
    if tuned:
        fns["scalemm_tuned"] = lambda i: scalemm.gemm(a, bs[i], sa, sb, out=out, fast_accum=fast_accum)
    for cfg in configs:
        for suffix, tree in (("", None), *epilogues):
            fn = (lambda c, t: lambda i: scalemm.gemm(a, bs[i], sa, sb, out=out, fast_accum=fast_accum, config=c,
                                                      epilogue=t))(cfg, tree)
            try:
                fn(0)
                fns[cfg.label() + suffix] = fn
            except Exception as e:  # a candidate that cannot run this shape
                print(f"  {cfg.label() + suffix} failed at {M}x{N}x{K}: {str(e).splitlines()[0]}", file=sys.stderr)
    if with_bf16:
        a16 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w16 = [b.to(torch.bfloat16) for b in bs]
        fns["torch_bf16"] = lambda i: torch.matmul(a16, w16[i].T)
    return bench(fns, copies)


def torchao_nvfp4():
    """torchao's NVFP4Tensor class (prototype.mx_formats), or None where torchao does not import."""
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    except Exception as e:  # not installed, or built for another torch
        print(f"  torchao NVFP4 not available: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        return None
    return NVFP4Tensor


NVFP4_ANCHOR = "torch_bf16"


def time_point_nvfp4(M, N, K, num_sms=132, torchao=None):
    """Microseconds per call at one point: scalemm.gemm on NVFP4 weights as it resolves the call
    ("nvfp4_w4a16" with bf16 activations, "nvfp4_w4a4" with NVFP4 ones), the skinny kernel where it can
    run ("nvfp4_skinny", "nvfp4_w4a4_skinny"), scalemm's FP8 GEMM ("scalemm_fp8", fast accumulation), bf16 torch.matmul and,
    given torchao's NVFP4Tensor class, torchao's weight-only NVFP4 linear ("torchao_w4a16")."""
    from scalemm.cutlass_kernels.configs import default_nvfp4_config, skinny_config_for_tokens
    from scalemm.gemm_nvfp4 import skinny_problem
    copies = l2_copies(int(N * K * 0.5625), most=64)  # at most 8 copies left small layers' NVFP4 weights in L2
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N + 1)
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
    wq = [scalemm.quantize_nvfp4(w, scaling="token") for w in w16]
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    xq = scalemm.quantize_nvfp4(x, scaling="token")
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    a8, bs8, sa, sb = operands(M, N, K, copies)
    fp8 = default_config(M, N, K, fast_accum=True, num_sms=num_sms)
    fns = {"nvfp4_w4a16": lambda i: scalemm.gemm(x, wq[i], out=out),
           "nvfp4_w4a4": lambda i: scalemm.gemm(xq, wq[i], out=out),
           "scalemm_fp8": lambda i: scalemm.gemm(a8, bs8[i], sa, sb, out=out, fast_accum=True, config=fp8),
           NVFP4_ANCHOR: lambda i: torch.matmul(x, w16[i].T)}
    skinny = skinny_config_for_tokens(M)  # beside the default (the skinny kernel up to 8 tokens, 16 by shape)
    if skinny is not None and skinny_problem(M, N, K, skinny, [(x, "a"), (wq[0].qdata, "b.qdata")]) is None:
        fns["nvfp4_skinny"] = lambda i: scalemm.gemm(x, wq[i], out=out, config=skinny)
        fns["nvfp4_w4a4_skinny"] = lambda i: scalemm.gemm(xq, wq[i], out=out, config=skinny)
    for i in range(copies):  # the CUTLASS kernel's prepared weight copies are made before any capture
        scalemm.gemm(x, wq[i], out=out, config=default_nvfp4_config(M, N, K, num_sms=num_sms))
    ao = torchao_w4a16(torchao, x, w16)
    if ao is not None:
        fns["torchao_w4a16"] = ao
    return bench(fns, copies)


def torchao_w4a16(torchao, x, w16):
    """fn(i) = torchao's NVFP4 weight-only linear of x with weight copy i (F.linear on its NVFP4Tensor:
    on Hopper a dequantization to bf16 per call, then cuBLAS), or None where it cannot run."""
    if torchao is None:
        return None
    try:
        ao = [torchao.to_nvfp4(w) for w in w16]
        torch.nn.functional.linear(x, ao[0])
    except Exception as e:
        print(f"  torchao_w4a16 failed at {tuple(x.shape)} x {tuple(w16[0].shape)}: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return None
    return lambda i: torch.nn.functional.linear(x, ao[i])


NVFP4_GROUPS = {  # the targets: (what, rows it covers)
    "decode": lambda r: r["M"] <= 16 and r["N"] >= 4096 and r["K"] >= 4096,
    "m64": lambda r: r["M"] == 64,
    "prefill": lambda r: r["M"] >= 4096,
    "all": lambda r: True,
}


def summarize_nvfp4(rows):
    """Per contender: geomean and min speed-up over bf16 torch.matmul per group of points; and the
    geomean of torchao's time over scalemm's W4A16 where torchao ran."""
    out = {}
    names = sorted({k for r in rows for k in r["us"] if k != NVFP4_ANCHOR})
    for group, keep in NVFP4_GROUPS.items():
        sel = [r for r in rows if keep(r)]
        g = {"points": len(sel)}
        for name in names:
            ratios = [r["us"][NVFP4_ANCHOR] / r["us"][name] for r in sel if r["us"].get(name)]
            if ratios:
                g[name] = {"geomean_vs_bf16": geomean(ratios), "min_vs_bf16": min(ratios)}
        ao = [r["us"]["torchao_w4a16"] / r["us"]["nvfp4_w4a16"] for r in sel if r["us"].get("torchao_w4a16")]
        if ao:
            g["w4a16_speedup_vs_torchao"] = {"geomean": geomean(ao), "min": min(ao)}
        out[group] = g
    return out


def run_nvfp4(points, sms, out_dir):
    """The NVFP4 rows: table, summary, nvfp4 part of the JSON, gemm_sweep_nvfp4.png."""
    ao = torchao_nvfp4()
    names = ["nvfp4_w4a16", "nvfp4_w4a4", "nvfp4_skinny", "nvfp4_w4a4_skinny", "scalemm_fp8", "torchao_w4a16"]
    print("\nNVFP4-weight GEMM: us per call, and (x) bf16 torch.matmul time / that time")
    hdr = f"{'layer':<28}{'M':>6}{'N':>7}{'K':>7} {'bf16':>9} " + " ".join(f"{n:>22}" for n in names)
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    rows = []
    for label, M, N, K in points:
        us = time_point_nvfp4(M, N, K, num_sms=sms, torchao=ao)
        rows.append({"layer": label, "M": M, "N": N, "K": K, "us": us})
        base = us[NVFP4_ANCHOR]
        cells = [f"{us[n]:>12.1f} ({base / us[n]:>5.2f}x)" if us.get(n) else f"{'-':>22}" for n in names]
        print(f"{label:<28}{M:>6}{N:>7}{K:>7} {base:>9.1f} " + " ".join(cells), flush=True)
    summary = summarize_nvfp4(rows)
    print("\nNVFP4 geomean speed-up over bf16 torch.matmul (min in brackets)")
    print(f"{'':<14}" + "".join(f"{n:>22}" for n in names[:-1] + ["torchao_w4a16"]))
    for group in NVFP4_GROUPS:
        g = summary[group]
        print(f"{group + ' (' + str(g['points']) + ')':<14}" + "".join(
            f"{g[n]['geomean_vs_bf16']:>14.2f} ({g[n]['min_vs_bf16']:>4.2f})" if n in g else f"{'-':>22}"
            for n in names))
        if "w4a16_speedup_vs_torchao" in g:
            t = g["w4a16_speedup_vs_torchao"]
            print(f"{'':<14}scalemm W4A16 vs torchao: geomean {t['geomean']:.2f}x, min {t['min']:.2f}x")
    plot_nvfp4(rows, os.path.join(out_dir, "gemm_sweep_nvfp4.png"))
    return {"rows": rows, "summary": summary}


def plot_nvfp4(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, mark in (("nvfp4_w4a16", "o"), ("nvfp4_w4a4", "s"), ("nvfp4_skinny", "^"), ("nvfp4_w4a4_skinny", "<"),
                       ("scalemm_fp8", "x"), ("torchao_w4a16", "v")):
        pts = [(r["M"], r["us"][NVFP4_ANCHOR] / r["us"][name]) for r in rows if r["us"].get(name)]
        if pts:
            ax.scatter(*zip(*pts), marker=mark, s=16, label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("bf16 torch.matmul time / time")
    ax.set_title("NVFP4-weight GEMMs vs bf16 cuBLAS (same run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def eager_overhead(n=300):
    """Host-side cost per call without CUDA graphs: back-to-back calls on a tiny problem."""
    a, bs, sa, sb = operands(1, 4096, 4096, 1)
    out = torch.empty(1, 4096, dtype=torch.bfloat16, device="cuda")
    fns = {"scalemm": lambda: scalemm.gemm(a, bs[0], sa, sb, out=out),
           "torch_rowwise": lambda: torch._scaled_mm(a, bs[0].T, scale_a=sa[:, None], scale_b=sb[None, :],
                                                     out_dtype=torch.bfloat16)}
    res = {}
    for name, fn in fns.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        res[name] = (time.perf_counter() - t0) / n * 1e6
    return res


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _is_decode(M):
    return M <= 128


def _is_prefill(M):
    return M >= 1024


def summarize(rows, modes, tuned):
    """Geomean speed-ups per accumulation mode over all points, decode (M <= 128) and prefill (M >= 1024)."""
    summary = {}
    for fa in modes:
        sel = [r for r in rows if r["fast_accum"] == fa]
        if not sel:
            continue
        sq = [r for r in sel if r["layer"] == "square"]
        s = {
            "geomean_speedup_vs_rowwise": geomean([r["speedup_vs_rowwise"] for r in sel]),
            "min_speedup_vs_rowwise": min(r["speedup_vs_rowwise"] for r in sel),
            "geomean_speedup_vs_tensorwise": geomean([r["speedup_vs_tensorwise"] for r in sel]),
            "square_8192_vs_tensorwise": sq[0]["speedup_vs_tensorwise"] if sq else None,
            "square_8192_tflops": sq[0]["tflops"] if sq else None,
            "decode_geomean_vs_rowwise": geomean([r["speedup_vs_rowwise"] for r in sel if _is_decode(r["M"])]),
            "prefill_geomean_vs_rowwise": geomean([r["speedup_vs_rowwise"] for r in sel if _is_prefill(r["M"])]),
            "decode_points": sum(_is_decode(r["M"]) for r in sel),
            "prefill_points": sum(_is_prefill(r["M"]) for r in sel),
        }
        if tuned:
            for part, keep in (("", lambda M: True), ("decode_", _is_decode), ("prefill_", _is_prefill)):
                part_rows = [r for r in sel if keep(r["M"])]
                s[f"{part}tuned_geomean_vs_rowwise"] = geomean([r["speedup_tuned_vs_rowwise"] for r in part_rows])
                s[f"{part}tuned_over_heuristic"] = geomean([r["tuned_over_heuristic"] for r in part_rows])
            s["points_where_tuned_config_differs"] = sum(r["tuned_config"] != r["config"] for r in sel)
        summary["fast" if fa else "full"] = s
    return summary


def print_summary(summary, modes, tuned):
    names = ["fast" if fa else "full" for fa in modes if ("fast" if fa else "full") in summary]
    lines = [("all points, vs torch._scaled_mm rowwise", "geomean_speedup_vs_rowwise"),
             ("decode (M <= 128)", "decode_geomean_vs_rowwise"),
             ("prefill (M >= 1024)", "prefill_geomean_vs_rowwise"),
             ("all points, vs per-tensor cuBLASLt", "geomean_speedup_vs_tensorwise"),
             ("min vs rowwise", "min_speedup_vs_rowwise")]
    if tuned:
        lines += [("tuned: all points, vs rowwise", "tuned_geomean_vs_rowwise"),
                  ("tuned: decode (M <= 128)", "decode_tuned_geomean_vs_rowwise"),
                  ("tuned: prefill (M >= 1024)", "prefill_tuned_geomean_vs_rowwise"),
                  ("tuned over heuristic: all", "tuned_over_heuristic"),
                  ("tuned over heuristic: decode", "decode_tuned_over_heuristic"),
                  ("tuned over heuristic: prefill", "prefill_tuned_over_heuristic")]
    print("\nGeomean speed-up (anchor time / scalemm time, > 1 is faster; torch in the same accumulation mode)")
    print(f"{'':<42}" + "".join(f"{n + ' accum':>12}" for n in names))
    for label, key in lines:
        print(f"{label:<42}" + "".join(f"{summary[n][key]:>12.3f}" for n in names))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tune", action="store_true", help="also time every tuning candidate of the point's bucket")
    p.add_argument("--tuned", action="store_true", help="run scalemm.tune over the points first (writes the "
                   "tuned-config cache) and time the tuned pick beside the heuristic's")
    p.add_argument("--no-slow-accum", action="store_true", help="only the fast-accumulation mode")
    p.add_argument("--max-tflop", type=float, default=4.0)
    p.add_argument("--m-min", type=int, default=1, help="only points with M >= this")
    p.add_argument("--m-max", type=int, default=None, help="only points with M <= this")
    p.add_argument("--layers", default=None, help="only these layers: comma-separated prefixes of the labels "
                   "(e.g. llama3-8b,dsv3.q_b,square)")
    p.add_argument("--formats", default="fp8,nvfp4", help="fp8 (the FP8 rows), nvfp4 (the NVFP4 rows), or both")
    args = p.parse_args()
    formats = set(args.formats.split(","))
    if not formats or formats - {"fp8", "nvfp4"}:
        raise SystemExit(f"--formats takes fp8, nvfp4 or fp8,nvfp4, got {args.formats!r}")
    os.makedirs(args.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    points = sweep_points(args.max_tflop * 1e12)
    if args.quick:
        points = [pt for pt in points if pt[0] in ("llama3-8b.qkv", "square")]
    points = [pt for pt in points if pt[1] >= args.m_min and (args.m_max is None or pt[1] <= args.m_max)]
    if args.layers:
        prefixes = tuple(args.layers.split(","))
        points = [pt for pt in points if pt[0].startswith(prefixes)]
        if not points:
            raise SystemExit(f"--layers {args.layers!r} matches no point of the sweep")
    modes = (True,) if args.no_slow_accum else (True, False)
    print(f"GPU: {props.name} ({sms} SMs), torch {torch.__version__}, scalemm {scalemm.__version__}", flush=True)
    if "fp8" not in formats:
        nvfp4 = run_nvfp4(points, sms, args.out)
        with open(os.path.join(args.out, "gemm_sweep.json"), "w") as f:
            json.dump({"gpu": props.name, "sms": sms, "torch": torch.__version__, "scalemm": scalemm.__version__,
                       "nvfp4": nvfp4}, f, indent=1)
        return
    if args.tuned:
        t0 = time.time()
        scalemm.tune([(M, N, K) for _, M, N, K in points], fast_accum=modes)
        print(f"tuning took {time.time() - t0:.0f} s", flush=True)
    from scalemm.gemm import resolve_config
    eager = eager_overhead()
    print(f"eager (no graph) time per call, M=1 N=K=4096, back-to-back: " + ", ".join(f"{k} {v:.1f} us" for k, v in eager.items()))
    mode_hdr = f"{'config':<28}{'scalemm':>8}{'torch':>8}{'x':>6}" + (f"{'tuned':>7}{'gain':>6}" if args.tuned else "")
    hdr = f"{'layer':<28}{'M':>6}{'N':>7}{'K':>7} " + " | ".join(
        f"{('fast' if fa else 'full') + ' accum: ' + mode_hdr}" for fa in modes) + f" | {'bf16':>8}"
    print("times in us; x = torch._scaled_mm rowwise time / scalemm time, torch in the same accumulation mode"
          + ("; tuned = the same for scalemm's tuned pick; gain = heuristic time / tuned time" if args.tuned else ""))
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    rows = []
    for label, M, N, K in points:
        line = f"{label:<28}{M:>6}{N:>7}{K:>7} "
        parts = []
        for fa in modes:
            bucket = "decode" if M <= 64 else "mid" if M <= 128 else "large"
            cands = TUNING_CANDIDATES[bucket] if (args.tune and fa) else ()
            r = time_point(M, N, K, fa, configs=cands, tuned=args.tuned, num_sms=sms)
            bf16_us = r.pop("torch_bf16")
            flop = 2 * M * N * K
            row = {"layer": label, "M": M, "N": N, "K": K, "fast_accum": fa,
                   "config": default_config(M, N, K, fast_accum=fa, num_sms=sms).label(),
                   "us": {**r, "torch_bf16": bf16_us},
                   "tflops": {k: (flop / v / 1e6 if v else None) for k, v in {**r, "torch_bf16": bf16_us}.items()},
                   "speedup_vs_rowwise": r["torch_rowwise"] / r["scalemm"],
                   "speedup_vs_tensorwise": r["torch_tensorwise"] / r["scalemm"]}
            text = (f"{row['config']:<28}{r['scalemm']:>8.1f}{r['torch_rowwise']:>8.1f}"
                    f"{row['speedup_vs_rowwise']:>6.2f}")
            if args.tuned:
                row["tuned_config"] = resolve_config(M, N, K, fast_accum=fa, out_dtype=torch.bfloat16,
                                                     device=torch.device("cuda", 0)).label()
                row["speedup_tuned_vs_rowwise"] = r["torch_rowwise"] / r["scalemm_tuned"]
                row["tuned_over_heuristic"] = r["scalemm"] / r["scalemm_tuned"]
                text += f"{row['speedup_tuned_vs_rowwise']:>7.2f}{row['tuned_over_heuristic']:>6.2f}"
            rows.append(row)
            parts.append(" " * 12 + text)
        print(line + " | ".join(parts) + f" | {bf16_us:>8.1f}", flush=True)
    summary = summarize(rows, modes, args.tuned)
    if args.tune:
        tune = {}
        for r in rows:
            cands = {k: v for k, v in r["us"].items() if k not in ANCHORS + ("scalemm_tuned",) and v}
            if len(cands) > 1:
                best = min(cands, key=cands.get)
                tune.setdefault(("decode" if r["M"] <= 64 else "mid" if r["M"] <= 128 else "large"), []).append(
                    {"layer": r["layer"], "M": r["M"], "N": r["N"], "K": r["K"], "best": best,
                     "best_over_default": r["us"]["scalemm"] / cands[best]})
        summary["tuning"] = tune
        print("\nTuning: per bucket, how often each candidate wins, and the geomean gain of the best over the heuristic")
        for bucket, items in tune.items():
            wins = {}
            for it in items:
                wins[it["best"]] = wins.get(it["best"], 0) + 1
            print(f"  {bucket:<7} gain {geomean([it['best_over_default'] for it in items]):.3f}  wins {wins}")
    summary["eager_us_per_call_M1_4096"] = eager
    result = {"gpu": props.name, "sms": sms, "torch": torch.__version__,
              "scalemm": scalemm.__version__, "tuned": args.tuned, "rows": rows, "summary": summary}
    if "nvfp4" in formats:
        result["nvfp4"] = run_nvfp4(points, sms, args.out)
    with open(os.path.join(args.out, "gemm_sweep.json"), "w") as f:
        json.dump(result, f, indent=1)
    print_summary(summary, modes, args.tuned)
    print("\nSummary (JSON):")
    print(json.dumps({k: v for k, v in summary.items() if k != "tuning"}, indent=1))
    plot(rows, props.name, os.path.join(args.out, "gemm_sweep.png"))


def plot(rows, gpu, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(15, 5), sharey=True)
    for ax, fa in zip(axes, (True, False)):
        sel = [r for r in rows if r["fast_accum"] == fa]
        if not sel:
            continue
        ms = sorted({r["M"] for r in sel})
        for M in ms:
            pts = [r for r in sel if r["M"] == M]
            ax.scatter([M] * len(pts), [r["speedup_vs_rowwise"] for r in pts], s=14, label=None, c="tab:blue")
            ax.scatter([M] * len(pts), [r["speedup_vs_tensorwise"] for r in pts], s=14, marker="x", c="tab:orange")
            if "speedup_tuned_vs_rowwise" in pts[0]:
                ax.scatter([M] * len(pts), [r["speedup_tuned_vs_rowwise"] for r in pts], s=14, marker="^",
                           c="tab:green")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_title(f"{'fast' if fa else 'full'} accumulation: speed-up of scalemm (per-token x per-channel)")
    axes[0].set_ylabel("torch._scaled_mm time / scalemm time")
    axes[0].scatter([], [], c="tab:blue", label="vs rowwise (same scaling)")
    axes[0].scatter([], [], c="tab:orange", marker="x", label="vs per-tensor cuBLASLt")
    if rows and "speedup_tuned_vs_rowwise" in rows[0]:
        axes[0].scatter([], [], c="tab:green", marker="^", label="tuned config, vs rowwise")
    axes[0].legend()
    fig.suptitle(f"scalemm FP8 GEMM sweep on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
