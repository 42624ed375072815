"""The kernel cache: where an entry lives, what its name hashes, how it is checked, locked,
published and cleaned up.

Layout: $SCALEMM_CACHE_DIR (default ~/.cache/scalemm)/
  kernels/<name>-<key>-nvcc<V>/  kernel.so, source.cu, build.log, meta.json (with kernel.so's sha256)
  kernels/.tmp-<pid>@<host>@<name>-*/  a build in progress (or an entry being replaced)
  locks/<name>-<key>.lock        one file lock per kernel, held while building it
  failed/<name>-<key>-nvcc<V>/   the last failed build: source, log, command

Which entry a process uses (the cache-key rule):
- <key> hashes everything that changes the binary and can be known without a CUDA toolkit:
  the rendered source, every scalemm header it includes, the flags and target arch, scalemm's
  version, and for CUTLASS kernels the CUTLASS version. That is read from the nvidia-cutlass
  wheel's headers, a dependency of scalemm, so a deployment image has it without the toolkit.
  The nvcc version is the entry's suffix <V> (13.0.88), and is recorded in meta.json.
- With nvcc found, a process uses only entries that this nvcc built and builds the missing ones
  with it. Changing the toolkit rebuilds everything, so one process never mixes kernels from the
  compiler it builds with and from another one (say an older one whose code-generation bug the
  upgrade fixed), and machines with different toolkits can share one cache without rebuilding
  over each other's entries.
- Without nvcc (a deployment image with a prebuilt cache) nothing can be built, so the process
  takes, per kernel, the entry of the newest nvcc whose CUDA version the driver supports. Kernels
  from two toolkits may then meet in one process; that is safe because each kernel.so is
  self-contained (static cudart, its own cubin) and only needs a driver as new as its nvcc.

An entry is usable when its meta.json parses, names its key and records the sha256 of its
kernel.so; anything else (a killed copy, a full disk, a hand edit) is treated as missing.

A cache may be shared by a team: published files get the permissions the umask allows (not
mkdtemp's 0700), and lock files are opened read-only, which is all flock needs.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

from . import toolchain

SCALEMM_JIT_VERSION = "2"  # bump when the build recipe changes in a way the key cannot see

STALE_TEMP_SECONDS = 24 * 3600  # a build takes minutes: a day-old temp folder is abandoned

_INCLUDE = re.compile(r'^\s*#\s*include\s*"(scalemm/[^"]+)"', re.M)


class CacheError(RuntimeError):
    """The cache folder cannot be written."""


def cache_dir() -> Path:
    return Path(os.environ.get("SCALEMM_CACHE_DIR") or Path.home() / ".cache" / "scalemm")


def _not_writable(root: Path, e: OSError) -> CacheError:
    return CacheError(f"the scalemm JIT cache {root} is not writable ({e.strerror or e}: {e.filename}); "
                      "set SCALEMM_CACHE_DIR to a writable directory")


def _headers_digest(source: str) -> str:
    """Hash of every scalemm header the source includes, transitively (not CUTLASS's: its version is keyed)."""
    h, seen, todo = hashlib.sha256(), set(), _INCLUDE.findall(source)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        path = toolchain.INCLUDE_DIR / rel
        text = path.read_text() if path.is_file() else ""
        h.update(rel.encode() + b"\0" + text.encode())
        todo += _INCLUDE.findall(text)
    return h.hexdigest()


def cache_key(spec, source: str) -> str:
    """The hash of what `spec` is built from, without the nvcc version (see the rule above):
    computing it needs no CUDA toolkit."""
    from .. import __version__
    flags = toolchain.BASE_FLAGS + toolchain.arch_flags(spec.arch) + spec.extra_flags
    parts = [source, _headers_digest(source), "arch " + spec.arch, " ".join(flags), __version__, SCALEMM_JIT_VERSION]
    if spec.cutlass:
        parts.append("cutlass " + toolchain.cutlass_version())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def nvcc_tag(nvcc_release: str) -> str:
    """'release 13.0, V13.0.88' -> 'nvcc13.0.88', the suffix of the entries that nvcc builds."""
    m = re.search(r"V(\d+(?:\.\d+)*)", nvcc_release)
    return "nvcc" + (m[1] if m else ".".join(re.findall(r"\d+", nvcc_release)))


def entry_dir(root: Path, name: str, key: str, nvcc_release: str) -> Path:
    return root / "kernels" / f"{name}-{key}-{nvcc_tag(nvcc_release)}"


def entries_of_any_nvcc(root: Path, name: str, key: str) -> list[Path]:
    """The entries of (name, key) that any nvcc built, the newest nvcc first."""
    def version(entry: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", entry.name.rsplit("-nvcc", 1)[1]))
    return sorted((root / "kernels").glob(f"{name}-{key}-nvcc*"), key=version, reverse=True)


MISSING = "missing"  # check_entry's reason for an entry that is simply not there


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_entry(entry: Path, key: str) -> tuple[dict | None, str | None]:
    """(meta, None) for a complete entry, else (None, why it cannot be used). Hashes kernel.so."""
    if not entry.exists():
        return None, MISSING
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except FileNotFoundError:
        return None, "meta.json is missing"
    except (OSError, ValueError) as e:
        return None, f"meta.json does not parse ({e})"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None, "meta.json is not this kernel's"
    try:
        digest = file_sha256(entry / "kernel.so")
    except OSError as e:
        return None, f"kernel.so cannot be read ({e.strerror})"
    if digest != meta.get("sha256"):
        return None, "kernel.so does not match the sha256 in meta.json (truncated or overwritten)"
    return meta, None


@contextlib.contextmanager
def locked(root: Path, name: str):
    """Hold the build lock `name` (an flock: the kernel releases it if this process dies)."""
    try:
        for sub in ("kernels", "locks"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        fd = os.open(root / "locks" / f"{name}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError as e:
        raise _not_writable(root, e) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_TEMP = re.compile(r"\.tmp-(\d+)@([^@]*)@")


def new_temp(root: Path, name: str) -> Path:
    """A private folder under kernels/ to build in (same file system as the entries: rename is
    atomic). Its name records who made it, for `remove_stale_temps`."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}@{socket.gethostname()}@{name}-", dir=root / "kernels"))
    except OSError as e:
        raise _not_writable(root, e) from e


def remove_stale_temps(root: Path) -> None:
    """Remove the temp folders of builds that were killed: their owner is dead (a pid is only
    checked on its own host) or they are older than a day (a build takes minutes)."""
    host, now = socket.gethostname(), time.time()
    for path in (root / "kernels").glob(".*"):
        owner = _TEMP.match(path.name)
        try:
            old = now - path.lstat().st_mtime > STALE_TEMP_SECONDS
        except FileNotFoundError:  # its owner just published or removed it
            continue
        if old or (owner and owner[2] == host and not _pid_alive(int(owner[1]))):
            shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def make_shareable(folder: Path) -> None:
    """Give a build folder the permissions the umask allows, as files a compiler writes get."""
    umask = _umask()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o100
        os.chmod(path, (0o777 if executable else 0o666) & ~umask)


def _umask() -> int:
    try:  # Linux shows it; os.umask() could only read it by setting it, racing other threads
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish(tmp: Path, entry: Path) -> None:
    """Move a finished build into place; the caller holds the entry's lock.

    rename() cannot replace a non-empty folder, so a broken entry in the way is swapped with the
    new one in one step where the file system can (renameat2 RENAME_EXCHANGE: ext4, xfs, btrfs,
    tmpfs), else renamed aside first; then a reader can find no entry for a moment (those with
    nvcc wait for the lock we hold), never a half-written one.
    """
    make_shareable(tmp)
    if not entry.exists():
        os.rename(tmp, entry)
    elif _exchange(tmp, entry):
        shutil.rmtree(tmp, ignore_errors=True)  # now the broken entry
    else:
        aside = new_temp(entry.parent.parent, entry.name)
        os.rename(entry, aside / "old")
        os.rename(tmp, entry)
        shutil.rmtree(aside, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the libc or file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
