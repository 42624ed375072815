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


# ---------------------------------------------------------------------------
# NVFP4Linear
# ---------------------------------------------------------------------------

import scalemm  # noqa: E402
from scalemm.formats import layout  # noqa: E402
from scalemm.nn import NVFP4Linear  # noqa: E402


def _nvfp4_check(device, mode, weight_scaling, x_dtype=torch.bfloat16):
    """NVFP4Linear is scalemm.gemm on the layer's quantized weight, bit for bit; within NVFP4's error of nn.Linear."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 128, bias=True, device=device, dtype=x_dtype)
    mod = NVFP4Linear.from_linear(lin, mode=mode, weight_scaling=weight_scaling)
    x = torch.randn(3, 5, 256, device=device, dtype=x_dtype)
    with torch.no_grad():
        y, ref = mod(x), lin(x)
    w = scalemm.quantize_nvfp4(lin.weight.detach(), scaling=weight_scaling)
    a = scalemm.quantize_nvfp4(x.reshape(15, 256), scaling="token") if mode == "w4a4" else x.reshape(15, 256)
    assert y.shape == (3, 5, 128) and y.dtype == x_dtype
    assert torch.equal(y.reshape(15, 128), scalemm.gemm(a, w, bias=lin.bias.detach(), out_dtype=x_dtype))
    rel = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
    assert rel < (0.2 if mode == "w4a4" else 0.15), rel  # e2m1 with e4m3 block scales: ~10% per operand
    assert mode in repr(mod)


NVFP4_CASES = [("w4a16", "token", torch.bfloat16), ("w4a16", "tensor", torch.float16), ("w4a4", "token", torch.bfloat16),
               ("w4a4", "tensor", torch.float32)]


@pytest.mark.parametrize("mode,weight_scaling,x_dtype", NVFP4_CASES)
def test_nvfp4_linear_cpu(mode, weight_scaling, x_dtype):
    _nvfp4_check("cpu", mode, weight_scaling, x_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,weight_scaling,x_dtype", NVFP4_CASES)
def test_nvfp4_linear_gpu(mode, weight_scaling, x_dtype):
    _nvfp4_check("cuda", mode, weight_scaling, x_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 16, 64, 300])
@pytest.mark.parametrize("mode", ["w4a16", "w4a4"])
def test_nvfp4_linear_gpu_matches_cpu_and_replays_in_a_graph(tokens, mode):
    """Decode (the skinny kernel) and prefill token counts: the GPU layer matches the CPU reference layer within
    accumulation order, and a captured call (the weight's first call made before the capture) replays on new x."""
    torch.manual_seed(2)
    lin = torch.nn.Linear(1024, 512, dtype=torch.bfloat16)
    cpu = NVFP4Linear.from_linear(lin, mode=mode)
    gpu = NVFP4Linear.from_linear(lin.cuda(), mode=mode)
    x = torch.randn(tokens, 1024, dtype=torch.bfloat16)
    with torch.no_grad():
        want = cpu(x).double()
        got = gpu(x.cuda()).double().cpu()
        assert ((got - want).norm() / want.norm()).item() < 1e-2  # bf16 outputs of two accumulation orders
        xg = x.cuda()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = gpu(xg)
        xg.copy_(torch.randn(tokens, 1024, dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, gpu(xg))


def test_nvfp4_linear_from_blocks_and_state_dict():
    torch.manual_seed(3)
    lin = torch.nn.Linear(128, 64, dtype=torch.bfloat16)
    q = scalemm.quantize_nvfp4(lin.weight.detach(), scaling="token")
    ref = NVFP4Linear.from_quantized(q, lin.bias.detach())
    blocks = layout.unswizzle_scales(q.scales, 64, 128 // 16)
    mod = NVFP4Linear.from_blocks(q.qdata, blocks, q.alpha, lin.bias.detach())
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(mod(x), ref(x))
        fresh = NVFP4Linear(128, 64)
        out = fresh(x)  # zero weights: the bias alone
        assert torch.equal(out, torch.zeros_like(out))
        fresh.load_state_dict(mod.state_dict())  # in place: the layer sees the new weights
        assert torch.equal(fresh(x), ref(x))
    assert list(mod.state_dict()) == ["weight", "weight_scales", "weight_alpha", "weight_amax", "bias"]
    per_tensor = NVFP4Linear.from_blocks(q.qdata, blocks, torch.tensor(0.5), mode="w4a4")
    assert per_tensor.weight_scaling == "tensor" and per_tensor.bias is None


@pytest.mark.parametrize("cast", CASTS)
def test_nvfp4_linear_survives_model_casts(cast):
    fn, dtype = CASTS[cast]
    torch.manual_seed(4)
    model = torch.nn.Sequential(NVFP4Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16), mode="w4a4"),
                                torch.nn.ReLU())
    layer = model[0]
    kept = {name: layer._buffers[name].clone() for name in NVFP4Linear._QUANTIZED}
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        before = layer(x)
    assert fn(model) is model
    for name, t in kept.items():
        got = layer._buffers[name]
        assert got.dtype == t.dtype and torch.equal(got.view(torch.uint8), t.view(torch.uint8)), name
    assert layer.bias.dtype == dtype
    with torch.no_grad():
        y = model(x.to(dtype))
    assert y.dtype == dtype and y.shape == (3, 32)
    if dtype == torch.bfloat16:
        assert torch.equal(y, torch.relu(before))


def test_nvfp4_linear_leading_dims_and_no_tokens():
    layer = NVFP4Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    with torch.no_grad():
        assert layer(torch.randn(2, 0, 64, dtype=torch.bfloat16)).shape == (2, 0, 32)
        assert layer(torch.randn(64, dtype=torch.bfloat16)).shape == (32,)


def test_nvfp4_linear_errors_name_the_layer():
    where = r"NVFP4Linear\(in_features=64, out_features=32\)"
    with pytest.raises(ValueError, match="in_features % 16"):
        NVFP4Linear(40, 32)
    with pytest.raises(ValueError, match="'mode' must be one of"):
        NVFP4Linear(64, 32, mode="w8a8")
    with pytest.raises(ValueError, match="'weight_scaling' must be"):
        NVFP4Linear(64, 32, weight_scaling="block")
    layer = NVFP4Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    with torch.no_grad():
        with pytest.raises(TypeError, match=where + r": x must be bfloat16 or float16 with mode='w4a16' .* got "
                                                  r"torch.float32: cast the model .* or use mode='w4a4'"):
            layer(torch.randn(2, 64))  # W4A16 takes 16-bit activations; mode="w4a4" quantizes fp32 ones
        with pytest.raises(TypeError, match=where + r": x must be bfloat16 or float16, got torch.float64"):
            layer(torch.randn(2, 64, dtype=torch.float64))
        with pytest.raises(ValueError, match=where + r": expected x\[\.\.\., 64\], got shape \(2, 16\)"):
            layer(torch.randn(2, 16, dtype=torch.bfloat16))
        broken = NVFP4Linear.from_linear(torch.nn.Linear(64, 32))
        broken.weight_scales = broken.weight_scales.view(torch.uint8)  # replaced by hand
        with pytest.raises(TypeError, match=where + ": its weight buffers do not form an NVFP4 weight"):
            broken(torch.randn(2, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match=where + ": an inference module"):
        layer(torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True))
    q = scalemm.quantize_nvfp4(torch.randn(32, 64), columnwise=True, rht=True)
    with pytest.raises(TypeError, match="with a rowwise copy and no RHT"):
        NVFP4Linear.from_quantized(q.columnwise)  # RHT-transformed
    with pytest.raises(TypeError, match="with a rowwise copy and no RHT"):
        NVFP4Linear.from_quantized(scalemm.quantize_nvfp4(torch.randn(32, 64), rowwise=False, columnwise=True))
    with pytest.raises(ValueError, match=r"'bias' must be None or a \[32\]"):
        NVFP4Linear.from_quantized(q, torch.zeros(16))
    with pytest.raises(TypeError, match=r"'block_scales' must be a float8_e4m3fn \[32, 4\]"):
        NVFP4Linear.from_blocks(q.qdata, torch.zeros(32, 8, dtype=torch.float8_e4m3fn), q.alpha)


def test_convert_for_inference():
    """nn.Linear submodules swapped in place for NVFP4Linear / FP8Linear; ineligible ones reported with why; a
    shared Linear converted once; the model's outputs are the layers' own."""
    from scalemm.nn import FP8Linear, convert_for_inference
    torch.manual_seed(5)
    shared = torch.nn.Linear(64, 64, dtype=torch.bfloat16)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128, dtype=torch.bfloat16), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64, dtype=torch.bfloat16), shared, shared,
                                torch.nn.Linear(64, 20, dtype=torch.bfloat16),  # out_features % 8
                                torch.nn.Linear(20, 32, dtype=torch.bfloat16))  # in_features % 16
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        want = NVFP4Linear.from_linear(model[0], mode="w4a4")(x)
    report = convert_for_inference(model, "nvfp4", mode="w4a4", filter=lambda name, m: name != "2")
    assert report.converted == ["0", "3", "4"] and set(report.skipped) == {"2", "5", "6"}
    assert report.skipped["2"] == "excluded by the filter" and "out_features % 8" in report.skipped["5"]
    assert str(report).startswith("scalemm.nn.convert_for_inference: 3 converted, 3 skipped")
    assert isinstance(model[0], NVFP4Linear) and model[0].mode == "w4a4" and model[3] is model[4]
    with torch.no_grad():
        assert torch.equal(model[0](x), want)
    report = convert_for_inference(model, "fp8")  # the converted layers are left alone
    assert report.converted == ["2"] and isinstance(model[2], FP8Linear) and isinstance(model[0], NVFP4Linear)
    with pytest.raises(ValueError, match="'format' must be one of"):
        convert_for_inference(model, "int4")
    with pytest.raises(ValueError, match="'mode' must be one of"):
        convert_for_inference(model, mode="w2a2")
    with pytest.raises(TypeError, match="cannot replace the model itself"):
        convert_for_inference(torch.nn.Linear(64, 64))


@pytest.mark.gpu
@pytest.mark.parametrize("in_features,out_features", [(1040, 24), (2080, 8), (16, 8), (4096, 1000), (7168, 2112)])
@pytest.mark.parametrize("tokens", [1, 7, 17, 65, 129])
def test_nvfp4_linear_gpu_odd_shapes(in_features, out_features, tokens):
    """Shapes off the usual grid (K an odd multiple of 16, so no skinny kernel; N of 8 or not a multiple of 64; one
    block of K) at decode and prefill token counts: W4A4 with fp32 activations (fp32 output) against the CPU
    layer within accumulation order, W4A16 in bf16 within its rounding."""
    torch.manual_seed(in_features + out_features + tokens)
    lin = torch.nn.Linear(in_features, out_features, dtype=torch.float32)
    x = torch.randn(tokens, in_features)
    for mode, xs, tol in (("w4a4", x, 1e-5), ("w4a16", x.to(torch.bfloat16), 4e-3)):
        cpu = NVFP4Linear.from_linear(lin, mode=mode)
        gpu = NVFP4Linear.from_linear(lin.cuda(), mode=mode)
        lin.cpu()
        with torch.no_grad():
            want, got = cpu(xs).double(), gpu(xs.cuda()).double().cpu()
        assert not got.isnan().any()
        assert ((got - want).norm() / want.norm()).item() <= tol, mode


def _compiled_inference_modules(device):
    torch.manual_seed(6)
    lin = torch.nn.Linear(256, 64, device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 3, 256, device=device, dtype=torch.bfloat16)
    layers = [FP8Linear.from_linear(lin), NVFP4Linear.from_linear(lin), NVFP4Linear.from_linear(lin, mode="w4a4"),
              NVFP4Linear.from_linear(lin, mode="w4a4", weight_scaling="tensor")]
    with torch.no_grad():
        for layer in layers:
            want = layer(x)
            got = torch.compile(layer, backend="aot_eager", fullgraph=True)(x)  # scalemm.ops' custom ops
            assert torch.equal(got, want), layer


def test_inference_modules_compile_fullgraph():
    _compiled_inference_modules("cpu")


@pytest.mark.gpu
def test_inference_modules_compile_fullgraph_gpu():
    _compiled_inference_modules("cuda")


def test_nvfp4_linear_built_under_inference_mode():
    """A layer built (and its state loaded) under torch.inference_mode: its buffers are ordinary tensors, so an
    in-place load bumps their versions (the GEMM's prepared copy of the codes is keyed on them) and shows in forward."""
    torch.manual_seed(7)
    a, b = torch.nn.Linear(64, 32, dtype=torch.bfloat16), torch.nn.Linear(64, 32, dtype=torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        layer = NVFP4Linear.from_linear(a)
        assert not any(t.is_inference() for t in layer.state_dict().values())
        want_a, want_b = layer(x), NVFP4Linear.from_linear(b)(x)
        version = layer.weight._version
        layer.load_state_dict(NVFP4Linear.from_linear(b).state_dict())
        assert layer.weight._version > version
        assert torch.equal(layer(x), want_b) and not torch.equal(want_a, want_b)
    with torch.no_grad():
        assert torch.equal(layer(x), want_b)


def test_quantize_for_inference_example_runs():
    """examples/quantize_for_inference.py end to end on the CPU (the reference path): every eligible layer converted,
    the 50-wide head skipped with its reason, the output close to the bf16 model's."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "quantize_for_inference.py")
    spec = importlib.util.spec_from_file_location("quantize_for_inference", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    for argv, floor in ((["--layers", "1", "--hidden", "64", "--tokens", "3", "--compile"], 15.0),
                        (["--layers", "1", "--hidden", "64", "--mode", "w4a4"], 12.0),
                        (["--layers", "1", "--hidden", "64", "--format", "fp8"], 25.0)):
        report, sqnr = example.main(argv)
        assert report.converted == ["0", "2"] and list(report.skipped) == ["3"], report
        assert sqnr > floor, (argv, sqnr)
