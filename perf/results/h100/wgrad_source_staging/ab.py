"""Same-process A/B of the grouped FP8 wgrad that adds dW into .grad (accumulate=True: GroupedLinear's
fuse_wgrad_accumulation) with CUTLASS's source (C = .grad) staging changed. CUTLASS's builder gives a bf16 C and D
one shared set of shared-memory buffers (ReuseSmemC): a tile's next C subtile can only load into a buffer once the D
store that last used it has been read out, so the loads of .grad queue behind the epilogue's own stores. The
candidates give C buffers of its own (ReuseSmemC off) with 4 or 8 of the 128x32 subtiles loaded ahead (8: the whole
128x256 tile), which costs mainloop stages.

Needs the experiment's header and template (experiment.diff: grouped_gemm_epi_exp.cuh,
grouped_gemm_sm90_epi_exp.cu; not part of scalemm).
  python3 perf/results/h100/wgrad_source_staging/ab.py --build        (jobs=2, on the CPU machine)
  python3 perf/results/h100/wgrad_source_staging/ab.py --out OUT [--step]
"""
import argparse
import contextlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
from grouped_sweep import routed_sizes  # noqa: E402

import scalemm  # noqa: E402
from scalemm import grouped  # noqa: E402
from scalemm.jit import KernelSpec  # noqa: E402
from scalemm.cutlass_kernels.configs import sm90  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.timing import bench  # noqa: E402

# name: (accumulate, None for the rule's kernel or (StagesC, ReuseSmemC))
CANDIDATES = {"cur": (True, None), "write": (False, None), "reuse_c8": (True, (8, "true")),
              "own_c4": (True, (4, "false")), "own_c8": (True, (8, "false")), "own_c2": (True, (2, "false"))}
_KERNEL = grouped._kernel


def exp_spec(spec, staging):
    stages, reuse = staging
    return KernelSpec(name=f"{spec.name}_c{stages}{'r' if reuse == 'true' else 'o'}",
                      template="grouped_gemm_sm90_epi_exp.cu",
                      params={**dict(spec.params), "EXP_STAGES_C": str(stages), "EXP_REUSE_C": reuse})


@contextlib.contextmanager
def staging(st):
    def kernel(cfg, fast_accum, out_dtype, tree, wgrad=False):
        spec, emitted = grouped.grouped_gemm_kernel_spec(cfg, fast_accum=fast_accum, out_dtype=out_dtype,
                                                         epilogue=tree, wgrad=wgrad)
        if not (wgrad and emitted.source_dtype):  # only the adding wgrad changes
            return _KERNEL(cfg, fast_accum, out_dtype, tree, wgrad)
        return emitted.leaves, grouped._launcher(exp_spec(spec, st))
    if st:
        grouped._kernel = kernel
    try:
        yield
    finally:
        grouped._kernel = _KERNEL


def run(names, lines):
    """Times every candidate on both layers; returns {name: summed us}."""
    total = {n: 0.0 for n in names}
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T = sizes.numel(), int(sizes.sum())
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    W = layout.wgrad_width(T, E)
    for label, N, K in (("gate_up dW", 1536, 2048), ("down dW", 2048, 768)):
        g = torch.Generator(device="cuda").manual_seed(3)
        dy_t = (torch.randn(N, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        x_t = (torch.randn(K, W, device="cuda", generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        s_dy = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        s_x = torch.rand(E, device="cuda", generator=g) * 1e-5 + 1e-6
        prior = (torch.randn(E, N, K, device="cuda", generator=g) * 0.1).to(torch.bfloat16)
        outs = {n: prior.clone() for n in names}

        def call(n, i=0):
            acc, st = CANDIDATES[n]
            with staging(st):
                scalemm.grouped_gemm_wgrad(dy_t, x_t, offsets, s_dy, s_x, out=outs[n], accumulate=acc)
        for n in names:
            call(n)
        torch.cuda.synchronize()
        first = {n: outs[n].clone() for n in names}
        us = bench({n: (lambda i, n=n: call(n)) for n in names}, copies=1)
        lines.append(f"grouped {label} [{E}, {N}, {K}] from {T} rows, "
                     f"{sm90.default_wgrad_config(N, K, fast_accum=False).key()} (full accumulation):")
        for n in names:
            check = "(dW alone)" if n == "write" else "(reference)" if n == "cur" else \
                "bit-identical to cur" if torch.equal(first[n], first["cur"]) else "DIFFERS from cur"
            lines.append(f"  {n:<10}{us[n]:>9.1f} us {2 * T * N * K / us[n] / 1e6:>7.0f} TFLOP/s  "
                         f"{us['cur'] / us[n]:.3f}x of cur  {check}")
        print("\n".join(lines[-len(names) - 1:]), flush=True)
        for n in names:
            total[n] += us[n] if n == "cur" or torch.equal(first[n], first["cur"]) else float("inf")
        torch.cuda.empty_cache()
    return total


def step(best, lines):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", ".."))
    import train_bench as tb
    sizes = routed_sizes(8192, 128, 8, seed=0)
    E, T, hidden, inter = 128, int(sizes.sum()), 2048, 768
    offsets = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    moe = tb.moe_contenders(E, hidden, inter, True, True)
    blocks = [(f"{n} layer", {k: tb.ExpertLayer(w=m.w1 if n == "gate_up" else m.w2) if k == "bf16" else
                              tb.ExpertLayer(m.gate_up if n == "gate_up" else m.down) for k, m in moe.items()}, K, N)
              for n, K, N in (("gate_up", hidden, 2 * inter), ("down", inter, hidden))]
    blocks.append(("experts block", moe, hidden, hidden))
    for label, models, K, N in blocks:
        g = torch.Generator(device="cuda").manual_seed(3)
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        dy = torch.randn(T, N, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-2

        def make(m, st):
            def f(i):
                with staging(st):
                    m(x, offsets).backward(dy)
            return f
        fns = {"bf16": make(models["bf16"], None)}
        for r in ("scalemm_fp8_delayed", "scalemm_fp8_tensorwise"):
            fns[f"{r} | cur"] = make(models[r], None)
            fns[f"{r} | {best}"] = make(models[r], CANDIDATES[best][1])
        us = bench(fns, copies=1)
        lines.append(f"micro-step, qwen3-30b-a3b {label} ({T} rows; weights cached, dW added into .grad), CUDA graphs:")
        for n, t in us.items():
            lines.append(f"  {n:<40}{t / 1e3:>8.3f} ms  {us['bf16'] / t:.3f}x of bf16")
        print("\n".join(lines[-len(us) - 1:]), flush=True)


def specs(names):
    out = {}
    for n in names:
        acc, st = CANDIDATES[n]
        for N, K in ((1536, 2048), (2048, 768)):
            cfg = sm90.default_wgrad_config(N, K, fast_accum=False)
            s = grouped.grouped_gemm_kernel_spec(cfg, fast_accum=False, out_dtype=torch.bfloat16,
                                                 epilogue=grouped._wgrad_tree("bf16", acc), wgrad=True)[0]
            if st:
                s = exp_spec(s, st)
            out[s.name] = s
    return list(out.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--step", default=None, help="also time the micro-steps with this candidate (auto: the fastest)")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    names = args.candidates.split(",")
    if args.build:
        from scalemm import jit
        jit.build_many([s for s in specs(names) if not jit.is_cached(s)], jobs=2)
        return
    lines = [f"device: {torch.cuda.get_device_name()}"]
    total = run(names, lines)
    if args.step == "auto":  # the fastest bit-identical adding candidate over both layers
        args.step = min((n for n in names if n not in ("cur", "write")), key=total.get)
    if args.step:
        step(args.step, lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ab.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
