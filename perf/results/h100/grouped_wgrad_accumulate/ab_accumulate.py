"""Same-process A/B of the grouped FP8 wgrad that adds into an existing dW (accumulate=True: GroupedLinear's
fuse_wgrad_accumulation) on the Qwen3-30B-A3B expert layer (perf/train_bench.py's MoE block: 65536 routed rows
over 128 experts, skewed routing). The question: does a ping-pong tile, whose epilogue (reading and writing dW)
runs beside the other warpgroup's mainloop, beat the cooperative tile, whose epilogue no MMA overlaps?

Each candidate: scalemm.grouped_gemm_wgrad(..., out=dW, accumulate=True, config=...) timed by CUDA-graph replays
(scalemm.timing.bench) in one process; one call from the same starting dW checked against the rule's kernel
(full-accumulation candidates bit for bit; fast-accumulation ones by their largest relative difference).

  python3 perf/results/h100/grouped_wgrad_accumulate/ab_accumulate.py --out OUT [--candidates cur,...]
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
from scalemm.jit import KernelSpec  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, sm90  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.timing import bench  # noqa: E402

# name: (config or None for the rule's, fast accumulation, accumulate, explicit epilogue tile or None)
CANDIDATES = {
    "cur": (None, False, True, None),
    "cur_noacc": (None, False, False, None),  # the same kernel writing dW (what the adding costs)
    "fast_c2x1": (GemmConfig(128, 256, 128, 2, 1, "cooperative"), True, True, None),
    "fast_p192": (GemmConfig(128, 192, 128, 1, 1, "pingpong"), True, True, None),
    "fast_p128": (GemmConfig(128, 128, 128, 1, 1, "pingpong"), True, True, None),
    "fast_p128c2": (GemmConfig(128, 128, 128, 2, 1, "pingpong"), True, True, None),
    "p64x256": (GemmConfig(64, 256, 128, 1, 1, "pingpong", promotion_chunks=2), False, True, None),
    # the rule's kernel with an explicit epilogue tile instead of CUTLASS's 128x32 (8 subtiles of dW per tile, 4 of
    # them loaded ahead): larger subtiles keep more of dW's reads in flight (needs the experiment's header and
    # template, grouped_gemm_epi_exp.cuh / grouped_gemm_sm90_epi_exp.cu, not part of scalemm)
    "epi128x64": (None, False, True, (128, 64)),
    "epi128x128": (None, False, True, (128, 128)),
    "noacc_epi128x64": (None, False, False, (128, 64)),
    # the automatic 128x32 tile with all 8 of a tile's dW subtiles loaded ahead (8 source stages instead of 4)
    "c8_epi128x32": (None, False, True, (128, 32, 8)),
    "c6_epi128x32": (None, False, True, (128, 32, 6)),
    "c6_epi128x64": (None, False, True, (128, 64, 6)),
}


def config_of(name, N, K):
    cfg, fast, acc, _ = CANDIDATES[name]
    return (cfg or sm90.default_wgrad_config(N, K, fast_accum=fast)), fast, acc


_KERNEL = grouped._kernel


def exp_spec(spec, tile):
    """tile: (M, N) or (M, N, source stages)"""
    stages = f"_c{tile[2]}" if len(tile) > 2 else ""
    return KernelSpec(name=f"{spec.name}_epi{tile[0]}x{tile[1]}{stages}", template="grouped_gemm_sm90_epi_exp.cu",
                      params={**dict(spec.params), "EPI_TILE": f"cute::Shape<cute::_{tile[0]}, cute::_{tile[1]}>",
                              "EXP_DEFINES": f"#define SCALEMM_EXP_STAGES_C {tile[2]}\n" if len(tile) > 2 else ""})


@contextlib.contextmanager
def epilogue_tile(tile):
    def kernel(cfg, fast_accum, out_dtype, tree, wgrad=False):
        if not wgrad:  # fprop / dgrad kernels as they are
            return _KERNEL(cfg, fast_accum, out_dtype, tree, wgrad)
        spec, emitted = grouped.grouped_gemm_kernel_spec(cfg, fast_accum=fast_accum, out_dtype=out_dtype,
                                                         epilogue=tree, wgrad=wgrad)
        return emitted.leaves, grouped._launcher(exp_spec(spec, tile))
    if tile:
        grouped._kernel = kernel
    try:
        yield
    finally:
        grouped._kernel = _KERNEL


def max_rel_diff(a, ref):
    diff = max((a[i].float() - ref[i].float()).abs().max().item() for i in range(a.shape[0]))
    return diff / max(ref[i].float().abs().max().item() for i in range(ref.shape[0]))


def run(names, lines):
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    W = layout.wgrad_width(T, E)
    for label, N, K in (("gate_up dW", 1536, 2048), ("down dW", 2048, 768)):
        g = torch.Generator(device="cuda").manual_seed(3)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, N, device="cuda", generator=g) * 1e-5 + 1e-6
        s_x = torch.rand(E, K, device="cuda", generator=g) * 1e-5 + 1e-6
        start = (torch.randn(E, N, K, device="cuda", generator=g) * 0.1).to(torch.bfloat16)
        outs, fns, firsts = {}, {}, {}
        for n in names:
            cfg, fast, acc = config_of(n, N, K)
            out = start.clone()

            def f(i, cfg=cfg, fast=fast, acc=acc, out=out, tile=CANDIDATES[n][3]):
                with epilogue_tile(tile):
                    scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=out, accumulate=acc,
                                               fast_accum=fast, config=cfg)
            f(0)
            firsts[n] = out.clone()
            outs[n] = out
            fns[n] = f
        torch.cuda.synchronize()
        us = bench(fns, copies=1)
        flop = 2 * T * N * K
        lines.append(f"{label} [{E}, {N}, {K}] from {T} rows (largest expert {int(sizes.max())}), adding into dW:")
        for n in names:
            cfg, fast, acc = config_of(n, N, K)
            ref = "cur" if acc else "cur_noacc"  # writing dW: against the rule's kernel writing it
            if n == ref or ref not in firsts:
                check = "(reference)" if n == ref else "(writes dW)"
            elif torch.equal(firsts[n], firsts[ref]):
                check = f"bit-identical to {ref}"
            else:
                check = f"max rel diff {max_rel_diff(firsts[n], firsts[ref]):.2e} to {ref}"
            tile = CANDIDATES[n][3]
            label_n = cfg.label() + (f" epi {tile[0]}x{tile[1]}" if tile else "") + (
                f" C{tile[2]}" if tile and len(tile) > 2 else "")
            lines.append(f"  {n:<16}{label_n:<42}{'fast' if fast else 'full':<6}{us[n]:>9.1f} us "
                         f"{flop / us[n] / 1e6:>7.0f} TFLOP/s  {us['cur'] / us[n]:.3f}x of cur  {check}")
        print("\n".join(lines[-len(names) - 1:]), flush=True)
        del outs, fns, firsts
        torch.cuda.empty_cache()


def step(tile, lines):
    """The expert block's micro-step (perf/train_bench.py --cache-weight --fuse-wgrad-accumulation, CUDA graphs):
    bf16, and the FP8 recipes with the rule's wgrad kernels and with `tile` as their epilogue tile."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", ".."))
    import train_bench as tb
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T, hidden, inter = 128, int(sizes.sum()), 2048, 768
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    models = tb.moe_contenders(E, hidden, inter, True, True)
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

    def make(m, t):
        def f(i):
            with epilogue_tile(t):
                m(x, offsets).backward(dy)
        return f
    steps = {"bf16": make(models["bf16"], None)}
    for r in ("scalemm_fp8_tensorwise", "scalemm_fp8_rowwise"):
        steps[f"{r} | auto"] = make(models[r], None)
        steps[f"{r} | epi {'x'.join(map(str, tile))}"] = make(models[r], tile)
    us = bench(steps, copies=1)
    lines += ["", f"micro-step of the expert block ({T} rows, 128 experts; weights cached, dW added into .grad), "
              "CUDA graphs:"]
    for n, t in us.items():
        lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us):]), flush=True)


def specs(names):
    """The kernels the candidates launch (to prebuild them)."""
    from scalemm.grouped import _wgrad_tree, grouped_gemm_kernel_spec
    out = {}
    for n in names:
        for N, K in ((1536, 2048), (2048, 768)):
            cfg, fast, acc = config_of(n, N, K)
            s = grouped_gemm_kernel_spec(cfg, fast_accum=fast, out_dtype=torch.bfloat16,
                                         epilogue=_wgrad_tree("bf16", acc), wgrad=True)[0]
            if CANDIDATES[n][3]:
                s = exp_spec(s, CANDIDATES[n][3])
            out[s.name] = s
    return list(out.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--step", default=None, help="also time the block's micro-step with this epilogue tile, e.g. 128x64")
    ap.add_argument("--build", action="store_true", help="only build the candidates' kernels (jobs=2)")
    args = ap.parse_args()
    names = args.candidates.split(",")
    assert names[0] == "cur"
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs(names) if not jit.is_cached(s)], jobs=2)
        return
    lines = [f"device: {torch.cuda.get_device_name()}"]
    run(names, lines)
    if args.step:
        step(tuple(int(v) for v in args.step.split("x")), lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab_accumulate.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
