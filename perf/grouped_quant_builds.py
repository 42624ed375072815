"""Same-process A/B of quant_grouped library builds that differ by macros (an experiment's diff applied, each variant
compiled with its -D flags beside the default build): the grouped quantizers with current scaling on the Qwen3-30B-A3B
expert operands (65536 rows over 128 experts, perf/train_bench.py's MoE block), a skewed routing (one group of half the
rows) and a ragged case with NaN / Inf, every output of every build compared bit for bit with the default's (amax
buffers included); then, unless --no-steps, the expert block's (and its layers') micro-steps (weights cached, dW
added into .grad) against bf16. CUDA graphs (scalemm.timing.bench). Each experiment's ab.py under perf/results/ is an
Experiment and a call of main (perf/results/h200/grouped_stats_bits/ab.py and its neighbours).

  python3 .../ab.py --build                 # the builds (bf16)
  python3 .../ab.py --out OUT [--no-steps] [--builds a,b]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grouped_sweep import routed_sizes  # noqa: E402
import train_bench as tb  # noqa: E402

import scalemm  # noqa: E402
from scalemm import quantize_grouped as qg  # noqa: E402
from scalemm.timing import bench  # noqa: E402

_SPEC = qg._spec


@dataclasses.dataclass(frozen=True)
class Experiment:
    new: str         # the default build's label
    builds: dict     # label -> macros ("NAME=VALUE", ...); the first is the baseline of the ratio column
    # (mode, both copies): "tensor" / "token" FP8 scaling, or "nvfp4" (per-group rows)
    modes: tuple = (("tensor", True), ("token", True), ("nvfp4", False))
    step_builds: tuple = ()  # builds the micro-steps time (the default build's label among them); () = new, baseline
    layers: bool = True      # also the gate_up and down layers alone
    delayed_per_build: bool = False  # the quantize pass alone (a given amax) under every build, not just the default

    @property
    def baseline(self) -> str:
        return next(iter(self.builds))


def build_spec(exp: Experiment, which: str):
    macros = exp.builds[which]

    def spec(dtype):
        s = _SPEC(dtype)
        tag = "_".join(m.split("=")[0].split("_")[-1].lower() + m.split("=")[1] for m in macros)
        return dataclasses.replace(s, name=f"{s.name}_{tag}",
                                   extra_flags=tuple(s.extra_flags) + tuple(f"-D{m}" for m in macros))
    return spec


@contextlib.contextmanager
def build(exp: Experiment, which: str):
    if which != exp.new:
        qg._spec = build_spec(exp, which)
        qg._launcher.cache_clear()
    try:
        yield
    finally:
        qg._spec = _SPEC
        qg._launcher.cache_clear()


def bits(t):
    return t.reshape(-1).contiguous().view(torch.uint8)


def fields(q):
    if hasattr(q, "qdata"):  # GroupedNVFP4Tensor
        return [f for f in (q.qdata, q.scales, q.alpha, q.amax) if f is not None]
    out = [q.data, q.scale_inv]
    if q.columnwise is not None:
        out += [q.columnwise.data, q.columnwise.scale_inv]
    return [f for f in out if f is not None]


def quantizers(exp: Experiment, names: list, lines: list, offsets, T: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    G = offsets.numel()
    skew = torch.full((G,), (T // 2) // (G - 1), dtype=torch.int64)
    skew[0] = T - int(skew[1:].sum())
    cases = [("x / dy [T, 2048]", T, 2048, offsets), ("h [T, 768]", T, 768, offsets),
             ("dh [T, 1536]", T, 1536, offsets),
             ("skewed [T, 2048]", T, 2048, torch.cumsum(skew, 0).to(torch.int32).cuda()),
             ("ragged [1100, 512]", 1100, 512,
              torch.tensor([0, 3, 3, 40, 41, 200, 200, 999], dtype=torch.int32, device="cuda"))]
    lines.append(f"the grouped quantizers with current scaling, {T} rows over {G} experts (CUDA graphs, us):")
    new, base = exp.new, exp.baseline
    for w in list(names[1:]):  # a build that fails to run is reported and left out
        try:
            with build(exp, w):
                scalemm.quantize_fp8_grouped(torch.ones(256, 512, device="cuda", dtype=torch.bfloat16), offsets[:2] * 0
                                             + torch.tensor([100, 256], dtype=torch.int32, device="cuda"),
                                             scaling="tensor", columnwise=True)
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 -- an A/B build's launch error
            lines.append(f"build {w} left out: {e}")
            print(lines[-1], flush=True)
            names.remove(w)
    for name, rows, K, offs in cases:
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[rows // 2, 3] = float("inf")
        amax = torch.rand(offs.numel(), device="cuda", generator=g) * 8
        for mode, col in exp.modes:
            def q(i, which, mode=mode, col=col, x=x, offs=offs):
                with build(exp, which):
                    if mode == "nvfp4":
                        return scalemm.quantize_nvfp4_grouped(x, offs, scaling="tensor")
                    return scalemm.quantize_fp8_grouped(x, offs, scaling=mode, columnwise=col)
            got = {w: [f.clone() for f in fields(q(0, w))] for w in names}
            ok = all(torch.equal(bits(a), bits(b)) for w in names[1:] for a, b in zip(got[new], got[w]))
            fns = {w: (lambda i, q=q, w=w: q(i, w)) for w in names}
            delayed = []
            if mode == "tensor":  # the quantize pass alone: a given amax (delayed scaling), no stats pass
                for w in names if exp.delayed_per_build else [new]:
                    def d(i, w=w, x=x, offs=offs, col=col, amax=amax, out=torch.empty_like(amax)):
                        with build(exp, w):
                            q = scalemm.quantize_fp8_grouped(x, offs, columnwise=col, amax=amax, amax_out=out)
                        return [*fields(q), out]
                    label = f"delayed {w}" if exp.delayed_per_build else "delayed"
                    fns[label] = d
                    delayed.append((label, d))
                if exp.delayed_per_build:  # the delayed pass's outputs (amax_out included) across the builds
                    outs = [[f.clone() for f in d(0)] for _, d in delayed]
                    ok = ok and all(torch.equal(bits(a), bits(b)) for o in outs[1:] for a, b in zip(outs[0], o))
            t = bench(fns, 1)
            moved = x.numel() * (4 if col else 3 if mode != "nvfp4" else 2.5)  # x read, the copies written
            times = "".join(f"  {w} {t[w]:7.1f}" for w in [*names, *(label for label, _ in delayed)] if w in t)
            lines.append(f"  {name:<20}{mode:<7}{'both' if col else 'rows':<5}{times}  {base}/{new} "
                         f"{t[base] / t[new]:.3f}x  {new} {moved / t[new] / 1e6:.2f} TB/s  "
                         f"{'bit-identical' if ok else 'DIFFERS'}")
            print(lines[-1], flush=True)


def expert_step_blocks(offsets, T: int, layers: bool = True):
    """The micro-steps both A/B harnesses time (this one and grouped_quant_ab.py): the Qwen3-30B-A3B expert block
    and, with `layers`, each expert layer alone, as (label, contenders, x, dy) with the weights cached and dW added
    into .grad."""
    E, hidden, inter = offsets.numel(), 2048, 768
    moe = tb.moe_contenders(E, hidden, inter, True, True)
    blocks = [("experts block", moe, hidden, hidden)]
    if layers:
        for n, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden)):
            blocks.append((f"{n} layer", tb.expert_layers(moe, n), K, N))
    g = torch.Generator(device="cuda").manual_seed(3)
    for label, models, K, N in blocks:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        dy = torch.randn(T, N, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
        yield label, models, x, dy


def report_steps(lines: list, label: str, T: int, us: dict) -> None:
    lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
    for n, t in us.items():
        lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us) - 1:]), flush=True)


def steps(exp: Experiment, names: list, lines: list, offsets, T: int):
    for label, models, x, dy in expert_step_blocks(offsets, T, exp.layers):
        def make(m, which=exp.new, x=x, dy=dy):
            def f(i):
                with build(exp, which):
                    m(x, offsets).backward(dy)
            return f
        fns = {"bf16": make(models["bf16"]), "scalemm_fp8_delayed": make(models["scalemm_fp8_delayed"])}
        for r in ("scalemm_fp8_tensorwise", "scalemm_fp8_rowwise"):
            for w in [b for b in exp.step_builds or (exp.new, exp.baseline) if b in names]:
                fns[f"{r} | {w}"] = make(models[r], w)
        report_steps(lines, label, T, bench(fns, copies=1))


def main(exp: Experiment):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--builds", default=None, help="comma-separated builds to time beside the default and the "
                                                   "baseline (default: all)")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--no-steps", action="store_true")
    args = ap.parse_args()
    if args.build:
        from scalemm import jit
        jit.build_many([_SPEC(torch.bfloat16)] + [build_spec(exp, b)(torch.bfloat16) for b in exp.builds], jobs=4)
        return
    others = [b for b in exp.builds if b != exp.baseline]
    if args.builds is not None:
        others = [b for b in args.builds.split(",") if b and b != exp.baseline]
    names = [exp.new, exp.baseline, *others]
    sizes = routed_sizes(8192, 128, 8, seed=0)
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [f"device: {torch.cuda.get_device_name()}"]
    quantizers(exp, names, lines, offsets, T)
    if not args.no_steps:
        steps(exp, names, lines, offsets, T)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
