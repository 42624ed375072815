"""Same-process A/B of the FP8 wgrad that adds dW into an existing gradient (GroupedLinear / Linear with
fuse_wgrad_accumulation=True, a gradient-accumulation micro-step): the kernel that reads .grad as its C operand
and writes the sum rounded once ("source", epilogues.accumulating: the twenty-eighth session's code) against
the kernel that writes dW with TMA reduce-add stores, so the L2 adds it into .grad ("reduce",
epilogues.added_into_output: this session's, reverted after this run), and the same kernel writing dW into a
fresh tensor ("write"). Runs only with reduce_add_experiment.diff applied (README.txt).

  python3 perf/results/h100/wgrad_reduce_add/ab.py --out OUT [--part kernels,steps]
  python3 perf/results/h100/wgrad_reduce_add/ab.py --build      (the kernels it needs that --set train lacks)

kernels: the grouped wgrad of the Qwen3-30B-A3B experts (65536 rows over 128 experts, perf/train_bench.py's
  routing) and the dense wgrad of the Llama-3-8B MLP (8192 tokens), CUDA-graph replays (scalemm.timing.bench).
  Checks: reduce == bf16(prior + write) bit for bit (the same accumulators, rounded to bf16, added by the L2);
  source against reduce as a largest relative difference (one rounding against two).
steps: perf/train_bench.py's micro-step (--cache-weight --fuse-wgrad-accumulation, CUDA graphs) of each expert
  layer alone, the expert block and the MLP block: bf16 and FP8DelayedScaling / FP8Tensorwise with either kernel.
"""
import argparse
import contextlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402
import train_bench as tb  # noqa: E402

import scalemm  # noqa: E402
from scalemm import epilogues as epi, grouped, training  # noqa: E402
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.gemm import gemm_kernel_spec  # noqa: E402
from scalemm.timing import bench  # noqa: E402

BF16 = torch.bfloat16
_GROUPED_TREE, _DENSE_TREE = grouped._wgrad_tree, training.accumulating_wgrad_tree


def source_grouped_tree(out_name, accumulate):
    tree = grouped._resolve_epilogue(None, out_name)
    return epi.accumulating(tree, out_name) if accumulate else tree


def source_dense_tree(out_dtype):
    return epi.accumulating(epi.scaled(out_dtype), out_dtype)


@contextlib.contextmanager
def mode(name):
    """'source': the twenty-eighth session's accumulating trees; 'reduce': this session's (the code as it is)."""
    if name == "source":
        grouped._wgrad_tree, training.accumulating_wgrad_tree = source_grouped_tree, source_dense_tree
    try:
        yield
    finally:
        grouped._wgrad_tree, training.accumulating_wgrad_tree = _GROUPED_TREE, _DENSE_TREE


def max_rel_diff(a, ref):
    return ((a.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def grouped_kernels(lines):
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    W = layout.wgrad_width(T, E)
    for label, N, K in (("gate_up dW", 1536, 2048), ("down dW", 2048, 768)):
        g = torch.Generator(device="cuda").manual_seed(3)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        s_x = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        prior = (torch.randn(E, N, K, device="cuda", generator=g) * 0.1).to(BF16)
        outs = {n: prior.clone() for n in ("write", "source", "reduce")}

        def call(n, i=0):
            with mode("source" if n == "source" else "reduce"):
                scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=outs[n], accumulate=n != "write")
        for n in outs:
            call(n)
        torch.cuda.synchronize()
        expect = (prior.float() + outs["write"].float()).to(BF16)
        checks = {"reduce": "bit-identical to bf16(prior + write)" if torch.equal(outs["reduce"], expect) else
                  f"DIFFERS from bf16(prior + write): max rel {max_rel_diff(outs['reduce'], expect):.2e}, "
                  f"{int((outs['reduce'] != expect).sum())} elements",
                  "source": f"max rel diff to reduce {max_rel_diff(outs['source'], outs['reduce']):.2e}",
                  "write": "(dW alone)"}
        us = bench({n: (lambda i, n=n: call(n)) for n in outs}, copies=1)
        flop = 2 * T * N * K
        lines.append(f"grouped {label} [{E}, {N}, {K}] from {T} rows, "
                     f"{sm90.default_wgrad_config(N, K, fast_accum=False).key()} (full accumulation):")
        for n in outs:
            lines.append(f"  {n:<8}{us[n]:>9.1f} us {flop / us[n] / 1e6:>7.0f} TFLOP/s  "
                         f"{us['source'] / us[n]:.3f}x of source  {checks[n]}")
        print("\n".join(lines[-4:]), flush=True)
        torch.cuda.empty_cache()


def dense_kernels(lines):
    M = 8192
    for label, N, K in (("gate_up dW", 2 * 14336, 4096), ("down dW", 4096, 14336)):
        g = torch.Generator(device="cuda").manual_seed(4)
        # wgrad: dW [N, K] = dY^T X: a = dY^T [N, M], b = X^T [K, M] (the columnwise copies), per-tensor scales
        a = (torch.randn(N, M, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        b = (torch.randn(K, M, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        sa = torch.full((), 1e-5, device="cuda")
        sb = torch.full((), 2e-5, device="cuda")
        prior = (torch.randn(N, K, device="cuda", generator=g) * 0.1).to(BF16)
        outs = {n: prior.clone() for n in ("write", "source", "reduce")}

        def call(n, i=0):
            if n == "write":
                scalemm.gemm(a, b, sa, sb, out=outs[n])
                return
            tree = source_dense_tree(BF16) if n == "source" else _DENSE_TREE(BF16)
            scalemm.gemm(a, b, sa, sb, epilogue=tree, epilogue_inputs={epi.ACCUMULATOR: outs[n]}, out=outs[n])
        for n in outs:
            call(n)
        torch.cuda.synchronize()
        expect = (prior.float() + outs["write"].float()).to(BF16)
        ok = torch.equal(outs["reduce"], expect)
        us = bench({n: (lambda i, n=n: call(n)) for n in outs}, copies=1)
        lines.append(f"dense {label} [{N}, {K}] over {M} tokens (full accumulation):")
        for n in outs:
            check = ("bit-identical to bf16(prior + write)" if ok else "DIFFERS from bf16(prior + write)") \
                if n == "reduce" else f"max rel diff to reduce {max_rel_diff(outs[n], outs['reduce']):.2e}" \
                if n == "source" else "(dW alone)"
            lines.append(f"  {n:<8}{us[n]:>9.1f} us {2 * M * N * K / us[n] / 1e6:>7.0f} TFLOP/s  "
                         f"{us['source'] / us[n]:.3f}x of source  {check}")
        print("\n".join(lines[-4:]), flush=True)
        torch.cuda.empty_cache()


def steps(lines, recipes):
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T, hidden, inter = 128, int(sizes.sum()), 2048, 768
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    blocks = []
    moe = tb.moe_contenders(E, hidden, inter, True, True)
    for name, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden)):
        layers = {n: tb.ExpertLayer(w=m.w1 if name == "gate_up" else m.w2) if n == "bf16" else
                  tb.ExpertLayer(m.gate_up if name == "gate_up" else m.down) for n, m in moe.items()}
        blocks.append((f"qwen3-30b-a3b {name} layer", layers, T, K, N, offsets))
    blocks.append(("qwen3-30b-a3b experts", moe, T, hidden, hidden, offsets))
    blocks.append(("llama3-8b mlp", tb.mlp_contenders(4096, 14336, True, True), 8192, 4096, 4096, None))
    for label, models, rows, K, N, offs in blocks:
        g = torch.Generator(device="cuda").manual_seed(3)
        x = torch.randn(rows, K, device="cuda", dtype=BF16, generator=g).requires_grad_()
        dy = torch.randn(rows, N, device="cuda", dtype=BF16, generator=g) * 1e-2

        def make(m, md):
            def f(i):
                with mode(md):
                    (m(x) if offs is None else m(x, offs)).backward(dy)
            return f
        fns = {"bf16": make(models["bf16"], "reduce")}
        for r in recipes:
            for md in ("source", "reduce"):
                fns[f"{r} | {md}"] = make(models[r], md)
        us = bench(fns, copies=1)
        lines.append(f"micro-step, {label} ({rows} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)
        torch.cuda.empty_cache()


def build_specs():
    """The source-mode kernels (the train set has the reduce-mode and writing ones)."""
    specs = []
    for N, K in ((1536, 2048), (2048, 768)):
        cfg = sm90.default_wgrad_config(N, K, fast_accum=False)
        specs.append(grouped.grouped_gemm_kernel_spec(cfg, fast_accum=False, out_dtype=BF16,
                                                      epilogue=source_grouped_tree("bf16", True), wgrad=True)[0])
    for N, K, M in ((2 * 14336, 4096, 8192), (4096, 14336, 8192)):
        cfg = sm90.default_config(N, K, M, fast_accum=False, num_sms=132).compiled()
        for tree in (source_dense_tree(BF16), _DENSE_TREE(BF16), epi.scaled(BF16, bias=False), epi.scaled(BF16)):
            specs.append(gemm_kernel_spec(cfg, fast_accum=False, out_dtype=BF16, epilogue=tree)[0])
    return list({s.name: s for s in specs}.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--part", default="kernels,steps")
    ap.add_argument("--recipes", default="scalemm_fp8_delayed,scalemm_fp8_tensorwise")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in build_specs() if not jit.is_cached(s)], jobs=2)
        return
    lines = [f"device: {torch.cuda.get_device_name()}"]
    parts = args.part.split(",")
    if "kernels" in parts:
        grouped_kernels(lines)
        dense_kernels(lines)
    if "steps" in parts:
        steps(lines, args.recipes.split(","))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
