"""Same-process A/B of the grouped full-accumulation kernels (dgrad and wgrad of the FP8 recipes) on the
Qwen3-30B-A3B expert layer's training step (perf/train_bench.py's MoE block). The rules are monkeypatched in the
sm90 config module while each variant's CUDA graph is captured:
  cur:  default_grouped_config / default_wgrad_config as they are (cooperative 128x256, chunked promotion in 2);
  o192: cooperative 128x192, the promotion overlapped in 2 chunks (the dense full rule's kernel), dgrad and wgrad;
  o128: cooperative 128x128, overlapped over k-tile pairs in 1 chunk, dgrad and wgrad;
  o192_dgrad / o192_wgrad: o192 for one of the two.
  python3 perf/results/h100/grouped_full_overlap/ab_full.py --out OUT
"""
import argparse
import contextlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
import train_bench as tb  # noqa: E402
from grouped_sweep import routed_sizes  # noqa: E402

from scalemm import grouped  # noqa: E402
from scalemm.cutlass_kernels.configs import GemmConfig, sm90  # noqa: E402
from scalemm.timing import bench  # noqa: E402

O192 = GemmConfig(128, 192, 128, 1, 1, "cooperative", promotion_chunks=2, promotion_overlap=True)
O128 = GemmConfig(128, 128, 128, 1, 1, "cooperative", promotion_chunks=1, promotion_overlap=True)
CUR_G, CUR_W = sm90.default_grouped_config, sm90.default_wgrad_config


def rule(dgrad_cfg, wgrad_cfg):
    def g(T, G, N, K, *, fast_accum=True):
        return CUR_G(T, G, N, K, fast_accum=fast_accum) if fast_accum or dgrad_cfg is None else dgrad_cfg

    def w(N, K, *, fast_accum=False):
        return CUR_W(N, K, fast_accum=fast_accum) if fast_accum or wgrad_cfg is None else wgrad_cfg
    return g, w


VARIANTS = {"cur": rule(None, None), "o192": rule(O192, O192), "o128": rule(O128, O128),
            "o192_dgrad": rule(O192, None), "o192_wgrad": rule(None, O192)}


@contextlib.contextmanager
def use(v):
    sm90.default_grouped_config, sm90.default_wgrad_config = VARIANTS[v]
    grouped._plan.cache_clear()
    try:
        yield
    finally:
        sm90.default_grouped_config, sm90.default_wgrad_config = CUR_G, CUR_W
        grouped._plan.cache_clear()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    E, k, hidden, inter, tokens = 128, 8, 2048, 768, 8192
    sizes = routed_sizes(tokens, E, k, seed=0)
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(2)
    models = tb.moe_contenders(E, hidden, inter, False)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
    recipes = ("scalemm_fp8_rowwise", "scalemm_fp8_tensorwise")

    def grads(m, v):
        x.grad = None
        for prm in m.parameters():
            prm.grad = None
        with use(v):
            m(x, offsets).backward(dy)
        return [x.grad.clone()] + [prm.grad.clone() for prm in m.parameters()]
    same = {}
    for r in recipes:
        want = grads(models[r], "cur")
        for v in VARIANTS:
            same[(r, v)] = all(torch.equal(a, b) for a, b in zip(grads(models[r], v), want))
    lines = [f"GPU {torch.cuda.get_device_name()}, {T} rows over {E} experts, fwd + bwd, CUDA graphs",
             "dx, dW identical to cur: " + ", ".join(f"{r}/{v}: {s}" for (r, v), s in same.items())]
    print("\n".join(lines), flush=True)
    x.grad = None
    steps = {"bf16": lambda i: models["bf16"](x, offsets).backward(dy)}

    def step(m, v):
        def f(i):
            with use(v):
                m(x, offsets).backward(dy)
        return f
    for r in recipes:
        for v in VARIANTS:
            steps[f"{r} | {v}"] = step(models[r], v)
    us = bench(steps, copies=1)
    for n, t in us.items():
        lines.append(f"  {n:<40}{t:>10.1f} us  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[2:]), flush=True)
    tb.profile_steps("moe step", {n: (lambda s=s: s(0)) for n, s in steps.items() if n.endswith(("| cur", "| o192"))},
                     args.out, top=12)
    with open(os.path.join(args.out, "ab_full.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
