"""FP8Linear: CPU (reference path) always; GPU where there is one."""
import pytest
import torch

from scalemm.nn import FP8Linear


def _check(device):
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128, bias=True, device=device, dtype=torch.bfloat16)
    mod = FP8Linear.from_linear(lin)
    x = torch.randn(3, 5, 256, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        y, ref = mod(x), lin(x)
    assert y.shape == (3, 5, 128) and y.dtype == torch.bfloat16
    rel = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
    assert rel < 0.06, rel  # e4m3 quantization of both operands: a few percent
    assert "per-token" in repr(mod)


def test_fp8_linear_cpu():
    _check("cpu")


@pytest.mark.gpu
def test_fp8_linear_gpu():
    _check("cuda")


def test_fp8_linear_errors():
    with pytest.raises(ValueError, match="in_features % 16"):
        FP8Linear(10, 16)
    mod = FP8Linear.from_linear(torch.nn.Linear(32, 16))
    with pytest.raises(ValueError, match="expected x"):
        with torch.no_grad():
            mod(torch.randn(2, 16))
    with pytest.raises(RuntimeError, match="inference"):
        mod(torch.randn(2, 32, requires_grad=True))
