"""Architecture as an axis, on CPU: the one capability check (scalemm.arch), the per-arch configs
package, and every op that launches kernels refusing a GPU scalemm has no kernels for.

The ops run on fake CUDA tensors (torch's FakeTensorMode: shapes, dtypes and a device, no data,
no GPU), so each reaches its CUDA path here and must stop at the check, before building or
launching anything; the GPU itself is faked through scalemm.arch._query (the `fake_gpu` fixture)."""
import pathlib
import re
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import scalemm
from scalemm import arch
from scalemm.cutlass_kernels import configs
from scalemm.formats.base import _Container

E4M3 = torch.float8_e4m3fn
NO_KERNELS = [((10, 0), "NVIDIA B200", "sm_100"), ((8, 9), "NVIDIA L40S", "sm_89"), ((12, 0), "NVIDIA RTX PRO 6000", "sm_120")]


@pytest.mark.parametrize("cc,name,sm", NO_KERNELS)
def test_kernel_arch_refuses_gpus_without_kernels(fake_gpu, cc, name, sm):
    fake_gpu(capability=cc, name=name)
    with pytest.raises(NotImplementedError) as e:
        arch.kernel_arch(torch.device("cuda", 0))
    msg = str(e.value)
    assert msg.startswith(f"scalemm has no kernels for {sm} yet ({name}, compute capability {cc[0]}.{cc[1]})")
    assert "sm_90: H100, H200" in msg
    with pytest.raises(NotImplementedError, match=f"no kernels for {sm}"):
        arch.configs_for("cuda")  # index None: the current device


def test_kernel_arch_of_hopper(fake_gpu):
    fake_gpu(capability=(9, 0), name="NVIDIA H200", num_sms=132)
    assert arch.kernel_arch(torch.device("cuda", 0)) == "sm90" == arch.kernel_arch()
    assert arch.configs_for(0) is configs.sm90 is configs.for_arch("sm90")
    assert arch.gpu_info("cuda:0") == arch.GpuInfo("NVIDIA H200", (9, 0), 132)
    assert arch.gpu_skip_reason() is None


def test_device_properties_are_read_once(fake_gpu, monkeypatch):
    fake_gpu()
    calls = []
    monkeypatch.setattr(arch, "_query", lambda i: calls.append(i) or arch.GpuInfo("G", (9, 0), 100))
    arch._reset()
    for _ in range(5):
        arch.kernel_arch(0)
    assert calls == [0]


def test_configs_package_picks_by_arch():
    assert configs.archs() == ("sm90",)
    assert configs.for_arch("sm90").NVCC_ARCH == "sm90a"
    with pytest.raises(NotImplementedError, match=r"no kernel configs for 'sm100' yet \(it has: sm90\)"):
        configs.for_arch("sm100")
    # the public names are sm90's, as before the split
    from scalemm.cutlass_kernels import GemmConfig, default_config
    from scalemm.cutlass_kernels.configs import TUNING_CANDIDATES, sweep_points  # noqa: F401
    assert GemmConfig is configs.sm90.GemmConfig and default_config is configs.sm90.default_config
    from scalemm.gemm_nvfp4 import default_nvfp4_config
    assert default_nvfp4_config is configs.sm90.default_nvfp4_config


def test_default_config_uses_num_sms():
    """The thresholds scale with the SM count (measured on 132) and every waves count uses it: at 132 nothing
    changes, with fewer SMs the prefill rule starts at a smaller M, with more at a larger one."""
    dc = configs.sm90.default_config
    assert dc(1536, 4096, 4096, num_sms=132) == dc(1536, 4096, 4096)
    assert dc(1000, 2048, 4096, num_sms=132).tile_n == 128         # one wave of 128x128 tiles (128 of them)
    assert dc(200, 8192, 16384, num_sms=132).cluster_m == 2         # below 256 tokens: the waves rule
    assert dc(200, 8192, 16384, num_sms=66) == configs.sm90.prefill_config(200, 8192, 16384, 66)  # 200 >= 256 / 2
    assert dc(384, 8192, 16384, num_sms=264).cluster_m == 2         # 384 < 256 * 2: the waves rule
    assert dc(384, 8192, 4096, num_sms=132).tile_m == 64            # below 1024 tokens: ping-pong 64x256 ...
    assert dc(768, 8192, 4096, num_sms=66).tile_m == 128            # ... 768 >= 1024 * 66 / 132: the model
    # the prefill rule's waves count the SMs: at 2048 x 2048 x 4096, 256 tiles of 128x128 are one wave on 264 SMs,
    # which takes the one-wave rule's 128x128 in clusters of 1
    sm90 = configs.sm90
    for sms in (66, 132):
        times = {e[0]: sm90.predicted_prefill_us(*e, 2048, 2048, 4096, sms) for e in sm90.PREFILL_TILE_MODEL}
        assert dc(2048, 2048, 4096, num_sms=sms) == min(times, key=times.get)
    assert dc(2048, 2048, 4096, num_sms=264) == sm90.PREFILL_ONE_WAVE_TILES[1]
    # decode depends on it only where tiles pass a wave (few_tokens_config, the one-wave and cluster rules); full
    # accumulation only through its waves (test_tuning.py)
    for sms in (16, 132, 1000):
        assert dc(16, 4096, 4096, num_sms=sms) == dc(16, 4096, 4096)
        assert dc(4096, 4096, 4096, fast_accum=False, num_sms=sms).promotion_chunks >= 1
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="num_sms must be a positive int"):
            dc(16, 4096, 4096, num_sms=bad)


def test_default_config_at_132_sms_is_unchanged():
    """The heuristic at 132 SMs picks what it picked before num_sms was used (over the sweep's points), where later
    rules did not replace it."""
    def old(M, N, K, fast_accum):
        G = configs.GemmConfig
        if not fast_accum and M > 16:  # full accumulation's rules came later (chunked promotion): as it picks
            return configs.default_config(M, N, K, fast_accum=False)
        if 16 < M <= 128 or M >= 256:  # the two-token-tile rules (ninth session) and the prefill model (fourteenth,
            return configs.default_config(M, N, K)  # from 256 tokens since the twenty-second) came later: as it picks
        if M <= 16 and fast_accum and configs.default_config(M, N, K).tile_m == 128:  # the 128x16 tile past one wave
            return configs.sm90.few_tokens_config(N, 132)                               # (thirty-eighth session)
        if M <= 16:
            return G(64, 16, 256 if fast_accum else 128, 1, 1, "pingpong", swap_ab=True)
        if M <= 1024 and N >= 5120 and K <= 8192:
            return G(64, 256, 128, 1, 1, "pingpong")
        if M >= 2048 and N >= 2048:
            return G(128, 256, 128, 2, 1, "cooperative")
        # the last rule weighs tile widths by waves since (seventh session): its width as it picks
        return G(128, configs.default_config(M, N, K).tile_n, 128, 2, 1, "cooperative")
    pts = configs.sweep_points(1e20) + [("x", M, 4096, 4096) for M in (129, 1000, 1025, 2047, 2048, 3000)]
    for _, M, N, K in pts:
        for fa in (True, False):
            assert configs.default_config(M, N, K, fast_accum=fa, num_sms=132) == old(M, N, K, fa), (M, N, K, fa)


def _fake_cuda(obj):
    """A fake CUDA copy of a tensor or quantized container (same shapes and dtypes, no data)."""
    if isinstance(obj, torch.Tensor):
        return torch.empty(obj.shape, dtype=obj.dtype, device="cuda")
    if isinstance(obj, _Container):
        new = object.__new__(type(obj))
        for name in type(obj).__slots__:
            setattr(new, name, _fake_cuda(getattr(obj, name)))
        return new
    return obj


def _containers():
    """Real CPU NVFP4 containers whose shapes the fake CUDA copies take (made outside the fake mode)."""
    return {"w4": scalemm.quantize_nvfp4(torch.randn(64, 64), scaling="token"),
            "ws4": scalemm.quantize_nvfp4_stacked(torch.randn(2, 64, 64), scaling="token"),
            "x4": scalemm.quantize_nvfp4(torch.randn(32, 64), scaling="token"),
            "x4g": scalemm.quantize_nvfp4_grouped(torch.randn(32, 64), torch.tensor([16, 32], dtype=torch.int32),
                                                  scaling="token")}


def _ops(real=None):
    """(name, call) for every public op that launches kernels, on fake CUDA inputs (call it inside the
    fake mode), in the form that reaches its kernels. (quantize_nvfp4_residual is quantize_nvfp4 twice
    plus torch ops; prepare_residual_weight has no kernel.)"""
    def cuda(*shape, dtype=torch.float32):
        return torch.empty(*shape, dtype=dtype, device="cuda")

    bf16, i32 = torch.bfloat16, torch.int32
    real = real or {}
    w4, ws4, x4, x4g = (real.get(k) for k in ("w4", "ws4", "x4", "x4g"))
    return {
        "gemm": lambda: scalemm.gemm(cuda(32, 64, dtype=E4M3), cuda(64, 64, dtype=E4M3), cuda(32), cuda(64)),
        "gemm config=": lambda: scalemm.gemm(cuda(32, 64, dtype=E4M3), cuda(64, 64, dtype=E4M3), cuda(32), cuda(64),
                                             config=configs.GemmConfig()),
        "grouped_gemm": lambda: scalemm.grouped_gemm(cuda(32, 64, dtype=E4M3), cuda(2, 64, 64, dtype=E4M3),
                                                     cuda(2, dtype=i32), cuda(32), cuda(2, 64)),
        "grouped_gemm_wgrad": lambda: scalemm.grouped_gemm_wgrad(cuda(64, 64, dtype=E4M3), cuda(32, 64, dtype=E4M3),
                                                                 cuda(2, dtype=i32), cuda(2), cuda(2)),
        "gemm W4A16": lambda: scalemm.gemm(cuda(32, 64, dtype=bf16), _fake_cuda(w4)),
        "gemm W4A4": lambda: scalemm.gemm(_fake_cuda(x4), _fake_cuda(w4)),
        "grouped_gemm W4A16": lambda: scalemm.grouped_gemm(cuda(32, 64, dtype=bf16), _fake_cuda(ws4), cuda(2, dtype=i32)),
        "grouped_gemm W4A4": lambda: scalemm.grouped_gemm(_fake_cuda(x4g), _fake_cuda(ws4), None),
        "quantize_fp8": lambda: scalemm.quantize_fp8(cuda(32, 64, dtype=bf16)),
        "quantize_nvfp4": lambda: scalemm.quantize_nvfp4(cuda(32, 64, dtype=bf16)),
        "quantize_mxfp8": lambda: scalemm.quantize_mxfp8(cuda(32, 64, dtype=bf16)),
        "quantize_fp8_grouped": lambda: scalemm.quantize_fp8_grouped(cuda(32, 64, dtype=bf16), cuda(2, dtype=i32)),
        "quantize_nvfp4_grouped": lambda: scalemm.quantize_nvfp4_grouped(cuda(32, 64, dtype=bf16), cuda(2, dtype=i32)),
        "quantize_mxfp8_grouped": lambda: scalemm.quantize_mxfp8_grouped(cuda(32, 64, dtype=bf16), cuda(2, dtype=i32)),
        "quantize_fp8_stacked": lambda: scalemm.quantize_fp8_stacked(cuda(2, 32, 64, dtype=bf16)),
        "quantize_nvfp4_stacked": lambda: scalemm.quantize_nvfp4_stacked(cuda(2, 32, 64, dtype=bf16)),
    }


OPS = list(_ops())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("cc,name,sm", NO_KERNELS[:2])
def test_every_op_refuses_a_gpu_without_kernels(fake_gpu, op, cc, name, sm):
    fake_gpu(capability=cc, name=name)
    real = _containers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Accessing the data pointer of FakeTensor is deprecated"
        with FakeTensorMode(allow_non_fake_inputs=True):
            call = _ops(real)[op]
            with pytest.raises(NotImplementedError, match=rf"^scalemm has no kernels for {sm} yet \({name}, "):
                call()


class _Item:
    def __init__(self, *marks):
        self.keywords, self.markers = set(marks), []

    def add_marker(self, marker):
        self.markers.append(marker)


@pytest.mark.parametrize("cc,name,sm", NO_KERNELS[:2])
def test_conftest_skips_gpu_tests_with_the_reason(fake_gpu, cc, name, sm):
    import conftest
    fake_gpu(capability=cc, name=name)
    gpu, cpu = _Item("gpu"), _Item()
    conftest.pytest_collection_modifyitems(None, [gpu, cpu])
    reasons = [m.kwargs["reason"] for m in gpu.markers if m.name == "skip"]
    assert reasons and reasons[0].startswith(f"scalemm has no kernels for {sm} yet ({name}")
    assert not [m for m in cpu.markers if m.name == "skip" and "kernels" in m.kwargs["reason"]]


def test_conftest_runs_gpu_tests_on_hopper_and_skips_without_a_gpu(fake_gpu, monkeypatch):
    import conftest
    fake_gpu(capability=(9, 0))
    gpu = _Item("gpu")
    conftest.pytest_collection_modifyitems(None, [gpu])
    assert not [m for m in gpu.markers if "GPU" in m.kwargs.get("reason", "") or "kernels" in m.kwargs.get("reason", "")]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gpu = _Item("gpu")
    conftest.pytest_collection_modifyitems(None, [gpu])
    assert gpu.markers[0].kwargs["reason"] == "needs a CUDA GPU scalemm has kernels for (sm_90: H100, H200); none is available"


# ---------------------------------------------------------------------------------------------
# every kernel-library call runs with the operands' device current (arch.on_device)
# ---------------------------------------------------------------------------------------------

def _blocks_above(lines, i):
    """The statements that open the blocks enclosing line i, innermost first (by indentation)."""
    ind = len(lines[i]) - len(lines[i].lstrip())
    for j in range(i - 1, -1, -1):
        s = lines[j]
        if s.strip() and len(s) - len(s.lstrip()) < ind:
            ind = len(s) - len(s.lstrip())
            yield s.strip()
            if s.lstrip().startswith("def ") and ind == 0:
                return


def unguarded_library_calls(sources: dict) -> list:
    """(file, line) of every call into a kernel library (`ctypes.byref(` outside abi.py, which only wraps one)
    that is neither inside a `with on_device(` block nor in a function whose every call in `sources` is."""
    def guarded(lines, i):
        return any(b.startswith("with on_device(") for b in _blocks_above(lines, i))

    calls = {}  # function name -> [(file, line index)] of its calls
    for name, text in sources.items():
        for i, line in enumerate(text.splitlines()):
            for fn in re.findall(r"\b(_[a-z0-9_]+_cuda)\(", line):
                if not line.lstrip().startswith("def "):
                    calls.setdefault(fn, []).append((name, i))
    bad = []
    for name, text in sources.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "ctypes.byref(" not in line or guarded(lines, i):
                continue
            fn = next((b[4:b.index("(")] for b in _blocks_above(lines, i) if b.startswith("def ")), None)
            sites = calls.get(fn, [])
            if not sites or not all(guarded(sources[f].splitlines(), j) for f, j in sites):
                bad.append((name, i + 1))
    return bad


def test_every_kernel_call_selects_the_operands_device():
    """A kernel library launches on the thread's current device whatever device its pointers are on (a static CUDA
    runtime), so each call runs inside arch.on_device for its tensors (tests/test_multi_gpu.py checks the effect on
    two GPUs). The scan is checked on a call without the guard, one inside it, and a helper guarded at its call."""
    unguarded = "def f(x):\n    launch(ctypes.byref(args))\n"
    inside = "def f(x):\n    with on_device(x.device):\n        launch(ctypes.byref(args))\n"
    helper = ("def _a_cuda(x):\n    launch(ctypes.byref(args))\n\n\ndef f(x):\n    with on_device(x.device):\n"
              "        return _a_cuda(x)\n")
    assert unguarded_library_calls({"m.py": unguarded}) == [("m.py", 2)]
    assert unguarded_library_calls({"m.py": inside}) == []
    assert unguarded_library_calls({"m.py": helper}) == []
    assert unguarded_library_calls({"m.py": helper + "\n\ndef g(x):\n    return _a_cuda(x)\n"}) == [("m.py", 2)]
    root = pathlib.Path(scalemm.__file__).parent
    sources = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))
               if p.name != "abi.py" and "jit" not in p.parts and "reference" not in p.parts}
    assert unguarded_library_calls(sources) == []
