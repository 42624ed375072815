"""The toolchain: where nvcc and the CUTLASS headers are and what versions they are, the
driver's CUDA version, the target archs' nvcc flags, and the nvcc command and how it runs.

Everything here that changes the binary goes into a cache entry's key or name (see cache.py);
only the nvcc version needs the CUDA toolkit, so a cache can be used without one.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

# Our own headers: cutlass_kernels/include (installed as scalemm/cutlass_kernels/include).
KERNELS_DIR = Path(__file__).resolve().parent.parent / "cutlass_kernels"
if not KERNELS_DIR.is_dir():  # running from the source tree: py_api/ sits beside cutlass_kernels/
    KERNELS_DIR = Path(__file__).resolve().parents[2] / "cutlass_kernels"
INCLUDE_DIR = KERNELS_DIR / "include"
TEMPLATE_DIR = KERNELS_DIR / "templates"

# KernelSpec.arch -> nvcc code generation. The "a" targets are the arch-specific feature sets
# (wgmma/TMA multicast on sm_90a, tcgen05 on sm_100a) that CUTLASS's kernels for them need;
# their cubins run on exactly that architecture.
ARCHS = {
    "sm90a": ("-gencode=arch=compute_90a,code=sm_90a",),     # H100, H200
    "sm100a": ("-gencode=arch=compute_100a,code=sm_100a",),  # B200, GB200 (nvcc >= 12.8)
}
DEFAULT_ARCH = "sm90a"
ARCH_FLAGS = ARCHS[DEFAULT_ARCH]  # the default's flags, for callers of the old constant
BASE_FLAGS = (
    "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC", "-shared", "-cudart=static",
)


CUDA_HOME_FALLBACK = Path("/usr/local/cuda")  # where nvcc_path looks last


class ToolchainError(RuntimeError):
    pass


def arch_flags(arch: str) -> tuple[str, ...]:
    """nvcc's -gencode flags for a target arch name of `ARCHS`."""
    try:
        return ARCHS[arch]
    except KeyError:
        raise ValueError(f"unknown target arch {arch!r}: scalemm builds for {', '.join(ARCHS)}") from None


@functools.cache
def nvcc_path() -> str:
    """nvcc from $CUDA_HOME/bin, then $PATH, then /usr/local/cuda/bin."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
    which = shutil.which("nvcc")
    if which:
        candidates.append(Path(which))
    candidates.append(CUDA_HOME_FALLBACK / "bin" / "nvcc")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise ToolchainError(
        "nvcc not found: set CUDA_HOME to a CUDA toolkit (>= 12.4) or put nvcc on PATH")


@functools.cache
def nvcc_version() -> tuple[str, tuple[int, int]]:
    """(the 'release X.Y, VX.Y.Z' line, (major, minor))."""
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+)\.(\d+), (V[\d.]+)", out)
    if not m:
        raise ToolchainError(f"cannot parse `{nvcc_path()} --version`:\n{out}")
    return f"release {m[1]}.{m[2]}, {m[3]}", (int(m[1]), int(m[2]))


def driver_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the installed driver supports, or None where there is no driver.

    Asks cuda-python (cuda.bindings.driver); where it is missing or fails, asks libcuda itself.
    """
    version = _driver_version_cuda_python() or _driver_version_ctypes()
    if not version:
        return None
    return version // 1000, (version % 1000) // 10


def driver_description() -> str:
    """The driver's CUDA version for people to read: "12.8", or why there is none."""
    version = driver_cuda_version()
    return f"{version[0]}.{version[1]}" if version else "not available (no NVIDIA driver)"


def _driver_version_cuda_python() -> int | None:
    try:
        driver = importlib.import_module("cuda.bindings.driver")
        err, version = driver.cuDriverGetVersion()
    except Exception:  # not installed, or no libcuda to load (cuda-python raises its own error types)
        return None
    return int(version) if int(err) == 0 else None  # 0 is CUDA_SUCCESS


def _driver_version_ctypes() -> int | None:
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    v = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return None
    return v.value


def check_nvcc_against_driver() -> None:
    """Refuse an nvcc newer than the driver: its cubins would fail to load with a vague error."""
    drv = driver_cuda_version()
    if drv is None:
        return  # no driver here (a CPU build machine): compiling is still useful
    _, nv = nvcc_version()
    if nv > drv:
        raise ToolchainError(
            f"nvcc {nv[0]}.{nv[1]} ({nvcc_path()}) is newer than the driver's CUDA {drv[0]}.{drv[1]}: "
            "kernels it builds would not load. Point CUDA_HOME at a toolkit <= the driver's version "
            "or update the driver.")


@functools.cache
def cutlass_include_dirs() -> tuple[str, ...]:
    """CUTLASS headers shipped inside the nvidia-cutlass wheel (or $CUTLASS_PATH)."""
    roots = []
    if os.environ.get("CUTLASS_PATH"):
        roots.append(Path(os.environ["CUTLASS_PATH"]))
    # The nvidia-cutlass wheel ships the headers under cutlass_library/source. Locate it without
    # importing it: its Python layer needs packages we do not (and cuda-python < 13 quirks).
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        roots += [Path(p) / "source" for p in spec.submodule_search_locations]
    for root in roots:
        inc, util = root / "include", root / "tools" / "util" / "include"
        if (inc / "cutlass" / "cutlass.h").is_file():
            return (str(inc), str(util))
    raise ToolchainError(
        "CUTLASS headers not found: `pip install nvidia-cutlass==4.2.*` or set CUTLASS_PATH "
        "to a CUTLASS checkout")


@functools.cache
def cutlass_version() -> str:
    text = (Path(cutlass_include_dirs()[0]) / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{k} (\d+)", text)[1] for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def nvcc_command(source: Path, output: Path, use_cutlass: bool, extra_flags=(), arch: str = DEFAULT_ARCH) -> list[str]:
    includes = [f"-I{INCLUDE_DIR}"]
    if use_cutlass:
        includes += [f"-I{d}" for d in cutlass_include_dirs()]
    return [nvcc_path(), *BASE_FLAGS, *arch_flags(arch), *extra_flags, *includes, str(source), "-o", str(output)]


_running: set[subprocess.Popen] = set()  # nvcc processes of this process's builds
_running_lock = threading.Lock()


def run_nvcc(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run an nvcc command, capturing its output.

    nvcc runs in a process group of its own so that an interrupted build (Ctrl-C, an exception)
    can stop it together with the cicc, ptxas and host compiler it started, instead of leaving
    them running; its intermediate files go to a private TMPDIR that is removed afterwards (a
    stopped nvcc leaves them behind). Only a process killed outright (SIGKILL) still leaves nvcc
    to finish on its own.
    """
    with tempfile.TemporaryDirectory(prefix="scalemm-nvcc-") as scratch:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env={**os.environ, "TMPDIR": scratch})
        with _running_lock:
            _running.add(proc)
        try:
            out, err = proc.communicate()
        except BaseException:
            _stop(proc)
            raise
        finally:
            with _running_lock:
                _running.discard(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def stop_running_nvcc() -> None:
    """Stop every nvcc this process started (a Ctrl-C reaches only the main thread; builds run in others)."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM nvcc's process group, then SIGKILL what is left of it after a grace period."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)  # the group outlives its leader while cicc or ptxas run
        except ProcessLookupError:
            break
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
