"""Per-shape tuning of the FP8 GEMMs, and the persistent cache of the winners.

The cache itself (keys, file, lookups) is scalemm.tuned; this module plans and times.
"""
from __future__ import annotations

import datetime

import torch

from . import tuned


def expand_shapes(shapes=None, *, model=None, tokens=None) -> list[tuple[int, int, int]]:
    """(M, N, K) triples: `shapes` (an iterable of (M, N, K)) then every linear layer of `model` (a
    preset name, JSON path / text or dict: cutlass_kernels/configs/shapes.py) at each of `tokens`."""
    from .cutlass_kernels.configs import shapes as model_shapes
    out = []
    for s in shapes or ():
        try:
            M, N, K = s
        except (TypeError, ValueError):
            raise ValueError(f"a shape is (M, N, K), got {s!r}") from None
        out.append((M, N, K))
    if model is not None:
        out += model_shapes.model_gemm_shapes(model, tuple(tokens or model_shapes.DECODE_M + model_shapes.PREFILL_M))
    elif tokens is not None:
        raise ValueError("token counts are for a model: give model= (--model) too")
    for shape in out:
        _check_dims(("M", "N", "K"), shape)
    return list(dict.fromkeys(out))


def _check_dims(names, dims) -> None:
    for name, v in zip(names, dims):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r} in {tuple(dims)}")
    N, K = dims[-2:]
    if K % 16:
        raise ValueError(f"K = {K} must be a multiple of 16 (in {tuple(dims)})")
    if N % 8:
        raise ValueError(f"N = {N} must be a multiple of 8 (in {tuple(dims)})")


def expand_grouped(grouped=None) -> list[tuple[int, int, int, int]]:
    """(T, G, N, K) of grouped GEMMs to tune: T rows in all, spread evenly over G groups when timed."""
    out = []
    for s in grouped or ():
        try:
            T, G, N, K = s
        except (TypeError, ValueError):
            raise ValueError(f"a grouped shape is (T, G, N, K), got {s!r}") from None
        _check_dims(("T", "G", "N", "K"), (T, G, N, K))
        out.append((T, G, N, K))
    return list(dict.fromkeys(out))


def plan(shapes=(), *, grouped=(), fast_accum=(True, False), out_dtype=torch.bfloat16, arch: str = "sm90",
         num_sms: int | None = None, candidates=None) -> list[dict]:
    """What `tune` would time, without a GPU: one item per cache entry with its candidate configs, the
    heuristic's pick first. Dense shapes of one M bucket and N, K share an entry (the largest M of
    them is timed); grouped ones of one G, rows bucket, N, K likewise (the largest T)."""
    from .cutlass_kernels import configs
    module = configs.for_arch(arch)
    num_sms = num_sms or module.REFERENCE_SMS
    modes = (fast_accum,) if isinstance(fast_accum, bool) else tuple(fast_accum)
    items: dict[tuple, dict] = {}
    problems = [("gemm", s) for s in shapes] + [("grouped_gemm", g) for g in grouped]
    for op, dims in problems:
        for fa in modes:
            if op == "gemm":
                M, N, K = dims
                shape = tuned.gemm_shape(M, N, K)
                heuristic = module.default_config(M, N, K, fast_accum=fa, num_sms=num_sms)
                default = lambda: module.tuning_candidates(M, N, K, fast_accum=fa, num_sms=num_sms)  # noqa: E731
            else:
                T, G, N, K = dims
                shape = tuned.grouped_shape(T, G, N, K)
                heuristic = module.default_grouped_config(T, G, N, K, fast_accum=fa)
                default = lambda: module.grouped_tuning_candidates(T, G, N, K, fast_accum=fa)  # noqa: E731
            ident = (op, tuple(shape.items()), fa)
            if ident in items and items[ident]["dims"][0] >= dims[0]:
                continue
            if candidates is None:
                cands = default()
            else:
                cands = list(candidates(*dims, fa) if callable(candidates) else candidates)
            cands = [heuristic] + [c for c in cands if c != heuristic and module.usable(c, fast_accum=fa)
                                   and not (op == "grouped_gemm" and c.stream_k)]
            items[ident] = {"op": op, "dims": dims, "shape": shape, "fast_accum": fa, "out_dtype": out_dtype,
                            "heuristic": heuristic, "candidates": cands}
    return list(items.values())


def _e4m3(shape, g, device, chunk_elems=1 << 28):
    """Random e4m3 of `shape`, generated in chunks along the first dim (an fp32 randn of a large
    expert stack at once would take 4x its size)."""
    out = torch.empty(shape, dtype=torch.float8_e4m3fn, device=device)
    rows = max(1, chunk_elems // max(1, out[0].numel())) if out.dim() > 1 else out.shape[0]
    for r in range(0, shape[0], rows):
        part = out[r:r + rows]
        part.copy_((torch.randn(part.shape, device=device, generator=g) * 4).to(torch.float8_e4m3fn))
    return out


def _problem(item, device):
    """(call(cfg, i, out=None), copies, label) of one work item on fresh random operands: `call` runs the
    op with config `cfg` on the i-th of `copies` weight copies (together twice the L2)."""
    from .gemm import gemm
    from .grouped import grouped_gemm
    from .timing import l2_copies
    fa, out_dtype, dims = item["fast_accum"], item["out_dtype"], item["dims"]
    g = torch.Generator(device=device).manual_seed(sum(d * p for d, p in zip(dims, (7919, 31, 17, 3))))
    if item["op"] == "gemm":
        M, N, K = dims
        copies = l2_copies(N * K)
        a, bs = _e4m3((M, K), g, device), [_e4m3((N, K), g, device) for _ in range(copies)]
        sa, sb = torch.rand(M, device=device, generator=g) + 0.5, torch.rand(N, device=device, generator=g) + 0.5

        def call(cfg, i, out=None):
            return gemm(a, bs[i], sa, sb, out=out, out_dtype=out_dtype, fast_accum=fa, config=cfg)
        return call, copies, f"M={M:<6} N={N:<6} K={K:<6}"
    T, G, N, K = dims
    copies = l2_copies(G * N * K)
    a, ws = _e4m3((T, K), g, device), [_e4m3((G, N, K), g, device) for _ in range(copies)]
    sizes = torch.full((G,), T // G, dtype=torch.int64)
    sizes[:T % G] += 1  # T rows spread evenly
    offsets = torch.cumsum(sizes, 0).to(device=device, dtype=torch.int32)
    sa, sb = torch.rand(T, device=device, generator=g) + 0.5, torch.rand(G, N, device=device, generator=g) + 0.5

    def call(cfg, i, out=None):
        return grouped_gemm(a, ws[i], offsets, sa, sb, out=out, out_dtype=out_dtype, fast_accum=fa, config=cfg,
                            scale_a_per="token")
    return call, copies, f"grouped T={T} G={G} N={N} K={K}"


def _device_index(device) -> int:
    from .arch import _index
    return _index(device)


def _rel_err(x, ref) -> float:
    ref = ref.double()
    return float((x.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def tune(shapes=None, *, model=None, tokens=None, grouped=None, fast_accum=(True, False), out_dtype=torch.bfloat16,
         device=None, candidates=None, runtime_knobs: bool = True, min_gain: float = 1.01, jobs: int | None = None,
         save: bool = True, verbose: bool = True) -> list[dict]:
    """Time the candidate configs of the FP8 GEMMs for each shape on a CUDA device and store the winners
    in the tuned-config cache (see the module docstring), where scalemm.gemm / grouped_gemm find them.

    shapes: dense (M, N, K) triples; model / tokens: a model preset (name, JSON path or text, dict:
      cutlass_kernels/configs/shapes.py) expanded to its linear layers at each token count
      (default 1, 16, 32, 64, 128, 1024, 4096, 16384).
    grouped: (T, G, N, K) grouped (MoE) problems, T rows spread evenly over G groups when timed.
    fast_accum: a bool or both (default): each mode is its own entry.
    candidates: None (the architecture's `tuning_candidates` / `grouped_tuning_candidates`), a list
      of configs, or a callable (*dims, fast_accum) -> configs. The heuristic's pick is always timed.
    runtime_knobs: also time the fastest dense kernel's raster orders and swizzles when its tiles
      fill more than one wave. min_gain: a candidate must beat the heuristic by this factor to win
      (timing noise is about 1%); otherwise the entry stores the heuristic's config.
    jobs: parallel nvcc builds of the candidates (default: one per core). save: write the cache.
    Candidates that fail to build or run, or whose result differs from the heuristic's (relative
    error above 1e-2), are reported and skipped; an entry that fails is reported and left out.
    Returns one dict per entry (shape, winner, timings). Not during CUDA-graph capture.
    """
    from .arch import gpu_info, kernel_arch
    from .cutlass_kernels import configs
    from .gemm import _resolve_epilogue, bias_leaf, gemm_kernel_spec
    from .grouped import grouped_gemm_kernel_spec
    from .jit import build_many

    if not torch.cuda.is_available():
        raise RuntimeError("scalemm.tune needs a CUDA GPU (it times kernels); none is available")
    device = torch.device("cuda", _device_index(device))
    arch = kernel_arch(device)  # NotImplementedError on a GPU without kernels
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("scalemm.tune times kernels: call it outside CUDA-graph capture")
    module = configs.for_arch(arch)
    info, gpu = gpu_info(device), tuned.gpu_name(device)
    shapes = expand_shapes(shapes, model=model, tokens=tokens)
    grouped = expand_grouped(grouped)
    if not shapes and not grouped:
        raise ValueError("nothing to tune: give shapes (M, N, K), a model or grouped (T, G, N, K)")
    work = plan(shapes, grouped=grouped, fast_accum=fast_accum, out_dtype=out_dtype, arch=arch,
                num_sms=info.num_sms, candidates=candidates)
    def spec(op, cfg, fa):  # the default epilogue the timed calls (no bias) compile
        if op == "gemm":
            return gemm_kernel_spec(cfg.compiled(), fast_accum=fa, out_dtype=out_dtype,
                                    epilogue=_resolve_epilogue(None, out_dtype, bias=bias_leaf(False, fa, cfg)))[0]
        return grouped_gemm_kernel_spec(cfg.compiled(), fast_accum=fa, out_dtype=out_dtype,
                                        epilogue=_resolve_epilogue(None, out_dtype))[0]

    log = (lambda *a: print(*a, flush=True)) if verbose else (lambda *a: None)
    specs = list(dict.fromkeys(spec(it["op"], c, it["fast_accum"]) for it in work for c in it["candidates"]))
    log(f"[scalemm.tune] {gpu}, {arch}: {len(work)} entries, {len(specs)} candidate kernels")
    failed_specs = {s.name: e for s, e in build_many(specs, jobs=jobs, progress=verbose) if e}
    for name, err in failed_specs.items():
        log(f"[scalemm.tune] candidate {name} does not build, skipped: {err.splitlines()[0]}")

    results, new_entries, failures = [], {}, []
    with torch.cuda.device(device):
        for n, it in enumerate(work):
            mode = "fast" if it["fast_accum"] else "full"
            try:
                result = _tune_one(it, module, info, gpu, arch, lambda c, it=it: spec(it["op"], c, it["fast_accum"]),
                                   failed_specs, runtime_knobs, min_gain, device, log)
            except Exception as e:  # report and go on with the other entries
                log(f"[{n + 1}/{len(work)}] {it['op']} {it['dims']} {mode}: FAILED ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''})")
                failures.append({"op": it["op"], "dims": it["dims"], "fast_accum": it["fast_accum"],
                                 "error": f"{type(e).__name__}: {e}"})
                continue
            new_entries[result["key"]] = result.pop("entry")
            results.append(result)
            log(f"[{n + 1}/{len(work)}] {result['what']} {mode}: heuristic {result['heuristic']} "
                f"{result['heuristic_us']:.1f} us -> {result['label']} {result['us']:.1f} us "
                f"({result['speedup_over_heuristic']:.3f}x, {result['timed']} timed)")
    if save and new_entries:
        path = tuned.store(new_entries)
        log(f"[scalemm.tune] {len(new_entries)} entries written to {path}")
    if failures:
        log(f"[scalemm.tune] {len(failures)} entries failed (see above)")
    return results


def _tune_one(it, module, info, gpu, arch, spec, failed_specs, runtime_knobs, min_gain, device, log):
    """Time one entry's candidates together, interleaved (then, dense, the fastest one's run-time
    variants beside the heuristic's pick) on fresh operands rotated through L2; its result and entry."""
    from .timing import bench
    fa, heuristic = it["fast_accum"], it["heuristic"]
    call, copies, what = _problem(it, device)
    ref = call(heuristic, 0)
    out = torch.empty_like(ref)

    def checked(cfgs) -> dict:
        """{label: (config, fn)} of the configs that run this problem and agree with the heuristic."""
        fns = {}
        for cfg in cfgs:
            if cfg.label() in fns or spec(cfg).name in failed_specs:
                continue
            try:
                y = call(cfg, 0)
                torch.cuda.synchronize(device)
            except Exception as e:  # a candidate that cannot run this shape
                log(f"  {cfg.label()} fails at {what}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                continue
            err = _rel_err(y, ref)
            if not err <= 1e-2:
                log(f"  {cfg.label()} differs from the heuristic's result at {what} (relative error {err:.2e}): "
                    "skipped")
                continue
            fns[cfg.label()] = (cfg, (lambda c: lambda i: call(c, i, out))(cfg))
        return fns

    fns = checked(it["candidates"])
    times = bench({k: f for k, (_, f) in fns.items()}, copies)
    best = min(times, key=times.get)
    timed = len(times)
    if it["op"] == "gemm" and runtime_knobs and module.tile_count(fns[best][0], *it["dims"][:2]) > info.num_sms:
        stage2 = checked([heuristic, fns[best][0], *module.runtime_variants(fns[best][0])])
        times2 = bench({k: f for k, (_, f) in stage2.items()}, copies)
        fns.update(stage2)
        timed += len(times2) - len({heuristic.label(), best})
        times = {**times, **times2}  # the second stage's numbers are the ones compared
        best = min(times2, key=times2.get)
    h = heuristic.label()
    winner = best if times[h] / times[best] >= min_gain else h
    cfg = fns[winner][0]
    record = {"us": round(times[winner], 3), "heuristic": h, "heuristic_us": round(times[h], 3),
              "speedup_over_heuristic": round(times[h] / times[winner], 4), "tuned_shape": list(it["dims"]),
              "timed": timed, "date": datetime.datetime.now().isoformat(timespec="seconds")}
    key, entry = tuned.make_entry(it["op"], it["shape"], cfg, gpu=gpu, arch=arch, fast_accum=fa, out_dtype=it["out_dtype"],
                            **record)
    return {"key": key, "entry": entry, "op": it["op"], "dims": it["dims"], "what": what, "fast_accum": fa,
            "config": cfg, "label": cfg.label(), **record, "times": dict(sorted(times.items(), key=lambda kv: kv[1]))}


def format_entries(entries: dict) -> str:
    """A table of raw cache entries (python -m scalemm tune --show)."""
    lines = []
    for key, e in entries.items():
        f = e["fields"]
        shape = " ".join(f"{k}={v}" for k, v in f.items() if k not in tuned._FIELDS)
        gain = e.get("speedup_over_heuristic")
        lines.append(f"{f.get('gpu')} {f.get('arch')} scalemm {f.get('scalemm')} {f.get('op')} {f.get('dtypes')} "
                     f"{f.get('accum')}  {shape}: {e.get('label')}"
                     + (f" ({gain:.3f}x over {e.get('heuristic')})" if isinstance(gain, (int, float)) else ""))
    return "\n".join(lines)

