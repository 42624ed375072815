"""Does switching groups cost a wgrad tile? scalemm.grouped_gemm_wgrad on the same tile count and the same k-tiles per
tile (4: 512 tokens), once as 128 groups of [1536, 2048] (every CTA changes group at nearly every tile: the grouped
scheduler hands out tiles with a stride of the grid, more than one group's 96 tiles of 128x256) and once as fewer,
larger groups ([1536, 2048 x 128 / G] each), default config (and clusters of 1). CUDA-graph replays, one process.

  python3 perf/results/h100/grouped_wgrad_tiles/group_switch_probe.py --out OUT
"""
import argparse
import os

import torch

import scalemm
from scalemm.cutlass_kernels.configs import GemmConfig
from scalemm.formats import layout
from scalemm.timing import bench


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    p.add_argument("--rows", type=int, default=512, help="tokens per group")
    p.add_argument("--scales", choices=("vector", "group"), default="vector",
                   help="per group and channel ([G, N], [G, K]: the rowwise recipe) or one per group ([G])")
    p.add_argument("--groups", default="128,32,8,1")
    p.add_argument("--once", action="store_true", help="one call of the default kernel per G, no timing (for ncu)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    N, K0, total = 1536, 2048, 128
    lines = [f"GPU {torch.cuda.get_device_name()}; dW tiles of 128x256, {args.rows} tokens per group, {args.scales} scales"]
    g = torch.Generator(device="cuda").manual_seed(0)
    for G in map(int, args.groups.split(",")):
        K = K0 * total // G
        sizes = torch.full((G,), args.rows, dtype=torch.int64)
        offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
        T = int(sizes.sum())
        W = layout.wgrad_width(T, G)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        vec = args.scales == "vector"
        s_dy, s_x = torch.ones(G, N if vec else 1, device="cuda"), torch.ones(G, K if vec else 1, device="cuda")
        if not vec:
            s_dy, s_x = s_dy.reshape(G), s_x.reshape(G)
        out = torch.empty(G, N, K, device="cuda", dtype=torch.bfloat16)
        fns = {}
        for name, cfg in (("default", None), ("c1x1", GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2))):
            fns[name] = (lambda i, cfg=cfg, a=dy_t, b=x_t, o=out, offs=offsets, sa=s_dy, sb=s_x:
                         scalemm.grouped_gemm_wgrad(a, b, offs, sa, sb, out=o, config=cfg))
        if args.once:
            fns["default"](0)
            fns["default"](0)
            torch.cuda.synchronize()
            continue
        us = bench(fns, copies=1)
        flop = 2 * T * N * K
        lines.append(f"  G = {G:>3}, dW [{G}, {N}, {K}], {T} tokens: " + ", ".join(
            f"{n} {t:.1f} us ({flop / t / 1e6:.0f} TFLOP/s)" for n, t in us.items()))
        print(lines[-1], flush=True)
        del dy_t, x_t, out, fns
    with open(os.path.join(args.out, f"group_switch_probe_{args.rows}_{args.scales}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
