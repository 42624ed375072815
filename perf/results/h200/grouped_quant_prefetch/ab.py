"""Same-process A/B of L2 prefetches in the grouped quantizer's two passes (experiment.diff: macros
SCALEMM_STATS_PREFETCH, the stats kernel's CTA prefetching its next tile's rows; SCALEMM_QUANT_PREFETCH_TILES = d, each
quantize CTA prefetching the rows about where the CTA d tiles on will read) against the code without them ("base").
The Qwen3-30B-A3B expert operands (65536 rows over 128 experts), a skewed routing and a ragged case with NaN / Inf;
FP8 per-group and per-token scaling, both copies, NVFP4 per-group rows; every output compared bit for bit with the
base build's; unless --no-steps, the expert block's micro-steps. CUDA graphs (scalemm.timing.bench).

  python3 perf/results/h200/grouped_quant_prefetch/ab.py --build
  python3 perf/results/h200/grouped_quant_prefetch/ab.py --out OUT
"""
import argparse
import contextlib
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402
import train_bench as tb  # noqa: E402

import scalemm  # noqa: E402
from scalemm import quantize_grouped as qg  # noqa: E402
from scalemm.timing import bench  # noqa: E402

_SPEC = qg._spec
NEW, OLD = "base", "stats pf"
# the other builds: name -> macros (quant_grouped.cuh); NEW ("base") is the default build (no prefetch)
BUILDS = {OLD: ("SCALEMM_STATS_PREFETCH=1",),
          "both pf 528": ("SCALEMM_STATS_PREFETCH=1", "SCALEMM_QUANT_PREFETCH_TILES=528"),
          "both pf 1056": ("SCALEMM_STATS_PREFETCH=1", "SCALEMM_QUANT_PREFETCH_TILES=1056")}
OTHERS = [b for b in BUILDS if b != OLD]


def build_spec(which):
    def spec(dtype):
        s = _SPEC(dtype)
        tag = "_".join(m.split("=")[0].split("_")[-1].lower() + m.split("=")[1] for m in BUILDS[which])
        return dataclasses.replace(s, name=f"{s.name}_{tag}",
                                   extra_flags=tuple(s.extra_flags) + tuple(f"-D{m}" for m in BUILDS[which]))
    return spec


@contextlib.contextmanager
def build(which):
    if which != NEW:
        qg._spec = build_spec(which)
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


def quantizers(lines, offsets, T):
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
    for name, rows, K, offs in cases:
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16, generator=g)
        x[5, 7] = float("nan")
        x[rows // 2, 3] = float("inf")
        amax = torch.rand(offs.numel(), device="cuda", generator=g) * 8
        for scaling, col in (("tensor", True), ("token", True), ("nvfp4", False)):
            def q(i, which, scaling=scaling, col=col, x=x, offs=offs):
                with build(which):
                    if scaling == "nvfp4":
                        return scalemm.quantize_nvfp4_grouped(x, offs, scaling="tensor")
                    return scalemm.quantize_fp8_grouped(x, offs, scaling=scaling, columnwise=col)
            names = [NEW, OLD, *OTHERS]
            got = {w: [f.clone() for f in fields(q(0, w))] for w in names}
            ok = all(torch.equal(bits(a), bits(b)) for w in names[1:] for a, b in zip(got[NEW], got[w]))
            fns = {w: (lambda i, q=q, w=w: q(i, w)) for w in names}
            if scaling == "tensor" and col:
                fns["delayed"] = lambda i, x=x, offs=offs, col=col, amax=amax: scalemm.quantize_fp8_grouped(
                    x, offs, columnwise=col, amax=amax)
            t = bench(fns, 1)
            moved = x.numel() * 4 if col else x.numel() * 2.5  # x read, the copies written (rough for nvfp4)
            extra = "".join(f"  {w} {t[w]:7.1f}" for w in OTHERS)
            extra += f"  delayed {t['delayed']:7.1f}" if "delayed" in t else ""
            lines.append(f"  {name:<20}{scaling:<7}{'both' if col else 'rows':<5} {NEW} {t[NEW]:7.1f}  {OLD} "
                         f"{t[OLD]:7.1f}{extra}  {t[OLD] / t[NEW]:.3f}x  {NEW} {moved / t[NEW] / 1e6:.2f} TB/s  "
                         f"{'bit-identical' if ok else 'DIFFERS'}")
            print(lines[-1], flush=True)


def steps(lines, offsets, T):
    E, hidden, inter = offsets.numel(), 2048, 768
    moe = tb.moe_contenders(E, hidden, inter, True, True)
    blocks = [("experts block", moe, hidden, hidden)]
    g = torch.Generator(device="cuda").manual_seed(3)
    for label, models, K, N in blocks:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        dy = torch.randn(T, N, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

        def make(m, which=NEW):
            def f(i):
                with build(which):
                    m(x, offsets).backward(dy)
            return f
        fns = {"bf16": make(models["bf16"]), "scalemm_fp8_delayed": make(models["scalemm_fp8_delayed"])}
        for r in ("scalemm_fp8_tensorwise", "scalemm_fp8_rowwise"):
            for w in (NEW, OLD, "both pf 528"):
                fns[f"{r} | {w}"] = make(models[r], w)
        us = bench(fns, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--builds", default=None, help="comma-separated subset of the other builds to time")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--no-steps", action="store_true")
    args = ap.parse_args()
    global OTHERS
    if args.builds is not None:
        OTHERS = [b for b in args.builds.split(",") if b]
    if args.build:
        from scalemm import jit
        jit.build_many([_SPEC(torch.bfloat16)] + [build_spec(b)(torch.bfloat16) for b in BUILDS], jobs=4)
        return
    sizes = routed_sizes(8192, 128, 8, seed=0)
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [f"device: {torch.cuda.get_device_name()}"]
    quantizers(lines, offsets, T)
    if not args.no_steps:
        steps(lines, offsets, T)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
