"""NVFP4-weight GEMMs against bf16 cuBLAS (torch.matmul / torch._grouped_mm), one process, one GPU.

Dense W4A16 and W4A4 (scalemm's heuristic) and every candidate config, on decode and prefill
token counts of Llama-like shapes, and grouped (MoE) W4A16 points. Microseconds per call are
medians of CUDA-graph replays with the weights rotated past L2 (perf/gemm_sweep.py's bench).

  python perf/nvfp4_explore.py --out results/            # table + nvfp4_explore.json + .png
  python perf/nvfp4_explore.py --quick                   # two token counts, no candidates
  python perf/nvfp4_explore.py --from-text LOG --out D   # JSON + plot from a saved table

Where torchao imports (its wheel carried in .whl/), a `torchao_w4a16` column times torchao's NVFP4
weight-only linear (`F.linear(x, NVFP4Tensor)`: on Hopper it dequantizes the weight to bf16 on
every call, then runs cuBLAS), the peer emulation scalemm is compared with.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_sweep import bench, l2_copies, torchao_nvfp4, torchao_w4a16  # noqa: E402
from quant_bench import moe_routing_counts  # noqa: E402

import scalemm  # noqa: E402
from scalemm.cutlass_kernels import GemmConfig  # noqa: E402
from scalemm.cutlass_kernels.configs.sm90 import skinny_block_tiles  # noqa: E402
from scalemm.cutlass_kernels.configs import (SKINNY_MAINLOOPS, SkinnyConfig,  # noqa: E402
                                            default_nvfp4_grouped_config, default_nvfp4_tokens_on_a_config,
                                            nvfp4_decodes_activations,
                                            skinny_config_for_groups,
                                            default_nvfp4_skinny_config, skinny_config_for_tokens)
from scalemm.gemm_nvfp4 import (default_nvfp4_config, dequantize_rows_bf16, gemm_nvfp4,  # noqa: E402
                                 grouped_gemm_nvfp4, skinny_by_default, skinny_problem, skinny_splits)


def candidates(M, N, K, which="all"):
    """Configs timed beside the default. Up to 64 tokens: the skinny kernel with each fixed split count
    (0: the launcher fits the split to the GPU) and the CUTLASS kernel's heuristic pick ("cutlass"); with
    which="all" also every CUTLASS candidate tile."""
    out = []
    skinny = skinny_config_for_tokens(M)
    if skinny is not None:
        out += [SkinnyConfig(skinny.token_tiles, s) for s in (0, 1, 2, 4, 8)]
        out += [SkinnyConfig(skinny.token_tiles, s, "lean") for s in (0, 2, 4, 8)]
        out += [default_nvfp4_config(M, N, K)]
    if which != "all":
        return out
    tn = [16] if M <= 16 else [32, 64] if M <= 64 else [128] if M <= 128 else [256]
    for n in tn:
        out += [GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True),
                GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True, stream_k=True)]
        if n <= 128:  # a ping-pong warpgroup holds all 128 x n accumulators: 256 spills
            out.append(GemmConfig(128, n, 64, 1, 1, "pingpong", swap_ab=True))
    if M > 128:
        out += [GemmConfig(128, 256, 64, 2, 1, "cooperative", swap_ab=True)]
    return list(dict.fromkeys(out))


def auto_splits(M, N, K):
    """The split count the skinny kernel's launcher picks for splits=0 at this shape (W4A16, bf16 out), or
    None where the kernel does not run: the labels skinny_tN (no _sN) in the tables ran with it."""
    cfg = skinny_config_for_tokens(M)
    if cfg is None or K % 32:
        return None
    w = scalemm.quantize_nvfp4(torch.ones(N, K, device="cuda", dtype=torch.bfloat16), scaling="token")
    return skinny_splits(torch.ones(M, K, device="cuda", dtype=torch.bfloat16), w, cfg)


def point(M, N, K, which="all", loops=tuple(SKINNY_MAINLOOPS)):
    copies = l2_copies(int(N * K * 0.5625), most=64)  # the NVFP4 weights past L2 too (at most 8 left 1024 x 4096's in it)
    g = torch.Generator(device="cuda").manual_seed(M + N)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    xq = scalemm.quantize_nvfp4(x, scaling="token")
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(copies)]
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    if which in ("loops", "wgmma"):  # the skinny kernel's main loops against bf16 cuBLAS ("wgmma": and the
        # CUTLASS kernel's pick, the wgmma loop's rival from 17 tokens; kernels of build_set("decode"))
        fns = {"torch_bf16": lambda i: torch.matmul(x, w16[i].T)}
        # above 64 tokens: blocks of 32 or 64 tokens side by side, as skinny_blocks_config runs them
        base = skinny_config_for_tokens(M) or SkinnyConfig(skinny_block_tiles(M))
        for w in ws:  # the prepared copies (wgmma loop, CUTLASS kernel) are made before the graphs are captured
            gemm_nvfp4(x, w, out=out, config=replace(base, mainloop="wgmma"))
        loops = [loop for loop in loops if loop != "resident" or base.token_tiles == 1]  # resident: 1 tile
        for c in (replace(base, mainloop=loop) for loop in loops):
            if (which == "wgmma" and c.mainloop in ("lean", "resident")) or skinny_problem(M, N, K, c, []):
                continue
            for name, a in ((c.label(), x), ("w4a4_" + c.label(), xq)):
                fn = (lambda c, a: lambda i: gemm_nvfp4(a, ws[i], out=out, config=c))(c, a)
                try:
                    fn(0)
                    fns[name] = fn
                except ValueError as e:  # resident: a split's tokens may not fit its shared memory
                    print(f"  {name} cannot run: {str(e).splitlines()[0][:100]}", file=sys.stderr)
        if which == "loops" and default_nvfp4_skinny_config(M, N, K) is not None:  # what a call without a config
            fns["default"] = lambda i: gemm_nvfp4(x, ws[i], out=out)               # runs (a skinny kernel here)
            fns["w4a4_default"] = lambda i: gemm_nvfp4(xq, ws[i], out=out)
        if which == "wgmma":
            cutlass = default_nvfp4_config(M, N, K)
            fns["w4a16"] = lambda i: gemm_nvfp4(x, ws[i], out=out, config=cutlass)
            fns["w4a4"] = lambda i: gemm_nvfp4(xq, ws[i], out=out, config=cutlass)  # the bf16 decode pass + W4A16
        return bench(fns, copies)
    cutlass = default_nvfp4_config(M, N, K)  # "w4a16"/"w4a4": the CUTLASS kernel (the default may be the skinny one)
    for w in ws:  # prepare every weight copy for the CUTLASS kernel before the graphs are captured
        gemm_nvfp4(x, w, out=out, config=cutlass)
    fns = {"torch_bf16": lambda i: torch.matmul(x, w16[i].T),
           "w4a16": lambda i: gemm_nvfp4(x, ws[i], out=out, config=cutlass),
           "w4a4": lambda i: gemm_nvfp4(xq, ws[i], out=out, config=cutlass)}
    if nvfp4_decodes_activations(cutlass) and K % 32 == 0:  # "w4a4" runs the bf16 pass: the mainloop decode beside it
        fns["w4a4_mainloop"] = lambda i: gemm_nvfp4(xq, ws[i], out=out, config=cutlass, activation_decode="mainloop")
    if M >= 256 and K % 32 == 0:  # and the tokens on A (the weights' pass, the tokens decoded in registers)
        on_a = default_nvfp4_tokens_on_a_config(M, N, K)
        fns["w4a4_tokens_on_a"] = lambda i: gemm_nvfp4(xq, ws[i], out=out, config=on_a, activation_decode="registers")
    ao = torchao_w4a16(torchao_nvfp4(), x, w16)
    if ao is not None:
        fns["torchao_w4a16"] = ao
    skinny = skinny_config_for_tokens(M)
    if which != "none" and skinny is not None and K % 32 == 0:  # W4A4 with the activations decoded in the kernel
        fns["w4a4_" + skinny.label()] = lambda i: gemm_nvfp4(xq, ws[i], out=out, config=skinny)
        c = replace(skinny, mainloop="lean")  # the baseline main loop (the default is stepped)
        fns["w4a4_" + c.label()] = lambda i: gemm_nvfp4(xq, ws[i], out=out, config=c)
        # timing only (no alpha_a): the bf16 decode pass + the W4A16 skinny kernel, the alternative for
        # many tokens, where every warp decoding every token costs more than one pass
        fns["w4a4_pass_" + skinny.label()] = lambda i: gemm_nvfp4(dequantize_rows_bf16(xq), ws[i], out=out,
                                                                   config=skinny)
    if which != "none":
        for c in candidates(M, N, K, which):
            fn = (lambda c: lambda i: gemm_nvfp4(x, ws[i], out=out, config=c))(c)
            try:
                fn(0)
                fns[c.label()] = fn
            except Exception as e:
                print(f"  {c.label()} failed: {str(e).splitlines()[0]}", file=sys.stderr)
    return bench(fns, copies)


def grouped_point(G, per, N, K, which="all", routing="uniform"):
    """G experts, T = G * per rows: `per` rows each ("uniform") or a skewed top-8 routing of T / 8 tokens
    (quant_bench.moe_routing_counts: popular experts get many rows, some none)."""
    T = G * per
    g = torch.Generator(device="cuda").manual_seed(G + per)
    w16 = torch.randn(G, N, K, device="cuda", generator=g).to(torch.bfloat16)
    wq = scalemm.quantize_nvfp4_stacked(w16, scaling="token")
    x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
    if routing == "uniform":
        offs = (torch.arange(1, G + 1, device="cuda") * per).to(torch.int32)
    else:
        offs = moe_routing_counts(T // 8, G, 8).cumsum(0).to(torch.int32).cuda()
    out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
    cutlass = default_nvfp4_grouped_config(T, G, N, K)  # "w4a16_grouped": the CUTLASS kernel
    grouped_gemm_nvfp4(x, wq, offs, out=out, config=cutlass)
    w16t = w16.transpose(-2, -1)
    fns = {"torch_grouped_bf16": lambda i: torch._grouped_mm(x, w16t, offs=offs),
           "w4a16_grouped": lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out, config=cutlass)}
    skinny = skinny_config_for_groups(T, G)
    if skinny is not None:  # the skinny kernel, W4A16 and W4A4 (activations decoded in the kernel)
        xq = scalemm.quantize_nvfp4_grouped(x, offs, scaling="token")
        fns["w4a4_grouped"] = lambda i: grouped_gemm_nvfp4(xq, wq, offs, out=out, config=cutlass)
        fns["w4a16_grouped_" + skinny.label()] = lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out, config=skinny)
        fns["w4a4_grouped_" + skinny.label()] = lambda i: grouped_gemm_nvfp4(xq, wq, offs, out=out, config=skinny)
        c = replace(skinny, mainloop="lean")  # the baseline main loop (the default is stepped)
        fns["w4a16_grouped_" + c.label()] = lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out, config=c)
    for n in (16, 32, 64, 128, 256) if which == "all" else ():  # the CUTLASS tiles (kernels of --set nvfp4)
        c = GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True)
        fns[c.label()] = (lambda c: lambda i: grouped_gemm_nvfp4(x, wq, offs, out=out, config=c))(c)
        fns[c.label()](0)
    return bench(fns, 1)


def _row(name, r, base_key):
    base = r[base_key]
    return name + ": " + "  ".join(f"{k}={v:.1f}({base / v:.2f}x)" for k, v in sorted(r.items(), key=lambda kv: kv[1]))


def parse_text(path):
    """The points of a saved table (the lines this script prints)."""
    points = []
    for line in open(path):
        head, _, rest = line.partition(": ")
        times = {k: float(v) for k, v in re.findall(r"(\S+?)=([\d.]+)\(", rest)}
        if line.startswith("M="):
            m = re.match(r"M=\s*(\d+) N=\s*(\d+) K=\s*(\d+)", head)
            points.append({"kind": "dense", "M": int(m[1]), "N": int(m[2]), "K": int(m[3]), "us": times})
        elif line.startswith("grouped"):
            m = re.match(r"grouped G=(\d+) per=(\d+) N=(\d+) K=(\d+)( skewed)?", head)
            points.append({"kind": "grouped", "G": int(m[1]), "per": int(m[2]), "N": int(m[3]), "K": int(m[4]),
                           "routing": "skewed" if m[5] else "uniform", "us": times})
    return points


def save(points, device, out):
    from pathlib import Path
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvfp4_explore.json").write_text(json.dumps({"device": device, "points": points}, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    dense = [p for p in points if p["kind"] == "dense"]
    grouped = [p for p in points if p["kind"] == "grouped"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    labels = [f"{p['N']}x{p['K']}\nM={p['M']}" for p in dense]
    def first(us, match):  # the time of the first key that `match` accepts (None: none there)
        return next((v for k, v in us.items() if match(k)), None)
    series = (("CUTLASS W4A16", "o", lambda k: re.fullmatch(r"t128x\d+x64_c1x1_coop_swap(_sk)?", k)),
              ("CUTLASS W4A4 (bf16 decode pass)", "s", lambda k: k == "w4a4"),
              ("CUTLASS W4A4, decoded in the mainloop", "D", lambda k: k == "w4a4_mainloop"),
              ("skinny W4A16", "^", lambda k: re.fullmatch(r"skinny_t\d+", k)),
              ("skinny W4A16 registers loop (removed)", ">", lambda k: re.fullmatch(r"skinny_t\d+_registers", k)),
              ("skinny W4A16 stepped loop", "<", lambda k: re.fullmatch(r"skinny_t\d+_stepped", k)),
              ("skinny W4A4", "v", lambda k: re.fullmatch(r"w4a4_skinny_t\d+", k)))
    for name, mark, match in series:
        ts = [first(p["us"], match) for p in dense]
        axes[0].plot(range(len(dense)), [p["us"]["torch_bf16"] / t if t else float("nan") for p, t in zip(dense, ts)],
                     mark + "-", label=name)
    axes[0].axhline(1.0, color="gray", lw=0.8)
    axes[0].set_xticks(range(len(dense)), labels, fontsize=6)
    axes[0].set_ylabel("speed-up vs bf16 cuBLAS (same run)")
    axes[0].set_title(f"NVFP4-weight GEMM, {device}")
    axes[0].legend()
    for i, (pattern, name) in enumerate(((r"w4a16_grouped", "CUTLASS"), (r"w4a16_grouped_skinny_t\d+", "skinny"))):
        ts = [first(p["us"], lambda k: re.fullmatch(pattern, k)) for p in grouped]
        axes[1].bar([j + 0.4 * i for j in range(len(grouped))],
                    [p["us"]["torch_grouped_bf16"] / t if t else 0 for p, t in zip(grouped, ts)], 0.4, label=name)
    axes[1].legend(fontsize=7)
    axes[1].axhline(1.0, color="gray", lw=0.8)
    axes[1].set_xticks(range(len(grouped)), [f"G={p['G']}\n{p['per']}/exp" + ("\nskewed" if p.get("routing") == "skewed" else "")
                                              for p in grouped], fontsize=7)
    axes[1].set_title("grouped W4A16 vs torch._grouped_mm")
    fig.tight_layout()
    fig.savefig(out / "nvfp4_explore.png", dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="two token counts, no candidates")
    p.add_argument("--ms", default=None, help="token counts, comma-separated (default 1,16,64,128,1024,4096)")
    p.add_argument("--candidates", choices=("all", "skinny", "loops", "wgmma", "none"), default="all",
                   help="skinny: only the skinny kernel's splits and the CUTLASS pick (kernels of --set tests); "
                        "loops: only the skinny kernel's main loops (stepped, lean, wgmma, resident: up to 8), what a "
                        "call without a config runs (default, w4a4_default) and bf16, up to 64 tokens; "
                        "wgmma: the stepped and wgmma loops, the CUTLASS pick and bf16 (kernels of build_set('decode'))")
    p.add_argument("--loops", default=",".join(SKINNY_MAINLOOPS),
                   help="with --candidates loops: the main loops to time (default: all of SKINNY_MAINLOOPS)")
    p.add_argument("--grouped", choices=("all", "decode", "none"), default="all",
                   help="grouped points: all, only the decode ones (<= 16 rows per expert), or none")
    p.add_argument("--shapes", default=None, help="dense N x K shapes, e.g. 4096x4096,1024x4096 (default: four "
                                                     "Llama shapes)")
    p.add_argument("--out", default=None, help="directory for nvfp4_explore.json / .png")
    p.add_argument("--from-text", default=None, help="a saved table to turn into JSON + plot")
    args = p.parse_args()
    unknown = set(args.loops.split(",")) - set(SKINNY_MAINLOOPS)
    if unknown:
        raise SystemExit(f"--loops takes main loops of {sorted(SKINNY_MAINLOOPS)}, got {sorted(unknown)}")
    if args.from_text:
        first = open(args.from_text).readline().strip()
        save(parse_text(args.from_text), first.removeprefix("GPU: ").split(",")[0], args.out or ".")
        return
    shapes = ([tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")] if args.shapes else
              [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336)])
    ms = [16, 4096] if args.quick else [int(m) for m in args.ms.split(",")] if args.ms else [1, 16, 64, 128, 1024, 4096]
    device = torch.cuda.get_device_name()
    print(device)
    points = []
    for N, K in shapes:
        for M in ms:
            r = point(M, N, K, "none" if args.quick else args.candidates, tuple(args.loops.split(",")))
            auto = auto_splits(M, N, K)
            points.append({"kind": "dense", "M": M, "N": N, "K": K, "us": r, "skinny_auto_splits": auto})
            default = (skinny_by_default() and default_nvfp4_skinny_config(M, N, K)) or default_nvfp4_config(M, N, K)
            print(_row(f"M={M:5d} N={N:5d} K={K:5d} default={default.label()} skinny_s0={auto}", r, "torch_bf16"),
                  flush=True)
    # (G, rows per expert, N, K, routing); "skewed": where the skinny kernel's blocks of 8 rows re-read
    # a popular expert's weights
    grouped = [(8, 2048, 2048, 7168, "uniform"), (64, 2, 2048, 7168, "uniform"), (64, 32, 1536, 4096, "uniform"),
               (128, 1, 1536, 4096, "uniform"), (128, 8, 1536, 2048, "uniform"), (128, 1, 1536, 4096, "skewed"),
               (64, 2, 2048, 7168, "skewed")]
    grouped = [pt for pt in grouped if args.candidates not in ("loops", "wgmma") and
               (args.grouped == "all" or (args.grouped == "decode" and pt[1] <= 16))]
    for G, per, N, K, routing in grouped:
        r = grouped_point(G, per, N, K, "none" if args.quick else args.candidates, routing)
        points.append({"kind": "grouped", "G": G, "per": per, "N": N, "K": K, "routing": routing, "us": r})
        print(_row(f"grouped G={G} per={per} N={N} K={K}" + (f" {routing}" if routing != "uniform" else ""), r,
                   "torch_grouped_bf16"), flush=True)
    if args.out:
        save(points, device, args.out)


if __name__ == "__main__":
    main()
