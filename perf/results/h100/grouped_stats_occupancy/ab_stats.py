"""Same-process A/B of grouped_stats_kernel's register budget (rows per thread x CTAs per SM it is compiled
for), on the grouped FP8 quantizer calls of the Qwen3-30B-A3B expert layer's training step and on the whole
step (perf/train_bench.py's MoE block). Each variant is the bf16 quant_grouped library built from this
checkout's headers with kGroupedStatsRows / kGroupedStatsMinBlocks replaced; scalemm.quantize_grouped's
launcher is monkeypatched while a variant's CUDA graph is captured. "prod" is the library the JIT cache holds.
  python3 perf/results/h100/grouped_stats_occupancy/ab_stats.py --out OUT
"""
import argparse
import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "perf"))
import train_bench as tb  # noqa: E402
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import abi, quantize_grouped as qg  # noqa: E402
from scalemm.jit import toolchain  # noqa: E402
from scalemm.timing import bench  # noqa: E402

VARIANTS = {"r16_b1": (16, 1), "r16_b2": (16, 2), "r8_b2": (8, 2), "r8_b3": (8, 3)}


def build_variant(name, rows, blocks, work):
    inc = os.path.join(work, name, "include")
    shutil.copytree(os.path.join(ROOT, "cutlass_kernels", "include"), inc, dirs_exist_ok=True)
    h = os.path.join(inc, "scalemm", "quant_grouped.cuh")
    text = open(h).read()
    text, n1 = re.subn(r"constexpr int kGroupedStatsRows = \d+;", f"constexpr int kGroupedStatsRows = {rows};", text)
    text, n2 = re.subn(r"constexpr int kGroupedStatsMinBlocks = \d+;",
                       f"constexpr int kGroupedStatsMinBlocks = {blocks};", text)
    assert n1 == n2 == 1
    open(h, "w").write(text)
    src = os.path.join(work, name, "source.cu")
    tpl = open(os.path.join(ROOT, "cutlass_kernels", "templates", "quant_grouped.cu")).read()
    open(src, "w").write(tpl.replace("{{IN_T}}", "__nv_bfloat16"))
    so = os.path.join(work, name, "kernel.so")
    cmd = toolchain.nvcc_command(src, so, use_cutlass=False, extra_flags=["-Xptxas", "-v"])
    cmd = [c if c != f"-I{toolchain.INCLUDE_DIR}" else f"-I{inc}" for c in cmd]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    regs = re.search(r"grouped_stats_kernel.*?Used (\d+) registers", out.stderr, re.S)
    lib = ctypes.CDLL(so)
    fns = {}
    for fn_name, struct in qg._ARGS.items():
        f = getattr(lib, fn_name)
        f.argtypes, f.restype = [ctypes.POINTER(abi.structs[struct])], ctypes.c_int

        def call(*a, f=f, fn_name=fn_name):
            rc = f(*a)
            assert rc == 0, (fn_name, rc)
        fns[fn_name] = call
    return fns, int(regs[1]) if regs else None


PROD = qg._launcher


@contextlib.contextmanager
def use(fns):
    if fns is not None:
        qg._launcher = lambda dtype, name: fns[name] if dtype == torch.bfloat16 else PROD(dtype, name)
    try:
        yield
    finally:
        qg._launcher = PROD


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="results")
    p.add_argument("--work", default="/tmp/ab_stats")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    libs = {"prod": None}
    lines = [f"GPU {torch.cuda.get_device_name()}"]
    for name, (rows, blocks) in VARIANTS.items():
        libs[name], regs = build_variant(name, rows, blocks, args.work)
        lines.append(f"{name}: {rows} rows per thread, min {blocks} CTAs/SM: {regs} registers")
    print("\n".join(lines), flush=True)
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
    # every variant gives the bytes of the production library
    for cname, fn in calls.items():
        want = [t.view(torch.uint8) if t.element_size() == 1 else t for t in _tensors(fn())]
        for lname, fns in libs.items():
            with use(fns):
                got = [t.view(torch.uint8) if t.element_size() == 1 else t for t in _tensors(fn())]
            assert all(torch.equal(a, b) for a, b in zip(got, want)), (cname, lname)
    print("every variant bit-identical on every call", flush=True)
    fns = {}
    for cname, fn in calls.items():
        for lname, lib in libs.items():
            fns[f"{cname} | {lname}"] = lambda i, fn=fn, lib=lib: _run(fn, lib)
    us = bench(fns, copies=1)
    for cname in calls:
        base = us[f"{cname} | r16_b1"]
        lines.append(f"{cname:<28}" + "".join(f"{l}: {us[f'{cname} | {l}']:8.1f} us ({base / us[f'{cname} | {l}']:.3f}x)  "
                                                for l in libs))
    print("\n".join(lines[-len(calls):]), flush=True)
    # the whole step
    models = tb.moe_contenders(E, hidden, inter, False)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2
    steps = {"bf16": lambda i: models["bf16"](x, offsets).backward(dy)}
    for r in ("scalemm_fp8_rowwise", "scalemm_fp8_tensorwise"):
        for lname, lib in libs.items():
            steps[f"{r} | {lname}"] = lambda i, m=models[r], lib=lib: _run(lambda: m(x, offsets).backward(dy), lib)
    us = bench(steps, copies=1)
    lines.append(f"MoE step fwd + bwd, {T} rows over {E} experts, CUDA graphs:")
    for n, t in us.items():
        lines.append(f"  {n:<40}{t:>10.1f} us  {us['bf16'] / t:.3f}x of bf16")
    print("\n".join(lines[-len(us) - 1:]), flush=True)
    with open(os.path.join(args.out, "ab_stats.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _run(fn, lib):
    with use(lib):
        return fn()


def _tensors(r):
    out = []
    for q in (r if isinstance(r, tuple) else (r,)):
        for c in (q, getattr(q, "columnwise", None)):
            if c is not None:
                out += [t for t in (getattr(c, "data", None), getattr(c, "scale_inv", None)) if t is not None]
    return out


if __name__ == "__main__":
    main()
