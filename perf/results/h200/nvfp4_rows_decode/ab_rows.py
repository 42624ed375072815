"""W4A4 at decode as a layer runs it, quantize + GEMM (scalemm's default dispatch), next to the GEMM alone on
pre-quantized activations, the quantizer alone, W4A16 and bf16 cuBLAS; the nine layers of ../nvfp4_exact_rows (FIT,
the rule's data) and eighteen others (HELD_OUT), grouped expert layers; one process, microseconds per call (CUDA-graph
replays, weights rotated past L2). Run once per build of scalemm (PYTHONPATH) and compare the JSON files
(../nvfp4_exact_rows/compare.py): `python3 ab_rows.py OUT.json [--ms 1,2,...] [--ts 8,...] [--shapes fit|held|all]`."""
import argparse
import json
from pathlib import Path

import torch

import scalemm
from scalemm.timing import bench, l2_copies

FIT = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
       (24576, 1536), (2048, 4096)]
HELD_OUT = [(3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192),      # Llama-3.2-1B qkv, o, gate_up, down
            (5120, 3072), (3072, 3072), (16384, 3072), (3072, 8192),      # Llama-3.2-3B
            (10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600),    # Qwen3-32B
            (14336, 12288), (12288, 12288),                               # Mistral-Large-2 qkv, o
            (43008, 5376), (5376, 21504),                                 # Gemma-3-27B gate_up, down
            (5120, 2880), (1536, 7168)]                                   # gpt-oss-120b qkv, DeepSeek-V3 q_a
EXPERTS = [(128, 1536, 2048, 8), (128, 4096, 1536, 8)]  # (E, N, K, top-k): Qwen3-30B-A3B gate_up / -235B-A22B-like

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--ms", default="1,2,4,8,16")
p.add_argument("--ts", default="8,16,32")  # grouped rows (tokens x top-k)
p.add_argument("--shapes", default="all", choices=("fit", "held", "all"))
args = p.parse_args()
SHAPES = {"fit": FIT, "held": HELD_OUT, "all": FIT + HELD_OUT}[args.shapes]
points = []
for N, K in SHAPES:
    copies = l2_copies(int(N * K * 0.5625), most=64)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    w16 = [torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16) for _ in range(min(copies, 8))]
    for M in map(int, args.ms.split(",")):
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4(x, scaling="token")
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        for w in ws:  # prepared copies (wgmma loop, CUTLASS kernel) before any capture
            scalemm.gemm(x, w, out=out)
        fns = {"bf16": lambda i: torch.matmul(x, w16[i % len(w16)].T),
               "w4a16": lambda i: scalemm.gemm(x, ws[i], out=out),
               "w4a4": lambda i: scalemm.gemm(xq, ws[i], out=out),
               "quant": lambda i: scalemm.quantize_nvfp4(x, scaling="token"),
               "chain": lambda i: scalemm.gemm(scalemm.quantize_nvfp4(x, scaling="token"), ws[i], out=out)}
        r = bench(fns, copies)
        points.append({"M": M, "N": N, "K": K, "us": r})
        print(f"M={M:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
grouped = []
for E, N, K, topk in EXPERTS:
    copies = l2_copies(int(E * N * K * 0.5625), most=8)
    g = torch.Generator(device="cuda").manual_seed(E + N + K)
    ws = [scalemm.quantize_nvfp4_stacked(torch.randn(E, N, K, device="cuda", generator=g).to(torch.bfloat16),
                                         scaling="token") for _ in range(copies)]
    for T in map(int, args.ts.split(",")):
        picks = torch.rand(max(T // topk, 1), E, device="cuda", generator=g).topk(topk, dim=1).indices.flatten()
        offsets = torch.bincount(picks, minlength=E).cumsum(0).to(torch.int32)
        x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
        for w in ws:
            scalemm.grouped_gemm(x, w, offsets, out=out)
        fns = {"w4a16": lambda i: scalemm.grouped_gemm(x, ws[i], offsets, out=out),
               "w4a4": lambda i: scalemm.grouped_gemm(xq, ws[i], None, out=out),
               "quant": lambda i: scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
               "chain": lambda i: scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
                                                       ws[i], None, out=out)}
        r = bench(fns, copies)
        grouped.append({"E": E, "T": T, "N": N, "K": K, "us": r})
        print(f"E={E:4d} T={T:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "scalemm": scalemm.__file__,
                                      "points": points, "grouped": grouped}, indent=1))
