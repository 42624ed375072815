"""Same-process A/B of the Qwen3-30B-A3B expert layer's training step (perf/train_bench.py's MoE block):
this commit's FP8 paths against the previous ones, restored by monkeypatching scalemm.training:
  old_pair:  W^T's copy from the wgrad-layout columnwise copy and a torch copy (_experts_to_rows);
  old_zeros: fprop / dgrad outputs from torch.zeros (a full fill) instead of zeroing only the rows past the groups.
CUDA graphs (scalemm.timing.bench, contenders interleaved per round), then one eager profiled step of each.
  python3 perf/results/h100/train_moe_copies/ab_moe.py --out OUT
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

from scalemm import training  # noqa: E402
from scalemm.formats import GroupedFP8Tensor, layout  # noqa: E402
from scalemm.grouped import grouped_gemm as _grouped_gemm  # noqa: E402
from scalemm.quantize_grouped import quantize_fp8_stacked  # noqa: E402
from scalemm.timing import bench  # noqa: E402

NEW_PAIR, NEW_GG = training.quantize_stacked_pair, training.grouped_gemm


def old_pair(w, recipe):
    if recipe.format != "fp8":
        return NEW_PAIR(w, recipe)
    E, N, K = w.shape
    q = quantize_fp8_stacked(w, scaling=recipe.scaling("weight"), columnwise=True)
    col, q.columnwise = q.columnwise, None
    data = training._experts_to_rows(col.data.view(torch.uint8)[:, :E * N], E).view(col.data.dtype)
    return q, GroupedFP8Tensor(data, col.scale_inv.reshape(-1), layout.stacked_offsets(E, K, w.device), (E * K, N),
                               recipe.scaling("weight"), w.dtype, group_rows=K)


def old_grouped_gemm(which, a_tensors, b_tensors, offsets, recipe, *, T, bias=None, out_dtype=torch.bfloat16):
    if which == "wgrad":
        return NEW_GG(which, a_tensors, b_tensors, offsets, recipe, T=T, bias=bias, out_dtype=out_dtype)
    (ra, ca), (rb, cb) = training.GROUPED_GEMM_OPERANDS[which]
    a = training.grouped_unflatten(a_tensors, recipe, ra, ca, offsets, T)
    b = training.grouped_unflatten(b_tensors, recipe, rb, cb, offsets, T)
    out = torch.zeros((T, b.group_rows), dtype=out_dtype, device=offsets.device)
    return _grouped_gemm(a, b, None, bias=bias, out_dtype=out_dtype, out=out, fast_accum=recipe.gemm(which).fast_accum)


@contextlib.contextmanager
def variant(pair, gg):
    training.quantize_stacked_pair, training.grouped_gemm = pair, gg
    try:
        yield
    finally:
        training.quantize_stacked_pair, training.grouped_gemm = NEW_PAIR, NEW_GG


VARIANTS = {"new": (NEW_PAIR, NEW_GG), "old_pair": (old_pair, NEW_GG), "old_zeros": (NEW_PAIR, old_grouped_gemm),
            "old_both": (old_pair, old_grouped_gemm)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--recipes", default="scalemm_fp8_rowwise,scalemm_fp8_tensorwise")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    E, k, hidden, inter = 128, 8, 2048, 768
    models = tb.moe_contenders(E, hidden, inter, False)
    sizes = routed_sizes(args.tokens, E, k, seed=0)
    T = int(sizes.sum())
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    steps = {}

    def make(m, pair, gg):
        def step(i=0):
            with variant(pair, gg):
                m(x, offsets).backward(dy)
        return step
    steps["bf16"] = make(models["bf16"], NEW_PAIR, NEW_GG)
    for r in args.recipes.split(","):
        for v, (pair, gg) in VARIANTS.items():
            steps[f"{r}:{v}"] = make(models[r], pair, gg)
    # the variants give the same gradients
    grads = {}
    for n, s in steps.items():
        x.grad = None
        for prm in models["bf16"].parameters():
            prm.grad = None
        s()
        grads[n] = x.grad.clone()
    for r in args.recipes.split(","):
        for v in VARIANTS:
            assert torch.equal(grads[f"{r}:{v}"], grads[f"{r}:new"]), (r, v)
    print("dx identical across variants", flush=True)
    us = bench(steps, copies=1)
    lines = [f"GPU {torch.cuda.get_device_name()}, {T} rows over {E} experts, fwd + bwd, CUDA graphs (us, vs bf16)"]
    for n, t in us.items():
        lines.append(f"{n:<40}{t:>10.1f}{us['bf16'] / t:>8.3f}")
    print("\n".join(lines), flush=True)
    with open(os.path.join(args.out, "ab_moe.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    tb.profile_steps("moe step", {n: s for n, s in steps.items() if n.endswith((":new", ":old_both")) or n == "bf16"},
                     args.out, top=22)


if __name__ == "__main__":
    main()
