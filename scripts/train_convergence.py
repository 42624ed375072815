"""Convergence of scalemm's training recipes against bf16 on a fixed synthetic task.

Task: classification over C classes with labels drawn from a fixed random teacher (a 2-layer MLP):
y ~ softmax(teacher(x) / temperature), x ~ N(0, 1). The best achievable cross-entropy is the
teacher's entropy, so every recipe's loss flattens near the same floor and their final losses
can be compared in relative terms. The data stream is the same for every recipe (one seeded
generator per run).

Model ("mlp"): 4 linear layers d_in -> hidden -> hidden -> hidden -> C with GELU, fp32 master
weights, AdamW, autocast bf16 (the bf16 baseline is exactly this with nn.Linear); a recipe converts
the 4 layers with scalemm.nn.convert. Model "moe": d_in -> hidden, a MoE block (examples/moe.py;
8 experts, top-2) with a residual, -> C; the recipe applies to the experts and the dense layers,
the router stays bf16.

Pass criteria (the defaults): final loss (mean of the last 10% of steps) within 1% of bf16 for the
FP8 recipes and 3% for NVFP4.

  python scripts/train_convergence.py --out results/convergence            # CUDA, ~300 steps
  python scripts/train_convergence.py --out /tmp/c --device cpu --steps 100  # the reference path
Writes convergence.json (config, every loss, final losses, relative gaps, pass/fail) and
convergence.png (the curves, smoothed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

import scalemm
from scalemm.nn import convert
from scalemm.recipes import NVFP4, FP8DelayedScaling, FP8Rowwise, FP8Tensorwise

RECIPES = {"bf16": None, "fp8_tensorwise": FP8Tensorwise(), "fp8_rowwise": FP8Rowwise(),
           "fp8_delayed": FP8DelayedScaling(), "nvfp4": NVFP4()}
TOLERANCE = {"fp8_tensorwise": 0.01, "fp8_rowwise": 0.01, "fp8_delayed": 0.01, "nvfp4": 0.03}


def _moe_module():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    if here not in sys.path:
        sys.path.insert(0, here)
    import moe
    return moe


class Teacher(torch.nn.Module):
    def __init__(self, d_in, classes, gen, device):
        super().__init__()
        self.w1 = torch.randn(256, d_in, generator=gen, device=device) / math.sqrt(d_in)
        self.w2 = torch.randn(classes, 256, generator=gen, device=device) * (8.0 / math.sqrt(256))

    def forward(self, x):
        return F.gelu(x @ self.w1.T) @ self.w2.T


def make_model(kind, d_in, hidden, classes, device, recipe_name):
    torch.manual_seed(0)  # the same initial weights for every recipe
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                                    torch.nn.GELU(), torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                                    torch.nn.Linear(hidden, classes))
    else:
        moe = _moe_module()

        class MoEModel(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = torch.nn.Linear(d_in, hidden)
                self.norm = torch.nn.LayerNorm(hidden)
                self.moe = moe.MoEBlock(hidden, hidden, 8, 2, recipe=None)
                self.out = torch.nn.Linear(hidden, classes)

            def forward(self, x):
                h = self.inp(x)
                h = h + self.moe(self.norm(h))
                return self.out(h)
        model = MoEModel()
    model = model.to(device)
    recipe = RECIPES[recipe_name]
    if recipe is not None:
        convert(model, recipe)
        for m in model.modules():
            if isinstance(m, scalemm.nn.GroupedLinear):
                m.recipe = recipe
    return model


def train(recipe_name, *, steps=300, batch=512, d_in=256, hidden=512, classes=64, lr=2e-3, device="cuda",
          model_kind="mlp", seed=0, log_every=0):
    """Losses (a list of floats, one per step) of one run."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    teacher = Teacher(d_in, classes, gen, dev)
    model = make_model(model_kind, d_in, hidden, classes, dev, recipe_name)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    losses = []
    torch.manual_seed(seed + 1)  # stochastic rounding draws from the default generators
    for step in range(steps):
        x = torch.randn(batch, d_in, generator=gen, device=dev)
        with torch.no_grad():
            y = torch.multinomial(torch.softmax(teacher(x), -1), 1, generator=gen).squeeze(1)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach())
        if log_every and (step + 1) % log_every == 0:
            print(f"  {recipe_name} step {step + 1}: loss {loss.item():.4f}", flush=True)
    return [float(v) for v in torch.stack(losses).cpu()]


def final_loss(losses):
    tail = max(1, len(losses) // 10)
    return sum(losses[-tail:]) / tail


def run(recipes=tuple(RECIPES), **kw):
    """{recipe: losses}, {recipe: final loss}, {recipe: relative gap to bf16}, {recipe: passed}."""
    curves = {}
    for name in recipes:
        t0 = time.perf_counter()
        curves[name] = train(name, **kw)
        print(f"{name:16s} final loss {final_loss(curves[name]):.4f}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    finals = {n: final_loss(c) for n, c in curves.items()}
    gaps, passed = {}, {}
    if "bf16" in finals:
        for n in finals:
            if n != "bf16":
                gaps[n] = finals[n] / finals["bf16"] - 1
                passed[n] = abs(gaps[n]) <= TOLERANCE.get(n, 0.03) if n in TOLERANCE else None
    return curves, finals, gaps, passed


def plot(curves, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, losses in curves.items():
        k = max(1, len(losses) // 50)
        windows = [losses[max(0, i - k + 1):i + 1] for i in range(len(losses))]
        smooth = [sum(w) / len(w) for w in windows]
        ax.plot(smooth, label=f"{name} ({final_loss(losses):.4f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (smoothed)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    lo = min(final_loss(c) for c in curves.values())
    ax.set_ylim(lo * 0.97, lo * 1.6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", choices=("mlp", "moe"), default="mlp")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, from {', '.join(RECIPES)}")
    args = p.parse_args(argv)
    recipes = args.recipes.split(",")
    bad = [r for r in recipes if r not in RECIPES]
    if bad:
        p.error(f"unknown recipes {bad}; choose from {list(RECIPES)}")
    os.makedirs(args.out, exist_ok=True)
    kw = dict(steps=args.steps, batch=args.batch, hidden=args.hidden, lr=args.lr, device=args.device,
              model_kind=args.model, seed=args.seed, log_every=max(1, args.steps // 5))
    curves, finals, gaps, passed = run(recipes, **kw)
    for n, g in gaps.items():
        verdict = {True: "PASS", False: "FAIL", None: "-"}[passed[n]]
        print(f"{n:16s} {finals[n]:.4f} vs bf16 {finals['bf16']:.4f}: {100 * g:+.2f}% "
              f"(tolerance {100 * TOLERANCE.get(n, float('nan')):.0f}%) {verdict}")
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu (scalemm reference path)"
    result = {"config": {**{k: v for k, v in kw.items() if k != "log_every"}, "device_name": device,
                         "torch": torch.__version__, "tolerance": TOLERANCE},
              "final_loss": finals, "relative_gap": gaps, "passed": passed, "losses": curves}
    with open(os.path.join(args.out, "convergence.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(curves, os.path.join(args.out, "convergence.png"),
         f"{args.model}: {args.steps} steps, batch {args.batch}, {device}")
    print(f"wrote {args.out}/convergence.json and convergence.png")
    return 0 if all(v is not False for v in passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
