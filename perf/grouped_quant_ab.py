"""Same-process A/B harness for the grouped FP8 quantizer's experiment builds (perf/results/h100/quant_*/ab.py): an
experiment build's launcher takes the old path while an environment knob is set, and each contender sets or clears it
while its CUDA graph is captured. (1) Every quantization of both paths compared by bits (NaN and Inf in x; a ragged
case with empty groups, a 3-row group and rows past the last group) and timed: the Qwen3-30B-A3B expert operands
(65536 rows over 128 experts), delayed and current scaling, and the stacked weight pairs; (2) unless --no-steps, the
micro-steps (weights cached, dW added into .grad) of the expert block and layers against bf16.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grouped_quant_builds import bits, expert_step_blocks, report_steps  # noqa: E402
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm.timing import bench  # noqa: E402

KNOB = None  # main() sets these: the environment variable, and (label, short label) of the knob on / off
ON = OFF = None


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
    return {ON[0]: knobbed(fn, True), OFF[0]: knobbed(fn, False)}


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
        outs = {k: torch.empty(G, device="cuda") for k in (ON[0], OFF[0])}
        for label, kw in (("delayed", dict(amax=amax)), ("current", {})):
            def q(i, key=OFF[0], kw=kw, x=x, offs=offs):
                extra = dict(amax_out=outs[key]) if "amax" in kw else {}
                return scalemm.quantize_fp8_grouped(x, offs, columnwise=True, **kw, **extra)
            got = {key: knobbed(lambda i, key=key: q(i, key), key == ON[0])(0) for key in outs}
            ok = same(got[ON[0]], got[OFF[0]]) and torch.equal(bits(outs[ON[0]]), bits(outs[OFF[0]]))
            t = bench(both(q), 1)
            lines.append(f"  {name:<20}{label:<9}{ON[1]} {t[ON[0]]:7.1f}  {OFF[1]} {t[OFF[0]]:7.1f}  "
                         f"{t[ON[0]] / t[OFF[0]]:.3f}x  {2 * x.numel() * 2 / t[OFF[0]] / 1e6:.2f} "
                         f"TB/s moved  {'bit-identical' if ok else 'DIFFERS'}")
            print(lines[-1], flush=True)
    for name, (N, K) in (("W gate_up [128, 1536, 2048]", (1536, 2048)), ("W down [128, 2048, 768]", (2048, 768))):
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        amax, out = torch.full((E,), 0.1, device="cuda"), torch.empty(E, device="cuda")
        fn = lambda i: scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)  # noqa: E731
        got = {key: knobbed(fn, key == ON[0])(0) for key in (ON[0], OFF[0])}
        ok = all(same(a, b) for a, b in zip(got[ON[0]], got[OFF[0]]))
        t = bench(both(fn), 1)
        lines.append(f"  {name:<27}delayed {ON[1]} {t[ON[0]]:7.1f}  {OFF[1]} {t[OFF[0]]:7.1f}  "
                     f"{t[ON[0]] / t[OFF[0]]:.3f}x  {'bit-identical' if ok else 'DIFFERS'}")
        print(lines[-1], flush=True)


def steps(lines, E, offsets, T):
    for label, models, x, dy in expert_step_blocks(offsets, T):
        def make(m, on, x=x, dy=dy):
            return knobbed(lambda i: m(x, offsets).backward(dy), on)
        fns = {"bf16": make(models["bf16"], False)}
        for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
            fns[f"{r} | {ON[0]}"] = make(models[r], True)
            fns[f"{r} | {OFF[0]}"] = make(models[r], False)
        report_steps(lines, label, T, bench(fns, copies=1))


def main(knob: str, on: tuple, off: tuple):
    """The A/B of an experiment build whose launcher takes the old path while `knob` is set in the environment:
    on / off = (label, short label) of the two paths."""
    global KNOB, ON, OFF
    KNOB, ON, OFF = knob, on, off
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

