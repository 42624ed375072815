"""python -m scalemm {demo, build, info, sweep}"""
from __future__ import annotations

import argparse
import sys
import time

import torch


def _gemm_specs(cases, grouped=False):
    from . import epilogues as epi
    from .gemm import gemm_kernel_spec
    from .grouped import grouped_gemm_kernel_spec
    make = grouped_gemm_kernel_spec if grouped else gemm_kernel_spec
    return [make(cfg, fast_accum=fa, out_dtype=od, epilogue=tree or epi.scaled(od))[0] for cfg, fa, od, tree in cases]


def _grouped_cases(name):
    """Grouped kernels: the heuristic's picks for the MoE sweep and the tests' explicit configs."""
    from .cutlass_kernels.configs import GemmConfig, default_grouped_config
    bf16, cases = torch.bfloat16, []
    if name in ("default", "all", "sweep"):
        per_group = (1, 2, 16, 32, 64, 128, 256, 512, 1024, 4096)
        cases += [(default_grouped_config(G * t, G, 4096, 4096, fast_accum=fa), fa, bf16, None)
                  for G in (8,) for t in per_group for fa in ((True, False) if name != "sweep" else (True,))]
    if name in ("sweep", "all"):
        from .cutlass_kernels.configs import GROUPED_TUNING_CANDIDATES
        cases += [(c, True, bf16, None) for c in GROUPED_TUNING_CANDIDATES]
    if name in ("tests", "all"):
        cases += [(default_grouped_config(T, G, 1, 1, fast_accum=fa), fa, bf16, None)
                  for G, T in ((1, 300), (8, 4096), (64, 1500), (256, 2048), (8, 40), (8, 1024), (8, 2048))
                  for fa in (False, True)]
        cases += [(c, False, torch.float32, None) for c in (
            default_grouped_config(577, 8, 1, 1, fast_accum=False), GemmConfig(128, 128, 128, 1, 1, "cooperative"),
            GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(64, 16, 128, 1, 1, "pingpong", swap_ab=True),
            GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True))]
    return cases


# Layers the training GPU tests, scripts/train_convergence.py and perf/train_bench.py run:
# (tokens M or T, out N, in K, experts or None, x dtype, weight dtype).
_TRAIN_LAYERS = [
    (210, 512, 256, None, torch.bfloat16, torch.float32), (300, 128, 256, 4, torch.bfloat16, torch.float32),  # tests
    (512, 512, 256, None, torch.bfloat16, torch.float32), (512, 512, 512, None, torch.bfloat16, torch.float32),
    (512, 64, 512, None, torch.bfloat16, torch.float32),  # convergence, mlp
    (1024, 1024, 512, 8, torch.bfloat16, torch.float32), (1024, 512, 512, 8, torch.bfloat16, torch.float32),  # moe
    (8192, 28672, 4096, None, torch.bfloat16, torch.bfloat16),  # perf/train_bench.py
    (8192, 4096, 14336, None, torch.bfloat16, torch.bfloat16),
    (65536, 1536, 2048, 128, torch.bfloat16, torch.bfloat16), (65536, 2048, 768, 128, torch.bfloat16, torch.bfloat16),
]


def _train_specs():
    """The GEMM kernels of the training layers above under every recipe, and the quantization kernels."""
    from .quantize import kernel_specs as quant_specs
    from .quantize_grouped import kernel_specs as grouped_quant_specs
    from .recipes import NVFP4, FP8Rowwise, FP8Tensorwise
    from .training import step_kernel_specs
    specs = {}
    for recipe in (FP8Tensorwise(), FP8Rowwise(), NVFP4()):
        for M, N, K, experts, xd, wd in _TRAIN_LAYERS:
            for s in step_kernel_specs(recipe, M, N, K, x_dtype=xd, w_dtype=wd, experts=experts):
                specs[s.name] = s
    return list(specs.values()) + list(quant_specs()) + list(grouped_quant_specs())


def kernel_set(name: str):
    """Named sets of kernels to prebuild: default (the heuristic's picks), tests, sweep, nvfp4, train, all."""
    if name == "train":
        return _train_specs()
    from . import epilogues as epi
    from .cutlass_kernels.configs import TUNING_CANDIDATES, GemmConfig, default_build_set, default_config
    bf16 = torch.bfloat16
    cases = []
    if name in ("default", "all"):
        cases += [(c, fa, bf16, None) for c, fa in default_build_set()]
    if name in ("tests", "all"):  # what tests/test_gemm_gpu.py launches
        nk = [(6144, 4096), (4096, 14336), (57344, 8192), (7168, 2048)]
        full = dict(fast_accum=False)
        cases += [(default_config(M, N, K, **full), False, bf16, None) for M in (1, 7, 129, 4096) for N, K in nk]
        cases += [(default_config(M, 2048, 768, fast_accum=fa), fa, od, None) for M in (1, 129) for fa in (False, True)
                  for od in (bf16, torch.float16, torch.float32)]
        cases += [(default_config(300, 4096, 4096, **full), False, torch.float32, epi.scaled("f32", activation="relu")),
                  (default_config(300, 4096, 4096, **full), False, bf16, None),
                  (default_config(512, 4096, 4096), True, bf16, None),
                  (default_config(16, 4096, 4096, **full), False, bf16, None),
                  (default_config(64, 1024, 512, **full), False, torch.float32,
                   epi.relu(epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift")))]
        cases += [(c, False, bf16, None) for c in (
            GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(128, 256, 128, 2, 1, "cooperative"),
            GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 16, 128, 1, 1, "cooperative", swap_ab=True),
            GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, stream_k=True))]
    if name in ("sweep", "all"):  # perf/gemm_sweep.py: heuristic picks, both accumulation modes, + tuning
        from .cutlass_kernels.configs import sweep_configs
        cases += [(c, fa, bf16, None) for c, fa in sweep_configs()]
        cases += [(default_config(1, 4096, 4096, fast_accum=False), False, bf16, None)]  # eager-overhead probe
        cases += [(c.compiled(), True, bf16, None) for cs in TUNING_CANDIDATES.values() for c in cs]
    grouped = _grouped_cases(name)
    if name not in ("default", "tests", "sweep", "nvfp4", "all"):
        raise SystemExit(f"unknown kernel set {name!r}: default, tests, sweep, nvfp4, train, all")
    wgrad = []
    if name in ("default", "tests", "all"):
        from .cutlass_kernels.configs import default_wgrad_config
        from .grouped import grouped_gemm_kernel_spec
        wgrad = [grouped_gemm_kernel_spec(default_wgrad_config(4096, 4096, fast_accum=fa), fast_accum=fa,
                                          out_dtype=bf16, epilogue=epi.scaled(bf16), wgrad=True)[0] for fa in (False, True)]
    quant = []
    if name in ("default", "tests", "all"):
        from .quantize import kernel_specs as quant_specs
        from .quantize_grouped import kernel_specs as grouped_quant_specs
        quant = list(quant_specs()) + list(grouped_quant_specs())
    nvfp4 = []
    if name in ("tests", "sweep", "all", "nvfp4"):
        from .gemm_nvfp4 import build_set as nvfp4_build_set
        nvfp4 = nvfp4_build_set({"tests": "tests", "sweep": "explore", "nvfp4": "all", "all": "all"}[name])
    if name == "nvfp4":
        return nvfp4
    specs = _gemm_specs(cases) + _gemm_specs(grouped, grouped=True) + wgrad + quant + nvfp4
    if name == "all":  # + the training layers' kernels (tests/test_train_gpu.py)
        names = {s.name for s in specs}
        specs += [s for s in _train_specs() if s.name not in names]
    return specs


def cmd_build(args):
    from .jit import build_many
    specs = [s for n in args.set for s in kernel_set(n)]
    failed = [(s, e) for s, e in build_many(specs, jobs=args.jobs) if e]
    for s, e in failed:
        print(f"FAILED {s.name}:\n{e}\n", file=sys.stderr)
    return 1 if failed else 0


def cmd_info(args):
    from . import __version__
    from .jit import cache_dir, toolchain
    print(f"scalemm {__version__}, torch {torch.__version__}")
    for label, fn in (("nvcc", lambda: f"{toolchain.nvcc_path()} ({toolchain.nvcc_version()[0]})"),
                      ("CUTLASS", lambda: f"{toolchain.cutlass_version()} at {toolchain.cutlass_include_dirs()[0]}"),
                      ("driver CUDA", toolchain.driver_description)):
        try:
            print(f"{label}: {fn()}")
        except Exception as e:
            print(f"{label}: not available ({e})")
    print(f"JIT cache: {cache_dir()}")
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print(f"GPU: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
    else:
        print("GPU: none (scalemm runs its torch reference path on CPU tensors)")
    return 0


def _time_ms(fn, reps=7, calls=20):
    """Median ms per call over `reps` batches of `calls` back-to-back launches (launch cost
    overlaps the GPU work, as in a model; a lone call between two events would time the host)."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def cmd_demo(args):
    import scalemm
    M, N, K = args.m, args.n, args.k
    cuda = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)
    dev = "cuda" if cuda else "cpu"
    if not cuda:
        M, N, K = min(M, 256), min(N, 512), min(K, 512)
        print(f"No Hopper GPU here: running scalemm's torch reference path on the CPU ({M}x{N}x{K}).")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, generator=g, dtype=torch.bfloat16)
    w = (torch.randn(N, K, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    xq = scalemm.quantize_fp8(x, scaling="token")
    wq = scalemm.quantize_fp8(w, scaling="token")
    out = scalemm.gemm(xq, wq)
    exact = (xq.data.double() @ wq.data.double().T) * xq.scale_inv.double()[:, None] * wq.scale_inv.double()[None, :]
    ref_bf16 = x.double() @ w.double().T
    err = lambda o, r: ((o.double() - r).norm() / r.norm()).item()
    print(f"FP8 per-token GEMM {M}x{N}x{K} -> bf16 on {dev}")
    print(f"  error vs exact dequantized product: {err(out, exact):.2e}   (bf16 output rounding: <= 4e-3)")
    print(f"  error vs the bf16 product (quantization): {err(out, ref_bf16):.2e}")
    if cuda:
        flop = 2 * M * N * K
        sa, sb = xq.scale_inv[:, None], wq.scale_inv[None, :]
        for fast in (True, False):
            t_ours = _time_ms(lambda: scalemm.gemm(xq, wq, fast_accum=fast))
            t_rw = _time_ms(lambda: torch._scaled_mm(xq.data, wq.data.T, scale_a=sa, scale_b=sb,
                                                     out_dtype=torch.bfloat16, use_fast_accum=fast))
            print(f"  {'fast' if fast else 'full'} FP8 accumulation: scalemm.gemm {t_ours * 1e3:8.1f} us "
                  f"({flop / t_ours / 1e9:6.1f} TFLOP/s), torch._scaled_mm rowwise {t_rw * 1e3:8.1f} us "
                  f"({flop / t_rw / 1e9:6.1f}): {t_rw / t_ours:.2f}x")
        t_bf16 = _time_ms(lambda: x @ w.T)
        t_q = _time_ms(lambda: scalemm.quantize_fp8(x, scaling="token"))
        print(f"  torch bf16 matmul {t_bf16 * 1e3:.1f} us ({flop / t_bf16 / 1e9:.1f} TFLOP/s); "
              f"scalemm.quantize_fp8 (per-token) of x {t_q * 1e3:.1f} us")
    q4 = scalemm.quantize_nvfp4(x, scaling="tensor")
    print(f"NVFP4 (e2m1 + e4m3/16 + fp32) quantization of x: relative error "
          f"{err(q4.dequantize(torch.float32), x.double()):.3e}, {q4.qdata.numel() + q4.scales.numel()} bytes "
          f"for {x.numel() * 2} bf16 bytes")
    if cuda:
        t4 = _time_ms(lambda: scalemm.quantize_nvfp4(x, scaling="tensor"))
        moved = x.numel() * x.element_size() * 2 + q4.qdata.numel() + q4.scales.numel()  # amax read + cast read/write
        print(f"  scalemm.quantize_nvfp4 (amax + cast): {t4 * 1e3:.1f} us, {moved / (t4 * 1e-3) / 1e9:.0f} GB/s")
        G, per = 8, max(1, M // 8)
        sizes = torch.tensor([per * 2, 0, per, per // 2, per, per * 2, per // 2, 0])
        sizes[0] += G * per - int(sizes.sum())
        offs = torch.cumsum(sizes, 0).to(torch.int32).to(dev)
        T = int(sizes.sum())
        we = (torch.randn(G, N, K, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        wq = scalemm.quantize_fp8(we.reshape(G * N, K), scaling="token")
        w8, sw = wq.data.reshape(G, N, K), wq.scale_inv.reshape(G, N)
        xs = scalemm.quantize_fp8(x[:T], scaling="token")
        y = scalemm.grouped_gemm(xs.data, w8, offs, xs.scale_inv, sw, scale_a_per="token", fast_accum=True)
        ref = torch.cat([(xs.data[s:e].double() * xs.scale_inv[s:e, None].double()) @
                         (w8[i].double() * sw[i, :, None].double()).T
                         for i, (s, e) in enumerate(zip([0] + offs[:-1].tolist(), offs.tolist()))])
        t_g = _time_ms(lambda: scalemm.grouped_gemm(xs.data, w8, offs, xs.scale_inv, sw, scale_a_per="token",
                                                    fast_accum=True))
        t_tg = _time_ms(lambda: torch._scaled_grouped_mm(xs.data, w8.transpose(-2, -1), xs.scale_inv, sw, offs=offs,
                                                         out_dtype=torch.bfloat16, use_fast_accum=True))
        print(f"Grouped FP8 GEMM (fast accumulation), {G} experts (two empty), {T} tokens: error {err(y, ref):.2e}, "
              f"{t_g * 1e3:.1f} us vs torch._scaled_grouped_mm {t_tg * 1e3:.1f} us ({t_tg / t_g:.2f}x)")
    return 0


def cmd_sweep(args):
    import runpy
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "perf" / "gemm_sweep.py"
    if not script.is_file():
        raise SystemExit("perf/gemm_sweep.py is part of the source tree: run this from a checkout")
    sys.argv = [str(script), *args.rest]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def _size(multiple=1):
    """An argparse type: a positive int, a multiple of `multiple` (the GEMM's layout rules)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value <= 0 or value % multiple:
            what = "a positive integer" if multiple == 1 else f"a positive multiple of {multiple}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text if value is not None else repr(text)}")
        return value
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m scalemm", description=__doc__)
    sub = p.add_subparsers(dest="cmd", metavar="{demo,build,info,sweep}")
    d = sub.add_parser("demo", help="quantize, run the FP8 GEMM, print errors and timings against torch")
    d.add_argument("-m", type=_size(), default=4096, help="tokens (rows of x), >= 1")
    d.add_argument("-n", type=_size(8), default=4096, help="output features, a multiple of 8")
    d.add_argument("-k", type=_size(16), default=4096, help="input features, a multiple of 16")
    b = sub.add_parser("build", help="prebuild kernels into the JIT cache, in parallel")
    b.add_argument("--set", action="append", default=None,
                   help="default (repeatable): default, tests, sweep, nvfp4, train, all")
    b.add_argument("--jobs", type=_size(), default=None, help="parallel nvcc processes (default: one per core)")
    sub.add_parser("info", help="toolchain, CUTLASS, GPU and cache")
    s = sub.add_parser("sweep", help="run perf/gemm_sweep.py (arguments pass through)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help(sys.stderr)
        print(f"\n{p.prog}: error: choose a command (demo, build, info, sweep)", file=sys.stderr)
        return 2
    if args.cmd == "build" and not args.set:
        args.set = ["default"]
    return {"demo": cmd_demo, "build": cmd_build, "info": cmd_info, "sweep": cmd_sweep}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
