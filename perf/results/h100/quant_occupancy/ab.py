"""Same-process A/B of the grouped FP8 quantize kernel compiled for 1 (the twenty-eighth session's code: 59
registers, 4 blocks per SM), 5 (48 registers) or 6 (40 registers, 56 bytes spilled) blocks per SM
(SCALEMM_GROUPED_QUANTIZE_MIN_BLOCKS), on the expert layers' delayed-scaling quantizations (65536 rows over 128
experts as perf/train_bench.py's MoE block; both copies, a given amax, amax_out recorded). CUDA graphs; every
variant's outputs checked bit for bit against the first's.

Needs experiment.diff (the macro; not part of scalemm: the session kept no change).
  python3 perf/results/h100/quant_occupancy/ab.py --out OUT
"""
import argparse
import contextlib
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import quantize_grouped as qg  # noqa: E402
from scalemm.timing import bench  # noqa: E402

_SPEC = qg._spec
VARIANTS = (1, 5, 6)


def variant_spec(blocks):
    def spec(dtype):
        s = _SPEC(dtype)
        return dataclasses.replace(s, name=f"{s.name}_mb{blocks}",
                                   extra_flags=tuple(s.extra_flags) + (f"-DSCALEMM_GROUPED_QUANTIZE_MIN_BLOCKS={blocks}",))
    return spec


@contextlib.contextmanager
def variant(blocks):
    qg._spec = variant_spec(blocks)
    qg._launcher.cache_clear()
    try:
        yield
    finally:
        qg._spec = _SPEC
        qg._launcher.cache_clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    if args.build:
        from scalemm import jit
        jit.build_many([variant_spec(b)(torch.bfloat16) for b in VARIANTS], jobs=2)
        return
    sizes = routed_sizes(8192, 128, 8, seed=0)
    T = int(sizes.sum())
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    lines = [f"device: {torch.cuda.get_device_name()}"]
    for label, K in (("x / dy [T, 2048]", 2048), ("h [T, 768]", 768), ("dh [T, 1536]", 1536)):
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16) * 3
        amax = torch.rand(128, device="cuda") * 8 + 1
        outs = {b: torch.empty(128, device="cuda") for b in VARIANTS}
        res = {}

        def call(b, i=0):
            with variant(b):
                return scalemm.quantize_fp8_grouped(x, offs, columnwise=True, amax=amax, amax_out=outs[b])
        for b in VARIANTS:
            q = call(b)
            res[b] = [t.clone() for t in (q.data, q.scale_inv, q.columnwise.data, q.columnwise.scale_inv, outs[b])]
        torch.cuda.synchronize()
        us = bench({b: (lambda i, b=b: call(b)) for b in VARIANTS}, copies=1)
        moved = x.numel() * 4  # bf16 read, two e4m3 copies written
        lines.append(f"{label} ({moved / 1e6:.0f} MB moved):")
        for b in VARIANTS:
            same = all(torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                                   c.view(torch.uint8) if c.dtype == torch.float8_e4m3fn else c)
                       for a, c in zip(res[b], res[VARIANTS[0]]))
            lines.append(f"  min blocks {b}: {us[b]:8.1f} us  {moved / us[b] / 1e6:.2f} TB/s  "
                         f"{us[VARIANTS[0]] / us[b]:.3f}x of min blocks 1  {'bit-identical' if same else 'DIFFERS'}")
        print("\n".join(lines[-4:]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
