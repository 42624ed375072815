"""Same-process A/B of grouped FP8 wgrad kernels (full accumulation, the FP8 recipes' weight gradient) on the
Qwen3-30B-A3B expert layer (perf/train_bench.py's MoE block: 65536 routed rows over 128 experts, skewed routing).

Part 1, the kernels alone: scalemm.grouped_gemm_wgrad on the layer's two weight gradients (gate_up dW [128, 1536,
2048], down dW [128, 2048, 768]) from random FP8 operands in the wgrad layout with per-row scales, each candidate
config timed by CUDA-graph replays (scalemm.timing.bench) in one process; the full-accumulation candidates are checked
bit-identical to the rule's kernel; the fast-accumulation ones (a bound: what the promotion costs) against it by
their largest relative difference.
Part 2, the training step: the FP8 rowwise / tensorwise step with sm90.default_wgrad_config monkeypatched to each
full-accumulation candidate while its CUDA graph is captured (dx and dW checked bit-identical to the rule's).

  python3 perf/results/h100/grouped_wgrad_tiles/ab_wgrad.py --out OUT [--candidates cur,p128,...] [--no-step]
"""
import argparse
import contextlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
import train_bench as tb  # noqa: E402
from grouped_sweep import MODELS, OTHER_MODELS, routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import grouped  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, sm90  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.timing import bench  # noqa: E402

CUR_W, CUR_G = sm90.default_wgrad_config, sm90.default_grouped_config
# name: (config, fast accumulation)
CANDIDATES = {
    "cur": (None, False),  # the rule (sm90.default_wgrad_config), full accumulation
    "c1x1": (GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2), False),  # the rule before run 3
    # ping-pong: one warpgroup per tile, its epilogue beside the other's mainloop; the chunked promotion takes one
    # wgmma atom per warpgroup along M, so 64-row tiles (128x128 ping-pong does not compile with it)
    "p64x256": (GemmConfig(64, 256, 128, 1, 1, "pingpong", promotion_chunks=2), False),
    "p64x256o": (GemmConfig(64, 256, 128, 1, 1, "pingpong", promotion_chunks=4, promotion_overlap=True), False),
    "p64x192o": (GemmConfig(64, 192, 128, 1, 1, "pingpong", promotion_chunks=2, promotion_overlap=True), False),
    "p64x128o": (GemmConfig(64, 128, 128, 1, 1, "pingpong", promotion_chunks=1, promotion_overlap=True), False),
    # the rule's tile in clusters (TMA multicast: of dY^T's tile along cluster_n, of X^T's along cluster_m)
    "c2x1": (GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2), False),
    "c4x1": (GemmConfig(128, 256, 128, 4, 1, "cooperative", promotion_chunks=2), False),
    "c1x2": (GemmConfig(128, 256, 128, 1, 2, "cooperative", promotion_chunks=2), False),
    "c2x2": (GemmConfig(128, 256, 128, 2, 2, "cooperative", promotion_chunks=2), False),
    # fast accumulation (not the recipes' numerics): what the promotion costs
    "fast256": (GemmConfig(128, 256, 128, 1, 1, "cooperative"), True),
    "fastp192": (GemmConfig(128, 192, 128, 1, 1, "pingpong"), True),
    "fast2x1": (GemmConfig(128, 256, 128, 2, 1, "cooperative"), True),
}
# The grouped fprop (fast accumulation) and dgrad (full) kernels in the step: name -> (fprop config, dgrad config)
# (None: the rule's, ping-pong 128x192 / cooperative 128x256 in 2 chunks, both in clusters of 1)
GROUPED = {"cur": (None, None),
           "g2x1": (GemmConfig(128, 192, 128, 2, 1, "pingpong"),
                    GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2))}


def config_of(name, N, K):
    cfg, fast = CANDIDATES[name]
    return (cfg or CUR_W(N, K, fast_accum=False)), fast


@contextlib.contextmanager
def use(wgrad, grouped_rule="cur"):
    """The step with wgrad candidate `wgrad` and the fprop / dgrad configs of GROUPED[grouped_rule]."""
    cfg, fast = CANDIDATES[wgrad]
    assert not fast
    fprop, dgrad = GROUPED[grouped_rule]
    if cfg is not None:
        sm90.default_wgrad_config = lambda N, K, *, fast_accum=False: CUR_W(N, K, fast_accum=True) if fast_accum else cfg
    if fprop is not None:
        sm90.default_grouped_config = lambda T, G, N, K, *, fast_accum=True: fprop if fast_accum else dgrad
    grouped._plan.cache_clear()
    try:
        yield
    finally:
        sm90.default_wgrad_config, sm90.default_grouped_config = CUR_W, CUR_G
        grouped._plan.cache_clear()


def max_rel_diff(a, ref):
    """max |a - ref| / max |ref| over [G, N, K] outputs, one group at a time (the larger dW are 15 GB)."""
    diff = max((a[i].float() - ref[i].float()).abs().max().item() for i in range(a.shape[0]))
    return diff / max(ref[i].float().abs().max().item() for i in range(ref.shape[0]))


def layer_shapes(label, E, top_k, hidden, inter, tokens):
    """The two weight gradients of an MoE layer's experts: (label, rows per expert, N, K) for gate_up and down."""
    sizes = routed_sizes(tokens, E, top_k, seed=0)
    return [(f"{label} gate_up dW", sizes, 2 * inter, hidden), (f"{label} down dW", sizes, hidden, inter)]


def kernels(names, shapes, lines):
    for label, sizes, N, K in shapes:
        E = sizes.numel()
        T = int(sizes.sum())
        offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
        W = layout.wgrad_width(T, E)
        g = torch.Generator(device="cuda").manual_seed(3)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, N, device="cuda", generator=g) * 1e-3 + 1e-4
        s_x = torch.rand(E, K, device="cuda", generator=g) * 1e-3 + 1e-4
        outs, fns = {}, {}
        for n in names:
            cfg, fast = config_of(n, N, K)
            out = torch.empty(E, N, K, device="cuda", dtype=torch.bfloat16)
            outs[n] = out

            def f(i, cfg=cfg, fast=fast, out=out):
                scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=out, fast_accum=fast, config=cfg)
            f(0)
            fns[n] = f
        torch.cuda.synchronize()
        us = bench(fns, copies=1)
        flop = 2 * T * N * K
        lines.append(f"{label} [{E}, {N}, {K}] from {T} rows (W = {W}, largest expert {int(sizes.max())}):")
        for n in names:
            cfg, fast = config_of(n, N, K)
            o = outs[n]
            check = ("bit-identical" if torch.equal(o, outs["cur"]) else
                     f"max rel diff {max_rel_diff(o, outs['cur']):.2e}")
            lines.append(f"  {n:<10}{cfg.label():<32}{'fast' if fast else 'full':<6}{us[n]:>9.1f} us "
                         f"{flop / us[n] / 1e6:>7.0f} TFLOP/s  {us['cur'] / us[n]:.3f}x of cur  {check}")
        print("\n".join(lines[-len(names) - 1:]), flush=True)
        del outs, fns
        torch.cuda.empty_cache()


def grouped_kernels(sizes, lines):
    """The step's four fprop / dgrad grouped GEMMs alone, each GROUPED rule's kernel (bit-identity checked)."""
    E = sizes.numel()
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(4)
    lines.append("")
    for label, N, K, fast in (("gate_up fprop", 1536, 2048, True), ("down fprop", 2048, 768, True),
                              ("down dgrad", 768, 2048, False), ("gate_up dgrad", 2048, 1536, False)):
        a = (torch.randn(T, K, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        b = (torch.randn(E, N, K, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        sa = torch.rand(T, device="cuda", generator=g) * 1e-3 + 1e-4
        sb = torch.rand(E, N, device="cuda", generator=g) * 1e-3 + 1e-4
        outs, fns = {}, {}
        for n, cfgs in GROUPED.items():
            cfg = cfgs[0 if fast else 1] or CUR_G(T, E, N, K, fast_accum=fast)
            outs[n] = torch.empty(T, N, device="cuda", dtype=torch.bfloat16)

            def f(i, cfg=cfg, out=outs[n]):
                scalemm.grouped_gemm(a, b, offsets, sa, sb, out=out, fast_accum=fast, config=cfg)
            f(0)
            fns[n] = f
        us = bench(fns, copies=1)
        lines.append(f"{label} [{T}, {N}, {K}] ({'fast' if fast else 'full'} accumulation):")
        for n, cfgs in GROUPED.items():
            cfg = cfgs[0 if fast else 1] or CUR_G(T, E, N, K, fast_accum=fast)
            lines.append(f"  {n:<10}{cfg.label():<32}{us[n]:>9.1f} us {2 * T * N * K / us[n] / 1e6:>7.0f} TFLOP/s  "
                         f"{us['cur'] / us[n]:.3f}x of cur  {'bit-identical' if torch.equal(outs[n], outs['cur']) else 'DIFFERS'}")
        print("\n".join(lines[-len(GROUPED) - 1:]), flush=True)


def step(names, sizes, lines):
    E, hidden, inter = sizes.numel(), 2048, 768
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(2)
    models = tb.moe_contenders(E, hidden, inter, False)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
    recipes = ("scalemm_fp8_rowwise", "scalemm_fp8_tensorwise")
    full = names  # "wgrad candidate" or "wgrad candidate+GROUPED key"
    split = {v: (v.split("+") + ["cur"])[:2] for v in full}

    def grads(m, v):
        x.grad = None
        for prm in m.parameters():
            prm.grad = None
        with use(*split[v]):
            m(x, offsets).backward(dy)
        return [x.grad.clone()] + [prm.grad.clone() for prm in m.parameters()]
    same = []
    for r in recipes:
        want = grads(models[r], "cur")
        same += [f"{r}/{v}: {all(torch.equal(a, b) for a, b in zip(grads(models[r], v), want))}" for v in full]
    lines += ["", f"training step, {T} rows over {E} experts, fwd + bwd, CUDA graphs",
              "dx, dW identical to cur: " + ", ".join(same)]
    x.grad = None
    steps = {"bf16": lambda i: models["bf16"](x, offsets).backward(dy)}

    def make(m, v):
        def f(i):
            with use(*split[v]):
                m(x, offsets).backward(dy)
        return f
    for r in recipes:
        for v in full:
            steps[f"{r} | {v}"] = make(models[r], v)
    us = bench(steps, copies=1)
    for n, t in us.items():
        lines.append(f"  {n:<40}{t:>10.1f} us  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us) - 3:]), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    p.add_argument("--candidates", default=",".join(CANDIDATES))
    p.add_argument("--step-candidates", default=None, help="wgrad candidates, or wgrad+GROUPED pairs (c2x1+g2x1); "
                   "default: the full-accumulation ones of --candidates")
    p.add_argument("--no-step", action="store_true")
    p.add_argument("--models", default="", help="also (or with --only-models, only) the kernels on these MoE layers "
                   "of perf/grouped_sweep.py's MODELS / OTHER_MODELS, e.g. dsv3,gpt-oss-120b")
    p.add_argument("--tokens", default="8192", help="with --models: tokens per step (routed top-k)")
    p.add_argument("--only-models", action="store_true")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = args.candidates.split(",")
    assert names[0] == "cur"
    sizes = routed_sizes(8192, 128, 8, seed=0)
    lines = [f"GPU {torch.cuda.get_device_name()}"]
    shapes = [] if args.only_models else [("qwen3-30b-a3b gate_up dW", sizes, 1536, 2048),
                                          ("qwen3-30b-a3b down dW", sizes, 2048, 768)]
    for m in filter(None, args.models.split(",")):
        for t in map(int, args.tokens.split(",")):
            shapes += layer_shapes(f"{m} {t} tok", *{**MODELS, **OTHER_MODELS}[m], t)
    kernels(names, shapes, lines)
    if args.only_models:
        args.no_step = True
    else:
        grouped_kernels(sizes, lines)
    if not args.no_step:
        step(args.step_candidates.split(",") if args.step_candidates else
             [n for n in names if not CANDIDATES[n][1]], sizes, lines)
    with open(os.path.join(args.out, "ab_wgrad.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
