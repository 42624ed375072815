"""One SM90 FP8 GEMM through the whole JIT, compiled for sm_90a on a machine with no GPU.

It takes about a minute to compile, so it builds into a persistent cache ($SCALEMM_TEST_CACHE_DIR,
else the user's JIT cache) instead of a fresh one. The entry is keyed like any other (source,
included headers, CUTLASS, flags, arch, nvcc, scalemm version): a second run is a cache hit, and
any change to what the kernel is built from compiles it again. A hit still checks the library,
which build() verifies against the sha256 recorded when it was built.
"""
import hashlib
import json
import os
import subprocess

import pytest
import torch

from scalemm import epilogues as epi
from scalemm import jit
from scalemm.cutlass_kernels import GemmConfig
from scalemm.gemm import gemm_kernel_spec

pytestmark = pytest.mark.nvcc


@pytest.fixture
def persistent_cache(monkeypatch):
    if os.environ.get("SCALEMM_TEST_CACHE_DIR"):
        monkeypatch.setenv("SCALEMM_CACHE_DIR", os.environ["SCALEMM_TEST_CACHE_DIR"])
    jit._reset_process_state()  # verify the entry from disk, as a new process would
    return jit.cache_dir()


def test_sm90_fp8_gemm_compiles_to_sm90a(persistent_cache):
    spec, emitted = gemm_kernel_spec(GemmConfig(128, 128, 128, 2, 1, "cooperative"), fast_accum=True,
                                     out_dtype=torch.bfloat16, epilogue=epi.scaled("bf16"))
    so = jit.build(spec, load=False)
    assert so.parent.parent == persistent_cache / "kernels"
    assert so.is_file() and so.stat().st_size > 100_000
    # the library exports exactly the launcher scalemm.gemm calls, and holds sm_90a code
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert " T scalemm_gemm" in syms
    assert b"sm_90a" in so.read_bytes()
    meta = json.loads((so.parent / "meta.json").read_text())
    assert meta["arch"] == "sm90a" and meta["sha256"] == hashlib.sha256(so.read_bytes()).hexdigest()
    assert [l.name for l in emitted.leaves] == ["scale_a", "scale_b", "bias"]
