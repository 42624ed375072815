"""The per-token quantizers at decode sizes, alone and as a W4A4 layer runs them (quantize + GEMM), for one build of
scalemm (PYTHONPATH); one process, microseconds per call (CUDA-graph replays; weights rotated past L2). Also a hash of
each quantizer's outputs on a fixed input, so that two builds can be compared bit for bit (compare.py):
`python3 ab_quant.py OUT.json`."""
import hashlib
import json
import sys
from pathlib import Path

import torch

import scalemm
from scalemm.formats.nvfp4 import exact_rows
from scalemm.timing import bench, l2_copies

CHAIN_SHAPES = [(4096, 4096), (6144, 4096), (5120, 2048), (8192, 8192), (14336, 4096), (4096, 14336), (576, 7168),
                (24576, 1536), (2048, 4096)]  # (N, K), as ../nvfp4_exact_rows/ab_chain.py (its kernels are packed)
CHAIN_MS = (1, 4, 8, 16, 32, 64, 128, 256)
QUANT_KS = (2048, 4096, 7168, 8192, 14336, 28672)
QUANT_MS = (1, 4, 8, 16, 32, 64, 128, 132, 133, 256, 512, 1024, 4096)
EXPERTS = [(128, 1536, 2048, 8), (128, 4096, 1536, 8)]  # (E, N, K, top-k)
CHAIN_TS, QUANT_TS = (32, 128, 256), (8, 32, 128, 256)


def digest(*ts):
    h = hashlib.sha256()
    for t in ts:
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def nv_bytes(q):
    rows = exact_rows(q)  # the exact bf16 rows the quantizer wrote beside the codes (9-256 rows), if any
    extra = [getattr(q, "sf_offsets", None), rows]  # grouped: the scale offsets
    return digest(q.qdata, q.scales.view(torch.uint8), q.alpha, q.amax, *[t for t in extra if t is not None])


def fp8_bytes(q):
    return digest(q.data.view(torch.uint8), q.scale_inv)


quant, chain, grouped = [], [], []
for K in QUANT_KS:  # the quantizers alone, dense
    for M in QUANT_MS:
        g = torch.Generator(device="cuda").manual_seed(M * 7 + K)
        xs = [torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
              for _ in range(l2_copies(M * K * 2, most=8))]
        x = xs[0].clone()
        if M > 1:
            x[0, :17] = float("nan")  # a row with a NaN block where there are rows to spare
        bits = {"nvfp4": nv_bytes(scalemm.quantize_nvfp4(x, scaling="token")),
                "fp8": fp8_bytes(scalemm.quantize_fp8(x, scaling="token"))}
        fns = {"nvfp4": lambda i: scalemm.quantize_nvfp4(xs[i], scaling="token"),
               "fp8": lambda i: scalemm.quantize_fp8(xs[i], scaling="token")}
        r = bench(fns, len(xs))
        quant.append({"M": M, "K": K, "us": r, "bits": bits})
        print(f"quant M={M:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
for N, K in CHAIN_SHAPES:  # quantize + W4A4 GEMM, dense
    copies = l2_copies(int(N * K * 0.5625), most=64)
    g = torch.Generator(device="cuda").manual_seed(N + K)
    ws = [scalemm.quantize_nvfp4(torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16), scaling="token")
          for _ in range(copies)]
    for M in CHAIN_MS:
        x = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
        xq = scalemm.quantize_nvfp4(x, scaling="token")
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        for w in ws:
            scalemm.gemm(x, w, out=out)
        fns = {"w4a4": lambda i: scalemm.gemm(xq, ws[i], out=out),
               "chain": lambda i: scalemm.gemm(scalemm.quantize_nvfp4(x, scaling="token"), ws[i], out=out)}
        r = bench(fns, copies)
        chain.append({"M": M, "N": N, "K": K, "us": r})
        print(f"chain M={M:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
for E, N, K, topk in EXPERTS:  # grouped: the quantizers alone (T rows), quantize + W4A4 grouped GEMM
    copies = l2_copies(int(E * N * K * 0.5625), most=8)
    g = torch.Generator(device="cuda").manual_seed(E + N + K)
    ws = [scalemm.quantize_nvfp4_stacked(torch.randn(E, N, K, device="cuda", generator=g).to(torch.bfloat16),
                                         scaling="token") for _ in range(copies)]
    for T in sorted(set(QUANT_TS) | set(CHAIN_TS)):
        picks = torch.rand(max(T // topk, 1), E, device="cuda", generator=g).topk(topk, dim=1).indices.flatten()[:T]
        offsets = torch.bincount(picks, minlength=E).cumsum(0).to(torch.int32)
        x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
        bits = {"nvfp4": nv_bytes(scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")),
                "fp8": fp8_bytes(scalemm.quantize_fp8_grouped(x, offsets, scaling="token"))}
        fns = {"nvfp4": lambda i: scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
               "fp8": lambda i: scalemm.quantize_fp8_grouped(x, offsets, scaling="token")}
        if T in CHAIN_TS:
            out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
            for w in ws:
                scalemm.grouped_gemm(x, w, offsets, out=out)
            fns["chain"] = lambda i: scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
                                                          ws[i], offsets, out=out)
        r = bench(fns, copies)
        grouped.append({"E": E, "T": T, "N": N, "K": K, "us": r, "bits": bits})
        print(f"grouped E={E} T={T:4d} N={N:5d} K={K:5d} " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()),
              flush=True)
Path(sys.argv[1]).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "scalemm": scalemm.__file__,
                                         "quant": quant, "chain": chain, "grouped": grouped}, indent=1))
