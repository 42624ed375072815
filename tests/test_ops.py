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


def test_grouped_gemm_op_takes_scale_b_per():
    """G == N: the op passes scale_b_per through (a [G] = [N] scale_b is ambiguous without it)."""
    a = (torch.randn(6, 32) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(8, 8, 32) * 4).to(torch.float8_e4m3fn)
    offs, sa, sb = torch.tensor([2, 2, 3, 3, 4, 4, 6, 6], dtype=torch.int32), torch.ones(6), torch.rand(8) + 0.5
    with pytest.raises(ValueError, match="scale_b_per"):
        torch.ops.scalemm.grouped_gemm(a, b, offs, sa, sb, None, torch.float32, False, None)
    got = torch.ops.scalemm.grouped_gemm(a, b, offs, sa, sb, None, torch.float32, False, None, "channel")
    assert torch.equal(got, scalemm.grouped_gemm(a, b, offs, sa, sb.view(1, 8), out_dtype=torch.float32))


@pytest.mark.gpu
def test_ops_on_gpu_under_compile():
    x = torch.randn(16, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(512, 256, dtype=torch.bfloat16, device="cuda") * 0.05
    wq = scalemm.quantize_fp8(w, scaling="token")
    want = _linear_fp8(x, wq.data, wq.scale_inv, None)
    got = torch.compile(_linear_fp8, backend="aot_eager", fullgraph=True)(x, wq.data, wq.scale_inv, None)
    assert torch.equal(got, want)


def _quant_all(x, offsets, amax):
    nv = torch.ops.scalemm.quantize_nvfp4(x, "token", None)
    nvt = torch.ops.scalemm.quantize_nvfp4(x, "tensor", amax)
    mx = torch.ops.scalemm.quantize_mxfp8(x)
    f8g = torch.ops.scalemm.quantize_fp8_grouped(x, offsets, "tensor")
    nvg = torch.ops.scalemm.quantize_nvfp4_grouped(x, offsets, "token")
    return nv + nvt + mx + f8g + nvg


def _want_all(x, offsets, amax):
    nv = scalemm.quantize_nvfp4(x, scaling="token")
    nvt = scalemm.quantize_nvfp4(x, amax=amax)
    mx = scalemm.quantize_mxfp8(x)
    f8g = scalemm.quantize_fp8_grouped(x, offsets)
    nvg = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
    return (nv.qdata, nv.scales, nv.alpha, nv.amax, nvt.qdata, nvt.scales, nvt.alpha, nvt.amax, mx.data, mx.scales,
            f8g.data, f8g.scale_inv, nvg.qdata, nvg.scales, nvg.sf_offsets, nvg.alpha, nvg.amax)


def _assert_all_equal(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        assert torch.equal(g.view(torch.uint8) if g.dtype.itemsize == 1 else g, w.view(torch.uint8)
                           if w.dtype.itemsize == 1 else w), i


def _quant_inputs(device):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(100, 128, generator=g) * 3).to(torch.bfloat16).to(device)
    offsets = torch.tensor([10, 10, 64, 100], dtype=torch.int32, device=device)
    return x, offsets, x.float().abs().amax()


def test_quantize_ops_match_and_compile():
    x, offsets, amax = _quant_inputs("cpu")
    want = _want_all(x, offsets, amax)
    _assert_all_equal(_quant_all(x, offsets, amax), want)
    _assert_all_equal(torch.compile(_quant_all, backend="aot_eager", fullgraph=True)(x, offsets, amax), want)


def test_quantize_ops_fake_shapes_match_real():
    x, offsets, amax = _quant_inputs("cpu")
    real = _quant_all(x, offsets, amax)
    with FakeTensorMode() as mode:
        fake = _quant_all(mode.from_tensor(x), mode.from_tensor(offsets), mode.from_tensor(amax))
    for i, (f, r) in enumerate(zip(fake, real)):
        assert f.shape == r.shape and f.dtype == r.dtype, i


@pytest.mark.gpu
def test_quantize_ops_on_gpu_under_compile():
    x, offsets, amax = _quant_inputs("cuda")
    want = _want_all(x, offsets, amax)
    _assert_all_equal(_quant_all(x, offsets, amax), want)
    _assert_all_equal(torch.compile(_quant_all, backend="aot_eager", fullgraph=True)(x, offsets, amax), want)


def test_gemm_nvfp4_op_matches_scalemm_gemm():
    """scalemm::gemm_nvfp4: W4A16 and W4A4 (activations from scalemm::quantize_nvfp4) as scalemm.gemm on the
    containers, bit for bit; the fake gives [M, N]; an operand that is not NVFP4 codes is refused."""
    torch.manual_seed(1)
    x = torch.randn(12, 64, dtype=torch.bfloat16)
    w = scalemm.quantize_nvfp4(torch.randn(32, 64), scaling="token")
    bias = torch.randn(32).to(torch.bfloat16)
    op = torch.ops.scalemm.gemm_nvfp4
    assert torch.equal(op(x, None, None, w.qdata, w.scales, w.alpha, bias, torch.bfloat16),
                       scalemm.gemm(x, w, bias=bias))
    qx, sx, ax, _ = torch.ops.scalemm.quantize_nvfp4(x, "token", None)
    assert torch.equal(op(qx, sx, ax, w.qdata, w.scales, w.alpha, None, torch.float32),
                       scalemm.gemm(scalemm.quantize_nvfp4(x, scaling="token"), w, out_dtype=torch.float32))
    with FakeTensorMode() as mode:
        fx, fq = mode.from_tensor(x), mode.from_tensor(w.qdata)
        out = op(fx, None, None, fq, mode.from_tensor(w.scales), mode.from_tensor(w.alpha), None, torch.float16)
        assert out.shape == (12, 32) and out.dtype == torch.float16
    with pytest.raises(ValueError, match="NVFP4 codes uint8"):
        op(x, sx, ax, w.qdata, w.scales, w.alpha, None, torch.bfloat16)
    with pytest.raises(ValueError, match="a_scales and a_alpha go together"):
        op(x, None, ax, w.qdata, w.scales, w.alpha, None, torch.bfloat16)  # an alpha a W4A16 call would drop
