import pytest


def _gpu_skip_reason():
    """None where the GPU tests can run; else why not, as scalemm's ops would say it (scalemm.arch:
    no CUDA GPU, or one scalemm has no kernels for)."""
    from scalemm.arch import gpu_skip_reason
    return gpu_skip_reason()


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
    gpu_reason = _gpu_skip_reason()
    skip_gpu = pytest.mark.skip(reason=gpu_reason) if gpu_reason else None
    skip_nvcc = pytest.mark.skip(reason="needs nvcc and the CUTLASS headers (nvidia-cutlass)")
    nvcc = _has_nvcc()
    for item in items:
        if "gpu" in item.keywords and skip_gpu:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(skip_nvcc)


@pytest.fixture
def guarded_reads():
    """tests/guarded_reads.py as a module (the skinny kernel's inputs against unmapped memory; also a script)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent / "guarded_reads.py"
    spec = importlib.util.spec_from_file_location("guarded_reads", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.PATH = path
    return module


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty JIT cache for this test (and any process it starts)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SCALEMM_CACHE_DIR", str(d))
    import scalemm.jit as jit
    jit._reset_process_state()  # nothing loaded or verified from another test's cache
    return d


@pytest.fixture
def fake_gpu(monkeypatch):
    """fake_gpu(capability=(10, 0), name=..., num_sms=...): scalemm.arch sees such a CUDA device 0 (and
    the current device is 0); forgotten after the test."""
    import torch
    from scalemm import arch

    def install(capability=(9, 0), name="NVIDIA H100 80GB HBM3", num_sms=132):
        arch._reset()
        monkeypatch.setattr(arch, "_query", lambda index: arch.GpuInfo(name, tuple(capability), num_sms))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        return arch.gpu_info(0)

    yield install
    arch._reset()
