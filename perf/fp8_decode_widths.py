"""FP8 at 33-128 tokens: tiles whose weight side is any multiple of 8 wide, so that one wave holds the output.

cuBLASLt's per-tensor FP8 kernels at 64-128 tokens (perf/cublas_kernels.py --points decode) put the tokens on the
wgmma's M side (64 per warpgroup) and the weights on its N side, with a width chosen so that the grid is about one
wave: 72 x 64 tiles for N = 9216 at 64 tokens (128 CTAs), 144 x 64 at 128 tokens (2 x 64), 80 x 128 for N = 10240.
Widths other than 8 / 16 / 32 / 64 / 96 / 128 / 192 / 256 are CUTLASS's extended wgmma shapes (configs.mma_prelude).
This script times, in one process per point (scalemm.timing: CUDA graphs, weights rotated past L2):
  the heuristic's pick ("scalemm"), torch._scaled_mm rowwise and per-tensor, and the candidates
  ping-pong 64 x w (one warpgroup per 64-token tile) and cooperative 128 x w (one 128-token tile), unswapped, for
  every width w in --widths whose tiles fill at least --min-fill of one wave (and at most one wave).

  python perf/fp8_decode_widths.py --build                 # compile the candidates (no GPU needed)
  python perf/fp8_decode_widths.py --out DIR [--ms 64,128] [--points sweep|models|both]
  python perf/fp8_decode_widths.py --ab --points check --ms 36,44,... --out DIR   # the rule against the previous one
      (--before one-wave: the rule before the one-wave tiles; --before clusters: before the clusters of 2)
  python perf/fp8_decode_widths.py --clusters --points both --ms 1,16,65,... --out DIR   # the pick against its
      clusters of 2 along the tokens and, up to 16 tokens, the 128-row swap-AB tile (cluster_variants)
  python perf/fp8_decode_widths.py --token-clusters ...    # the one-wave candidates in clusters of 2 along the tokens

Writes DIR/fp8_decode_widths.json (us per contender per point) and prints, per point, the best candidate and the
heuristic against cuBLASLt per-tensor and rowwise.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fp8_prefill_model import config_of_key  # noqa: E402  (the one parser of kernel keys)

WIDTHS = (32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 144, 160, 192, 224, 256)
# Layers of models outside perf/gemm_sweep.py's sweep (held out from any fit): (label, N, K)
HELD_OUT = (("llama3-405b.qkv", 18432, 16384), ("llama3-405b.o", 16384, 16384), ("mistral-large.qkv", 14336, 12288),
            ("mistral-large.o", 12288, 12288), ("gemma3-27b.qkv", 8192, 5376), ("gemma3-27b.o", 5376, 4096),
            ("gemma3-27b.gate_up", 43008, 5376), ("gpt-oss-120b.qkv", 5120, 2880), ("gpt-oss-120b.o", 2880, 4096),
            ("qwen2.5-7b.qkv", 4608, 3584), ("qwen2.5-7b.gate_up", 37888, 3584), ("qwen2.5-7b.down", 3584, 18944),
            ("mixtral.qkv", 6144, 4096), ("phi3-mini.qkv", 9216, 3072), ("phi3-mini.gate_up", 16384, 3072))
# Layers of neither set, for checking a rule fitted on the two above (--points check)
CHECK = (("gemma2-9b.qkv", 8192, 3584), ("gemma2-9b.o", 3584, 4096), ("gemma2-9b.gate_up", 28672, 3584),
         ("gemma2-9b.down", 3584, 14336), ("mistral-nemo.qkv", 6144, 5120), ("mistral-nemo.o", 5120, 4096),
         ("mistral-nemo.down", 5120, 14336), ("phi4.qkv", 7680, 5120), ("phi4.gate_up", 35840, 5120),
         ("phi4.down", 5120, 17920), ("yi-34b.qkv", 9216, 7168), ("yi-34b.o", 7168, 7168),
         ("yi-34b.down", 7168, 20480), ("qwen2.5-32b.qkv", 7168, 5120), ("qwen2.5-32b.down", 5120, 27648),
         ("command-r.qkv", 24576, 8192))
# ... and for checking it again after a change made from the first check (--points check2)
CHECK2 = (("llama2-13b.qkv", 15360, 5120), ("llama2-13b.o", 5120, 5120), ("llama2-13b.gate_up", 27648, 5120),
          ("llama2-13b.down", 5120, 13824), ("falcon-40b.qkv", 9216, 8192), ("glm4-9b.qkv", 4608, 4096),
          ("glm4-9b.gate_up", 27392, 4096), ("glm4-9b.down", 4096, 13696), ("starcoder2-15b.qkv", 7168, 6144),
          ("starcoder2-15b.up", 24576, 6144), ("starcoder2-15b.down", 6144, 24576), ("gemma3-12b.qkv", 8192, 3840))


def candidates(M: int, N: int, num_sms: int, min_fill: float, widths=WIDTHS, extra=(), token_clusters=False):
    """The one-wave candidates (the module's docstring); `token_clusters`: the ping-pong ones with two token tiles in
    clusters of 2 along the tokens (sm90.token_cluster) instead."""
    from scalemm.cutlass_kernels.configs import GemmConfig
    from scalemm.cutlass_kernels.configs.sm90 import token_cluster
    out = list(extra)
    for w in widths:
        ping = GemmConfig(64, w, 128, 1, 1, "pingpong")
        tiles = -(-M // 64) * -(-N // w)
        if min_fill * num_sms <= tiles <= num_sms:
            out.append(token_cluster(ping) if token_clusters and M > 64 else ping)
        if M > 64 and min_fill * num_sms <= -(-N // w) <= num_sms:
            out.append(GemmConfig(128, w, 128, 1, 1, "cooperative"))
    return list(dict.fromkeys(out))


def points(which: str, ms, layers=None):
    from scalemm.cutlass_kernels.configs import sweep_points
    pts = []
    if which in ("sweep", "both"):
        sweep = sorted({(label, N, K) for label, M, N, K in sweep_points(1e18) if M == 1 and label != "square"})
        pts += [(label, M, N, K) for label, N, K in sweep for M in ms]
    if which in ("models", "both"):
        pts += [(label, M, N, K) for label, N, K in HELD_OUT for M in ms]
    if which in ("check", "check2"):
        pts += [(label, M, N, K) for label, N, K in (CHECK if which == "check" else CHECK2) for M in ms]
    return [p for p in pts if not layers or p[0] in layers]


def previous_config(M: int, N: int, num_sms: int, before: str = "one-wave"):
    """The rule before a change, for --ab: "one-wave" the rule before the one-wave tiles (configs.sm90's
    _token_tiles_config; fast accumulation, 17-128 tokens), "clusters" the rule before the clusters of 2 along the
    tokens and the 128x16 tile at 1-16 tokens (thirty-eighth session: today's rule in clusters of 1, 64x16 tiles)."""
    from dataclasses import replace
    from scalemm.cutlass_kernels.configs import GemmConfig, default_config, sm90
    if before == "one-wave":
        return sm90._token_tiles_config(M, N, num_sms)
    if M <= 16:
        return GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True)
    return replace(default_config(M, N, 4096, num_sms=num_sms), cluster_m=1, cluster_n=1)


def cluster_variants(M: int, N: int, K: int, num_sms: int):
    """--clusters: the heuristic's pick and, from 33 tokens, the previous rule's (previous_config), each also in
    clusters of 2 along the tokens where it has two token tiles or more (token_cluster); up to 32 tokens the swap-AB
    pick also in clusters of 2 along the weights (multicast of the tokens' tile) and the cooperative 128-row swap-AB
    tile of the same width (half the CTAs, each streaming twice the weights). Run 1 (commit 10379ab) also timed every
    pick in clusters of 2 along the weights and the 128-row tiles in clusters of 2 and with 128-deep k-tiles."""
    from dataclasses import replace
    from scalemm.cutlass_kernels.configs import GemmConfig, default_config
    from scalemm.cutlass_kernels.configs.sm90 import token_cluster, token_tile_count
    pick = default_config(M, N, K, num_sms=num_sms)
    picks = [pick] if M <= 32 else [pick, previous_config(M, N, num_sms)]  # run 2: the one-wave rule's pick
    out = []
    for p in picks:
        out.append(p)
        if token_tile_count(p, M) >= 2:
            out.append(token_cluster(p))
    if M <= 32 and pick.swap_ab and pick.tile_m == 64:
        out += [replace(pick, cluster_m=2), GemmConfig(128, pick.tile_n, 256, 1, 1, "cooperative", swap_ab=True)]
    return list(dict.fromkeys(out))


def contenders(M, N, K, num_sms, min_fill, extra, ab, clusters=False, before="one-wave", token_clusters=False):
    """The configs timed beside the heuristic's pick: --ab the previous rule's pick, --clusters the pick's cluster
    variants (cluster_variants), else the candidates."""
    if ab:
        return list(dict.fromkeys([previous_config(M, N, num_sms, before), *extra]))
    if clusters:
        return list(dict.fromkeys([*cluster_variants(M, N, K, num_sms), *extra]))
    return candidates(M, N, num_sms, min_fill, extra=extra, token_clusters=token_clusters)


def build(pts, num_sms, min_fill, jobs, extra=(), ab=False, clusters=False, before="one-wave", token_clusters=False):
    import torch
    from scalemm.cutlass_kernels.configs import default_config
    from scalemm.gemm import _resolve_epilogue, bias_leaf, gemm_kernel_spec
    from scalemm.jit import build_many
    specs = []
    for _, M, N, K in pts:
        for cfg in [default_config(M, N, K, num_sms=num_sms), *contenders(M, N, K, num_sms, min_fill, extra, ab, clusters, before,
                                                                          token_clusters)]:
            tree = _resolve_epilogue(None, torch.bfloat16, bias=bias_leaf(False, True, cfg))
            specs.append(gemm_kernel_spec(cfg, fast_accum=True, out_dtype=torch.bfloat16, epilogue=tree)[0])
    for spec, err in build_many(specs, jobs=jobs):
        if err:
            print(f"{spec.name}: FAILED {err.splitlines()[0]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="store_true", help="only compile the candidates (no GPU needed)")
    p.add_argument("--ms", default="64,128")
    p.add_argument("--points", default="sweep", choices=("sweep", "models", "both", "check", "check2"))
    p.add_argument("--min-fill", type=float, default=0.5, help="least fraction of one wave a candidate's tiles fill")
    p.add_argument("--num-sms", type=int, default=132, help="with --build: the GPU's SMs")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--layers", default="", help="only these layers (comma-separated labels)")
    p.add_argument("--extra", default="", help="kernel keys timed at every point, e.g. t64x64x128_c1x1_ping_swap")
    p.add_argument("--ab", action="store_true",
                   help="time the heuristic's pick against the previous rule's (no candidates)")
    p.add_argument("--before", default="one-wave", choices=("one-wave", "clusters"),
                   help="with --ab: the rule before which change (previous_config)")
    p.add_argument("--token-clusters", action="store_true",
                   help="the one-wave ping-pong candidates with two token tiles in clusters of 2 along the tokens")
    p.add_argument("--clusters", action="store_true",
                   help="time the heuristic's pick against its cluster variants (cluster_variants; no candidates)")
    p.add_argument("--out", default="results")
    args = p.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    pts = points(args.points, ms, [x for x in args.layers.split(",") if x])
    extra = [config_of_key(k, swap=True) for k in args.extra.split(",") if k]
    if args.build:
        build(pts, args.num_sms, args.min_fill, args.jobs, extra, args.ab, args.clusters, args.before,
              args.token_clusters)
        return
    import torch
    from gemm_sweep import time_point
    from scalemm.cutlass_kernels.configs import default_config
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    build(pts, num_sms, args.min_fill, args.jobs, extra, args.ab, args.clusters, args.before,
              args.token_clusters)
    print(f"GPU: {torch.cuda.get_device_name()} ({num_sms} SMs), torch {torch.__version__}")
    rows = []
    for label, M, N, K in pts:
        cands = contenders(M, N, K, num_sms, args.min_fill, extra, args.ab, args.clusters, args.before,
              args.token_clusters)
        us = time_point(M, N, K, True, configs=cands, with_bf16=False, num_sms=num_sms)
        mine = {k: v for k, v in us.items() if not k.startswith("torch")}
        best = min(mine, key=mine.get)
        row = {"layer": label, "M": M, "N": N, "K": K, "us": us, "best": best,
               "heuristic": default_config(M, N, K, num_sms=num_sms).label()}
        if args.ab:
            row["previous"] = previous_config(M, N, num_sms, args.before).label()
        rows.append(row)
        tw, rw = us["torch_tensorwise"], us["torch_rowwise"]
        print(f"{label:<28}{M:>5}{N:>7}{K:>7}  heuristic {us['scalemm']:7.2f} us ({tw / us['scalemm']:.3f} of "
              f"per-tensor)  best {best:<28} {mine[best]:7.2f} us ({tw / mine[best]:.3f} of per-tensor, "
              f"{rw / mine[best]:.3f} of rowwise, {us['scalemm'] / mine[best]:.3f}x the heuristic)", flush=True)
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    for M in ms:
        sel = [r for r in rows if r["M"] == M]
        line = (f"M = {M}: heuristic {g([r['us']['torch_tensorwise'] / r['us']['scalemm'] for r in sel]):.3f} of "
                f"per-tensor, best {g([r['us']['torch_tensorwise'] / r['us'][r['best']] for r in sel]):.3f}")
        if args.ab:
            line += f", heuristic over previous {g([r['us'][r['previous']] / r['us']['scalemm'] for r in sel]):.3f}"
        print(line)
    if args.ab:
        ratios = [r["us"][r["previous"]] / r["us"]["scalemm"] for r in rows]
        changed = [x for r, x in zip(rows, ratios) if r["previous"] != r["heuristic"]]
        print(f"heuristic over previous: all {g(ratios):.3f}, the {len(changed)} changed points {g(changed):.3f} "
              f"(min {min(changed, default=float('nan')):.3f}, max {max(changed, default=float('nan')):.3f})")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fp8_decode_widths.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "sms": num_sms, "rows": rows}, open(path, "w"), indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
