"""Per-shape tuning of the FP8 GEMMs, and the persistent cache of the winners.

`scalemm.tune(shapes, grouped=...)` (or `python -m scalemm tune`) times, on the current GPU, the
candidate configs of its architecture (cutlass_kernels/configs/<arch>.py: `tuning_candidates`,
then the fastest one's run-time tile orders; `grouped_tuning_candidates`) against the heuristic's
pick, and stores the winner of each shape in a JSON file under the JIT cache:
$SCALEMM_CACHE_DIR/tuning/tuned.json. scalemm.gemm and scalemm.grouped_gemm look their shape up
there (`lookup`, `lookup_grouped`: dictionary reads, the file is loaded once per process) before
they fall back to the heuristic; an explicit `config=` wins over both. Nothing is ever tuned inside
a GEMM call, so calls stay cheap and CUDA-graph capturable.

An entry is keyed by everything that decides which kernel is fastest and that scalemm can know
without timing (`entry_key`):
  gpu       the device name and SM count ("NVIDIA H100 80GB HBM3 (132 SMs)")
  arch      the kernel architecture ("sm90")
  scalemm   the version (kernels and heuristics change between versions)
  op        "gemm" (dense FP8) or "grouped_gemm" (grouped FP8, fprop)
  dtypes    operand and output types ("e4m3->bf16")
  accum     "fast" or "full" (FP8 fast accumulation on or off: different kernels)
  m_bucket  (gemm) M rounded up to a power of two: a shape tuned at M serves every M' with the same
            bucket (M' in (bucket/2, bucket]); decode sizes get buckets of their own (1, 2, 4, ...)
  G, rows_bucket  (grouped_gemm) the groups, and the bucket of the mean rows per group ceil(T / G),
            which is all the host knows of the routing (the offsets stay on the device)
  N, K      exact (the weight's shape: a model has few of them)
The epilogue (bias, activation, trees) is not in the key: the mainloop dominates, and every config
runs every epilogue.

The file is human-readable JSON ({"format", "about", "entries": {key: entry}}; each entry holds
its key's fields, the config, and the timings that chose it). Writers take a file lock
(scalemm.jit.cache.locked), re-read the file, merge and publish it by an atomic rename, so
concurrent processes tuning different shapes all land. A file that does not parse is reported
with a warning and ignored by lookups; the next write replaces it. SCALEMM_TUNED=0 turns the
lookups off (the heuristic alone).
"""
from __future__ import annotations

import datetime
import functools
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from .jit import cache as jit_cache
from .jit.cache import cache_dir

FORMAT = 1
FILE_NAME = "tuned.json"
_LOCK_NAME = "tuned-configs"
_ABOUT = ("scalemm tuned GEMM configs (python -m scalemm tune): scalemm.gemm runs the config of the entry whose key "
          "matches the GPU, architecture, scalemm version, op, dtypes, accumulation mode, power-of-two M bucket and "
          "exact N, K of a call; it falls back to its heuristic otherwise. Safe to delete.")
_FIELDS = ("gpu", "arch", "scalemm", "op", "dtypes", "accum")

# the loaded table: {key: config}, from the file at _table_path (reloaded when the cache dir changes)
_table: dict | None = None
_table_path: Path | None = None
_table_env: str | None = None  # SCALEMM_CACHE_DIR when it was loaded
_warned: set[str] = set()
_lock = threading.Lock()


# ---------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------

def cache_path() -> Path:
    """The tuned-config file: $SCALEMM_CACHE_DIR/tuning/tuned.json (default ~/.cache/scalemm)."""
    return cache_dir() / "tuning" / FILE_NAME


def m_bucket(M: int) -> int:
    """M rounded up to a power of two (1, 2, 4, ..., 64, 128, ...): the shape bucket of the tokens."""
    if isinstance(M, bool) or not isinstance(M, int) or M < 1:
        raise ValueError(f"M must be a positive int, got {M!r}")
    return 1 << (M - 1).bit_length()


def gemm_shape(M: int, N: int, K: int) -> dict:
    """The shape fields of a dense GEMM's key: M's bucket, exact N and K."""
    return {"m_bucket": m_bucket(M), "N": int(N), "K": int(K)}


def grouped_shape(T: int, G: int, N: int, K: int) -> dict:
    """The shape fields of a grouped GEMM's key: the number of groups, the bucket of the mean rows per
    group (ceil(T / G), what the grouped heuristic decides by), exact N and K."""
    return {"G": int(G), "rows_bucket": m_bucket(max(1, -(-T // max(G, 1)))), "N": int(N), "K": int(K)}


def gpu_name(device=None) -> str:
    """The `gpu` field of the keys: the device's name and SM count (a MIG slice names its own)."""
    from .arch import gpu_info
    info = gpu_info(device)
    return f"{info.name} ({info.num_sms} SMs)"


def _dtype(dtype) -> str:
    from .epilogues import dtype_name
    return dtype_name(dtype)


def key_fields(op: str, shape: dict, *, gpu: str, arch: str, fast_accum: bool, out_dtype,
               in_dtype: str = "e4m3", version: str | None = None) -> dict:
    """The fields of an entry's key, in order."""
    if version is None:
        from . import __version__ as version
    return {"gpu": gpu, "arch": arch, "scalemm": version, "op": op, "dtypes": f"{in_dtype}->{_dtype(out_dtype)}",
            "accum": "fast" if fast_accum else "full", **shape}


def entry_key(fields: dict) -> str:
    """The key string of an entry: its fields as 'name=value' joined by ' | ' (readable in the file)."""
    return " | ".join(f"{k}={v}" for k, v in fields.items())


# ---------------------------------------------------------------------------------------
# the file
# ---------------------------------------------------------------------------------------

def _warn(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _read_entries(path: Path, action: str) -> dict:
    """{key: raw entry} of the file at `path` ({} when missing); a file or entry that does not parse
    is reported (once per process and message) with `action`, and left out."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        _warn(f"scalemm: the tuned-config cache {path} cannot be read ({e.strerror}); {action}")
        return {}
    try:
        data = json.loads(text)  # bytes: a non-UTF-8 file is a ValueError here too
        if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
            raise ValueError("no 'entries' object")
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this scalemm reads format {FORMAT}")
    except ValueError as e:
        _warn(f"scalemm: the tuned-config cache {path} is not valid ({e}); {action}")
        return {}
    entries = {}
    for key, entry in data["entries"].items():
        if isinstance(entry, dict) and isinstance(entry.get("fields"), dict) and isinstance(entry.get("config"), dict) \
                and entry_key(entry["fields"]) == key:
            entries[key] = entry
        else:
            _warn(f"scalemm: the tuned-config cache {path} has a malformed entry {key!r}; ignoring it")
    return entries


def _config_of(entry: dict):
    """The config object of a raw entry (its architecture's GemmConfig), or None if it is not usable here."""
    from .cutlass_kernels import configs
    try:
        module = configs.for_arch(entry["fields"].get("arch"))
        return module.GemmConfig(**entry["config"])
    except (NotImplementedError, TypeError, ValueError):
        return None


def _load() -> dict:
    """{key: config} of the cache file, loaded once per process (and again if SCALEMM_CACHE_DIR changes)."""
    global _table, _table_path, _table_env
    env = os.environ.get("SCALEMM_CACHE_DIR")
    table = _table
    if table is not None and _table_env == env:  # the common case: no file system access
        return table
    with _lock:
        path = cache_path()
        if _table is not None and _table_path == path:
            _table_env = env
            return _table
        table = {}
        for key, entry in _read_entries(path, "ignoring it (the next `scalemm.tune` rewrites it)").items():
            config = _config_of(entry)
            if config is None:
                if entry["fields"].get("arch") in _known_archs():
                    _warn(f"scalemm: the tuned-config cache {path} has an unusable config in {key!r}; ignoring it")
                continue
            table[key] = config
        _lookup.cache_clear()
        _table, _table_path, _table_env = table, path, env
        return table


def _known_archs():
    from .cutlass_kernels import configs
    return configs.archs()


def reload() -> None:
    """Forget the loaded table (the next lookup reads the file again) and the GEMM plans built on it."""
    global _table, _table_path
    with _lock:
        _table, _table_path = None, None
        _lookup.cache_clear()
    _warned.clear()
    from .gemm import _plan  # (`from . import gemm` would give the function scalemm.gemm)
    _plan.cache_clear()


def enabled() -> bool:
    """Whether lookups use the cache (SCALEMM_TUNED=0 turns them off)."""
    return os.environ.get("SCALEMM_TUNED", "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=4096)
def _lookup(op: str, shape: tuple, fast_accum: bool, out_dtype, device):
    from .arch import kernel_arch
    fields = key_fields(op, dict(shape), gpu=gpu_name(device), arch=kernel_arch(device), fast_accum=fast_accum,
                        out_dtype=out_dtype)
    return _table.get(entry_key(fields)) if _table else None


def lookup(op: str, M: int, N: int, K: int, *, fast_accum: bool, out_dtype, device=None):
    """The tuned config of a dense GEMM ("gemm") on a CUDA device, or None (no entry, or lookups off)."""
    if not enabled() or not _load():
        return None
    return _lookup(op, tuple(gemm_shape(M, N, K).items()), bool(fast_accum), out_dtype, _cuda(device))


def lookup_grouped(T: int, G: int, N: int, K: int, *, fast_accum: bool, out_dtype, device=None):
    """The tuned config of a grouped FP8 GEMM ("grouped_gemm"), or None. Memoized per key: cheap per call."""
    if not enabled() or not _load():
        return None
    return _lookup("grouped_gemm", tuple(grouped_shape(T, G, N, K).items()), bool(fast_accum), out_dtype,
                   _cuda(device))


def _cuda(device) -> torch.device:
    from .arch import _index
    return torch.device("cuda", _index(device))


def store(entries: dict) -> Path:
    """Merge {key: entry} into the cache file under its lock and publish it atomically; returns its path.
    A file that does not parse is replaced (with a warning). Lookups of this process see the new
    entries at once."""
    path = cache_path()
    for key, entry in entries.items():
        if entry_key(entry["fields"]) != key:
            raise ValueError(f"entry key {key!r} does not match its fields")
    with jit_cache.locked(cache_dir(), _LOCK_NAME):
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = _read_entries(path, "rebuilding it")
        merged.update(entries)
        data = {"format": FORMAT, "about": _ABOUT, "entries": dict(sorted(merged.items()))}
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~jit_cache._umask())  # shareable, like the kernels
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    reload()
    return path


def entries() -> dict:
    """{key: raw entry} of the cache file as it is now (for `python -m scalemm tune --show`)."""
    return _read_entries(cache_path(), "ignoring it")


def make_entry(op: str, shape: dict, config, *, gpu: str, arch: str, fast_accum: bool, out_dtype,
               **record) -> tuple[str, dict]:
    """(key, entry) for a config chosen for `shape` (gemm_shape(M, N, K) for op "gemm",
    grouped_shape(T, G, N, K) for "grouped_gemm"); `record` adds the timings."""
    from dataclasses import asdict
    fields = key_fields(op, shape, gpu=gpu, arch=arch, fast_accum=fast_accum, out_dtype=out_dtype)
    entry = {"fields": fields, "config": asdict(config), "label": config.label(), **record}
    return entry_key(fields), entry


# ---------------------------------------------------------------------------------------
# tuning
# ---------------------------------------------------------------------------------------

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
                shape = gemm_shape(M, N, K)
                heuristic = module.default_config(M, N, K, fast_accum=fa, num_sms=num_sms)
                default = lambda: module.tuning_candidates(M, N, K, fast_accum=fa, num_sms=num_sms)  # noqa: E731
            else:
                T, G, N, K = dims
                shape = grouped_shape(T, G, N, K)
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
    from .gemm import _resolve_epilogue, gemm_kernel_spec
    from .grouped import grouped_gemm_kernel_spec
    from .jit import build_many

    if not torch.cuda.is_available():
        raise RuntimeError("scalemm.tune needs a CUDA GPU (it times kernels); none is available")
    device = torch.device("cuda", _device_index(device))
    arch = kernel_arch(device)  # NotImplementedError on a GPU without kernels
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("scalemm.tune times kernels: call it outside CUDA-graph capture")
    module = configs.for_arch(arch)
    info, gpu = gpu_info(device), gpu_name(device)
    shapes = expand_shapes(shapes, model=model, tokens=tokens)
    grouped = expand_grouped(grouped)
    if not shapes and not grouped:
        raise ValueError("nothing to tune: give shapes (M, N, K), a model or grouped (T, G, N, K)")
    work = plan(shapes, grouped=grouped, fast_accum=fast_accum, out_dtype=out_dtype, arch=arch,
                num_sms=info.num_sms, candidates=candidates)
    tree = _resolve_epilogue(None, out_dtype)  # the default epilogue the ops compile

    def spec(op, cfg, fa):
        make = gemm_kernel_spec if op == "gemm" else grouped_gemm_kernel_spec
        return make(cfg.compiled(), fast_accum=fa, out_dtype=out_dtype, epilogue=tree)[0]

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
        path = store(new_entries)
        log(f"[scalemm.tune] {len(new_entries)} entries written to {path}")
    if failures:
        log(f"[scalemm.tune] {len(failures)} entries failed (see above)")
    return results


def _tune_one(it, module, info, gpu, arch, spec, failed_specs, runtime_knobs, min_gain, device, log):
    """Time one entry's candidates together, round-robin (then, dense, the fastest one's run-time
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
    if it["op"] == "gemm" and runtime_knobs and module.tiles(fns[best][0], *it["dims"][:2]) > info.num_sms:
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
    key, entry = make_entry(it["op"], it["shape"], cfg, gpu=gpu, arch=arch, fast_accum=fa, out_dtype=it["out_dtype"],
                            **record)
    return {"key": key, "entry": entry, "op": it["op"], "dims": it["dims"], "what": what, "fast_accum": fa,
            "config": cfg, "label": cfg.label(), **record, "times": dict(sorted(times.items(), key=lambda kv: kv[1]))}


def format_entries(entries: dict) -> str:
    """A table of raw cache entries (python -m scalemm tune --show)."""
    lines = []
    for key, e in entries.items():
        f = e["fields"]
        shape = " ".join(f"{k}={v}" for k, v in f.items() if k not in _FIELDS)
        gain = e.get("speedup_over_heuristic")
        lines.append(f"{f.get('gpu')} {f.get('arch')} scalemm {f.get('scalemm')} {f.get('op')} {f.get('dtypes')} "
                     f"{f.get('accum')}  {shape}: {e.get('label')}"
                     + (f" ({gain:.3f}x over {e.get('heuristic')})" if isinstance(gain, (int, float)) else ""))
    return "\n".join(lines)

