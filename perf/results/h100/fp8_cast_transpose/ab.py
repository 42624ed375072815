"""Same-process A/B of the grouped FP8 quantizer's columnwise copy with per-group scaling: through an fp32 tile
(scaled and converted a second time) against the rowwise e4m3 bytes transposed through a byte tile (cast, then
transpose). Needs the A/B build of quant_grouped.cuh, whose launcher takes the fp32 tile when SCALEMM_EXP_FLOAT_TILE
is set (experiment.diff); each contender sets or clears it while its CUDA graph is captured.

  python3 perf/results/h100/fp8_cast_transpose/ab.py --out OUT [--dense]
(1) every quantization of both paths bit-identical (rowwise, columnwise, scale_inv, amax_out); (2) the quantizer
alone on the Qwen3-30B-A3B expert layers' operands (65536 rows over 128 experts) and stacked weights, delayed and
current scaling; (3) micro-steps of the expert block and layers (weights cached, dW added into .grad) against bf16.
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
from scalemm.timing import bench  # noqa: E402

KNOB = "SCALEMM_EXP_FLOAT_TILE"


@contextlib.contextmanager
def float_tile(on):
    if on:
        os.environ[KNOB] = "1"
    try:
        yield
    finally:
        os.environ.pop(KNOB, None)


MINB = []  # --minb: byte-tile variants compiled for that many resident blocks per SM (SCALEMM_EXP_MINB)


def both(fn):
    """{'float tile': ..., 'byte tile': ..., 'byte minb N': ...} of fn(i), each run with its knobs."""
    def make(on, minb=None):
        def f(i):
            if minb:
                os.environ["SCALEMM_EXP_MINB"] = str(minb)
            try:
                with float_tile(on):
                    return fn(i)
            finally:
                os.environ.pop("SCALEMM_EXP_MINB", None)
        return f
    out = {"float tile": make(True), "byte tile": make(False)}
    out.update({f"byte minb {m}": make(False, m) for m in MINB})
    return out


def extra(t):
    return "".join(f"  minb{m} {t['float tile'] / t[f'byte minb {m}']:.3f}x" for m in MINB)


def bits(t):
    return t.reshape(-1).view(torch.uint8)  # NaNs compare by their bits


def same(a, b):
    fields = [(a.data, b.data), (a.scale_inv, b.scale_inv)]
    if a.columnwise is not None:
        fields += [(a.columnwise.data, b.columnwise.data), (a.columnwise.scale_inv, b.columnwise.scale_inv)]
    return all(torch.equal(bits(x), bits(y)) for x, y in fields)


def quantizers(lines, E, offsets, T):
    lines.append(f"the grouped FP8 quantizer, both copies, {T} rows over {E} experts (CUDA graphs, us):")
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, K in (("x / dy [T, 2048]", 2048), ("h [T, 768]", 768), ("dh [T, 1536]", 1536)):
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[T // 2, 3] = float("inf")
        amax = torch.rand(E, device="cuda", generator=g) * 8
        outs = {k: torch.empty(E, device="cuda") for k in ("float tile", "byte tile")}
        for label, kw in (("delayed", dict(amax=amax)), ("current", {})):
            def q(i, key=None, kw=kw):
                extra = dict(amax_out=outs[key]) if key and "amax" in kw else {}
                return scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, **kw, **extra)
            got = {}
            for key, on in (("float tile", True), ("byte tile", False)):
                with float_tile(on):
                    got[key] = q(0, key)
            ok = same(got["float tile"], got["byte tile"]) and torch.equal(bits(outs["float tile"]), bits(outs["byte tile"]))
            fns = both(lambda i, q=q: q(i, "byte tile"))
            t = bench(fns, 1)
            lines.append(f"  {name:<18}{label:<9}float {t['float tile']:7.1f}  byte {t['byte tile']:7.1f}  "
                         f"{t['float tile'] / t['byte tile']:.3f}x  {2 * x.numel() * 2 / t['byte tile'] / 1e6:.2f} "
                         f"TB/s moved  {'bit-identical' if ok else 'DIFFERS'}" + extra(t))
            print(lines[-1], flush=True)
    for name, (N, K) in (("W gate_up [128, 1536, 2048]", (1536, 2048)), ("W down [128, 2048, 768]", (2048, 768))):
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        amax, out = torch.full((E,), 0.1, device="cuda"), torch.empty(E, device="cuda")
        got = {}
        for key, on in (("float tile", True), ("byte tile", False)):
            with float_tile(on):
                got[key] = scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)
        ok = all(same(a, b) for a, b in zip(got["float tile"], got["byte tile"]))
        t = bench(both(lambda i: scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)), 1)
        lines.append(f"  {name:<27}delayed float {t['float tile']:7.1f}  byte {t['byte tile']:7.1f}  "
                     f"{t['float tile'] / t['byte tile']:.3f}x  {'bit-identical' if ok else 'DIFFERS'}" + extra(t))
        print(lines[-1], flush=True)


def dense_quantizers(lines):
    lines.append("the dense FP8 quantizer (quantize_fp8, tensor scaling), both copies, Llama-3-8B MLP operands "
                 "(CUDA graphs, us):")
    g = torch.Generator(device="cuda").manual_seed(1)
    for name, (M, K) in (("x / dy down [8192, 4096]", (8192, 4096)), ("h [8192, 14336]", (8192, 14336)),
                         ("dy gate_up [8192, 28672]", (8192, 28672)), ("odd [272, 1040]", (272, 1040))):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[M // 2, 3] = float("inf")
        amax = torch.tensor(3.0, device="cuda")
        outs = {k: torch.empty((), device="cuda") for k in ("float tile", "byte tile")}
        for label, kw in (("delayed", dict(amax=amax)), ("current", {})):
            def q(i, key="byte tile", kw=kw):
                extra = dict(amax_out=outs[key]) if "amax" in kw else {}
                return scalemm.quantize_fp8(x, columnwise=True, **kw, **extra)
            got = {}
            for key, on in (("float tile", True), ("byte tile", False)):
                with float_tile(on):
                    got[key] = q(0, key)
            ok = same(got["float tile"], got["byte tile"]) and torch.equal(bits(outs["float tile"]),
                                                                           bits(outs["byte tile"]))
            t = bench(both(q), 1)
            lines.append(f"  {name:<26}{label:<9}float {t['float tile']:7.1f}  byte {t['byte tile']:7.1f}  "
                         f"{t['float tile'] / t['byte tile']:.3f}x  {2 * x.numel() * 2 / t['byte tile'] / 1e6:.2f} "
                         f"TB/s moved  {'bit-identical' if ok else 'DIFFERS'}" + extra(t))
            print(lines[-1], flush=True)


def dense_steps(lines):
    M, hidden, inter = 8192, 4096, 14336
    models = tb.mlp_contenders(hidden, inter, True, True)
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(M, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(M, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

    def make(m, on):
        def f(i):
            with float_tile(on):
                m(x).backward(dy)
        return f
    fns = {"bf16": make(models["bf16"], False)}
    for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
        fns[f"{r} | float tile"] = make(models[r], True)
        fns[f"{r} | byte tile"] = make(models[r], False)
    us = bench(fns, copies=1)
    lines.append(f"micro-step, llama3-8b MLP ({M} tokens; weights cached, dW added into .grad), CUDA graphs:")
    for n, t in us.items():
        lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us) - 1:]), flush=True)


def steps(lines, E, offsets, T):
    hidden, inter = 2048, 768
    moe = tb.moe_contenders(E, hidden, inter, True, True)
    blocks = [("experts block", moe, hidden, hidden)]
    for n, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden)):
        blocks.append((f"{n} layer", {k: tb.ExpertLayer(w=m.w1 if n == "gate_up" else m.w2) if k == "bf16" else
                                      tb.ExpertLayer(getattr(m, n)) for k, m in moe.items()}, K, N))
    g = torch.Generator(device="cuda").manual_seed(3)
    for label, models, K, N in blocks:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        dy = torch.randn(T, N, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

        def make(m, on):
            def f(i):
                with float_tile(on):
                    m(x, offsets).backward(dy)
            return f
        fns = {"bf16": make(models["bf16"], False)}
        for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
            fns[f"{r} | float tile"] = make(models[r], True)
            fns[f"{r} | byte tile"] = make(models[r], False)
        us = bench(fns, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--no-steps", action="store_true")
    ap.add_argument("--dense", action="store_true", help="the dense quantizer (quantize_fp8) and the Llama-3-8B MLP")
    ap.add_argument("--minb", default="", help="comma-separated resident-block counts to time beside (5,6,8)")
    args = ap.parse_args()
    MINB.extend(int(m) for m in args.minb.split(",") if m)
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [torch.cuda.get_device_name()]
    if args.dense:
        dense_quantizers(lines)
        if not args.no_steps:
            dense_steps(lines)
    else:
        quantizers(lines, E, offsets, T)
        if not args.no_steps:
            steps(lines, E, offsets, T)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
