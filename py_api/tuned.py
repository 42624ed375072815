"""The persistent cache of tuned GEMM configs: keys, the JSON file, lookups.

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


scalemm.tuning fills it (`scalemm.tune`); scalemm.gemm and scalemm.grouped_gemm read it through
`lookup` / `lookup_grouped`. Modules that memoize plans built on a lookup register a function with
`on_reload`, so a new entry reaches them.
"""
from __future__ import annotations

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


_on_reload: list = []  # functions that forget what was built on earlier lookups (gemm's plans)


def on_reload(forget) -> None:
    """Call `forget()` whenever the table is reloaded (a store, or `reload`)."""
    _on_reload.append(forget)


def reload() -> None:
    """Forget the loaded table (the next lookup reads the file again) and the GEMM plans built on it."""
    global _table, _table_path
    with _lock:
        _table, _table_path = None, None
        _lookup.cache_clear()
    _warned.clear()
    for forget in _on_reload:
        forget()


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
