"""Same-process A/B of the grouped FP8 quantizer's columnwise-copy row mapping: each warp's chunk heads found by a
binary search over the position table (`search`) against read from a chunk table written by a small kernel after the
amaxes are known, one int4 per 16 positions with the group's scale in it (`table`). Needs the A/B build whose launcher
skips the table when SCALEMM_EXP_NO_CHUNK_TABLE is set (experiment.diff).

  python3 perf/results/h100/quant_chunk_table/ab.py --out OUT [--no-steps]
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

KNOB = "SCALEMM_EXP_NO_CHUNK_TABLE"


def knobbed(fn, on):
    def f(i):
        if on:
            os.environ[KNOB] = "1"
        try:
            return fn(i)
        finally:
            os.environ.pop(KNOB, None)
    return f


def both(fn):
    return {"search": knobbed(fn, True), "table": knobbed(fn, False)}


def bits(t):
    return t.reshape(-1).view(torch.uint8)


def same(a, b):
    fields = [(a.data, b.data), (a.scale_inv, b.scale_inv)]
    if a.columnwise is not None:
        fields += [(a.columnwise.data, b.columnwise.data), (a.columnwise.scale_inv, b.columnwise.scale_inv)]
    return all(torch.equal(bits(x), bits(y)) for x, y in fields)


def quantizers(lines, E, offsets, T):
    lines.append(f"the grouped FP8 quantizer, both copies, {T} rows over {E} experts (CUDA graphs, us):")
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = [("x / dy [T, 2048]", 2048, offsets), ("h [T, 768]", 768, offsets), ("dh [T, 1536]", 1536, offsets)]
    ragged = torch.tensor([0, 3, 3, 40, 41, 200, 200, 999], dtype=torch.int32, device="cuda")  # empty, tiny, past
    cases.append(("ragged [1100, 512]", 512, ragged))
    for name, K, offs in cases:
        rows = T if offs is offsets else 1100
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[rows // 2, 3] = float("inf")
        G = offs.numel()
        amax = torch.rand(G, device="cuda", generator=g) * 8
        outs = {k: torch.empty(G, device="cuda") for k in ("search", "table")}
        for label, kw in (("delayed", dict(amax=amax)), ("current", {})):
            def q(i, key="table", kw=kw, x=x, offs=offs):
                extra = dict(amax_out=outs[key]) if "amax" in kw else {}
                return scalemm.quantize_fp8_grouped(x, offs, columnwise=True, **kw, **extra)
            got = {key: knobbed(lambda i, key=key: q(i, key), key == "search")(0) for key in outs}
            ok = same(got["search"], got["table"]) and torch.equal(bits(outs["search"]), bits(outs["table"]))
            t = bench(both(q), 1)
            lines.append(f"  {name:<20}{label:<9}search {t['search']:7.1f}  table {t['table']:7.1f}  "
                         f"{t['search'] / t['table']:.3f}x  {2 * x.numel() * 2 / t['table'] / 1e6:.2f} "
                         f"TB/s moved  {'bit-identical' if ok else 'DIFFERS'}")
            print(lines[-1], flush=True)
    for name, (N, K) in (("W gate_up [128, 1536, 2048]", (1536, 2048)), ("W down [128, 2048, 768]", (2048, 768))):
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        amax, out = torch.full((E,), 0.1, device="cuda"), torch.empty(E, device="cuda")
        fn = lambda i: scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)  # noqa: E731
        got = {key: knobbed(fn, key == "search")(0) for key in ("search", "table")}
        ok = all(same(a, b) for a, b in zip(got["search"], got["table"]))
        t = bench(both(fn), 1)
        lines.append(f"  {name:<27}delayed search {t['search']:7.1f}  table {t['table']:7.1f}  "
                     f"{t['search'] / t['table']:.3f}x  {'bit-identical' if ok else 'DIFFERS'}")
        print(lines[-1], flush=True)


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
            return knobbed(lambda i: m(x, offsets).backward(dy), on)
        fns = {"bf16": make(models["bf16"], False)}
        for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
            fns[f"{r} | search"] = make(models[r], True)
            fns[f"{r} | table"] = make(models[r], False)
        us = bench(fns, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--no-steps", action="store_true")
    args = ap.parse_args()
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [torch.cuda.get_device_name()]
    quantizers(lines, E, offsets, T)
    if not args.no_steps:
        steps(lines, E, offsets, T)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
