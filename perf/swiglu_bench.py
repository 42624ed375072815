"""SwiGLU forward and backward: scalemm.swiglu's kernels against torch's eager ops (F.silu(gate) * up and its
autograd) and a device copy of the same bytes, in one process (CUDA graphs, inputs rotated past L2).

    python perf/swiglu_bench.py [--out perf/results/<gpu>/swiglu]   # table, JSON (and a PNG with matplotlib)
    python perf/swiglu_bench.py --variants "label:MACRO=V,MACRO=V;label:..."
        # A/B: the kernels also built with these -D flags (macros an experiment adds to swiglu.cuh), timed beside
        # the default build, their outputs compared with it bit for bit (the fiftieth session's unroll and launch-bound
        # macros were removed with the decision: perf/results/h200/session50/call3)

Shapes: the expert block of perf/train_bench.py (65536 routed rows, I = 768: Qwen3-30B-A3B) and the Llama-3-8B MLP
at 8192 tokens (I = 14336), plus Llama-3-70B's MLP (I = 28672) at 4096 tokens, all bf16. Each row: microseconds
per call, GB/s of the pass's compulsory bytes (forward: h read, a written; backward: h and da read, dh written), the
ratio over torch and the fraction of a copy's rate (torch's copy_ of as many bytes read and written).
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scalemm import abi  # noqa: E402
from scalemm import activation  # noqa: E402
from scalemm.activation import swiglu_backward, swiglu_forward  # noqa: E402
from scalemm.jit import build  # noqa: E402
from scalemm.timing import bench, l2_copies  # noqa: E402

SHAPES = [("qwen3-30b-a3b experts", 65536, 768), ("llama-3-8b mlp", 8192, 14336), ("llama-3-70b mlp", 4096, 28672)]


def torch_forward(h):
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def torch_backward(h, da):
    """torch's eager autograd of F.silu(gate) * up: the ops its backward graph runs (mul, mul, silu_backward, cat)."""
    gate, up = h.chunk(2, dim=-1)
    s = F.silu(gate)
    dup = da * s
    dgate = torch.ops.aten.silu_backward(da * up, gate)
    return torch.cat([dgate, dup], dim=-1)


def variant_launchers(text: str, dtype=torch.bfloat16) -> dict:
    """{label: (forward launcher, backward launcher)} of --variants "label:MACRO=V,MACRO=V;label:..."."""
    out = {}
    for item in filter(None, (t.strip() for t in text.split(";"))):
        label, _, macros = item.partition(":")
        base = activation._spec(dtype)
        spec = dataclasses.replace(base, name=f"{base.name}_{label}",
                                   extra_flags=tuple(f"-D{m}" for m in macros.split(",") if m))
        lib = build(spec)
        out[label] = tuple(lib.function(f"scalemm_swiglu_{w}", [ctypes.POINTER(abi.SwigluArgs)])
                           for w in ("forward", "backward"))
    return out


def run(rows: int, inner: int, dtype=torch.bfloat16, variants=None) -> dict:
    el = torch.finfo(dtype).bits // 8
    fwd_bytes = rows * 3 * inner * el
    bwd_bytes = rows * 5 * inner * el
    n = l2_copies(rows * 2 * inner * el)
    hs = [torch.randn(rows, 2 * inner, device="cuda", dtype=dtype) for _ in range(n)]
    ds = [torch.randn(rows, inner, device="cuda", dtype=dtype) for _ in range(n)]
    src = [torch.empty(rows * 5 * inner // 2, device="cuda", dtype=dtype) for _ in range(n)]
    dst = torch.empty_like(src[0])
    # correctness first: the same values as the reference to one ulp (tests/test_swiglu_gpu.py checks it closely)
    torch.testing.assert_close(swiglu_forward(hs[0]), torch_forward(hs[0]), rtol=2 ** -7, atol=1e-6)
    fns = {
        "scalemm forward": lambda i: swiglu_forward(hs[i]),
        "torch forward": lambda i: torch_forward(hs[i]),
        "scalemm backward": lambda i: swiglu_backward(hs[i], ds[i]),
        "torch backward": lambda i: torch_backward(hs[i], ds[i]),
        "copy (backward's bytes)": lambda i: dst.copy_(src[i]),
    }
    for label, (fwd, bwd) in (variants or {}).items():
        def vf(i, fwd=fwd):
            a = torch.empty(rows, inner, device="cuda", dtype=dtype)
            activation._launch("", hs[i], None, a, inner, fwd)
            return a

        def vb(i, bwd=bwd):
            dh = torch.empty_like(hs[i])
            activation._launch("", hs[i], ds[i], dh, inner, bwd)
            return dh
        assert torch.equal(vf(0), swiglu_forward(hs[0])) and torch.equal(vb(0), swiglu_backward(hs[0], ds[0])), label
        fns[f"{label} forward"], fns[f"{label} backward"] = vf, vb
    us = bench(fns, n)
    copy_rate = bwd_bytes / us["copy (backward's bytes)"]  # bytes per us of a copy (read + write)
    out = {"rows": rows, "inner": inner, "dtype": str(dtype), "us": us}
    for way, nbytes in (("forward", fwd_bytes), ("backward", bwd_bytes)):
        t = us[f"scalemm {way}"]
        out[way] = {"us": t, "torch_us": us[f"torch {way}"], "over_torch": us[f"torch {way}"] / t,
                    "GB_per_s": nbytes / t / 1e3, "of_copy_rate": nbytes / t / copy_rate}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="write OUT.json (and OUT.png)")
    p.add_argument("--variants", default="",
                   help="A/B builds: 'label:MACRO=V,MACRO=V;label:...' (-D flags for swiglu.cuh)")
    args = p.parse_args(argv)
    variants = variant_launchers(args.variants)
    gpu = torch.cuda.get_device_name()
    rows = []
    print(f"{gpu}\n{'shape':<34} {'pass':<9} {'scalemm us':>10} {'torch us':>9} {'x torch':>8} {'GB/s':>7} "
          f"{'of copy':>8}")
    for name, M, inner in SHAPES:
        r = run(M, inner, variants=variants)
        r["name"] = name
        rows.append(r)
        for way in ("forward", "backward"):
            w = r[way]
            print(f"{name + f' [{M}, 2x{inner}]':<34} {way:<9} {w['us']:>10.1f} {w['torch_us']:>9.1f} "
                  f"{w['over_torch']:>7.2f}x {w['GB_per_s']:>7.0f} {w['of_copy_rate']:>7.0%}")
        for label in variants:
            print(f"{'':<34} {label:<9} forward {r['us'][label + ' forward']:.1f} us, backward "
                  f"{r['us'][label + ' backward']:.1f} us")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".json", "w") as f:
            json.dump({"gpu": gpu, "rows": rows}, f, indent=1)
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return 0
        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{r['name']}\n{way}" for r in rows for way in ("forward", "backward")]
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], [r[w]["us"] for r in rows for w in ("forward", "backward")], 0.4,
               label="scalemm.swiglu")
        ax.bar([x + 0.2 for x in xs], [r[w]["torch_us"] for r in rows for w in ("forward", "backward")], 0.4,
               label="torch eager")
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_ylabel("us per call")
        ax.set_title(f"SwiGLU, bf16 ({gpu})", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.out + ".png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
