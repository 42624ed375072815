"""One SM90 FP8 GEMM through the whole JIT, compiled for sm_90a on a machine with no GPU."""
import subprocess

import pytest
import torch

from scalemm import epilogues as epi
from scalemm import jit
from scalemm.cutlass_kernels import GemmConfig
from scalemm.gemm import gemm_kernel_spec

pytestmark = pytest.mark.nvcc


def test_sm90_fp8_gemm_compiles_to_sm90a(fresh_cache):
    spec, emitted = gemm_kernel_spec(GemmConfig(128, 128, 128, 2, 1, "cooperative"), fast_accum=True,
                                     out_dtype=torch.bfloat16, epilogue=epi.scaled("bf16"))
    so = jit.build(spec, load=False)
    assert so.is_file() and so.stat().st_size > 100_000
    # the library exports exactly the launcher scalemm.gemm calls, and holds sm_90a code
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert " T scalemm_gemm" in syms
    assert b"sm_90a" in so.read_bytes()
    assert [l.name for l in emitted.leaves] == ["scale_a", "scale_b", "bias"]
