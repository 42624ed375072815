"""The grouped wgrad kernel (the rule's cooperative 128x256 in clusters of 2, chunked promotion) with CUTLASS's
automatic epilogue tile (128x32 for cooperative kernels: 8 store subtiles per tile) against explicit 128x64 and
128x128 ones (fewer, larger subtiles). Needs the experiment's template and header (epilogue_tile.patch here:
`git apply` it; they are not part of scalemm). Kernel-level, CUDA-graph replays, one process; outputs compared bit
for bit.
  python3 perf/results/h100/grouped_wgrad_tiles/ab_epilogue_tile.py --out OUT
"""
import argparse
import contextlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import grouped  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.jit import KernelSpec  # noqa: E402
from scalemm.timing import bench  # noqa: E402

TILES = {"auto": None, "epi128x64": (128, 64), "epi128x128": (128, 128)}
_KERNEL = grouped._kernel


@contextlib.contextmanager
def epilogue_tile(name):
    tile = TILES[name]

    def kernel(cfg, fast_accum, out_dtype, tree, wgrad=False):
        spec, emitted = grouped.grouped_gemm_kernel_spec(cfg, fast_accum=fast_accum, out_dtype=out_dtype,
                                                         epilogue=tree, wgrad=wgrad)
        spec = KernelSpec(name=f"{spec.name}_{name}", template="grouped_gemm_sm90_epi_exp.cu",
                          params={**dict(spec.params), "EPI_TILE": f"cute::Shape<cute::_{tile[0]}, cute::_{tile[1]}>"})
        return emitted.leaves, grouped._launcher(spec)
    if tile:
        grouped._kernel = kernel
    try:
        yield
    finally:
        grouped._kernel = _KERNEL


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = [f"GPU {torch.cuda.get_device_name()}"]
    g = torch.Generator(device="cuda").manual_seed(3)
    skewed = routed_sizes(8192, 128, 8, seed=0)
    uniform = torch.full((128,), 512, dtype=torch.int64)
    for label, sizes, N, K in (("qwen3-30b-a3b gate_up dW", skewed, 1536, 2048),
                               ("qwen3-30b-a3b down dW", skewed, 2048, 768),
                               ("uniform 512 rows, [128, 1536, 2048]", uniform, 1536, 2048)):
        E, T = sizes.numel(), int(sizes.sum())
        offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
        W = layout.wgrad_width(T, E)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, N, device="cuda", generator=g) * 1e-3 + 1e-4
        s_x = torch.rand(E, K, device="cuda", generator=g) * 1e-3 + 1e-4
        outs, fns = {}, {}
        for name in TILES:
            outs[name] = torch.empty(E, N, K, device="cuda", dtype=torch.bfloat16)

            def f(i, name=name, out=outs[name]):
                with epilogue_tile(name):
                    scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=out)
            f(0)
            fns[name] = f
        us = bench(fns, copies=1)
        lines.append(f"{label}, {T} rows:")
        for name in TILES:
            same = "bit-identical" if torch.equal(outs[name], outs["auto"]) else "DIFFERS"
            lines.append(f"  {name:<12}{us[name]:>9.1f} us  {2 * T * N * K / us[name] / 1e6:>6.0f} TFLOP/s  "
                         f"{us['auto'] / us[name]:.3f}x of auto  {same}")
        print("\n".join(lines[-len(TILES) - 1:]), flush=True)
    with open(os.path.join(args.out, "ab_epilogue_tile.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
