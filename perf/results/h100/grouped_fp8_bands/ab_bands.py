"""Same-process A/B of the banded grouped FP8 quantizer (rows + columns copies: a stats pass over a band of rows,
then the groups that ended in it, while its rows are in L2) against one stats pass then one quantize pass, on the
Qwen3-30B-A3B expert layer's quantizer calls and on its whole training step (perf/train_bench.py's MoE block).
The variants set scalemm.quantize_grouped._FP8_BAND_ROWS (abi.h QuantizeFp8GroupedArgs.band_rows) while a CUDA
graph is captured: -1 no bands (the previous path), 0 the launcher's bands (about 16 MB of x), or rows per band.
  git apply perf/results/h100/grouped_fp8_bands/bands.patch   # the banded path is not in scalemm
  python3 perf/results/h100/grouped_fp8_bands/ab_bands.py --out OUT
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

import scalemm  # noqa: E402
from scalemm import quantize_grouped as qg  # noqa: E402
from scalemm.timing import bench  # noqa: E402

VARIANTS = {"one_pass": -1, "bands_16MB": 0, "rows_2048": 2048, "rows_8192": 8192}


@contextlib.contextmanager
def band(rows):
    old = qg._FP8_BAND_ROWS
    qg._FP8_BAND_ROWS = rows
    try:
        yield
    finally:
        qg._FP8_BAND_ROWS = old


def _run(fn, rows):
    with band(rows):
        return fn()


def _tensors(r):
    out = []
    for q in (r if isinstance(r, tuple) else (r,)):
        for c in (q, getattr(q, "columnwise", None)):
            if c is not None:
                out += [t.view(torch.uint8) if t.element_size() == 1 else t for t in (c.data, c.scale_inv)]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = [f"GPU {torch.cuda.get_device_name()}"]
    E, k, hidden, inter, tokens = 128, 8, 2048, 768, 8192
    sizes = routed_sizes(tokens, E, k, seed=0)
    T = int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(3)
    acts = {K: torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g) for K in (hidden, 2 * inter, inter)}
    weights = {"w_gate_up": torch.randn(E, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16, generator=g),
               "w_down": torch.randn(E, hidden, inter, device="cuda", dtype=torch.bfloat16, generator=g)}
    calls = {}
    for scaling in ("token", "tensor"):
        for K, x in acts.items():
            calls[f"x[{T},{K}] {scaling}"] = lambda x=x, s=scaling: scalemm.quantize_fp8_grouped(
                x, offsets, scaling=s, rowwise=True, columnwise=True)
        for n, w in weights.items():
            calls[f"{n} pair {scaling}"] = lambda w=w, s=scaling: scalemm.quantize_fp8_stacked_pair(w, scaling=s)
    for cname, fn in calls.items():
        want = _tensors(_run(fn, -1))
        for v, rows in VARIANTS.items():
            assert all(torch.equal(a, b) for a, b in zip(_tensors(_run(fn, rows)), want)), (cname, v)
    print("every variant bit-identical on every call", flush=True)
    fns = {f"{c} | {v}": (lambda i, fn=fn, rows=rows: _run(fn, rows)) for c, fn in calls.items()
           for v, rows in VARIANTS.items()}
    us = bench(fns, copies=1)
    for c in calls:
        base = us[f"{c} | one_pass"]
        lines.append(f"{c:<28}" + "".join(f"{v}: {us[f'{c} | {v}']:8.1f} us ({base / us[f'{c} | {v}']:.3f}x)  "
                                          for v in VARIANTS))
    print("\n".join(lines[1:]), flush=True)
    models = tb.moe_contenders(E, hidden, inter, False)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
    steps = {"bf16": lambda i: models["bf16"](x, offsets).backward(dy)}
    for r in ("scalemm_fp8_rowwise", "scalemm_fp8_tensorwise"):
        for v, rows in VARIANTS.items():
            steps[f"{r} | {v}"] = lambda i, m=models[r], rows=rows: _run(lambda: m(x, offsets).backward(dy), rows)
    us = bench(steps, copies=1)
    lines.append(f"MoE step fwd + bwd, {T} rows over {E} experts, CUDA graphs:")
    for n, t in us.items():
        lines.append(f"  {n:<40}{t:>10.1f} us  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us) - 1:]), flush=True)
    with open(os.path.join(args.out, "ab_bands.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
