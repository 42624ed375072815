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


# ---------------------------------------------------------------------------
# model casts: the quantized weight and its scales keep their dtypes; the bias follows the model
# ---------------------------------------------------------------------------

CASTS = {
    "to(bf16)": (lambda m: m.to(torch.bfloat16), torch.bfloat16),
    "half()": (lambda m: m.half(), torch.float16),
    "float()": (lambda m: m.float(), torch.float32),
    "bfloat16()": (lambda m: m.bfloat16(), torch.bfloat16),
    "to(cpu, fp16)": (lambda m: m.to("cpu", torch.float16), torch.float16),
    "to(dtype=fp32)": (lambda m: m.to(dtype=torch.float32), torch.float32),
}


@pytest.mark.parametrize("cast", CASTS)
def test_fp8_linear_survives_model_casts(cast):
    fn, dtype = CASTS[cast]
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32, dtype=torch.bfloat16)
    model = torch.nn.Sequential(FP8Linear.from_linear(lin), torch.nn.ReLU())
    layer = model[0]
    w, s = layer.weight.clone(), layer.weight_scale_inv.clone()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        before = layer(x)
    assert fn(model) is model
    assert layer.weight.dtype == torch.float8_e4m3fn and torch.equal(layer.weight.view(torch.uint8), w.view(torch.uint8))
    assert layer.weight_scale_inv.dtype == torch.float32 and torch.equal(layer.weight_scale_inv, s)
    assert layer.bias.dtype == dtype  # the bias follows the model
    with torch.no_grad():
        y = model(x.to(dtype))
    assert y.dtype == dtype and y.shape == (3, 32)
    if dtype == torch.bfloat16:  # nothing was lost: the same bits as before the cast
        assert torch.equal(y, torch.relu(before))
    assert list(layer.state_dict()) == ["weight", "weight_scale_inv", "bias"]


def test_fp8_linear_device_moves_and_to_empty():
    layer = FP8Linear.from_linear(torch.nn.Linear(64, 32))
    meta = layer.to("meta", torch.bfloat16)  # a device move (and a cast) at once
    assert meta.weight.device.type == "meta" and meta.weight.dtype == torch.float8_e4m3fn
    assert meta.weight_scale_inv.dtype == torch.float32 and meta.bias.dtype == torch.bfloat16
    fresh = FP8Linear(64, 32, device="meta").to_empty(device="cpu")  # meta-device init, then load
    assert fresh.weight.device.type == "cpu" and fresh.weight.dtype == torch.float8_e4m3fn
    fresh.load_state_dict(FP8Linear.from_linear(torch.nn.Linear(64, 32)).state_dict())
    with torch.no_grad():
        assert fresh(torch.randn(2, 64)).dtype == torch.float32


def test_fp8_linear_errors_name_the_layer():
    layer = FP8Linear.from_linear(torch.nn.Linear(64, 32))
    where = r"FP8Linear\(in_features=64, out_features=32\)"
    with torch.no_grad():
        with pytest.raises(TypeError, match=where + r": x must be bfloat16, float16 or float32, got torch.float64"):
            layer(torch.randn(2, 64, dtype=torch.float64))
        with pytest.raises(ValueError, match=where + r": expected x\[\.\.\., 64\], got shape \(2, 16\)"):
            layer(torch.randn(2, 16))
        with pytest.raises(ValueError, match=where + r": x is on meta, the layer on cpu"):
            layer(torch.randn(2, 64, device="meta"))
        with pytest.raises(TypeError, match=where + r": x must be a torch.Tensor, got list"):
            layer([[0.0] * 64])
        broken = FP8Linear.from_linear(torch.nn.Linear(64, 32))
        broken.weight = broken.weight.to(torch.bfloat16)  # replaced by hand, not by a cast
        with pytest.raises(TypeError, match=where + r": weight must be float8_e4m3fn \[32, 64\], got torch.bfloat16"):
            broken(torch.randn(2, 64))
    with pytest.raises(RuntimeError, match=where + ": an inference module"):
        layer(torch.randn(2, 64, requires_grad=True))
    with pytest.raises(TypeError, match=r"from_linear: the weight of Linear\(in_features=32, out_features=16\) must be "
                                        r"bfloat16, float16 or float32, got torch.float64"):
        FP8Linear.from_linear(torch.nn.Linear(32, 16).double())
