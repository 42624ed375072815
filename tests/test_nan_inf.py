"""docs/nan_inf.md, claim by claim, through the public API on CPU (the CUDA kernels match the
reference bit for bit, tests/test_quantize_gpu.py)."""
import pytest
import torch

import scalemm
from scalemm.nn import FP8Linear

NAN, INF = float("nan"), float("inf")
TINY = 2.0 ** -128  # alpha of a NaN tensor: 1 / FLT_MAX rounded to fp32


def _x(M=32, K=64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g) * scale


def test_nvfp4_nan_loses_the_tensor():
    x = _x()
    x[3, 5] = NAN
    q = scalemm.quantize_nvfp4(x)
    assert torch.isnan(q.amax) and q.alpha.item() == TINY
    d = q.dequantize()
    assert torch.isnan(d[3, 0:16]).all()  # the NaN's block
    others = torch.cat([d[:3], d[4:]])
    assert torch.equal(others.abs(), torch.full_like(others, 6 * 448 * TINY))  # ~7.9e-36, every value
    rows = scalemm.quantize_nvfp4(x, scaling="token")  # per token: only its row
    assert torch.isnan(rows.amax[3]) and torch.isfinite(torch.cat([rows.amax[:3], rows.amax[4:]])).all()
    assert torch.equal(rows.dequantize()[0], scalemm.quantize_nvfp4(x[:1], scaling="token").dequantize()[0])
    assert (~torch.isfinite(q.amax)).item() and (~torch.isfinite(rows.amax)).nonzero().flatten().tolist() == [3]


def test_nvfp4_inf_drops_the_global_scale():
    x = _x(scale=1000.0)
    x[3, 5] = -INF
    q = scalemm.quantize_nvfp4(x)
    assert q.amax.item() == INF and q.alpha.item() == 1.0
    d = q.dequantize()
    assert d[3, 5].item() == -2688.0
    assert d.abs().max().item() == 2688.0 and x[torch.isfinite(x)].abs().max() > 2688  # saturated blocks
    small = _x(scale=1e-3)
    small[3, 5] = INF
    assert (scalemm.quantize_nvfp4(small).dequantize() == 0).float().mean() > 0.99  # blocks below ~0.006


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_fp8_scale_one(bad):
    x = _x()
    x[3, 5] = bad
    q = scalemm.quantize_fp8(x)
    assert q.scale_inv.item() == 1.0
    v = q.dequantize()[3, 5].item()
    assert v != v if bad != bad else v == (448.0 if bad > 0 else -448.0)
    nan_bytes = (q.data.view(torch.uint8) & 0x7F) == 0x7F
    assert nan_bytes.any().item() == (bad != bad)  # how to find a NaN after quantization
    tiny = scalemm.quantize_fp8(torch.cat([x[:1] * 1e-4, torch.full((1, 64), bad)]))
    assert (tiny.data[0].float() == 0).all()  # below 2^-10 with scale 1: 0


def test_mxfp8_block_local():
    x = _x()
    x[3, 5], x[7, 40] = NAN, INF
    q = scalemm.quantize_mxfp8(x)
    d = q.dequantize()
    assert torch.isnan(d[3, 0:32]).all() and d[7, 40].item() == INF and (d[7, 32:40] == 0).all()
    assert (q.scales == 0xFF).sum() == 1 and (q.scales == 254).sum() == 1
    clean = scalemm.quantize_mxfp8(_x())
    keep = torch.ones(32, 64, dtype=torch.bool)
    keep[3, 0:32] = keep[7, 32:64] = False
    assert torch.equal(d[keep], clean.dequantize()[keep])


def test_fp8_linear_nan_and_inf_rows():
    """NaN in a row of x: that row of y is NaN. Inf: that row is finite (the Inf quantized as +-448 with
    scale 1): exactly the output for x with the Inf replaced by +-448. Other rows are unaffected."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    layer = FP8Linear.from_linear(lin)
    x = torch.randn(4, 64)
    with torch.no_grad():
        clean = layer(x)
        for bad in (NAN, INF, -INF):
            xb = x.clone()
            xb[1, 7] = bad
            y = layer(xb)
            assert torch.equal(y[[0, 2, 3]], clean[[0, 2, 3]])
            if bad != bad:
                assert torch.isnan(y[1]).all() and torch.isnan(lin(xb)[1]).all()
            else:
                assert torch.isfinite(y[1]).all() and not torch.isfinite(lin(xb)[1]).all()
                xs = x.clone()
                xs[1, 7] = 448.0 if bad > 0 else -448.0
                assert torch.equal(y[1], layer(xs)[1])


def test_fp8_linear_nan_and_inf_weights():
    torch.manual_seed(1)
    for bad, check in ((NAN, torch.isnan), (INF, torch.isfinite)):
        lin = torch.nn.Linear(64, 32)
        with torch.no_grad():
            lin.weight[3, 2] = bad
            y = FP8Linear.from_linear(lin)(torch.randn(5, 64))
        assert check(y[:, 3]).all() and torch.isfinite(torch.cat([y[:, :3], y[:, 4:]], 1)).all()


@pytest.mark.parametrize("weight_scaling", ["token", "tensor"])
def test_nvfp4_linear_nan_and_inf(weight_scaling):
    """docs/nan_inf.md's NVFP4Linear table (CPU reference path: the kernels match it bit for bit)."""
    from scalemm.nn import NVFP4Linear
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight[3, 5] = float("nan")
        y = NVFP4Linear.from_linear(lin, weight_scaling=weight_scaling)(x)
        assert y.isnan().any(0).nonzero().flatten().tolist() == [3] and y[:, 3].isnan().all()
        lin.weight[3, 5] = float("inf")
        layer = NVFP4Linear.from_linear(lin, weight_scaling=weight_scaling)
        assert not torch.isfinite(layer.weight_amax).all() and torch.isfinite(layer(x)).all()
        lin.weight[3, 5] = 0.1
        w4a4 = NVFP4Linear.from_linear(lin, weight_scaling=weight_scaling, mode="w4a4")
        x[1, 7] = float("nan")
        y = w4a4(x)
        assert y.isnan().any(1).nonzero().flatten().tolist() == [1] and y[1].isnan().all()
        x[1, 7] = float("inf")
        assert torch.isfinite(w4a4(x)).all()  # finite and wrong
        assert not torch.isfinite(NVFP4Linear.from_linear(lin, weight_scaling=weight_scaling)(x)[1]).all()  # w4a16
