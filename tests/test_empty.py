"""Empty inputs (M = 0 tokens, T = 0, N = 0 output features, G = 0 experts) across the public API on
CPU: well-formed empty (or all-zero) results of the right shapes and dtypes, no error. (The quantizers'
own empty cases are in test_quantize_api.py and test_quantize_grouped_api.py: test_empty_x_*.)"""
import pytest
import torch

import scalemm
import scalemm.ops  # noqa: F401  registers torch.ops.scalemm.*
from scalemm import epilogues as epi
from scalemm.nn import FP8Linear

E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16


def z(*shape):
    return torch.zeros(*shape, dtype=E4M3)


def _shape(t, shape, dtype=BF16):
    assert tuple(t.shape) == tuple(shape) and t.dtype == dtype, (tuple(t.shape), t.dtype)


def test_gemm_empty_m_and_n():
    _shape(scalemm.gemm(z(4, 32), z(0, 32), torch.ones(4), torch.ones(0), bias=torch.zeros(0, dtype=BF16)), (4, 0))
    _shape(scalemm.gemm(z(0, 32), z(0, 32), torch.ones(0), torch.ones(0)), (0, 0))
    out = torch.empty(0, 16, dtype=torch.float32)
    assert scalemm.gemm(z(0, 32), z(16, 32), torch.ones(()), torch.ones(16), out=out, out_dtype=torch.float32,
                        epilogue="gelu") is out
    tree = epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift")
    _shape(scalemm.gemm(z(0, 32), z(16, 32), torch.ones(0), torch.ones(16), epilogue=tree,
                        epilogue_inputs={"shift": torch.zeros(0)}), (0, 16))


def test_grouped_gemm_empty():
    offs = torch.zeros(3, dtype=torch.int32)
    _shape(scalemm.grouped_gemm(z(0, 32), z(3, 16, 32), offs, torch.ones(0), torch.ones(3, 16)), (0, 16))
    _shape(scalemm.grouped_gemm(z(5, 32), z(3, 0, 32), torch.tensor([1, 3, 5], dtype=torch.int32), torch.ones(5),
                                torch.ones(3, 0)), (5, 0))
    _shape(scalemm.grouped_gemm(z(5, 32), z(0, 16, 32), torch.zeros(0, dtype=torch.int32), torch.ones(5),
                                torch.ones(0, 16)), (5, 16))  # no experts: no row is written


def test_grouped_containers_with_no_tokens():
    """An expert-parallel rank that got no tokens: T = 0 containers go through fprop and wgrad."""
    offs = torch.zeros(3, dtype=torch.int32)
    xq = scalemm.quantize_fp8_grouped(torch.zeros(0, 32), offs, scaling="token", columnwise=True)
    dyq = scalemm.quantize_fp8_grouped(torch.zeros(0, 16), offs, scaling="token", columnwise=True)
    wq = scalemm.quantize_fp8_stacked(torch.randn(3, 16, 32), scaling="token")
    _shape(scalemm.grouped_gemm(xq, wq, None), (0, 16))
    dw = scalemm.grouped_gemm_wgrad(dyq, xq)
    _shape(dw, (3, 16, 32))
    assert (dw == 0).all()  # experts with no tokens get dW = 0


def test_grouped_gemm_wgrad_empty_dims():
    offs = torch.zeros(3, dtype=torch.int32)
    s = torch.ones(3)
    _shape(scalemm.grouped_gemm_wgrad(z(16, 0), z(32, 0), torch.zeros(0, dtype=torch.int32), torch.ones(0),
                                      torch.ones(0)), (0, 16, 32))
    _shape(scalemm.grouped_gemm_wgrad(z(0, 48), z(32, 48), offs, s, s), (3, 0, 32))
    _shape(scalemm.grouped_gemm_wgrad(z(16, 48), z(0, 48), offs, s, s), (3, 16, 0))


def test_nvfp4_gemms_empty():
    w = scalemm.quantize_nvfp4(torch.randn(16, 32))
    _shape(scalemm.gemm(torch.zeros(0, 32, dtype=BF16), w), (0, 16))
    _shape(scalemm.gemm(scalemm.quantize_nvfp4(torch.zeros(0, 32), scaling="token"), w), (0, 16))
    _shape(scalemm.gemm(torch.zeros(4, 32, dtype=BF16), scalemm.quantize_nvfp4(torch.randn(0, 32))), (4, 0))
    offs = torch.zeros(3, dtype=torch.int32)
    ws = scalemm.quantize_nvfp4_stacked(torch.randn(3, 16, 32))
    _shape(scalemm.grouped_gemm(torch.zeros(0, 32, dtype=BF16), ws, offs), (0, 16))
    _shape(scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(torch.zeros(0, 32), offs), ws, None), (0, 16))


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_fp8_linear_no_tokens(dtype):
    layer = FP8Linear.from_linear(torch.nn.Linear(32, 16)).to(dtype)
    with torch.no_grad():
        _shape(layer(torch.zeros(0, 32, dtype=dtype)), (0, 16), dtype)
        _shape(layer(torch.zeros(2, 0, 32, dtype=dtype)), (2, 0, 16), dtype)


def test_residual_empty():
    q = scalemm.quantize_nvfp4_residual(torch.zeros(0, 32), [1, 2])
    assert q.shape == (0, 48) and q.qdata.shape == (0, 24) and q.dequantize().shape == (0, 48)
    _shape(scalemm.prepare_residual_weight(torch.zeros(0, 32, dtype=BF16), [1, 2]), (0, 48))


def test_op_fakes_match_real_empty_results():
    """The custom ops' fake shapes for M = 0 / T = 0 are the real ones (as test_empty_x_grouped_fakes for the
    grouped quantizers)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    offs = torch.zeros(3, dtype=torch.int32)

    def run(a, b, b3, x, offs):
        ops = torch.ops.scalemm
        return ((ops.gemm(a, b, torch.ones_like(a[:, 0], dtype=torch.float32), torch.ones_like(b[:, 0], dtype=torch.float32),
                          None, BF16, False),
                 ops.grouped_gemm(a, b3, offs, torch.ones_like(a[:, 0], dtype=torch.float32),
                                  torch.ones_like(b3[:, :, 0], dtype=torch.float32), None, torch.float32, True, "token"))
                + ops.quantize_fp8(x, "token") + ops.quantize_mxfp8(x) + ops.quantize_nvfp4(x, "token", None))

    args = (z(0, 32), z(16, 32), z(3, 16, 32), torch.zeros(0, 32, dtype=BF16), offs)
    real = run(*args)
    with FakeTensorMode() as mode:
        fake = run(*(mode.from_tensor(t) for t in args))
    assert len(fake) == len(real) == 10
    for f, r in zip(fake, real):
        assert f.shape == r.shape and f.dtype == r.dtype, (f.shape, r.shape)
