"""Same-process A/B of the grouped FP8 quantizer (per-group scaling, byte tile) walking KT = 1, 2 or 4 tiles of 64
columns per CTA: the rows' slots mapped once per CTA, the next tile's loads issued before the current tile's column
phase. Needs the A/B build whose launcher reads SCALEMM_EXP_KT (experiment.diff).

  python3 perf/results/h100/quant_k_tiles/ab.py --out OUT [--steps KT]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402
import train_bench as tb  # noqa: E402

import scalemm  # noqa: E402
from scalemm.timing import bench  # noqa: E402

KTS = ("1", "2", "4")


def knob(fn, kt):
    def f(i):
        if kt != "1":
            os.environ["SCALEMM_EXP_KT"] = kt
        try:
            return fn(i)
        finally:
            os.environ.pop("SCALEMM_EXP_KT", None)
    return f


def bits(t):
    return t.reshape(-1).view(torch.uint8)


def same(a, b):
    fields = [(a.data, b.data), (a.scale_inv, b.scale_inv)]
    if a.columnwise is not None:
        fields += [(a.columnwise.data, b.columnwise.data), (a.columnwise.scale_inv, b.columnwise.scale_inv)]
    return all(torch.equal(bits(x), bits(y)) for x, y in fields)


def quantizers(lines, E, offsets, T):
    """Returns {KT: summed us of the delayed-scaling cases}."""
    total = {kt: 0.0 for kt in KTS}
    lines.append(f"the grouped FP8 quantizer, both copies, {T} rows over {E} experts (CUDA graphs, us), KT = "
                 + " / ".join(KTS) + ":")
    g = torch.Generator(device="cuda").manual_seed(0)
    ragged = torch.tensor([0, 3, 3, 40, 41, 200, 200, 999], dtype=torch.int32, device="cuda")
    for name, rows, K, offs in (("x / dy [T, 2048]", T, 2048, offsets), ("h [T, 768]", T, 768, offsets),
                                ("dh [T, 1536]", T, 1536, offsets), ("ragged [1100, 592]", 1100, 592, ragged)):
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[rows // 2, 3] = float("inf")
        G = offs.numel()
        amax = torch.rand(G, device="cuda", generator=g) * 8
        outs = {kt: torch.empty(G, device="cuda") for kt in KTS}
        for label, delayed in (("delayed", True), ("current", False)):
            def q(i, kt="1", x=x, offs=offs, delayed=delayed):
                kw = dict(amax=amax, amax_out=outs[kt]) if delayed else {}
                return scalemm.quantize_fp8_grouped(x, offs, columnwise=True, **kw)
            got = {kt: knob(lambda i, kt=kt: q(i, kt), kt)(0) for kt in KTS}
            ok = all(same(got["1"], got[kt]) and (not delayed or torch.equal(bits(outs["1"]), bits(outs[kt])))
                     for kt in KTS)
            t = bench({kt: knob(q, kt) for kt in KTS}, 1)
            for kt in KTS:
                total[kt] += t[kt] if delayed and ok else 0.0
            lines.append(f"  {name:<20}{label:<9}" + "  ".join(f"{t[kt]:7.1f}" for kt in KTS) + "   "
                         + "  ".join(f"KT{kt} {t['1'] / t[kt]:.3f}x" for kt in KTS[1:])
                         + f"  {'bit-identical' if ok else 'DIFFERS'}")
            print(lines[-1], flush=True)
    for name, (N, K) in (("W gate_up [128, 1536, 2048]", (1536, 2048)), ("W down [128, 2048, 768]", (2048, 768))):
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        amax, out = torch.full((E,), 0.1, device="cuda"), torch.empty(E, device="cuda")
        fn = lambda i: scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)  # noqa: E731
        got = {kt: knob(fn, kt)(0) for kt in KTS}
        ok = all(same(a, b) for kt in KTS for a, b in zip(got["1"], got[kt]))
        t = bench({kt: knob(fn, kt) for kt in KTS}, 1)
        lines.append(f"  {name:<29}" + "  ".join(f"{t[kt]:7.1f}" for kt in KTS) + "   "
                     + "  ".join(f"KT{kt} {t['1'] / t[kt]:.3f}x" for kt in KTS[1:])
                     + f"  {'bit-identical' if ok else 'DIFFERS'}")
        print(lines[-1], flush=True)
    return total


def steps(lines, E, offsets, T, kt):
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

        def make(m, k):
            return knob(lambda i: m(x, offsets).backward(dy), k)
        fns = {"bf16": make(models["bf16"], "1")}
        for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
            fns[f"{r} | KT1"] = make(models[r], "1")
            fns[f"{r} | KT{kt}"] = make(models[r], kt)
        us = bench(fns, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--steps", default=None, help="also time the micro-steps with this KT (auto: the fastest delayed quantizer)")
    args = ap.parse_args()
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [torch.cuda.get_device_name()]
    total = quantizers(lines, E, offsets, T)
    if args.steps:
        kt = min(KTS, key=total.get) if args.steps == "auto" else args.steps
        steps(lines, E, offsets, T, kt if kt != "1" else "2")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
