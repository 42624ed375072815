"""torch.library registrations: eager results, fake shapes, and torch.compile(fullgraph=True) tracing
through them (CPU: the ops run scalemm's reference path; the GPU path is the same wrapper)."""
import pytest
import torch

import scalemm
import scalemm.ops  # noqa: F401  registers torch.ops.scalemm.*
from torch._subclasses.fake_tensor import FakeTensorMode


def _linear_fp8(x, w8, sw, bias):
    xq, sx = torch.ops.scalemm.quantize_fp8(x, "token")
    return torch.ops.scalemm.gemm(xq, w8, sx, sw, bias, torch.bfloat16, False)


def test_ops_match_the_functions_and_compile():
    torch.manual_seed(0)
    x = torch.randn(12, 64, dtype=torch.bfloat16)
    w = torch.randn(32, 64, dtype=torch.bfloat16) * 0.1
    wq = scalemm.quantize_fp8(w, scaling="token")
    bias = torch.randn(32).to(torch.bfloat16)
    eager = _linear_fp8(x, wq.data, wq.scale_inv, bias)
    xq = scalemm.quantize_fp8(x, scaling="token")
    want = scalemm.gemm(xq, wq, bias=bias)
    assert torch.equal(eager, want)
    compiled = torch.compile(_linear_fp8, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, wq.data, wq.scale_inv, bias), want)


def test_fake_impls_give_shapes_without_running():
    with FakeTensorMode():
        a = torch.empty(7, 64, dtype=torch.float8_e4m3fn)
        b = torch.empty(48, 64, dtype=torch.float8_e4m3fn)
        y = torch.ops.scalemm.gemm(a, b, torch.empty(7), torch.empty(48), None, torch.float32, True)
        assert y.shape == (7, 48) and y.dtype == torch.float32
        d, s = torch.ops.scalemm.quantize_fp8(torch.empty(3, 5, 64), "token")
        assert d.shape == (15, 64) and d.dtype == torch.float8_e4m3fn and s.shape == (15,)
        g = torch.ops.scalemm.grouped_gemm(a, torch.empty(2, 48, 64, dtype=torch.float8_e4m3fn),
                                           torch.empty(2, dtype=torch.int32), torch.empty(7), torch.empty(2, 48),
                                           None, torch.bfloat16, False, "token")
        assert g.shape == (7, 48) and g.dtype == torch.bfloat16


@pytest.mark.gpu
def test_ops_on_gpu_under_compile():
    x = torch.randn(16, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(512, 256, dtype=torch.bfloat16, device="cuda") * 0.05
    wq = scalemm.quantize_fp8(w, scaling="token")
    want = _linear_fp8(x, wq.data, wq.scale_inv, None)
    got = torch.compile(_linear_fp8, backend="aot_eager", fullgraph=True)(x, wq.data, wq.scale_inv, None)
    assert torch.equal(got, want)
