"""GPU timing for benchmarks and tuning (perf/*.py and scalemm.tune share it).

`bench` captures each contender in a CUDA graph of several calls that rotate over `copies`
input sets (so repeats are not served from L2: `l2_copies` says how many sets flush it), warms
it up, then replays the graphs in rounds between CUDA events, so clock and thermal drift hit
every contender alike, and reports medians. Each round replays them in a different order
(`round_orders`): a graph replayed right after a heavier one timed 1-3% slow on an H100 (perf/NOTES.md,
the skinny split model), so no contender may always follow the same neighbour.
"""
from __future__ import annotations

import math
import random
import statistics
import time

import torch

L2_BYTES = 64 << 20  # at least the L2 of an H100 (50 MB) or H200 (60 MB)


def l2_copies(bytes_per_copy: int, most: int = 8) -> int:
    """How many copies of an input of `bytes_per_copy` bytes to rotate over so that together they
    are twice the L2: each call then reads its operand from memory, as in a model."""
    return max(1, min(most, math.ceil(2 * L2_BYTES / max(1, bytes_per_copy))))


def round_orders(names, rounds: int, seed: int = 0) -> list[list]:
    """The replay order of each round: the given order first, then fixed-seed shuffles (the same orders
    on every run, so runs stay comparable)."""
    rng = random.Random(seed)
    orders = [list(names)]
    while len(orders) < rounds:
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders[:rounds]


def bench(fns: dict, copies: int, min_ms: float = 2.0, rounds: int = 9) -> dict:
    """Median microseconds per call of each fn(i) (i rotates over `copies` input sets).

    Each fn is captured in a CUDA graph of several calls (at least `copies`, enough for about
    `min_ms`); the graphs are then replayed `rounds` times each between CUDA events, one round after
    another, each round in its own order (`round_orders`), so clock and thermal drift during the run
    and the neighbour a graph follows hit every contender alike."""
    graphs = {}
    stream = torch.cuda.Stream()
    for name, fn in fns.items():
        fn(0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(3):
            fn(i % copies)
        torch.cuda.synchronize()
        est_ms = max((time.perf_counter() - t0) / 3 * 1e3, 1e-3)
        calls = max(copies, min(200, math.ceil(min_ms / est_ms)))
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for i in range(calls):
                    fn(i % copies)
        torch.cuda.current_stream().wait_stream(stream)
        g.replay()
        graphs[name] = (g, calls)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in graphs}
    for order in round_orders(graphs, rounds):
        for name in order:
            g, calls = graphs[name]
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / calls)
    graphs.clear()
    return {name: statistics.median(t) for name, t in times.items()}
