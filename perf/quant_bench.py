"""Bandwidth of scalemm's quantizers beside a device-to-device copy measured in the same run.

GB/s counts the bytes each quantizer must move: every read of x (two when an amax pass
runs first) plus every byte written (data, scales with padding, global scales). The
anchor is torch's dst.copy_(src) of a buffer the size of x (bytes read + written).
Device time: one CUDA graph holds one call per input buffer (enough buffers, >= 5x a
50 MB L2, that no call finds its input in L2); the median replay time over the number of
calls is the time per call, and GB/s and "% of copy" use it. "eager" is the median
CUDA-event time of plain Python calls (what a caller sees, host overhead included).
torchao's NVFP4 quantization is timed eagerly too when `import torchao` works.

    python perf/quant_bench.py --out DIR [--quick]
    python perf/quant_bench.py --out DIR --shapes 1x4096,8192x8192 --only token   # some shapes and cases

Writes DIR/quant_bench.json and DIR/quant_bench.png (if matplotlib is there) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

import torch

SHAPES = [(8192, 8192), (16384, 7168), (4096, 4096), (128, 7168), (1, 7168)]
QUICK_SHAPES = [(8192, 8192), (4096, 4096), (1, 7168)]
L2_ROTATE_BYTES = 256 << 20  # bytes of distinct inputs per graph  # inputs rotated per case: several times the L2 of an H100/H200


def _nbytes(obj) -> int:
    """Bytes of every tensor a quantized container holds (columnwise copy included)."""
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    total = 0
    for name in getattr(type(obj), "__slots__", ()):
        v = getattr(obj, name)
        if isinstance(v, torch.Tensor) or hasattr(v, "__slots__"):
            total += _nbytes(v)
    return total


def time_fn(fn, inputs, iters: int, warmup: int) -> float:
    """Median milliseconds of fn(x) over `iters` calls, x rotating through `inputs`."""
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(inputs[i % len(inputs)])
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_graph(fn, inputs, replays: int) -> float:
    """Milliseconds per call: median replay time of a graph that calls fn once per input."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (JIT build, allocator)
        for x in inputs[:2]:
            fn(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x in inputs:
            fn(x)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(inputs))
    del graph
    return statistics.median(times)


def cases(sq):
    """(name, fn(x, ctx), reads of x, whether outputs are counted) for each quantizer option."""
    def amax_of(x):
        return x.float().abs().amax()

    return [
        ("nvfp4 tensor, given amax", lambda x, c: sq.quantize_nvfp4(x, amax=c["amax"][id(x)]), 1),
        ("nvfp4 tensor, fused amax", lambda x, c: sq.quantize_nvfp4(x), 2),
        ("nvfp4 token", lambda x, c: sq.quantize_nvfp4(x, scaling="token"), 1),  # one kernel: 2nd read cached
        ("nvfp4 row+col, given amax", lambda x, c: sq.quantize_nvfp4(x, amax=c["amax"][id(x)], columnwise=True), 1),
        ("nvfp4 row+col, fused amax", lambda x, c: sq.quantize_nvfp4(x, columnwise=True), 2),
        ("nvfp4 row+col rht", lambda x, c: sq.quantize_nvfp4(x, columnwise=True, rht=True), 2),
        ("nvfp4 sr, given amax", lambda x, c: sq.quantize_nvfp4(
            x, amax=c["amax"][id(x)], stochastic_rounding=True, seed=1, offset=0), 1),
        ("nvfp4 token sr", lambda x, c: sq.quantize_nvfp4(x, scaling="token", stochastic_rounding=True, seed=1,
                                                          offset=0), 1),
        ("fp8 tensor", lambda x, c: sq.quantize_fp8(x), 2),
        ("fp8 token", lambda x, c: sq.quantize_fp8(x, scaling="token"), 1),
        ("fp8 row+col tensor", lambda x, c: sq.quantize_fp8(x, columnwise=True), 2),
        ("mxfp8", lambda x, c: sq.quantize_mxfp8(x), 1),
        ("mxfp8 row+col", lambda x, c: sq.quantize_mxfp8(x, columnwise=True), 1),
    ], amax_of


def torchao_case():
    """(fn, note) for torchao's NVFP4 quantization, or (None, reason)."""
    try:
        import torchao  # noqa: F401
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    except Exception as e:  # not installed, or another API
        return None, f"not available ({type(e).__name__}: {e})"

    def fn(x):
        scale = per_tensor_amax_to_scale(x.float().abs().amax())
        return NVFP4Tensor.to_nvfp4(x, per_tensor_scale=scale)

    return fn, f"torchao {getattr(torchao, '__version__', '?')} NVFP4Tensor.to_nvfp4 (per-tensor scale)"


# ---------------------------------------------------------------------------
# grouped (MoE) quantization: 16384 x 7168 bf16 in 64 ragged groups
# ---------------------------------------------------------------------------

GROUPED_SHAPE = (16384, 7168)
GROUPED_EXPERTS = 64


def moe_routing_counts(tokens: int, experts: int, topk: int, seed: int = 0, empty=(7,)) -> torch.Tensor:
    """Group sizes of a realistic skewed top-k routing (expert popularity ~ exp(0.5 randn), each
    token picks its top-k experts by a noisy score); `empty` experts get no tokens (their tokens
    go to the most popular expert). Sums to tokens * topk."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(experts, generator=g) * 0.5
    scores = logits[None, :] + torch.randn(tokens, experts, generator=g)
    counts = torch.bincount(scores.topk(topk, dim=1).indices.reshape(-1), minlength=experts)
    for e in empty:
        counts[e] = 0
    counts[counts.argmax()] += tokens * topk - counts.sum()
    return counts


def grouped_bench(iters: int, warmup: int, only: str | None = None, rows: int = GROUPED_SHAPE[0]) -> dict:
    """GB/s of the grouped quantizers vs a copy of x and vs the single-tensor quantizer run once
    per group (that loop reads the offsets on the host: it is the baseline, not capturable)."""
    import scalemm
    import scalemm.quantize as sq

    T, K = rows, GROUPED_SHAPE[1]
    G = GROUPED_EXPERTS
    dev = torch.device("cuda")
    counts = moe_routing_counts(T // 8, G, 8)
    offsets = torch.cumsum(counts, 0).to(torch.int32).to(dev)
    x_bytes = T * K * 2
    gen = torch.Generator(device=dev).manual_seed(0)
    inputs = [torch.randn(T, K, generator=gen, device=dev).mul_(3).to(torch.bfloat16) for _ in range(2)]
    dst = torch.empty_like(inputs[0])
    copy_ms = time_graph(lambda x: dst.copy_(x), inputs, iters)
    copy_gbs = 2 * x_bytes / copy_ms / 1e6
    out = {"T": T, "K": K, "G": G, "sizes": counts.tolist(), "copy_ms": copy_ms, "copy_GBs": copy_gbs, "cases": {}}

    def per_group(quant):
        def fn(x):
            ends = offsets.tolist()  # host sync: the baseline's cost
            start = 0
            for e in ends:
                if e > start:
                    quant(x[start:e])
                start = e
        return fn

    cases = [
        ("nvfp4 grouped tensor", lambda x: scalemm.quantize_nvfp4_grouped(x, offsets), 2,
         per_group(lambda xs: sq.quantize_nvfp4(xs))),
        ("nvfp4 grouped token", lambda x: scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"), 1,
         per_group(lambda xs: sq.quantize_nvfp4(xs, scaling="token"))),
        ("nvfp4 grouped row+wgrad", lambda x: scalemm.quantize_nvfp4_grouped(x, offsets, columnwise=True), 3, None),
        ("nvfp4 grouped row+wgrad rht+sr",  # stats, rows, RHT stats, wgrad: 4 reads of x
         lambda x: scalemm.quantize_nvfp4_grouped(x, offsets, columnwise=True, rht=True, stochastic_rounding=True,
                                                  seed=1), 4, None),
        ("fp8 grouped tensor", lambda x: scalemm.quantize_fp8_grouped(x, offsets), 2,
         per_group(lambda xs: sq.quantize_fp8(xs))),
        ("fp8 grouped token", lambda x: scalemm.quantize_fp8_grouped(x, offsets, scaling="token"), 1,
         per_group(lambda xs: sq.quantize_fp8(xs, scaling="token"))),
        ("fp8 grouped row+wgrad", lambda x: scalemm.quantize_fp8_grouped(x, offsets, columnwise=True), 2, None),
        ("fp8 grouped token row+wgrad",
         lambda x: scalemm.quantize_fp8_grouped(x, offsets, scaling="token", columnwise=True), 2, None),
        ("mxfp8 grouped", lambda x: scalemm.quantize_mxfp8_grouped(x, offsets), 1,
         per_group(lambda xs: sq.quantize_mxfp8(xs))),
    ]
    for name, fn, reads, loop in cases:
        if only and only not in name:
            continue
        try:
            res = fn(inputs[0])
            moved = reads * x_bytes + (sum(_nbytes(t) for t in res[:2]) if isinstance(res, tuple) else _nbytes(res))
            ms = time_graph(fn, inputs, iters)
            eager = time_fn(fn, inputs, iters, warmup)
            gbs = moved / ms / 1e6
            row = {"ms": ms, "eager_ms": eager, "bytes": moved, "GBs": gbs, "vs_copy": gbs / copy_gbs}
            if loop is not None:
                loop_ms = time_fn(loop, inputs, max(5, iters // 5), 2)
                row.update(loop_ms=loop_ms, speedup_vs_loop=loop_ms / ms, eager_speedup_vs_loop=loop_ms / eager)
            out["cases"][name] = row
        except Exception as e:  # report, keep benchmarking the rest
            out["cases"][name] = {"error": f"{type(e).__name__}: {e}"}
    del inputs, dst
    torch.cuda.empty_cache()
    return out


def print_grouped(g: dict) -> None:
    print(f"\ngrouped: {g['T']}x{g['K']} bf16 in {g['G']} ragged groups (sizes {min(g['sizes'])}..{max(g['sizes'])}, "
          f"{g['sizes'].count(0)} empty); copy {g['copy_GBs']:.0f} GB/s")
    print(f"{'case':30s}{'GB/s':>8s}{'% copy':>8s}{'us':>9s}{'eager us':>10s}{'loop us':>10s}{'x loop':>8s}")
    for n, c in g["cases"].items():
        if "error" in c:
            print(f"{n:30s} error: {c['error']}")
            continue
        loop = f"{c['loop_ms'] * 1e3:>10.1f}{c['speedup_vs_loop']:>7.1f}x" if "loop_ms" in c else f"{'':>10s}{'':>8s}"
        print(f"{n:30s}{c['GBs']:>8.0f}{100 * c['vs_copy']:>7.0f}%{c['ms'] * 1e3:>9.1f}{c['eager_ms'] * 1e3:>10.1f}" + loop)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory for JSON and PNG")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and iterations")
    ap.add_argument("--shapes", default=None, help="MxK,MxK,...: these input shapes instead of the default ones")
    ap.add_argument("--only", default=None, help="only the cases whose name contains this text")
    ap.add_argument("--grouped-rows", type=int, default=GROUPED_SHAPE[0],
                    help="rows of the grouped input (tokens x top-8; 128: 16 tokens at decode)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("quant_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    import scalemm.quantize as sq

    os.makedirs(args.out, exist_ok=True)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in mk.split("x")) for mk in args.shapes.split(",")]
    iters, warmup = (30, 5) if args.quick else (100, 10)
    dev = torch.device("cuda")
    results = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "iters": iters, "rows": []}
    qcases, amax_of = cases(sq)
    if args.only:
        qcases = [c for c in qcases if args.only in c[0]]
    ao_fn, ao_note = torchao_case() if not args.only else (None, "not timed (--only)")
    results["torchao"] = ao_note

    for M, K in shapes:
        x_bytes = M * K * 2
        n_buf = max(2, min(64, math.ceil(L2_ROTATE_BYTES / x_bytes)))
        gen = torch.Generator(device=dev).manual_seed(0)
        inputs = [torch.randn(M, K, generator=gen, device=dev).mul_(3).to(torch.bfloat16) for _ in range(n_buf)]
        ctx = {"amax": {id(x): amax_of(x) for x in inputs}}
        # anchor: a device-to-device copy of the same size
        dsts = [torch.empty_like(x) for x in inputs[:2]]
        copy_ms = time_graph(lambda x: dsts[0].copy_(x), inputs, iters)
        copy_gbs = 2 * x_bytes / copy_ms / 1e6
        row = {"M": M, "K": K, "copy_ms": copy_ms, "copy_GBs": copy_gbs, "cases": {}}
        for name, fn, reads in qcases:
            try:
                out = fn(inputs[0], ctx)
                moved = reads * x_bytes + _nbytes(out)
                if "given amax" in name:
                    moved -= 4  # the given amax is read, not written
                ms = time_graph(lambda x: fn(x, ctx), inputs, iters)
                eager = time_fn(lambda x: fn(x, ctx), inputs, iters, warmup)
                gbs = moved / ms / 1e6
                row["cases"][name] = {"ms": ms, "eager_ms": eager, "bytes": moved, "GBs": gbs,
                                      "vs_copy": gbs / copy_gbs}
            except ValueError as e:  # the shape is outside the option's rules (e.g. M % 16)
                row["cases"][name] = {"n/a": str(e)}
            except Exception as e:  # report, keep benchmarking the rest
                row["cases"][name] = {"error": f"{type(e).__name__}: {e}"}
        if ao_fn is not None:
            try:
                out = ao_fn(inputs[0])
                moved = 2 * x_bytes + out.qdata.numel() + out.scale.numel() * out.scale.element_size()
                ms = time_fn(ao_fn, inputs, max(5, iters // 5), 2)
                gbs = moved / ms / 1e6
                row["cases"]["torchao nvfp4 (per-tensor)"] = {"ms": ms, "bytes": moved, "GBs": gbs,
                                                             "vs_copy": gbs / copy_gbs}
            except Exception as e:
                row["cases"]["torchao nvfp4 (per-tensor)"] = {"error": f"{type(e).__name__}: {e}"}
        results["rows"].append(row)
        del inputs, dsts, ctx
        torch.cuda.empty_cache()

    results["grouped"] = grouped_bench(iters, warmup, args.only, args.grouped_rows)

    with open(os.path.join(args.out, "quant_bench.json"), "w") as f:
        json.dump(results, f, indent=1)

    # table
    names = [n for n, _, _ in qcases] + (["torchao nvfp4 (per-tensor)"] if ao_fn else [])
    print(f"device: {results['device']}   torchao: {ao_note}")
    print("cells: GB/s, % of copy, device us per call (graph), eager us per call")
    print(f"{'case':30s}" + "".join(f"{f'{M}x{K}':>26s}" for M, K in shapes))
    print(f"{'copy':30s}" + "".join(f"{r['copy_GBs']:>6.0f} 100% {r['copy_ms'] * 1e3:>6.1f} {'':>6s}" for r in results["rows"]))
    for n in names:
        cells = []
        for r in results["rows"]:
            c = r["cases"].get(n, {})
            cells.append(f"{c['GBs']:>6.0f} {100 * c['vs_copy']:>3.0f}% {c['ms'] * 1e3:>6.1f} {c.get('eager_ms', c['ms']) * 1e3:>6.1f}"
                         if "GBs" in c else f"{'error' if 'error' in c else 'n/a':>26s}")
        print(f"{n:30s}" + "".join(f"{s:>26s}" for s in cells))
    for r in results["rows"]:
        for n, c in r["cases"].items():
            if "error" in c:
                print(f"error {r['M']}x{r['K']} {n}: {c['error']}")

    print_grouped(results["grouped"])

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(14, 6))
        width = 0.8 / len(shapes)
        for si, r in enumerate(results["rows"]):
            vals = [100 * r["cases"].get(n, {}).get("vs_copy", 0) for n in names]
            ax.bar([i + si * width for i in range(len(names))], vals, width, label=f"{r['M']}x{r['K']}")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("% of device-to-device copy bandwidth")
        ax.axhline(80, color="gray", ls="--", lw=0.8)
        ax.axhline(70, color="gray", ls=":", lw=0.8)
        ax.set_title(f"scalemm quantizers, bf16 input, {results['device']}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "quant_bench.png"), dpi=110)
    except Exception as e:
        print(f"plot skipped: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
