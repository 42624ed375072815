"""Training step (forward + backward) of two blocks: scalemm's recipes against bf16 and torchao.

Blocks:
  llama3-8b MLP: x [8192, 4096] -> gate_up Linear(4096, 2 x 14336) -> SiLU(gate) * up -> down Linear(14336, 4096)
  qwen3-30b-a3b MoE experts: 8192 tokens routed top-8 over 128 experts (skewed routing, perf/grouped_sweep.py's
    routed_sizes: T = 65536 rows sorted by expert), gate_up GroupedLinear(2048 -> 2 x 768) -> SiLU * up ->
    down GroupedLinear(768 -> 2048); the routing itself is not timed.
The SwiGLU between gate_up and down is the same for every contender: scalemm.swiglu (one kernel forward, one
backward), or with --activation torch torch's eager F.silu(gate) * up (three passes forward, four backward).
Contenders: bf16 (nn.Linear / torch._grouped_mm with torch's autograd), scalemm.nn.Linear / GroupedLinear with
FP8Tensorwise, FP8Rowwise, FP8DelayedScaling (one pass per quantization; not under --compile) and NVFP4, and
torchao's Float8Linear (tensorwise and rowwise recipes; dense block) and torchao's FP8 rowwise grouped GEMM
(`moe_training`, Triton quantizers + torch._scaled_grouped_mm; expert block, with --group-multiple 16) when
torchao imports. Parameters are bf16 and shared by
the contenders; x requires grad (dgrad runs). One timed call = forward + backward = one optimizer step's
worth of work: scalemm layers run with cache_weight=False, so the weight is quantized in every call
(--cache-weight: reused, as in gradient-accumulation micro-steps). The parameters' .grad is never zeroed,
so every call after the first adds its dW into .grad, as a micro-step does (torch's AccumulateGrad for
bf16 and by default for scalemm; --fuse-wgrad-accumulation: scalemm's FP8 Linear / GroupedLinear add dW
into .grad in their wgrad epilogue instead). The micro-step of a gradient-accumulation loop is therefore
--cache-weight --fuse-wgrad-accumulation; a step with an optimizer update is the default.

Timing: medians over interleaved rounds (every contender once per round) after warm-up, CUDA events
around each call, and the host time to issue the call ("host ms": near the GPU time, the eager step is
host-bound); --graphs instead captures each call in a CUDA graph (perf/gemm_sweep.py's bench) to
remove host overhead (inside a capture the NVFP4 quantizers draw their stochastic-rounding seed on the
device, each replay anew; the seventh session's run predates that and timed NVFP4 eagerly). --compile wraps every
contender in torch.compile (torchao's Float8Linear is meant to be compiled). Prints a table and writes
train_bench.json and train_bench.png under --out. Prebuild the kernels: python -m scalemm build --set train.

  python perf/train_bench.py --out results/train
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import bench, geomean  # noqa: E402
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm.nn import GroupedLinear, Linear  # noqa: E402
from scalemm.recipes import NVFP4, FP8DelayedScaling, FP8Rowwise, FP8Tensorwise  # noqa: E402

DEVICE = "cuda"  # "cpu" for --smoke (scalemm's reference path, tiny shapes: checks the script, times nothing useful)
RECIPES = {"scalemm_fp8_tensorwise": FP8Tensorwise(), "scalemm_fp8_rowwise": FP8Rowwise(),
           "scalemm_fp8_delayed": FP8DelayedScaling(), "scalemm_nvfp4": NVFP4()}
BF16 = torch.bfloat16
ACTIVATION = "scalemm"  # --activation: the SwiGLU every contender's block runs between gate_up and down


def swiglu(h):
    """SiLU(gate) * up of h = [gate | up]: scalemm.swiglu (one kernel each way), or torch's eager ops."""
    if ACTIVATION == "scalemm":
        return scalemm.swiglu(h)
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


class MLP(torch.nn.Module):
    def __init__(self, gate_up, down):
        super().__init__()
        self.gate_up, self.down = gate_up, down

    def forward(self, x):
        return self.down(swiglu(self.gate_up(x)))


class Experts(torch.nn.Module):
    """gate_up -> SiLU * up -> down over tokens sorted by expert: GroupedLinear layers, or (w1, w2 given)
    bf16 torch._grouped_mm with torch's own autograd."""

    def __init__(self, gate_up=None, down=None, w1=None, w2=None):
        super().__init__()
        self.gate_up, self.down, self.w1, self.w2 = gate_up, down, w1, w2

    def forward(self, x, offsets):
        if self.w1 is not None:
            h = torch._grouped_mm(x, self.w1.transpose(-2, -1), offs=offsets)
        else:
            h = self.gate_up(x, offsets)
        a = swiglu(h)
        if self.w2 is not None:
            return torch._grouped_mm(a, self.w2.transpose(-2, -1), offs=offsets)
        return self.down(a, offsets)


class TorchaoExperts(torch.nn.Module):
    """The same block on torchao's differentiable FP8 rowwise grouped GEMM
    (`torchao.prototype.moe_training.fp8_grouped_mm._to_fp8_rowwise_then_scaled_grouped_mm`: Triton
    quantizers, power-of-two scales, torch._scaled_grouped_mm in fast accumulation, the weights quantized
    every call). Its groups must be multiples of 16 rows (--group-multiple 16)."""

    def __init__(self, fn, w1, w2):
        super().__init__()
        self.fn, self.w1, self.w2 = fn, w1, w2

    def forward(self, x, offsets):
        mm = lambda a, w: self.fn(a, w.transpose(-2, -1), offsets, pad_token_groups_for_grouped_mm=False)  # noqa: E731
        return mm(swiglu(mm(x, self.w1)), self.w2)


class ExpertLayer(torch.nn.Module):
    """One expert layer alone over tokens sorted by expert: a GroupedLinear, or (w given) bf16
    torch._grouped_mm with torch's own autograd (issue 13's "GroupedLinear fwd+bwd against _grouped_mm")."""

    def __init__(self, layer=None, w=None):
        super().__init__()
        self.layer, self.w = layer, w

    def forward(self, x, offsets):
        if self.w is not None:
            return torch._grouped_mm(x, self.w.transpose(-2, -1), offs=offsets)
        return self.layer(x, offsets)


def expert_layers(models: dict, name: str) -> dict:
    """{contender: ExpertLayer} of one layer ("gate_up" or "down") of moe_contenders' expert blocks: bf16's on
    torch._grouped_mm with its own autograd (on the CPU smoke run its GroupedLinear(recipe=None)), the others'
    GroupedLinear."""
    out = {}
    for n, m in models.items():
        if n == "bf16" and DEVICE == "cuda":
            out[n] = ExpertLayer(w=m.w1 if name == "gate_up" else m.w2)
        else:
            out[n] = ExpertLayer(m.gate_up if name == "gate_up" else m.down)
    return out


def mlp_contenders(hidden, inter, cache_weight, fuse_wgrad_accumulation=False):
    torch.manual_seed(0)
    base = MLP(torch.nn.Linear(hidden, 2 * inter, bias=False), torch.nn.Linear(inter, hidden, bias=False))
    base = base.to(DEVICE, BF16)
    out = {"bf16": base}
    kw = dict(cache_weight=cache_weight, fuse_wgrad_accumulation=fuse_wgrad_accumulation)
    for name, recipe in RECIPES.items():  # the same Parameters as the bf16 model
        out[name] = MLP(Linear.from_linear(base.gate_up, recipe, **kw), Linear.from_linear(base.down, recipe, **kw))
    try:
        import copy

        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        for r in ("tensorwise", "rowwise"):
            m = copy.deepcopy(base)
            convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name(r))
            out[f"torchao_float8_{r}"] = m
    except Exception as e:  # not installed, or an API it does not have
        print(f"torchao Float8Linear not compared: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return out


def moe_contenders(experts, hidden, inter, cache_weight, fuse_wgrad_accumulation=False):
    torch.manual_seed(0)
    ref_up = GroupedLinear(experts, hidden, 2 * inter, recipe=None, device=DEVICE, dtype=BF16)
    ref_down = GroupedLinear(experts, inter, hidden, recipe=None, device=DEVICE, dtype=BF16)
    # torch's own _grouped_mm backward does not run on CPU tensors: the smoke run uses GroupedLinear(recipe=None)
    out = {"bf16": Experts(w1=ref_up.weight, w2=ref_down.weight) if DEVICE == "cuda" else Experts(ref_up, ref_down)}
    for name, recipe in RECIPES.items():
        kw = dict(recipe=recipe, device="meta", dtype=BF16, cache_weight=cache_weight,
                  fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        up, down = GroupedLinear(experts, hidden, 2 * inter, **kw), GroupedLinear(experts, inter, hidden, **kw)
        up.weight, down.weight = ref_up.weight, ref_down.weight  # shared Parameters
        out[name] = Experts(up, down)
    return out


def torchao_experts(bf16: Experts, sizes) -> dict:
    """{"torchao_fp8_rowwise_grouped": the expert block on torchao's FP8 grouped GEMM, with bf16's Parameters}
    where torchao imports and every group is a multiple of 16 rows; else {} (and says why). Kept out of
    moe_contenders, whose contenders are all Experts of GroupedLinear layers (the A/B harnesses take their layers)."""
    if DEVICE != "cuda":
        return {}
    if bool((sizes % 16 != 0).any()):
        print("torchao FP8 grouped GEMM not compared: its groups must be multiples of 16 rows (--group-multiple 16)")
        return {}
    try:
        from torchao.prototype.moe_training.fp8_grouped_mm import _to_fp8_rowwise_then_scaled_grouped_mm as fn
    except Exception as e:  # not installed, or an API it does not have
        print(f"torchao FP8 grouped GEMM not compared: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return {}
    return {"torchao_fp8_rowwise_grouped": TorchaoExperts(fn, bf16.w1, bf16.w2)}


def select(models: dict, pattern) -> dict:
    """bf16 and the contenders whose name matches --contenders (a regular expression)."""
    if pattern is None:
        return models
    return {n: m for n, m in models.items() if n == "bf16" or re.search(pattern, n)}


def moe_sizes(tokens, experts, top_k, multiple):
    """perf/grouped_sweep.py's routed rows per expert, each non-empty expert's rows rounded up to `multiple`
    (the padding a MoE adds for a grouped GEMM that needs aligned groups; torchao's FP8 one needs 16)."""
    sizes = routed_sizes(tokens, experts, top_k, seed=0)
    return (sizes + multiple - 1) // multiple * multiple


def time_eager(fns: dict, rounds: int = 15, warmup: int = 3) -> dict:
    """Per fn(): (median milliseconds per call, median host milliseconds to issue it), interleaved
    round-robin after `warmup` calls each (CUDA events around the call; the host time is the wall clock
    from the call's start until it returns, before any synchronisation: a step whose host time is
    close to its GPU time is host-bound. The CPU smoke run: wall clock for both)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    cuda = DEVICE == "cuda"
    if cuda:
        torch.cuda.synchronize()
    times = {n: [] for n in fns}
    host = {n: [] for n in fns}
    start, end = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else (None, None)
    for _ in range(rounds):
        for n, fn in fns.items():
            if cuda:
                start.record()
                t0 = time.perf_counter()
                fn()
                host[n].append((time.perf_counter() - t0) * 1e3)
                end.record()
                end.synchronize()
                times[n].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times[n].append((time.perf_counter() - t0) * 1e3)
                host[n].append(times[n][-1])
    return {n: (statistics.median(times[n]), statistics.median(host[n])) for n in fns}


def time_block(models: dict, make_step, use_graphs: bool) -> dict:
    """Per contender: (milliseconds per step, host milliseconds to issue it; None for a graph replay)."""
    steps = {n: make_step(m) for n, m in models.items()}
    if not use_graphs:
        return time_eager(steps, **({"rounds": 2, "warmup": 1} if DEVICE == "cpu" else {}))
    res = {}
    for n, fn in steps.items():  # one graph per contender: a capture failure costs only that contender
        try:
            res[n] = (bench({n: lambda i, f=fn: f()}, copies=1)[n] / 1e3, None)
        except Exception as e:
            print(f"  {n}: CUDA-graph capture failed ({type(e).__name__}: {str(e).splitlines()[0]}); timed eagerly")
            torch.cuda.synchronize()
            res[n] = time_eager({n: fn})[n]
    return res


def profile_steps(label, steps: dict, out: str, top: int = 15) -> None:
    """One warm step of each contender under torch.profiler: its kernels (or CPU ops in the smoke
    run) by total time, into <out>/train_profile.txt (appended per block) and printed."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    key = "self_cuda_time_total" if DEVICE == "cuda" else "self_cpu_time_total"
    with open(os.path.join(out, "train_profile.txt"), "a") as f:
        for n, step in steps.items():
            step()  # warm (kernels built and loaded, caches filled)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            with profile(activities=acts) as prof:
                step()
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=70)
            text = f"== {label}: {n}\n{table}\n{launch_order(prof)}"
            f.write(text)
            print(text, flush=True)


def launch_order(prof) -> str:
    """The step's GPU kernels one per line in launch order with their times: the table above sums launches
    by kernel name, and kernels of one type (the grouped dgrad and wgrad in full accumulation) share a name.
    Empty in the CPU smoke run."""
    from torch.autograd import DeviceType
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    if not kernels:
        return ""
    return "kernels in launch order (us):\n" + "".join(
        f"{e.time_range.elapsed_us():10.1f}  {e.name[:110]}\n" for e in kernels) + "\n"


def sqnr_db(a, ref):
    a, ref = a.double(), ref.double()
    return (10 * torch.log10(ref.norm() ** 2 / (a - ref).norm() ** 2)).item()


def run_block(label, models, make_input, forward, flop, args):
    """Time fwd+bwd of every model; the first output of each against bf16's as an SQNR."""
    x, dy, extra = make_input()
    if args.compile:  # FP8DelayedScaling does not run under torch.compile (its histories are seeded on the host)
        # every contender's forward is one code object (MLP.forward / Experts.forward): dynamo counts their
        # compilations against one limit (8), past which a contender silently runs eagerly
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 512)
        models = {n: torch.compile(m) for n, m in models.items() if n != "scalemm_fp8_delayed"}

    def make_step(m):
        def step():
            y = forward(m, x, extra)
            y.backward(dy)
        return step
    with torch.no_grad():
        ref = forward(models["bf16"], x, extra)
        quality = {n: sqnr_db(forward(m, x, extra), ref) for n, m in models.items() if n != "bf16"}
    timed = time_block(models, make_step, args.graphs)
    if args.profile:
        profile_steps(label, {n: make_step(m) for n, m in models.items()}, args.out)
    rows = []
    base = timed["bf16"][0]
    for n, (t, host) in timed.items():
        rows.append({"block": label, "contender": n, "ms": t, "host_ms": host, "tflops": flop / t / 1e9,
                     "speedup_vs_bf16": base / t, "output_sqnr_db_vs_bf16": quality.get(n)})
        q = quality.get(n)
        print(f"{label:<34}{n:<28}{t:>9.3f}{'-' if host is None else f'{host:.3f}':>9}{flop / t / 1e9:>9.1f}"
              f"{base / t:>9.3f}{'' if q is None else f'{q:>9.1f}'}", flush=True)
    del x, dy, extra
    return rows


def plot(rows, gpu, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no plot")
        return
    blocks = list(dict.fromkeys(r["block"] for r in rows))
    fig, axes = plt.subplots(1, len(blocks), figsize=(6.5 * len(blocks), 4.5), squeeze=False)
    for ax, b in zip(axes[0], blocks):
        sel = [r for r in rows if r["block"] == b]
        colors = ["tab:gray" if r["contender"] == "bf16" else "tab:orange" if r["contender"].startswith("torchao")
                  else "tab:blue" for r in sel]
        ax.bar(range(len(sel)), [r["speedup_vs_bf16"] for r in sel], color=colors)
        for i, r in enumerate(sel):
            ax.text(i, r["speedup_vs_bf16"], f"{r['ms']:.2f} ms", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(sel)), [r["contender"] for r in sel], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("bf16 time / time (fwd + bwd)")
        ax.set_title(b)
    fig.suptitle(f"scalemm training step on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--graphs", action="store_true", help="time CUDA-graph replays (gemm_sweep.bench)")
    p.add_argument("--compile", action="store_true", help="torch.compile every contender")
    p.add_argument("--cache-weight", action="store_true", help="reuse the quantized weights across calls")
    p.add_argument("--fuse-wgrad-accumulation", action="store_true",
                   help="FP8 Linear / GroupedLinear add dW into .grad in their wgrad epilogue")
    p.add_argument("--only", choices=("mlp", "moe", "moe-layers"), default=None,
                   help="one block; moe-layers (never in the default run): the experts' gate_up and down "
                        "GroupedLinear each alone, fwd + bwd, without the SiLU * up between them")
    p.add_argument("--contenders", default=None, metavar="REGEX",
                   help="only the contenders whose name matches (bf16 always runs), e.g. 'tensorwise|rowwise'")
    p.add_argument("--group-multiple", type=int, default=1, metavar="N",
                   help="round each expert's routed rows up to a multiple of N (16: torchao's FP8 grouped GEMM runs)")
    p.add_argument("--profile", action="store_true",
                   help="also profile one step of each contender (top kernels -> <out>/train_profile.txt)")
    p.add_argument("--activation", choices=("scalemm", "torch"), default="scalemm",
                   help="the SwiGLU between gate_up and down in every contender's block: scalemm.swiglu (default) "
                        "or torch's eager F.silu(gate) * up (the runs before the fiftieth session)")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: a check of the script itself")
    args = p.parse_args(argv)
    global DEVICE, ACTIVATION
    ACTIVATION = args.activation
    if args.smoke:
        DEVICE = "cpu"
        if args.graphs:
            p.error("--graphs needs CUDA")
    os.makedirs(args.out, exist_ok=True)
    gpu = torch.cuda.get_device_properties(0).name if DEVICE == "cuda" else "cpu (smoke run)"
    print(f"GPU: {gpu}, torch {torch.__version__}, scalemm {scalemm.__version__}, activation {ACTIVATION}")
    hdr = f"{'block':<34}{'contender':<28}{'ms':>9}{'host ms':>9}{'TFLOP/s':>9}{'vs bf16':>9}{'SQNR dB':>9}"
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    rows = []
    M = 64 if args.smoke else args.tokens
    if args.only in (None, "mlp"):
        hidden, inter = (256, 512) if args.smoke else (4096, 14336)
        models = select(mlp_contenders(hidden, inter, args.cache_weight, args.fuse_wgrad_accumulation), args.contenders)

        def mlp_input():
            g = torch.Generator(device=DEVICE).manual_seed(1)
            x = torch.randn(M, hidden, device=DEVICE, dtype=BF16, generator=g).requires_grad_()
            return x, torch.randn(M, hidden, device=DEVICE, dtype=BF16, generator=g) * 1e-2, None
        rows += run_block(f"llama3-8b mlp, {M} tok", models, mlp_input, lambda m, x, _: m(x),
                          3 * 2 * M * (hidden * 2 * inter + inter * hidden), args)
        del models
        torch.cuda.empty_cache()
    if args.only in (None, "moe"):
        E, k, hidden, inter = (16, 4, 128, 64) if args.smoke else (128, 8, 2048, 768)
        sizes = moe_sizes(M, E, k, args.group_multiple)
        T = int(sizes.sum())
        models = moe_contenders(E, hidden, inter, args.cache_weight, args.fuse_wgrad_accumulation)
        models = select({**models, **torchao_experts(models["bf16"], sizes)}, args.contenders)

        def moe_input():
            g = torch.Generator(device=DEVICE).manual_seed(2)
            x = torch.randn(T, hidden, device=DEVICE, dtype=BF16, generator=g).requires_grad_()
            offsets = torch.cumsum(sizes, 0).to(torch.int32).to(DEVICE)
            return x, torch.randn(T, hidden, device=DEVICE, dtype=BF16, generator=g) * 1e-2, offsets
        print(f"(moe: {T} routed rows, {int((sizes == 0).sum())} empty experts, largest {int(sizes.max())} rows)")
        rows += run_block(f"qwen3-30b-a3b experts, {M} tok", models, moe_input, lambda m, x, o: m(x, o),
                          3 * 2 * T * (hidden * 2 * inter + inter * hidden), args)
    if args.only == "moe-layers":
        E, k, hidden, inter = (16, 4, 128, 64) if args.smoke else (128, 8, 2048, 768)
        models = select(moe_contenders(E, hidden, inter, args.cache_weight, args.fuse_wgrad_accumulation),
                        args.contenders)
        sizes = moe_sizes(M, E, k, args.group_multiple)
        T = int(sizes.sum())
        for name, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden)):
            layers = expert_layers(models, name)

            def layer_input(K=K, N=N):
                g = torch.Generator(device=DEVICE).manual_seed(3)
                x = torch.randn(T, K, device=DEVICE, dtype=BF16, generator=g).requires_grad_()
                offsets = torch.cumsum(sizes, 0).to(torch.int32).to(DEVICE)
                return x, torch.randn(T, N, device=DEVICE, dtype=BF16, generator=g) * 1e-2, offsets
            rows += run_block(f"qwen3-30b-a3b {name} layer, {M} tok", layers, layer_input, lambda m, x, o: m(x, o),
                              3 * 2 * T * K * N, args)
    summary = {b: {r["contender"]: r["speedup_vs_bf16"] for r in rows if r["block"] == b}
               for b in dict.fromkeys(r["block"] for r in rows)}
    summary["geomean_scalemm_fp8_rowwise_vs_bf16"] = geomean(
        [r["speedup_vs_bf16"] for r in rows if r["contender"] == "scalemm_fp8_rowwise"])
    # scalemm over torchao with the same scaling, per block (torchao's time / scalemm's)
    peers = {"torchao_float8_tensorwise": "scalemm_fp8_tensorwise", "torchao_float8_rowwise": "scalemm_fp8_rowwise",
             "torchao_fp8_rowwise_grouped": "scalemm_fp8_rowwise"}
    for b in dict.fromkeys(r["block"] for r in rows):
        ms = {r["contender"]: r["ms"] for r in rows if r["block"] == b}
        for theirs, ours in peers.items():
            if theirs in ms and ours in ms:
                summary[b][f"{ours}_vs_{theirs}"] = ms[theirs] / ms[ours]
    result = {"gpu": gpu, "torch": torch.__version__, "scalemm": scalemm.__version__,
              "options": vars(args), "rows": rows, "summary": summary}
    with open(os.path.join(args.out, "train_bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(summary, indent=1))
    plot(rows, gpu, os.path.join(args.out, "train_bench.png"))


if __name__ == "__main__":
    main()
