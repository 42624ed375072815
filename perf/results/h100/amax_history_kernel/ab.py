"""Same-process A/B of FP8DelayedScaling's history step: the torch ops the layers ran until the thirtieth session
(before each quantization the history's max over rows, h.amax(0); after it the roll, copy_(cat(...)); at seeding a
clone) against scalemm.quantize.advance_amax_history (one kernel after the quantization that rolls the history and
keeps the next amax beside it). The old path is this file's `torch_ops_delayed_quantize`, patched into its own
instances of the layers.

  python3 perf/results/h100/amax_history_kernel/ab.py --out OUT
Prints and writes OUT/ab.txt: (1) the history step alone on the experts' [1024, 128] and a dense [1024] history;
(2) three eager steps of each path from the same state: gradients and histories bit-identical; (3) micro-steps
(weights cached, dW added into .grad) of the Qwen3-30B-A3B expert layers and block, CUDA graphs, against bf16.
"""
import argparse
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402
import train_bench as tb  # noqa: E402

from scalemm import nn as snn  # noqa: E402
from scalemm.quantize import advance_amax_history  # noqa: E402
from scalemm.timing import bench  # noqa: E402


def torch_ops_delayed_quantize(self, role, call):
    """GroupedLinear._delayed_quantize as it was (twenty-ninth session): torch ops around the quantizer."""
    if role != "grad" and role in self._amax_used and snn._in_backward():
        return call(self._amax_used[role], None)
    h = self._buffers.get(f"amax_history_{role}")
    if h is None:
        h, _ = self._amax_history(role)
    amax = h.amax(0) if role in self._amax_seeded else None
    cur = torch.empty_like(h[0])
    out = call(amax, cur)
    h.copy_(torch.cat((cur[None], h[:-1])))
    self._amax_used[role] = h[0].clone() if amax is None else amax
    self._amax_seeded.add(role)
    return out


def patch(model):
    for m in model.modules():
        if isinstance(m, snn.GroupedLinear):
            m._delayed_quantize = types.MethodType(torch_ops_delayed_quantize, m)
    return model


def history_ops(lines):
    lines.append("the history step alone (CUDA graphs, us per step):")
    for shape in ((1024, 128), (1024,)):
        h = torch.rand(shape, device="cuda")
        cur, nxt, used = (torch.rand(shape[1:], device="cuda") for _ in range(3))

        def old(i):
            a = h.amax(0)
            h.copy_(torch.cat((cur[None], h[:-1])))
            return a

        us = bench({"torch ops": old, "advance_amax_history": lambda i: advance_amax_history(h, cur, nxt, used)}, 1)
        lines.append(f"  {str(list(shape)):<12}" + "  ".join(f"{k} {v:.2f}" for k, v in us.items()))
    print("\n".join(lines), flush=True)


def contenders(E, hidden, inter):
    """(bf16, new, old) expert blocks with the same weights (moe_contenders seeds them)."""
    new = tb.moe_contenders(E, hidden, inter, True, True)
    old = tb.moe_contenders(E, hidden, inter, True, True)
    return new["bf16"], new["scalemm_fp8_delayed"], patch(old["scalemm_fp8_delayed"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    lines = []
    history_ops(lines)
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T, hidden, inter = 128, int(sizes.sum()), 2048, 768
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

    bf16, new, old = contenders(E, hidden, inter)
    for step in range(3):  # both paths from the same state: the same bits
        grads = []
        for m in (new, old):
            m.zero_grad()
            x.grad = None
            m(x * (1 + step), offsets).backward(dy)
            grads.append([p.grad.clone() for p in m.parameters()] + [x.grad.clone()])
        same = all(torch.equal(a, b) for a, b in zip(*grads))
        hist = all(torch.equal(getattr(a, f"amax_history_{r}"), getattr(b, f"amax_history_{r}"))
                   for a, b in ((new.gate_up, old.gate_up), (new.down, old.down)) for r in ("input", "grad", "weight"))
        lines.append(f"eager step {step}: gradients {'bit-identical' if same else 'DIFFER'}, histories "
                     f"{'bit-identical' if hist else 'DIFFER'}")
        print(lines[-1], flush=True)

    blocks = [("experts block", {"bf16": bf16, "new": new, "old": old}, hidden, hidden)]
    for n, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden)):
        layers = {"bf16": tb.ExpertLayer(w=bf16.w1 if n == "gate_up" else bf16.w2),
                  "new": tb.ExpertLayer(getattr(new, n)), "old": tb.ExpertLayer(getattr(old, n))}
        blocks.append((f"{n} layer", layers, K, N))
    for label, models, K, N in blocks:
        xi = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        dyi = torch.randn(T, N, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

        def make(m):
            return lambda i: m(xi, offsets).backward(dyi)
        us = bench({"bf16": make(models["bf16"]), "FP8DelayedScaling torch ops": make(models["old"]),
                    "FP8DelayedScaling kernel": make(models["new"])}, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<32}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write(f"{torch.cuda.get_device_name()}\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
