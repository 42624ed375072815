"""scalemm's JIT: kernel spec -> rendered source -> nvcc -> cache -> ctypes -> launch.

One entry point, `build(spec)`. A spec names a template under cutlass_kernels/templates and
the values of its `{{PLACEHOLDERS}}`. The result is a shared library with `extern "C"`
launchers (CUTLASS Arguments are built on the C++ side; Python passes one parameter struct of
cutlass_kernels/include/scalemm/abi.h by pointer, see scalemm.abi). Launchers return 0, a
cudaError_t, abi.kCutlassStatusBase + cutlass::Status, or a scalemm code (abi.h's LaunchCode);
`Kernel.function` turns nonzero into an error.

Files: toolchain.py finds nvcc, CUTLASS and the driver, maps target archs to nvcc flags and
runs nvcc; cache.py says where an entry lives, what its key hashes, which entry a process uses
with and without nvcc, and how entries are checked, locked, published and cleaned up; this
module ties them together: build, load, rebuild what is broken. Builds run in a temp dir under
a file lock and are published by a rename, so concurrent processes are safe.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from . import cache, toolchain
from .cache import SCALEMM_JIT_VERSION, CacheError, cache_dir, cache_key
from .toolchain import ToolchainError

__all__ = ["KernelSpec", "Kernel", "BuildError", "KernelError", "CacheError", "build", "build_many", "cache_dir",
           "is_cached", "ptr", "i64", "i32", "f32", "ToolchainError"]

_PLACEHOLDER = re.compile(r"\{\{[A-Z][A-Z0-9_]*\}\}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}")  # a kernel's name is part of its cache folder's
ptr, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float


@dataclass(frozen=True)
class KernelSpec:
    """What to build. `params` fill the template's {{NAME}} placeholders; `arch` is the target
    (a key of toolchain.ARCHS: "sm90a", "sm100a")."""
    name: str
    template: str
    params: Mapping[str, str] = field(default_factory=dict)
    cutlass: bool = True
    extra_flags: tuple[str, ...] = ()
    arch: str = toolchain.DEFAULT_ARCH

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"kernel name {self.name!r} names its cache folder: use at most 120 ASCII letters, "
                             "digits, '_', '-' and '.', not starting with '.' or '-'")
        try:
            toolchain.arch_flags(self.arch)
        except ValueError as e:
            raise ValueError(f"kernel {self.name!r}: {e}") from None
        object.__setattr__(self, "params", tuple(sorted((str(k), str(v)) for k, v in dict(self.params).items())))

    def render(self) -> str:
        path = toolchain.TEMPLATE_DIR / self.template
        if not path.is_file():
            raise FileNotFoundError(f"kernel template {self.template!r} not found in {toolchain.TEMPLATE_DIR}")
        text = path.read_text()
        for key, value in self.params:
            text = text.replace("{{" + key + "}}", value)
        left = _PLACEHOLDER.search(text)
        if left:
            raise ValueError(f"{self.name}: template {self.template} has an unfilled placeholder {left[0]!r}")
        return text


class BuildError(RuntimeError):
    pass


class KernelError(RuntimeError):
    pass


class Kernel:
    """A loaded shared library. `function(name, argtypes)` gives a checked callable."""

    def __init__(self, spec: KernelSpec, path: Path):
        self.spec, self.path = spec, path
        self.lib = ctypes.CDLL(str(path))
        self._functions: dict[str, object] = {}

    def function(self, name: str, argtypes: Sequence):
        if name in self._functions:
            return self._functions[name]
        try:
            cfn = getattr(self.lib, name)
        except AttributeError:
            raise KernelError(f"{self.spec.name}: {self.path} has no launcher {name!r}") from None
        cfn.argtypes, cfn.restype = list(argtypes), ctypes.c_int
        kernel_name = self.spec.name

        def call(*args):
            rc = cfn(*args)
            if rc != 0:
                raise KernelError(f"{kernel_name}.{name} failed: {describe_status(rc)}")

        self._functions[name] = call
        return call


def describe_status(rc: int) -> str:
    """A launcher's return code (abi.h's LaunchCode rules) in words."""
    from .. import abi
    if rc < abi.kCutlassStatusBase:
        try:
            import torch  # cudaGetErrorName through torch keeps us free of another CUDA binding
            return f"CUDA error {rc} ({torch.cuda.cudart().cudaGetErrorString(rc)})"
        except Exception:
            return f"CUDA error {rc}"
    codes = {abi.kWorkspaceTooSmall: "workspace too small",
             abi.kCannotImplement: "CUTLASS can_implement refused the problem: shape or alignment",
             abi.kBadArgument: "bad argument"}
    if rc in codes:
        return f"scalemm launcher code {rc} ({codes[rc]})"
    status = rc - abi.kCutlassStatusBase
    if status < len(_CUTLASS_STATUS):
        return f"CUTLASS status {status} ({_CUTLASS_STATUS[status]})"
    return f"launcher code {rc} (unknown)"


# cutlass::Status, in the order of cutlass/cutlass.h
_CUTLASS_STATUS = ("success", "misaligned operand", "invalid data type", "invalid layout", "invalid problem",
                   "not supported", "workspace null", "internal error", "arch mismatch", "insufficient driver",
                   "memory allocation")


_loaded: dict[str, Kernel] = {}   # entry folder -> the loaded kernel
_verified: dict[str, dict] = {}   # entry folder -> its meta.json, once kernel.so matched its sha256
_warned: set[str] = set()         # entries already reported as unusable
_loaded_lock = threading.Lock()


def _reset_process_state() -> None:
    """Forget what this process loaded, verified and warned about (tests: act like a new process)."""
    with _loaded_lock:
        _loaded.clear()
        _verified.clear()
        _warned.clear()


def _nvcc_release() -> str | None:
    """nvcc's version line, or None where there is no CUDA toolkit (then only the cache serves)."""
    try:
        return toolchain.nvcc_version()[0]
    except ToolchainError:
        return None


def _prebuilt_entry(spec: KernelSpec, key: str) -> Path:
    """Without nvcc: the entry of the newest nvcc the driver supports (the rule in cache.py)."""
    driver = toolchain.driver_cuda_version()
    too_new = []
    for entry in cache.entries_of_any_nvcc(cache_dir(), spec.name, key):
        meta, problem = _verify(entry, key)
        if problem:
            _warn_unusable(spec, entry, problem, "skipping it: no nvcc here to rebuild it")
            continue
        needs = tuple(meta.get("nvcc_version") or (0, 0))
        if driver and needs > driver:
            too_new.append(f"{entry.name} needs CUDA {needs[0]}.{needs[1]}")
            continue
        return entry
    why = (f"; the driver supports CUDA {driver[0]}.{driver[1]} and {', '.join(too_new)}" if too_new else "")
    raise ToolchainError(
        f"kernel {spec.name!r} is not in the JIT cache {cache_dir()} for this driver{why}, and nvcc is not found "
        "to build it: set CUDA_HOME to a CUDA toolkit, or prebuild the kernels with `python -m scalemm build` "
        "where one is and point SCALEMM_CACHE_DIR at that cache")


def _verify(entry: Path, key: str) -> tuple[dict | None, str | None]:
    """cache.check_entry, hashing kernel.so once per process and entry."""
    meta = _verified.get(str(entry))
    if meta is not None:
        return meta, None
    meta, problem = cache.check_entry(entry, key)
    if meta is not None:
        _verified[str(entry)] = meta
    return meta, problem


def _warn_unusable(spec: KernelSpec, entry: Path, problem: str, action: str = "rebuilding it") -> None:
    if problem != cache.MISSING and str(entry) not in _warned:
        _warned.add(str(entry))
        warnings.warn(f"scalemm JIT: the cached kernel {spec.name!r} at {entry} is unusable ({problem}); {action}",
                      RuntimeWarning, stacklevel=3)


def is_cached(spec: KernelSpec) -> bool:
    """Whether `spec` has a usable cache entry (checked as `build` checks it, without loading it)."""
    key = cache_key(spec, spec.render())
    nvcc = _nvcc_release()
    if nvcc is None:
        try:
            _prebuilt_entry(spec, key)
            return True
        except ToolchainError:
            return False
    entry = cache.entry_dir(cache_dir(), spec.name, key, nvcc)
    _, problem = _verify(entry, key)
    if problem:
        _warn_unusable(spec, entry, problem)
    return problem is None


def build(spec: KernelSpec, *, load: bool = True, verbose: bool = False) -> Kernel | Path:
    """Compile `spec` (or take it from the cache) and load it. With load=False return the .so path.

    A cache entry that is incomplete, does not match its recorded sha256 or does not load is
    rebuilt (with one warning per entry). Without nvcc, kernels come from the cache only (see
    cache.py for which entry a process uses).
    """
    source = spec.render()
    key = cache_key(spec, source)
    nvcc = _nvcc_release()
    entry = cache.entry_dir(cache_dir(), spec.name, key, nvcc) if nvcc else _prebuilt_entry(spec, key)
    so = entry / "kernel.so"
    with _loaded_lock:
        if load and str(entry) in _loaded:
            return _loaded[str(entry)]
    meta, problem = _verify(entry, key)
    kernel = None
    if problem is None and load:
        try:
            kernel = Kernel(spec, so)
        except OSError as e:  # dlopen refused it: a different machine's file, or damage the hash missed
            problem = f"kernel.so does not load: {e}"
            _verified.pop(str(entry), None)
    if problem is not None:
        if nvcc is None:
            raise ToolchainError(f"the cached kernel {spec.name!r} at {entry} is unusable ({problem}), and nvcc is "
                                 "not found to rebuild it: set CUDA_HOME to a CUDA toolkit")
        _warn_unusable(spec, entry, problem)
        _build_locked(spec, source, key, entry, verbose, unusable_build=meta and meta.get("build_id"))
        if load:
            try:
                kernel = Kernel(spec, so)
            except OSError as e:
                raise KernelError(f"kernel {spec.name!r} was rebuilt but {so} still does not load: {e}\n"
                                  f"log: {entry / 'build.log'}") from None
    if not load:
        return so
    with _loaded_lock:
        return _loaded.setdefault(str(entry), kernel)


def _build_locked(spec: KernelSpec, source: str, key: str, entry: Path, verbose: bool,
                  unusable_build: str | None = None) -> None:
    """Build `spec` into `entry` under its file lock, unless another process did while we waited.

    `unusable_build` is the build_id of an entry that verified but did not load: it must be
    replaced even though it still verifies.
    """
    root = cache_dir()
    with cache.locked(root, f"{spec.name}-{key}"):
        cache.remove_stale_temps(root)
        meta, _ = cache.check_entry(entry, key)  # hash again: another process may have replaced it
        if meta is not None and meta.get("build_id") != unusable_build:
            _verified[str(entry)] = meta
            return
        toolchain.check_nvcc_against_driver()
        tmp = cache.new_temp(root, spec.name)
        try:
            meta = _compile(spec, source, key, tmp, root / "failed" / entry.name, verbose)
            cache.publish(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when published or moved to failed/
        _verified[str(entry)] = meta


def _compile(spec: KernelSpec, source: str, key: str, tmp: Path, failed: Path, verbose: bool) -> dict:
    """nvcc in `tmp`; writes build.log and meta.json there. A failure moves `tmp` to `failed`."""
    src, out, log = tmp / "source.cu", tmp / "kernel.so", tmp / "build.log"
    src.write_text(source)
    cmd = toolchain.nvcc_command(src, out, spec.cutlass, spec.extra_flags, spec.arch)
    t0 = time.time()
    if verbose:
        print(f"[scalemm.jit] building {spec.name} ...", flush=True)
    proc = toolchain.run_nvcc(cmd)
    log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.is_file():
        cache.make_shareable(tmp)  # the next build, maybe a teammate's, replaces it
        shutil.rmtree(failed, ignore_errors=True)
        failed.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), failed)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        repro = toolchain.nvcc_command(failed / "source.cu", failed / "kernel.so", spec.cutlass, spec.extra_flags,
                                       spec.arch)
        raise BuildError(f"nvcc failed to build kernel {spec.name!r} (template {spec.template}).\n"
                         f"log: {failed / 'build.log'}\nreproduce: cd {failed} && {' '.join(repro)}\n"
                         f"--- last lines ---\n{tail}")
    release, version = toolchain.nvcc_version()
    meta = {"name": spec.name, "template": spec.template, "params": dict(spec.params), "arch": spec.arch,
            "key": key, "sha256": cache.file_sha256(out), "build_id": uuid.uuid4().hex,
            "nvcc": release, "nvcc_version": list(version), "command": cmd,
            "build_seconds": round(time.time() - t0, 1), "cutlass": toolchain.cutlass_version() if spec.cutlass else None}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def build_many(specs, jobs: int | None = None, progress: bool = True) -> list[tuple[KernelSpec, str | None]]:
    """Compile many specs in parallel (nvcc processes), skipping cached ones. Returns (spec, error)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed
    specs = list(dict.fromkeys(specs))
    todo = [s for s in specs if not is_cached(s)]
    jobs = jobs or max(1, min(len(todo), os.cpu_count() or 1))
    results, done, t0 = [], 0, time.time()
    if progress:
        print(f"[scalemm] {len(specs)} kernels, {len(specs) - len(todo)} cached, building {len(todo)} with {jobs} jobs",
              flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(build, s, load=False): s for s in todo}
        try:
            for f in as_completed(futures):
                done += 1
                err = None
                try:
                    f.result()
                except Exception as e:  # report and keep building the rest
                    err = str(e)
                results.append((futures[f], err))
                if progress:
                    bar = "#" * (30 * done // len(todo))
                    print(f"\r[{bar:<30}] {done}/{len(todo)} {time.time() - t0:5.0f}s {futures[f].name[:60]:<60}"
                          + (" FAILED" if err else ""), end="\n" if err or done == len(todo) else "", flush=True)
        except BaseException:  # Ctrl-C reaches this thread only: drop the queue and stop the running nvccs
            pool.shutdown(wait=False, cancel_futures=True)
            toolchain.stop_running_nvcc()
            raise
    return results


class _NotBuilt(Exception):
    """Raised in a prebuild's dry run where a call would compile a kernel (prebuild_calls)."""


PREBUILD_MODULES = ("gemm", "gemm_nvfp4", "grouped", "quantize", "quantize_grouped")


def prebuild_calls(calls, modules=PREBUILD_MODULES, jobs: int | None = None, rounds: int = 4) -> list[str]:
    """Compile in parallel every kernel that `calls` (callables, e.g. benchmark contenders or test cases) launch: each
    call runs with the scalemm `modules`' `build` recording the kernels not yet cached instead of compiling them (the
    call stops there), the recorded ones are built with build_many, and this repeats (a call's second kernel shows
    once its first is built) until nothing is missing or after `rounds` rounds. A call's other exceptions are
    ignored: the real run reports them. Returns the names of the kernels that failed to build."""
    import importlib
    mods = [importlib.import_module(f"scalemm.{m}") for m in modules]
    failed = []
    for _ in range(rounds):
        missing = {}

        def record(spec, **kw):
            if is_cached(spec):
                return build(spec, **kw)
            missing[spec.name] = spec
            raise _NotBuilt(spec.name)
        saved = [m.build for m in mods]
        try:
            for m in mods:
                m.build = record
            for call in calls:
                try:
                    call()
                except Exception:  # _NotBuilt, or what the real run will report
                    pass
        finally:
            for m, b in zip(mods, saved):
                m.build = b
        if not missing:
            break
        failed += [s.name for s, e in build_many(list(missing.values()), jobs=jobs or os.cpu_count()) if e]
        if failed:
            break
    return failed

