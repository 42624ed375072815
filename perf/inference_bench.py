"""Inference layers in a model: the linear layers of Llama-3-8B decoder blocks, bf16 nn.Linear against
scalemm.nn.FP8Linear and NVFP4Linear (W4A16, W4A4), made by scalemm.nn.convert_for_inference.

A block is qkv (4096 -> 6144), o (4096 -> 4096) on the first 4096 of qkv's outputs (attention itself left
out), a residual add, gate_up (4096 -> 28672), SiLU(gate) * up, down (14336 -> 4096) and a residual add: every
GEMM of the block with the elementwise work between them, as a model runs them. Each call runs `--blocks`
blocks with their own weights (two by default: 122 MB of NVFP4 weights per block, so every call reads its
weights from memory). Times are medians of CUDA-graph replays (scalemm.timing.bench), all contenders in one
process; the outputs' agreement with bf16 is reported as SQNR (dB).

  python perf/inference_bench.py --out results/inference      # 1, 16, 64, 256, 4096 tokens
  python perf/inference_bench.py --tokens 1,16 --blocks 4
"""
from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from scalemm.nn import convert_for_inference
from scalemm.timing import bench

HIDDEN, QKV, INTER = 4096, 6144, 14336
VARIANTS = {"fp8": dict(format="fp8"), "nvfp4_w4a16": dict(format="nvfp4", mode="w4a16"),
            "nvfp4_w4a4": dict(format="nvfp4", mode="w4a4")}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        kw = dict(bias=False, device="cuda", dtype=torch.bfloat16)
        self.qkv = torch.nn.Linear(HIDDEN, QKV, **kw)
        self.o = torch.nn.Linear(HIDDEN, HIDDEN, **kw)
        self.gate_up = torch.nn.Linear(HIDDEN, 2 * INTER, **kw)
        self.down = torch.nn.Linear(INTER, HIDDEN, **kw)
        for lin in (self.qkv, self.o, self.gate_up, self.down):  # unit-variance outputs for unit-variance inputs
            torch.nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(self, x):
        x = x + self.o(self.qkv(x)[:, :HIDDEN])
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def sqnr(y, ref):
    return 10 * math.log10(ref.double().pow(2).sum().item() / max((y.double() - ref.double()).pow(2).sum().item(), 1e-30))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1,16,64,256,4096")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    torch.manual_seed(0)
    models = {"bf16": torch.nn.Sequential(*[Block() for _ in range(args.blocks)])}
    for name, kw in VARIANTS.items():
        models[name] = copy.deepcopy(models["bf16"])
        report = convert_for_inference(models[name], **kw)
        assert len(report.converted) == 4 * args.blocks and not report.skipped, report
    rows = []
    print(f"{torch.cuda.get_device_name()}: {args.blocks} Llama-3-8B blocks' linear layers, us per call "
          f"(speed-up over bf16) and SQNR against bf16")
    print(f"{'tokens':>6} {'bf16':>9} " + " ".join(f"{n:>26}" for n in VARIANTS))
    with torch.inference_mode():
        for tokens in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
            outs = {name: m(x) for name, m in models.items()}  # each weight's first call outside the capture
            us = bench({name: (lambda m: lambda i: m(x))(m) for name, m in models.items()}, copies=1)
            row = {"tokens": tokens, "us": us, "speedup": {n: us["bf16"] / us[n] for n in VARIANTS},
                   "sqnr_db": {n: sqnr(outs[n], outs["bf16"]) for n in VARIANTS}}
            rows.append(row)
            print(f"{tokens:>6} {us['bf16']:9.1f} " + " ".join(
                f"{us[n]:9.1f} ({row['speedup'][n]:.2f}x, {row['sqnr_db'][n]:4.1f} dB)" for n in VARIANTS), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "inference_bench.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "blocks": args.blocks, "rows": rows},
            indent=1))


if __name__ == "__main__":
    main()
