"""scalemm.swiglu on the CPU: the reference's numerics against an fp64 evaluation, torch's own SwiGLU,
autograd, torch.compile, and bad input. tests/test_swiglu_gpu.py runs the kernels against the same reference."""
import math

import pytest
import torch
import torch.nn.functional as F

import scalemm
from scalemm import reference
from scalemm.activation import swiglu_backward, swiglu_forward

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def exact(h: torch.Tensor, dout: torch.Tensor = None):
    """swiglu (and with dout its backward) in fp64: the values the fp32 formulas approximate."""
    g, u = h.double().chunk(2, dim=-1)
    s = torch.sigmoid(g)
    if dout is None:
        return g * s * u
    d = dout.double()
    return torch.cat([d * u * s * (1 + g * (1 - s)), d * g * s], dim=-1)


def mantissa_bits(dt):
    return {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[dt]


def ulp_error(got: torch.Tensor, ref64: torch.Tensor, scale: torch.Tensor = None) -> float:
    """Max |got - ref64| over the elements in units of the last place of got's dtype at ref64 (tiny values at the
    dtype's smallest normal binade), after taking off 32 fp32 epsilons of `scale` (the size of the formula's
    terms, where a difference of them cancels: dgate near gate = -1.28)."""
    finfo = torch.finfo(got.dtype)
    same = (got.double() == ref64) | (got.isnan() & ref64.isnan())
    e = torch.floor(torch.log2(ref64.abs().clamp(min=finfo.tiny)))
    ulp = torch.exp2(e - mantissa_bits(got.dtype))
    diff = (got.double() - ref64).abs()
    if scale is not None:
        diff = (diff - 32 * 2.0 ** -24 * scale.double()).clamp(min=0)
    err = torch.where(same, torch.zeros_like(ulp), diff / ulp)
    return float(err.max()) if err.numel() else 0.0


def term_scale(h: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """|dout| (1 + |gate|) (1 + |up|) per element of dh: bounds the terms of both halves' formulas."""
    g, u = h.double().abs().chunk(2, dim=-1)
    s = dout.double().abs() * (1 + g) * (1 + u)
    return torch.cat([s, s], dim=-1)


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_is_within_an_ulp_of_fp64(dtype):
    h = inputs((64, 2 * 96), dtype)
    d = inputs((64, 96), dtype, seed=1)
    # one rounding of an fp32 value a few fp32 ulps from the exact one: <= 1 ulp of a 16-bit dtype
    tol = 1.0 if dtype != torch.float32 else 8.0
    assert ulp_error(reference.swiglu(h), exact(h)) <= tol
    assert ulp_error(reference.swiglu_backward(h, d), exact(h, d), term_scale(h, d)) <= tol


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_torch_swiglu_and_its_autograd(dtype):
    h = inputs((3, 5, 2 * 40), dtype).requires_grad_()
    a = scalemm.swiglu(h)
    g, u = h.chunk(2, dim=-1)
    t = F.silu(g) * u  # torch rounds silu's output first: the two differ by the extra rounding
    assert a.shape == t.shape == (3, 5, 40) and a.dtype == dtype
    eps = torch.finfo(dtype).eps
    assert torch.allclose(a.float(), t.float(), rtol=4 * eps, atol=4 * eps)
    d = inputs(a.shape, dtype, seed=2)
    (dh,) = torch.autograd.grad(a, h, d)
    (dt,) = torch.autograd.grad(t, h, d)
    assert torch.allclose(dh.float(), dt.float(), rtol=8 * eps, atol=8 * eps)
    assert torch.equal(dh, reference.swiglu_backward(h.detach(), d))  # the CPU path is the reference


def test_special_values_follow_torch():
    h = torch.tensor([[float("-inf"), float("inf"), float("nan"), 0.0, -100.0, 100.0,
                       2.0, 2.0, 2.0, 2.0, float("inf"), 0.0]])
    a = scalemm.swiglu(h)
    g, u = h.chunk(2, dim=-1)
    t = F.silu(g) * u
    assert torch.equal(a.isnan(), t.isnan())
    fin = ~t.isnan()
    assert torch.equal(a[fin], t[fin])


def test_gradcheck_fp32_formulas():
    # the fp32 formulas against finite differences (fp32 in, so a loose tolerance)
    h = inputs((4, 12), torch.float32, seed=3).requires_grad_()
    d = inputs((4, 6), torch.float32, seed=4)
    (dh,) = torch.autograd.grad(scalemm.swiglu(h), h, d)
    h64 = h.detach().double().requires_grad_()
    g, u = h64.chunk(2, dim=-1)
    (ref,) = torch.autograd.grad(F.silu(g) * u, h64, d.double())
    assert torch.allclose(dh.double(), ref, rtol=1e-5, atol=1e-6)


def test_empty_and_leading_dims():
    for shape in [(0, 8), (2, 0, 8), (8,), (1, 1, 1, 2)]:
        h = torch.randn(shape, requires_grad=True)
        a = scalemm.swiglu(h)
        assert a.shape == (*shape[:-1], shape[-1] // 2)
        a.sum().backward()
        assert h.grad.shape == h.shape


def test_torch_compile_fullgraph():
    def block(h):
        return scalemm.swiglu(h).square().sum()
    h = inputs((16, 64), torch.float32).requires_grad_()
    f = torch.compile(block, fullgraph=True, backend="aot_eager")
    loss = f(h)
    loss.backward()
    h2 = h.detach().clone().requires_grad_()
    block(h2).backward()
    assert torch.allclose(loss, block(h.detach()))
    assert torch.equal(h.grad, h2.grad)


@pytest.mark.parametrize("bad,err,match", [
    (torch.randn(4, 7), ValueError, "h"), (torch.randn(4, 0), ValueError, "h"),
    (torch.tensor(1.0), ValueError, "h"), (torch.randn(4, 8).double(), TypeError, "h"),
    (torch.ones(4, 8, dtype=torch.int32), TypeError, "h"), ([1.0, 2.0], TypeError, "h")])
def test_bad_input_names_the_argument(bad, err, match):
    with pytest.raises(err, match=match):
        scalemm.swiglu(bad)


def test_backward_checks_dout():
    h = torch.randn(4, 8)
    with pytest.raises(ValueError, match="dout"):
        swiglu_backward(h, torch.randn(4, 8))
    with pytest.raises(TypeError, match="dout"):
        swiglu_backward(h, None)
    # a dout of another dtype is taken in h's dtype
    d = torch.randn(4, 4, dtype=torch.float64)
    assert torch.equal(swiglu_backward(h, d), reference.swiglu_backward(h, d.float()))


def test_forward_is_the_reference_on_cpu():
    h = inputs((33, 2 * 17), torch.bfloat16)
    assert torch.equal(swiglu_forward(h), reference.swiglu(h))
    assert math.isfinite(float(swiglu_forward(h).float().sum()))
