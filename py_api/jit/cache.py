"""The kernel cache: where an entry lives and what its name hashes.

Layout: $SCALEMM_CACHE_DIR (default ~/.cache/scalemm)/
  kernels/<name>-<key>/   kernel.so, source.cu, build.log, meta.json
  locks/<name>-<key>.lock one file lock per kernel, held while building it
  failed/<name>-<key>/    the last failed build: source, log, command

The key hashes everything that changes the binary (see `cache_key`).
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from . import toolchain

SCALEMM_JIT_VERSION = "1"  # bump when the build recipe changes in a way the key cannot see

_INCLUDE = re.compile(r'^\s*#\s*include\s*"(scalemm/[^"]+)"', re.M)


def cache_dir() -> Path:
    return Path(os.environ.get("SCALEMM_CACHE_DIR") or Path.home() / ".cache" / "scalemm")


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
    from .. import __version__
    flags = toolchain.BASE_FLAGS + toolchain.arch_flags(spec.arch) + spec.extra_flags
    parts = [source, _headers_digest(source), toolchain.nvcc_version()[0], "arch " + spec.arch, " ".join(flags),
             __version__, SCALEMM_JIT_VERSION]
    if spec.cutlass:
        parts.append("cutlass " + toolchain.cutlass_version())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]
