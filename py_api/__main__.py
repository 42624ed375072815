"""python -m scalemm {demo, build, info, sweep, tune}"""
from __future__ import annotations

import argparse
import sys

import torch


def _gemm_specs(cases, grouped=False, calls_with_bias=(False, True)):
    """The specs of (config, fast_accum, out_dtype, tree) cases; tree None: the preset epilogue, for dense GEMMs
    as scalemm.gemm compiles it for calls without and/or with a bias (`calls_with_bias`; gemm.bias_leaf), for
    grouped GEMMs with its bias leaf."""
    from . import epilogues as epi
    from .gemm import bias_leaf, gemm_kernel_spec
    from .grouped import grouped_gemm_kernel_spec
    make = grouped_gemm_kernel_spec if grouped else gemm_kernel_spec

    def trees(cfg, tree, fa, od):
        if tree is not None:
            return [tree]
        leaves = (True,) if grouped else sorted({bias_leaf(b, fa, cfg) for b in calls_with_bias})
        return [epi.scaled(od, bias=b) for b in leaves]
    return [make(cfg, fast_accum=fa, out_dtype=od, epilogue=t)[0] for cfg, fa, od, tree in cases
            for t in trees(cfg, tree, fa, od)]


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
            GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True),
            GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2),
            GemmConfig(128, 128, 128, 1, 1, "cooperative", promotion_chunks=1),
            GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1))]
        cases += [(GemmConfig(128, n, 128, 1, 1, "pingpong"), True, od, None) for n in (128, 192)
                  for od in (bf16, torch.float32)]
    return cases


# Layers the training GPU tests, scripts/train_convergence.py and perf/train_bench.py run:
# (tokens M or T, out N, in K, experts or None, x dtype, weight dtype).
_TRAIN_LAYERS = [
    (210, 512, 256, None, torch.bfloat16, torch.float32), (300, 128, 256, 4, torch.bfloat16, torch.float32),  # tests
    (128, 512, 256, None, torch.bfloat16, torch.float32), (128, 256, 512, None, torch.bfloat16, torch.float32),
    (512, 512, 256, None, torch.bfloat16, torch.float32), (512, 512, 512, None, torch.bfloat16, torch.float32),
    (512, 64, 512, None, torch.bfloat16, torch.float32),  # convergence, mlp
    (512, 64, 512, None, torch.bfloat16, torch.bfloat16),  # tests (fused wgrad accumulation, swap-AB wgrad)
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
    from .activation import kernel_specs as swiglu_specs
    from .training import step_kernel_specs
    specs = {}
    for recipe in (FP8Tensorwise(), FP8Rowwise(), NVFP4()):
        for M, N, K, experts, xd, wd in _TRAIN_LAYERS:
            for s in step_kernel_specs(recipe, M, N, K, x_dtype=xd, w_dtype=wd, experts=experts):
                specs[s.name] = s
    return list(specs.values()) + list(quant_specs()) + list(grouped_quant_specs()) + list(swiglu_specs())


def chunked_promotion_test_configs():
    """The chunked-promotion kernels (full accumulation) tests/test_gemm_gpu.py runs beside CUTLASS's."""
    from .cutlass_kernels.configs import GemmConfig
    return [GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2),
            GemmConfig(128, 192, 128, 2, 1, "cooperative", promotion_chunks=1),
            GemmConfig(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2),
            GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=1),
            GemmConfig(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True),
            GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True),
            GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=1, promotion_overlap=True),
            GemmConfig(64, 256, 128, 1, 1, "pingpong", promotion_chunks=2),
            GemmConfig(128, 256, 128, 1, 1, "cooperative", stream_k=True, promotion_chunks=2),
            GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1),
            GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1)]


def kernel_set(name: str):
    """Named sets of kernels to prebuild: default (the heuristic's picks), tests, sweep, nvfp4, decode (the
    NVFP4 decode kernels and the quantizers: the skinny GPU tests, the decode benchmark and profile), skinny
    (only the skinny kernels, the bf16 quantizers and the nvfp4_dequant library, whose prepare_sm90 makes the
    wgmma loop's prepared weights: the skinny GPU tests and `nvfp4_explore.py --candidates loops`, the quickest to
    build), train, all."""
    if name == "train":
        return _train_specs()
    if name == "skinny":
        from .gemm_nvfp4 import _skinny_build_specs, dequant_kernel_spec
        from .quantize import kernel_specs as quant_specs
        from .quantize_grouped import kernel_specs as grouped_quant_specs
        bf16 = [s for s in list(quant_specs()) + list(grouped_quant_specs()) if s.name.endswith("_bfloat16")]
        return _skinny_build_specs() + bf16 + [dequant_kernel_spec()]
    if name == "decode":
        from .gemm_nvfp4 import build_set as nvfp4_build_set
        from .quantize import kernel_specs as quant_specs
        from .quantize_grouped import kernel_specs as grouped_quant_specs
        return nvfp4_build_set("decode") + list(quant_specs()) + list(grouped_quant_specs())
    from . import epilogues as epi
    from .cutlass_kernels.configs import TUNING_CANDIDATES, GemmConfig, default_build_set, default_config
    from .cutlass_kernels.configs.sm90 import PREFILL_ONE_WAVE_TILES, PREFILL_TILE_MODEL, decode_tiles
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
                  (default_config(17, 4096, 4096), True, bf16, None), (default_config(64, 4096, 4096), True, bf16, None),
                  (default_config(100, 4096, 4096), True, bf16, None), (default_config(128, 6144, 4096), True, bf16, None),
                  (default_config(48, 6144, 4096), True, bf16, None), (default_config(65, 4096, 4096), True, bf16, None),
                  (default_config(72, 9216, 4096), True, bf16, None), (default_config(65, 18432, 4096), True, bf16, None),
                  (default_config(80, 4096, 4096), True, bf16, None), (default_config(65, 57344, 4096), True, bf16, None),
                  (default_config(1, 9216, 4096), True, bf16, None), (default_config(16, 10240, 4096), True, bf16, None),
                  (default_config(64, 1024, 512, **full), False, torch.float32,
                   epi.relu(epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift")))]
        cases += [(c, False, bf16, None) for c in (
            GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(128, 256, 128, 2, 1, "cooperative"),
            GemmConfig(128, 192, 128, 2, 1, "cooperative"),
            GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 16, 128, 1, 1, "cooperative", swap_ab=True),
            GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, stream_k=True))]
        cases += [(c, False, od, None) for c in chunked_promotion_test_configs() for od in (bf16, torch.float32)]
        cases += [(GemmConfig(128, 128, 128, 2, 1, "cooperative"), False, torch.float32, None)]
        cases += [(cfg, True, od, None) for cfg in [e[0] for e in PREFILL_TILE_MODEL] + list(PREFILL_ONE_WAVE_TILES)
                  for od in (bf16, torch.float32)]
        cases += [(c, True, bf16, None) for c in decode_tiles()]  # the one-wave, clustered and 128x16 decode tiles
    if name in ("sweep", "all"):  # perf/gemm_sweep.py: heuristic picks, both accumulation modes, + tuning
        from .cutlass_kernels.configs import sweep_configs
        cases += [(c, fa, bf16, None) for c, fa in sweep_configs()]
        cases += [(default_config(1, 4096, 4096, fast_accum=False), False, bf16, None)]  # eager-overhead probe
        cases += [(c.compiled(), True, bf16, None) for cs in TUNING_CANDIDATES.values() for c in cs]
    grouped = _grouped_cases(name)
    if name not in ("default", "tests", "sweep", "nvfp4", "all"):
        raise SystemExit(f"unknown kernel set {name!r}: default, tests, sweep, nvfp4, decode, skinny, train, all")
    wgrad = []
    if name in ("default", "tests", "all"):
        from .cutlass_kernels.configs import default_wgrad_config
        from .grouped import grouped_gemm_kernel_spec
        wgrad = [grouped_gemm_kernel_spec(default_wgrad_config(4096, 4096, fast_accum=fa), fast_accum=fa,
                                          out_dtype=bf16, epilogue=epi.scaled(bf16), wgrad=True)[0] for fa in (False, True)]
        if name == "tests":  # the chunked promotion's wgrad test
            wgrad.append(grouped_gemm_kernel_spec(GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2),
                                                  fast_accum=False, out_dtype=bf16, epilogue=epi.scaled(bf16),
                                                  wgrad=True)[0])
    quant = []
    if name in ("default", "tests", "all"):
        from .quantize import kernel_specs as quant_specs
        from .activation import kernel_specs as swiglu_specs
        from .quantize_grouped import kernel_specs as grouped_quant_specs
        quant = list(quant_specs()) + list(grouped_quant_specs()) + list(swiglu_specs())
    nvfp4 = []
    if name in ("tests", "sweep", "all", "nvfp4"):
        from .gemm_nvfp4 import build_set as nvfp4_build_set
        nvfp4 = nvfp4_build_set({"tests": "tests", "sweep": "explore", "nvfp4": "all", "all": "all"}[name])
    if name == "nvfp4":
        return nvfp4
    # perf/gemm_sweep.py calls without a bias; the tests and users with and without
    specs = (_gemm_specs(cases, calls_with_bias=(False,) if name == "sweep" else (False, True))
             + _gemm_specs(grouped, grouped=True) + wgrad + quant + nvfp4)
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
        from .arch import gpu_skip_reason, kernel_arch
        p = torch.cuda.get_device_properties(0)
        why = gpu_skip_reason()
        print(f"GPU: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs: "
              + (f"kernels {kernel_arch()} (cutlass_kernels/configs/{kernel_arch()}.py)" if why is None else why))
    else:
        print("GPU: none (scalemm runs its torch reference path on CPU tensors)")
    from . import tuned
    n = len(tuned.entries())
    print(f"tuned configs: {tuned.cache_path()} ({n} entries{'' if tuned.enabled() else ', turned off by SCALEMM_TUNED'})")
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
    from .arch import gpu_skip_reason
    M, N, K = args.m, args.n, args.k
    why = gpu_skip_reason()
    cuda = why is None
    dev = "cuda" if cuda else "cpu"
    if not cuda:
        M, N, K = min(M, 256), min(N, 512), min(K, 512)
        print(f"No GPU with scalemm kernels here ({why}): running scalemm's torch reference path on the CPU "
              f"({M}x{N}x{K}).")
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


def _shape(text):
    """An argparse type: 'M,N,K' or 'MxNxK' (positive ints)."""
    parts = text.replace("x", ",").split(",")
    try:
        M, N, K = (int(p) for p in parts)
        if min(M, N, K) <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is M,N,K (three positive integers), got {text!r}") from None
    return M, N, K


def _grouped(text):
    """An argparse type: 'T,G,N,K' (positive ints): T rows over G groups, [G, N, K] weights."""
    try:
        dims = tuple(int(p) for p in text.split(","))
        if len(dims) != 4 or min(dims) <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"a grouped shape is T,G,N,K (four positive integers), got {text!r}") from None
    return dims


def _ints(text):
    try:
        values = tuple(int(v) for v in text.split(","))
        if not values or min(values) <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}") from None
    return values


def cmd_tune(args):
    from . import tuned, tuning
    from .cutlass_kernels.configs import MODEL_PRESETS
    if args.show:
        entries = tuned.entries()
        print(f"{tuned.cache_path()}: {len(entries)} entries")
        if entries:
            print(tuning.format_entries(entries))
        return 0
    modes = {"both": (True, False), "fast": (True,), "full": (False,)}[args.accum]
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.out_dtype]
    try:
        shapes = tuning.expand_shapes(args.shapes, model=args.model, tokens=args.tokens)
        grouped = tuning.expand_grouped(args.grouped)
        if not shapes and not grouped:
            raise ValueError("nothing to tune: give M,N,K shapes, --model or --grouped")
    except (ValueError, TypeError) as e:
        print(f"python -m scalemm tune: {e} (model presets: {', '.join(MODEL_PRESETS)})", file=sys.stderr)
        return 2
    if args.dry_run:
        from .arch import gpu_skip_reason, kernel_arch
        arch, num_sms = "sm90", None
        if gpu_skip_reason() is None:
            from .arch import gpu_info
            arch, num_sms = kernel_arch(), gpu_info().num_sms
        work = tuning.plan(shapes, grouped=grouped, fast_accum=modes, out_dtype=out_dtype, arch=arch, num_sms=num_sms)
        kernels = {(it["op"], c.compiled(), it["fast_accum"]) for it in work for c in it["candidates"]}
        print(f"{len(shapes)} shapes, {len(grouped)} grouped -> {len(work)} entries ({arch}), {len(kernels)} "
              f"candidate kernels; cache: {tuned.cache_path()}")
        for it in work:
            if it["op"] == "gemm":
                M, N, K = it["dims"]
                what = f"M={M:<6} (bucket {tuned.m_bucket(M)}) N={N:<6} K={K:<6}"
            else:
                what = "grouped T={} G={} N={} K={} (rows bucket {})".format(*it["dims"], it["shape"]["rows_bucket"])
            print(f"  {what} {'fast' if it['fast_accum'] else 'full'}: heuristic {it['heuristic'].label()}, "
                  f"{len(it['candidates'])} candidates")
        return 0
    from .arch import gpu_skip_reason
    why = gpu_skip_reason()
    if why is not None:
        print(f"python -m scalemm tune times kernels on the GPU: {why}", file=sys.stderr)
        return 1
    results = tuning.tune(shapes, grouped=grouped, fast_accum=modes, out_dtype=out_dtype, jobs=args.jobs,
                          runtime_knobs=not args.no_runtime_knobs, min_gain=args.min_gain, save=not args.no_save)
    if results:
        gains = [r["speedup_over_heuristic"] for r in results]
        geo = 1.0
        for g in gains:
            geo *= g ** (1 / len(gains))
        changed = sum(r["label"] != r["heuristic"] for r in results)
        print(f"tuned {len(results)} entries: {changed} differ from the heuristic; geomean gain {geo:.3f}x, "
              f"best {max(gains):.3f}x")
    return 0 if results else 1


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
    sub = p.add_subparsers(dest="cmd", metavar="{demo,build,info,sweep,tune}")
    d = sub.add_parser("demo", help="quantize, run the FP8 GEMM, print errors and timings against torch")
    d.add_argument("-m", type=_size(), default=4096, help="tokens (rows of x), >= 1")
    d.add_argument("-n", type=_size(8), default=4096, help="output features, a multiple of 8")
    d.add_argument("-k", type=_size(16), default=4096, help="input features, a multiple of 16")
    b = sub.add_parser("build", help="prebuild kernels into the JIT cache, in parallel")
    b.add_argument("--set", action="append", default=None,
                   help="default (repeatable): default, tests, sweep, nvfp4, decode, skinny, train, all")
    b.add_argument("--jobs", type=_size(), default=None, help="parallel nvcc processes (default: one per core)")
    sub.add_parser("info", help="toolchain, CUTLASS, GPU and cache")
    s = sub.add_parser("sweep", help="run perf/gemm_sweep.py (arguments pass through)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    t = sub.add_parser("tune", help="time the FP8 GEMMs' candidate configs per shape and cache the winners",
                       description="Time the candidate configs of the FP8 GEMMs for each shape on this GPU and "
                       "store the winners in the tuned-config cache (JIT cache dir/tuning/tuned.json), where "
                       "scalemm.gemm and scalemm.grouped_gemm look them up before their heuristics. Shapes: M,N,K "
                       "arguments, --model, --grouped.")
    t.add_argument("shapes", nargs="*", type=_shape, metavar="M,N,K", help="GEMM shapes (a [M, K] x [N, K]^T)")
    t.add_argument("--model", help="a preset (llama3-8b, llama3-70b, qwen2.5-7b, qwen2.5-72b), a JSON file or JSON "
                   "text with hidden, intermediate, heads, kv_heads (head_dim optional): every linear layer's N,K")
    t.add_argument("--tokens", type=_ints, default=None, help="token counts M for --model (default "
                   "1,16,32,64,128,1024,4096,16384)")
    t.add_argument("--grouped", action="append", type=_grouped, default=None, metavar="T,G,N,K",
                   help="a grouped (MoE) FP8 GEMM: T rows spread evenly over G experts of [N, K] weights (repeatable)")
    t.add_argument("--accum", choices=("both", "fast", "full"), default="both", help="FP8 accumulation modes")
    t.add_argument("--out-dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    t.add_argument("--jobs", type=_size(), default=None, help="parallel nvcc builds (default: one per core)")
    t.add_argument("--min-gain", type=float, default=1.01, help="a candidate must beat the heuristic by this factor")
    t.add_argument("--no-runtime-knobs", action="store_true", help="skip the raster / swizzle variants")
    t.add_argument("--no-save", action="store_true", help="time and print, do not write the cache")
    t.add_argument("--dry-run", action="store_true", help="list the entries and candidates, time nothing (no GPU)")
    t.add_argument("--show", action="store_true", help="print the cache's entries")
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help(sys.stderr)
        print(f"\n{p.prog}: error: choose a command (demo, build, info, sweep, tune)", file=sys.stderr)
        return 2
    if args.cmd == "build" and not args.set:
        args.set = ["default"]
    return {"demo": cmd_demo, "build": cmd_build, "info": cmd_info, "sweep": cmd_sweep, "tune": cmd_tune}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
