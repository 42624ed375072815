"""Where the expert layers' micro-step spends its time between and around the big kernels: one CUDA-graph replay of
each layer's fwd + bwd (perf/train_bench.py's --only moe-layers contenders, --cache-weight
--fuse-wgrad-accumulation) under torch.profiler, every kernel in launch order with its duration and the idle gap
before it, and the totals (kernels, gaps, span).

  python3 perf/results/h100/train_launch_gaps/gaps.py [--contenders REGEX] [--out DIR]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
import train_bench as tb  # noqa: E402


def replay_profile(step, label, f):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        step()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            step()
    torch.cuda.synchronize()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    spans = []
    for rep in range(3):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
        ks = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
        spans.append(ks)
    ks = spans[-1]
    t0 = ks[0].time_range.start
    busy = sum(e.time_range.elapsed_us() for e in ks)
    span = ks[-1].time_range.end - t0
    lines = [f"== {label}: {len(ks)} kernels, busy {busy:.1f} us, span {span:.1f} us, idle {span - busy:.1f} us"]
    prev_end = t0
    for e in ks:
        gap = e.time_range.start - prev_end
        lines.append(f"{e.time_range.start - t0:9.1f} {gap:7.1f} {e.time_range.elapsed_us():9.1f}  {e.name[:100]}")
        prev_end = max(prev_end, e.time_range.end)
    for rep, k in enumerate(spans[:-1]):
        b = sum(e.time_range.elapsed_us() for e in k)
        lines.append(f"  (replay {rep}: busy {b:.1f} us, span {k[-1].time_range.end - k[0].time_range.start:.1f} us)")
    text = "\n".join(lines) + "\n"
    f.write(text)
    print(text, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--contenders", default="delayed")
    p.add_argument("--out", default=".")
    p.add_argument("--tokens", type=int, default=8192)
    a = p.parse_args()
    E, k, hidden, inter = 128, 8, 2048, 768
    models = tb.select(tb.moe_contenders(E, hidden, inter, True, True), a.contenders)
    sizes = tb.moe_sizes(a.tokens, E, k, 1)
    T = int(sizes.sum())
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gaps.txt"), "w") as f:
        for name, K, N in (("down", inter, hidden), ("gate_up", hidden, 2 * inter)):
            g = torch.Generator(device="cuda").manual_seed(3)
            x = torch.randn(T, K, device="cuda", dtype=tb.BF16, generator=g).requires_grad_()
            dy = torch.randn(T, N, device="cuda", dtype=tb.BF16, generator=g) * 1e-2
            offsets = torch.cumsum(sizes, 0).to(torch.int32).to("cuda")
            for n, layer in tb.expert_layers(models, name).items():
                def step(layer=layer):
                    layer(x, offsets).backward(dy)
                replay_profile(step, f"{name} layer, {n}", f)


if __name__ == "__main__":
    main()
