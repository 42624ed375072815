"""The JIT's parts that need no nvcc: the driver query, the target-arch table, spec checks."""
import types

import pytest

from scalemm.jit import KernelSpec, toolchain


def _fake_cuda_python(monkeypatch, result=None, error=None):
    """Stand in for cuda.bindings.driver (cuda-python), answering cuDriverGetVersion with `result` or raising `error`."""
    def cuDriverGetVersion():
        if error:
            raise error
        return result
    fake = types.SimpleNamespace(cuDriverGetVersion=cuDriverGetVersion)
    monkeypatch.setitem(__import__("sys").modules, "cuda.bindings.driver", fake)


def test_driver_version_comes_from_cuda_python(monkeypatch):
    _fake_cuda_python(monkeypatch, result=(0, 12080))  # (CUDA_SUCCESS, 12.8)
    assert toolchain.driver_cuda_version() == (12, 8)
    _fake_cuda_python(monkeypatch, result=(3, 0))  # CUDA_ERROR_NOT_INITIALIZED and friends: no version
    monkeypatch.setattr(toolchain, "_driver_version_ctypes", lambda: None)
    assert toolchain.driver_cuda_version() is None


def test_driver_version_falls_back_to_libcuda(monkeypatch):
    # cuda-python missing or unable to find libcuda: the ctypes path answers
    _fake_cuda_python(monkeypatch, error=RuntimeError("libcuda.so.1 not found"))
    monkeypatch.setattr(toolchain, "_driver_version_ctypes", lambda: 13000)
    assert toolchain.driver_cuda_version() == (13, 0)
    monkeypatch.setitem(__import__("sys").modules, "cuda.bindings.driver", None)  # import fails
    assert toolchain.driver_cuda_version() == (13, 0)
    monkeypatch.setattr(toolchain, "_driver_version_ctypes", lambda: None)
    assert toolchain.driver_cuda_version() is None


def test_driver_description_prints_well(monkeypatch):
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: (12, 8))
    assert toolchain.driver_description() == "12.8"
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: None)
    assert toolchain.driver_description() == "not available (no NVIDIA driver)"


def test_arch_table():
    assert toolchain.arch_flags("sm90a") == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert toolchain.arch_flags("sm100a") == ("-gencode=arch=compute_100a,code=sm_100a",)
    with pytest.raises(ValueError, match="sm89.*sm90a"):
        toolchain.arch_flags("sm89")


def test_spec_has_a_target_arch():
    spec = KernelSpec(name="k", template="jit_selftest.cu", params={"VALUE": "1"}, cutlass=False)
    assert spec.arch == "sm90a"  # existing callers keep building for Hopper
    assert KernelSpec(name="k", template="t.cu", arch="sm100a").arch == "sm100a"
    with pytest.raises(ValueError, match="'k'.*unknown target arch 'sm_90'"):
        KernelSpec(name="k", template="t.cu", arch="sm_90")


@pytest.mark.parametrize("name", ["../evil", "a/b", "", ".hidden", "-x", "two words", "caf\u00e9", "x" * 121, "a\0b"])
def test_kernel_names_must_be_safe_file_names(name):
    with pytest.raises(ValueError, match="kernel name"):
        KernelSpec(name=name, template="jit_selftest.cu", cutlass=False)


def test_real_kernel_names_are_accepted():
    for name in ("selftest", "quant_bfloat16", "fp8_gemm_128x128x128_2x1_coop_fastacc_bf16_evt0123abcd", "a.b-c"):
        KernelSpec(name=name, template="jit_selftest.cu", cutlass=False)
