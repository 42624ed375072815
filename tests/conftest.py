import pytest
import torch


def _has_sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def _has_nvcc():
    """nvcc and the CUTLASS headers, found as the JIT finds them."""
    try:
        from scalemm.jit import toolchain
        toolchain.nvcc_path()
        toolchain.cutlass_include_dirs()
        return True
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU of compute capability >= 9.0")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc and the CUTLASS headers (nvidia-cutlass)")
    gpu, nvcc = _has_sm90(), _has_nvcc()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(skip_nvcc)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty JIT cache for this test (and any process it starts)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SCALEMM_CACHE_DIR", str(d))
    import scalemm.jit as jit
    jit._reset_process_state()  # nothing loaded or verified from another test's cache
    return d
