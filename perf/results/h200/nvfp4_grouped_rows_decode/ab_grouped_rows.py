"""Grouped W4A4 at 1-8 rows (MoE decode at batch 1-4) as a layer runs it, quantize_nvfp4_grouped + grouped_gemm,
next to the GEMM alone on pre-quantized activations, the quantizer alone and W4A16; expert layers of five models; one
process, microseconds per call (CUDA-graph replays, expert weights rotated past L2). Run once per build of scalemm
(PYTHONPATH) and compare the JSON files (../nvfp4_exact_rows/compare.py): `python3 ab_grouped_rows.py OUT.json`."""
import json
import sys
from pathlib import Path

import torch

import scalemm
from scalemm.timing import bench, l2_copies

# (E, N, K, top-k): gate_up / down projections
EXPERTS = [(128, 1536, 2048, 8), (128, 2048, 768, 8),      # Qwen3-30B-A3B
           (128, 3072, 4096, 8), (128, 4096, 1536, 8),     # Qwen3-235B-A22B
           (256, 4096, 7168, 8), (256, 7168, 2048, 8),     # DeepSeek-V3
           (128, 5760, 2880, 4), (128, 2880, 2880, 4),     # gpt-oss-120b
           (8, 28672, 4096, 2), (8, 4096, 14336, 2)]       # Mixtral-8x7B
grouped = []
for E, N, K, topk in EXPERTS:
    copies = l2_copies(int(E * N * K * 0.5625), most=8)
    g = torch.Generator(device="cuda").manual_seed(E + N + K)
    ws = [scalemm.quantize_nvfp4_stacked(torch.randn(E, N, K, device="cuda", generator=g).to(torch.bfloat16),
                                         scaling="token") for _ in range(copies)]
    for T in sorted({topk, 2 * topk, 8, 16} - {32}):  # batch 1 / 2, 8 rows, and 16 (exact rows in both builds)
        picks = torch.rand(max(T // topk, 1), E, device="cuda", generator=g).topk(topk, dim=1).indices.flatten()[:T]
        offsets = torch.bincount(picks, minlength=E).cumsum(0).to(torch.int32)
        x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
        for w in ws:
            scalemm.grouped_gemm(x, w, offsets, out=out)
        fns = {"w4a16": lambda i: scalemm.grouped_gemm(x, ws[i], offsets, out=out),
               "w4a4": lambda i: scalemm.grouped_gemm(xq, ws[i], offsets, out=out),
               "quant": lambda i: scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
               "chain": lambda i: scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
                                                       ws[i], offsets, out=out)}
        r = bench(fns, copies)
        grouped.append({"E": E, "T": T, "N": N, "K": K, "us": r})
        print(f"E={E:4d} T={T:3d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
Path(sys.argv[1]).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "scalemm": scalemm.__file__,
                                         "points": [], "grouped": grouped}, indent=1))
