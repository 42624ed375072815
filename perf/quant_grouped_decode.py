"""Grouped per-token quantization (rowwise copy) at MoE decode and prefill sizes: device time per call (CUDA-graph
replays of 20 calls, best of 10) and each kernel's share (torch.profiler over the replays).

    python perf/quant_grouped_decode.py [nvfp4] [fp8] [--package scalemm_old] [--out DIR]

--package times another installed copy under that name (see perf/host_overhead.py for installing one), so two
versions can be compared on one machine. Cases: (rows T, K, experts G) with T rows routed at random.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

CASES = [(128, 7168, 64), (512, 7168, 256), (512, 2048, 128), (512, 768, 128), (64, 2048, 128), (4096, 7168, 256),
         (2048, 4096, 64), (16384, 7168, 64)]


def offsets_for(T: int, G: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    counts = torch.bincount(torch.randint(0, G, (T,), generator=g), minlength=G)
    return torch.cumsum(counts, 0).to(torch.int32).cuda()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("formats", nargs="*", default=["nvfp4", "fp8"])
    p.add_argument("--package", default="scalemm")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    sm = importlib.import_module(args.package)
    print(f"GPU: {torch.cuda.get_device_name()}, package {args.package}")
    rows = []
    for fmt in args.formats:
        quant = sm.quantize_nvfp4_grouped if fmt == "nvfp4" else sm.quantize_fp8_grouped
        for T, K, G in CASES:
            x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
            off = offsets_for(T, G)
            def f():
                return quant(x, off, scaling="token")
            for _ in range(3):
                f()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(20):
                    f()
            graph.replay()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = float("inf")
            for _ in range(10):
                s.record()
                graph.replay()
                e.record()
                torch.cuda.synchronize()
                best = min(best, s.elapsed_time(e) * 1000 / 20)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    graph.replay()
                torch.cuda.synchronize()
            total, count = collections.defaultdict(float), collections.Counter()
            for ev in prof.events():
                if ev.device_type.name == "CUDA":
                    total[ev.name] += ev.device_time
                    count[ev.name] += 1
            kernels = {n: total[n] / count[n] for n in sorted(total, key=lambda n: -total[n])}
            rows.append({"format": fmt, "T": T, "K": K, "G": G, "us": best, "kernels_us": kernels})
            parts = ", ".join(f"{n[:40]} {v:.1f}" for n, v in kernels.items())
            print(f"{fmt} T={T} K={K} G={G}: {best:.1f} us per call | {parts}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        json.dump({"gpu": torch.cuda.get_device_name(), "package": args.package, "rows": rows},
                  open(os.path.join(args.out, f"quant_grouped_decode_{args.package}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
