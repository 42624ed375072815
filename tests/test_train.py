"""Training layers on CPU (scalemm's reference path): scalemm.nn.Linear, GroupedLinear, convert(), the
recipes and the train_* custom ops. The same checks run on CUDA in tests/test_train_gpu.py.

Two kinds of gradient checks:
- against an emulated reference: the same quantizer calls (scalemm.training), the copies
  dequantized and multiplied in fp64; the layer may differ only by fp32 accumulation order and
  the output rounding;
- against high-precision autograd (fp64): the quantization error itself, as an SQNR floor.
"""
import copy
import importlib.util
import io
import math
import os
import pickle

import pytest
import torch

import scalemm
from scalemm import training
from scalemm.formats import layout
from scalemm.nn import ConvertReport, GroupedLinear, Linear, convert, linear_eligibility
from scalemm.recipes import NVFP4, FP8DelayedScaling, FP8Rowwise, FP8Tensorwise, GemmOptions, from_key

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPES = {"fp8_tensorwise": FP8Tensorwise(), "fp8_rowwise": FP8Rowwise(), "nvfp4": NVFP4(),
           "nvfp4_token": NVFP4(activation_scaling="token", grad_scaling="token", weight_scaling="tensor")}
F64 = torch.float64


def _load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(a, b):
    a, b = a.to(F64), b.to(F64)
    return ((a - b).norm() / b.norm()).item()


def sqnr(a, ref):
    a, ref = a.to(F64), ref.to(F64)
    return 10 * math.log10(ref.norm().item() ** 2 / max((a - ref).norm().item() ** 2, 1e-300))


def _pad(t, rows):
    return torch.nn.functional.pad(t, (0, 0, 0, rows - t.shape[0]))


# ---------------------------------------------------------------------------
# recipes
# ---------------------------------------------------------------------------

def test_recipes_state_their_choices_and_round_trip():
    for r in RECIPES.values():
        assert from_key(r.key()) == r and hash(r) == hash(from_key(r.key()))
        assert r.gemm("fprop") is r.fprop and r.describe().startswith(type(r).__name__)
    assert FP8Tensorwise().fprop.fast_accum and not FP8Tensorwise().dgrad.fast_accum
    assert not FP8Rowwise().wgrad.fast_accum and FP8Rowwise().scaling("weight") == "token"
    n = NVFP4()
    assert (n.scaling("input"), n.scaling("weight"), n.scaling("grad")) == ("tensor", "token", "tensor")
    assert n.rht("input") and n.rht("grad") and not n.rht("weight")
    assert n.stochastic_rounding("grad") and not n.stochastic_rounding("input")
    assert not NVFP4(wgrad_rht=False).rht("input")
    custom = FP8Rowwise(fprop=GemmOptions(fast_accum=False))
    assert from_key(custom.key()) == custom and custom != FP8Rowwise()


def test_recipe_errors():
    with pytest.raises(ValueError, match="no fast-accumulation mode"):
        NVFP4(fprop=GemmOptions(fast_accum=True))
    with pytest.raises(ValueError, match="'activation_scaling' must be one of"):
        NVFP4(activation_scaling="block")
    with pytest.raises(TypeError, match="'wgrad_rht' must be a bool"):
        NVFP4(wgrad_rht=1)
    with pytest.raises(TypeError, match="'fast_accum' must be a bool"):
        GemmOptions(fast_accum=1)
    with pytest.raises(TypeError, match="'dgrad' must be a GemmOptions"):
        FP8Tensorwise(dgrad=True)
    with pytest.raises(ValueError, match="role must be one of"):
        FP8Rowwise().scaling("bias")
    with pytest.raises(ValueError, match="gemm must be one of"):
        FP8Rowwise().gemm("fwd")
    with pytest.raises(ValueError, match="not a recipe key"):
        from_key("FP8Rowwise")
    with pytest.raises(TypeError, match="'recipe' must be a scalemm.recipes recipe"):
        Linear(32, 32, recipe="fp8")


# ---------------------------------------------------------------------------
# Linear against the emulated reference
# ---------------------------------------------------------------------------

def _history(hist, role):
    """FP8DelayedScaling: quantizer arguments scaling from the largest amax in the layer's history of `role` (hist:
    role -> the history before the step), or none."""
    return {} if hist is None else dict(amax=hist[role].amax(0))


def emulated_linear(x2, w, b, dy2, recipe, seed, hist=None):
    """(y, dx, dW) of the recipe computed from the same quantized copies the layer makes (padded to
    16 tokens as the layer pads), dequantized, in fp64. hist: see _history."""
    M = x2.shape[0]
    Mp = layout.round_up(M, 16)
    xq = training.quantize(_pad(x2, Mp), recipe, "input", rowwise=True, columnwise=True, **_history(hist, "input"))
    wq = training.quantize(w, recipe, "weight", rowwise=True, columnwise=True, **_history(hist, "weight"))
    torch.manual_seed(seed)  # the layer's backward draws the stochastic-rounding seed first thing
    dq = training.quantize(_pad(dy2, Mp), recipe, "grad", rowwise=True, columnwise=True, **_history(hist, "grad"))
    deq = lambda q: q.dequantize(F64)  # noqa: E731
    y = deq(xq)[:M] @ deq(wq).T + b.to(F64)
    dx = deq(dq)[:M] @ deq(wq.columnwise).T  # dy W, W from its columnwise copy W^T
    dw = deq(dq.columnwise) @ deq(xq.columnwise).T  # dy^T x from the two columnwise (RHT'd) copies
    return y, dx, dw


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_matches_emulated_reference(name, dtype):
    recipe = RECIPES[name]
    torch.manual_seed(0)
    layer = Linear(64, 48, recipe=recipe, dtype=dtype)
    x = (torch.randn(3, 7, 64) * torch.logspace(-1, 1, 64)).to(dtype).requires_grad_()  # M = 21: padded to 32
    y = layer(x)
    dy = torch.randn_like(y)
    torch.manual_seed(1)
    y.backward(dy)
    ye, dxe, dwe = emulated_linear(x.detach().reshape(-1, 64), layer.weight.detach(), layer.bias.detach(),
                                   dy.reshape(-1, 48), recipe, seed=1)
    tol = 1e-5 if dtype == torch.float32 else 4e-3  # fp32 accumulation order; bf16: one output rounding
    assert y.dtype == dtype and x.grad.dtype == dtype and layer.weight.grad.dtype == dtype
    assert rel(y.reshape(-1, 48), ye) < tol
    assert rel(x.grad.reshape(-1, 64), dxe) < tol
    assert rel(layer.weight.grad, dwe) < tol
    assert rel(layer.bias.grad, dy.reshape(-1, 48).to(F64).sum(0)) < tol


# dB; measured about 28.5 (FP8) and 15.3 (NVFP4)
SQNR_FLOOR = {"fp8_tensorwise": 26.0, "fp8_rowwise": 26.0, "nvfp4": 13.0, "nvfp4_token": 13.0}


@pytest.mark.parametrize("name", RECIPES)
def test_linear_gradients_against_high_precision(name):
    """The quantization error itself: y, dx and dW against fp64 autograd on the unquantized
    operands, SQNR >= 26 dB for FP8 (e4m3: 3 mantissa bits), >= 13 dB for NVFP4 (e2m1)."""
    torch.manual_seed(0)
    layer = Linear(128, 64, recipe=RECIPES[name])
    x = torch.randn(256, 128, requires_grad=True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64 = x.detach().to(F64).requires_grad_()
    w64 = layer.weight.detach().to(F64).requires_grad_()
    y64 = torch.nn.functional.linear(x64, w64, layer.bias.detach().to(F64))
    y64.backward(dy.to(F64))
    floor = SQNR_FLOOR[name]
    for got, want in ((y, y64), (x.grad, x64.grad), (layer.weight.grad, w64.grad)):
        assert sqnr(got, want) > floor, (name, sqnr(got, want))


def test_linear_without_input_grad_and_frozen_weight():
    torch.manual_seed(0)
    layer = Linear(32, 16)
    x = torch.randn(5, 32)
    layer(x).sum().backward()  # x needs no gradient: no dgrad, no columnwise weight copy
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    xg = torch.randn(5, 32, requires_grad=True)
    layer(xg).sum().backward()  # no wgrad
    assert xg.grad is not None and xg.grad.shape == (5, 32)
    with torch.no_grad():
        assert layer(x).shape == (5, 16)
    with torch.inference_mode():
        assert layer(x).shape == (5, 16)


def test_linear_empty_and_unaligned_tokens():
    layer = Linear(32, 16)
    x = torch.randn(0, 32, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert y.shape == (0, 16) and torch.equal(layer.weight.grad, torch.zeros(16, 32))
    x = torch.randn(1, 32, requires_grad=True)  # one token: padded to 16 for the columnwise copies
    layer(x).sum().backward()
    assert x.grad.shape == (1, 32)


def test_linear_recipe_none_is_nn_linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(20, 12)
    layer = Linear.from_linear(lin, recipe=None)  # any shape: no scalemm GEMM
    x = torch.randn(4, 20)
    assert torch.equal(layer(x), lin(x))


# ---------------------------------------------------------------------------
# weight cache, state dict, autocast, pickling
# ---------------------------------------------------------------------------

def _count_weight_quantizations(monkeypatch):
    calls = []
    real = training.quantize

    def counting(x2, recipe, role, **kw):
        if role == "weight":
            calls.append(kw)
        return real(x2, recipe, role, **kw)
    monkeypatch.setattr(training, "quantize", counting)
    return calls


def test_weight_is_quantized_once_per_optimizer_step(monkeypatch):
    calls = _count_weight_quantizations(monkeypatch)
    torch.manual_seed(0)
    layer = Linear(32, 16)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.randn(8, 32, requires_grad=True)
    for _ in range(3):  # gradient accumulation: one quantization
        layer(x).square().sum().backward()
    assert len(calls) == 1 and calls[0]["columnwise"]
    opt.step()  # in place: a new _version
    y = layer(x)
    assert len(calls) == 2
    fresh = Linear(32, 16)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(y, fresh(x))  # not a stale copy
    with torch.no_grad():
        layer.weight.mul_(2)
    layer(x)
    assert len(calls) == 4  # (fresh's own) + the changed weight
    layer.weight = torch.nn.Parameter(layer.weight.detach().clone())  # a new tensor
    layer(x)
    assert len(calls) == 5
    layer.cache_weight = False
    layer(x)
    layer(x)
    assert len(calls) == 7


def test_state_dict_is_nn_linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    layer = Linear(64, 32)
    assert list(layer.state_dict()) == list(lin.state_dict()) == ["weight", "bias"]
    layer.load_state_dict(lin.state_dict())
    back = torch.nn.Linear(64, 32)
    back.load_state_dict(layer.state_dict())
    assert torch.equal(back.weight, lin.weight) and torch.equal(back.bias, lin.bias)
    g = GroupedLinear(4, 32, 16, bias=True)
    assert list(g.state_dict()) == ["weight", "bias"] and g.weight.shape == (4, 16, 32)
    assert "recipe=FP8Rowwise" in repr(layer) and "num_experts=4" in repr(g)


def test_autocast_and_fp32_master_weights():
    torch.manual_seed(0)
    layer = Linear(64, 32)  # fp32 parameters
    x = torch.randn(16, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


def test_pickle_deepcopy_and_device_moves_drop_the_cache():
    layer = Linear(32, 16)
    x = torch.randn(16, 32)
    y = layer(x)
    assert layer._wcache.tensors is not None
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded._wcache.tensors is None and torch.equal(loaded(x), y)
    assert torch.equal(copy.deepcopy(layer)(x), y)
    pickle.dumps(GroupedLinear(2, 32, 16))
    layer.to(torch.float64 if False else torch.float32)
    assert layer._wcache.tensors is None


# ---------------------------------------------------------------------------
# checkpointing, torch.compile, the custom ops
# ---------------------------------------------------------------------------

def _mlp(recipe):
    torch.manual_seed(0)
    return torch.nn.Sequential(Linear(64, 32, recipe=recipe), torch.nn.GELU(), Linear(32, 64, recipe=recipe))


def _grads(model, fn, x, seed=3):
    model.zero_grad()
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    y = fn(x)
    torch.manual_seed(seed + 1)
    y.square().sum().backward()
    return y, x.grad, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", ["fp8_rowwise", "nvfp4"])
@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_gives_the_same_gradients(name, reentrant):
    from torch.utils.checkpoint import checkpoint
    model = _mlp(RECIPES[name])
    x = torch.randn(2, 24, 64)
    want = _grads(model, model, x)
    got = _grads(model, lambda t: checkpoint(model, t, use_reentrant=reentrant), x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))


@pytest.mark.parametrize("name", ["fp8_rowwise", "nvfp4"])
def test_compile_fullgraph_matches_eager(name):
    model = _mlp(RECIPES[name])
    if name == "fp8_rowwise":  # the option is read in forward: it must not break the graph either
        for m in model.modules():
            if isinstance(m, Linear):
                m.fuse_wgrad_accumulation = True
    x = torch.randn(2, 24, 64)
    want = _grads(model, model, x)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = _grads(model, compiled, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))


@pytest.mark.parametrize("name", ["fp8_tensorwise", "nvfp4_token"])
def test_compile_fullgraph_grouped(name):
    torch.manual_seed(0)
    layer = GroupedLinear(3, 64, 32, bias=True, recipe=RECIPES[name])
    offsets = torch.tensor([10, 10, 45], dtype=torch.int32)
    x = torch.randn(50, 64)
    want = _grads(layer, lambda t: layer(t, offsets), x)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = _grads(layer, lambda t: compiled(t, offsets), x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))


@pytest.mark.parametrize("name", RECIPES)
def test_train_ops_fakes_match_real_shapes(name):
    """Every train_* op's fake gives the shapes and dtypes of the real outputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    recipe = RECIPES[name]
    key = recipe.key()
    ops = torch.ops.scalemm
    x, w, dy = torch.randn(32, 64), torch.randn(48, 64), torch.randn(32, 48)
    xo = torch.randn(40, 64)
    offs = torch.tensor([5, 5, 40], dtype=torch.int32)
    we = torch.randn(3, 48, 64)

    def run():
        xq = ops.train_quantize(x, key, "input", True, True)
        wq = ops.train_quantize(w, key, "weight", True, True)
        dq = ops.train_quantize(dy, key, "grad", True, True)
        n = training.field_count(recipe)
        outs = [*xq, *wq, *dq, ops.train_gemm("fprop", xq[:n], wq[:n], None, key, torch.float32),
                ops.train_gemm("dgrad", dq[:n], wq[n:], None, key, torch.bfloat16),
                ops.train_gemm("wgrad", dq[n:], xq[n:], None, key, torch.float32)]
        gq = ops.train_quantize_grouped(xo, offs, key, "input", True, True)
        sq = ops.train_quantize_stacked(we, key, False)
        tq = ops.train_quantize_stacked(we, key, True)
        pq = ops.train_quantize_stacked_pair(we, key)
        gd = ops.train_quantize_grouped(torch.randn(40, 48), offs, key, "grad", True, True)
        m = training.field_count(recipe, grouped=True)
        outs += [*gq, *sq, *tq, *pq, ops.train_grouped_gemm("fprop", gq[:m], sq, offs, None, key, torch.float32, 40),
                 ops.train_grouped_gemm("dgrad", gd[:m], tq, offs, None, key, torch.float32, 40),
                 ops.train_grouped_gemm("wgrad", gd[m:], gq[m:], offs, None, key, torch.float32, 40)]
        return outs
    real = run()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = run()
    assert [(tuple(t.shape), t.dtype) for t in fake] == [(tuple(t.shape), t.dtype) for t in real]


@pytest.mark.parametrize("name", [n for n in RECIPES if RECIPES[n].format == "nvfp4"])
@pytest.mark.parametrize("E,N,K", [(4, 128, 192), (3, 48, 80), (1, 16, 32)])
def test_stacked_pair_is_the_two_passes(name, E, N, K):
    """quantize_stacked_pair (W and W^T from one pass over w where the format allows) gives the bytes of
    quantize_stacked(w) and quantize_stacked(w, transposed=True). NVFP4 only: FP8's CPU path is those two reference
    passes itself; its one-pass kernel is checked on the GPU (test_quantize_grouped_gpu.py::test_fp8_stacked_pair,
    test_train_gpu.py::test_stacked_pair_on_gpu_is_the_two_passes)."""
    recipe = RECIPES[name]
    g = torch.Generator().manual_seed(E * N + K)
    w = (torch.randn(E, N, K, generator=g) * torch.rand(E, N, 1, generator=g).mul(8).exp2()).to(torch.bfloat16)
    w[0, 1] = 0  # a zero row of W (a zero scale block of W^T's columns)
    want = [training.quantize_stacked(w, recipe), training.quantize_stacked(w, recipe, transposed=True)]
    got = training.quantize_stacked_pair(w, recipe)
    for a, b in zip(got, want):
        assert (a.group_rows, a.shape, a.scaling, a.layout) == (b.group_rows, b.shape, b.scaling, b.layout)
        assert torch.equal(a.offsets, b.offsets)
        for x, y in zip(training.flatten(a, grouped=True), training.flatten(b, grouped=True)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)) if x.element_size() == 1 else torch.equal(x, y)


@pytest.mark.parametrize("K,E,n,pad", [(6, 3, 32, 16), (5, 2, 24, 0), (4, 3, 12, 4), (3, 2, 16, 3)])
def test_experts_to_rows_moves_whole_rows(K, E, n, pad):
    """[K, E * n] bytes (a padded row stride, as the columnwise copies have) -> [E * K, n], expert by
    expert, whether it moves 8-byte words (n and the stride multiples of 8) or single bytes."""
    base = torch.randint(0, 256, (K, E * n + pad), dtype=torch.uint8)
    u8 = base[:, :E * n]
    got = training._experts_to_rows(u8, E)
    assert got.dtype == torch.uint8 and got.is_contiguous()
    assert torch.equal(got, u8.unflatten(1, (E, n)).permute(1, 0, 2).reshape(E * K, n))


def decode_wgrad_check(device):
    """training.decode_wgrad_bf16 (on CUDA: the wgrad_to_bf16 kernel) against the host dequantization of the same
    wgrad copy, bit for bit: ragged, empty and leading-empty groups, both scalings, RHT, NaN blocks, zeros."""
    from scalemm.formats.nvfp4 import dequantize_nvfp4_grouped
    torch.manual_seed(0)
    x = (torch.randn(90, 256) * torch.logspace(-2, 2, 256)).to(device)
    for offs, scaling in (([20, 20, 90], "token"), ([0, 64, 70, 85], "tensor")):
        offsets = torch.tensor(offs, dtype=torch.int32, device=device)
        q = scalemm.quantize_nvfp4_grouped(x, offsets, scaling=scaling, columnwise=True, rht=True).columnwise
        want = dequantize_nvfp4_grouped(q, padded=True, apply_alpha=False)
        assert torch.equal(training.decode_wgrad_bf16(q).float(), want)
    # NaN blocks (scale 0x7F), negative zeros, empty and zero groups: the same bits
    x = torch.randn(300, 64) * torch.rand(300, 1).mul(10).exp2()
    x[7, 3], x[20:40], x[50] = float("nan"), 0.0, -0.0
    offsets = torch.tensor([0, 17, 17, 200, 300], dtype=torch.int32, device=device)
    q = scalemm.quantize_nvfp4_grouped(x.to(device, torch.bfloat16), offsets, scaling="tensor",
                                       columnwise=True).columnwise
    got, want = training.decode_wgrad_bf16(q).float(), dequantize_nvfp4_grouped(q, padded=True, apply_alpha=False)
    assert got.isnan().any() and torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
    assert torch.equal(torch.signbit(got) & ~got.isnan(), torch.signbit(want) & ~want.isnan())


def test_decode_wgrad_matches_the_host_dequantization():
    decode_wgrad_check("cpu")


# ---------------------------------------------------------------------------
# GroupedLinear
# ---------------------------------------------------------------------------

def emulated_grouped(x, offsets, w, b, dy, recipe, seed, hist=None):
    """(y, dx, dW) from the same quantized copies the layer makes, dequantized, fp64, per expert. hist: see
    _history."""
    E, N, K = w.shape
    xq = training.quantize_grouped(x, offsets, recipe, "input", rowwise=True, columnwise=True,
                                   **_history(hist, "input"))
    ws = training.quantize_stacked(w, recipe, **_history(hist, "weight"))
    wt = training.quantize_stacked(w, recipe, transposed=True, **_history(hist, "weight"))
    torch.manual_seed(seed)
    dq = training.quantize_grouped(dy, offsets, recipe, "grad", rowwise=True, columnwise=True,
                                   **_history(hist, "grad"))
    X, D = xq.dequantize(F64), dq.dequantize(F64)
    Wd, WTd = ws.dequantize(F64).view(E, N, K), wt.dequantize(F64).view(E, K, N)
    nvfp4 = recipe.format == "nvfp4"
    # wgrad operands: with the RHT every group's padded columns carry data, so sum over them
    Xc = xq.columnwise.dequantize(F64, padded=True) if nvfp4 else xq.columnwise.dequantize(F64)
    Dc = dq.columnwise.dequantize(F64, padded=True) if nvfp4 else dq.columnwise.dequantize(F64)
    T = x.shape[0]
    y, dx, dw = (torch.zeros(*s, dtype=F64, device=x.device) for s in ((T, N), (T, K), (E, N, K)))
    starts, ends = (v.tolist() for v in layout.group_bounds(offsets, T))
    p = layout.wgrad_column_starts(offsets, T).tolist()
    for g, (s, e) in enumerate(zip(starts, ends)):
        y[s:e] = X[s:e] @ Wd[g].T + (0 if b is None else b[g].to(F64))
        dx[s:e] = D[s:e] @ WTd[g].T
        cols = slice(p[g], p[g] + layout.round_up(e - s, 16)) if nvfp4 else slice(s, e)
        dw[g] = Dc[:, cols] @ Xc[:, cols].T
    return y, dx, dw


OFFSETS = {"ragged": [5, 5, 30, 37], "empty_first": [0, 16, 16, 40], "tail": [3, 9, 9, 33]}


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("offs", OFFSETS)
def test_grouped_linear_matches_emulated_reference(name, offs):
    recipe = RECIPES[name]
    torch.manual_seed(0)
    layer = GroupedLinear(4, 64, 32, bias=True, recipe=recipe)
    offsets = torch.tensor(OFFSETS[offs], dtype=torch.int32)
    x = (torch.randn(40, 64) * torch.logspace(-1, 1, 64)).requires_grad_()
    y = layer(x, offsets)
    dy = torch.randn_like(y)
    torch.manual_seed(1)
    y.backward(dy)
    ye, dxe, dwe = emulated_grouped(x.detach(), offsets, layer.weight.detach(), layer.bias.detach(), dy, recipe, 1)
    last = OFFSETS[offs][-1]
    assert rel(y, ye) < 1e-5 and rel(x.grad, dxe) < 1e-5
    # NVFP4 grouped wgrad: bf16 decoded operands, bf16-rounded accumulator (scalemm.training's notes)
    assert rel(layer.weight.grad, dwe) < (4e-3 if recipe.format == "nvfp4" else 1e-5)
    assert torch.count_nonzero(y[last:]) == 0 and torch.count_nonzero(x.grad[last:]) == 0
    want_db = torch.stack([dy[s:e].to(F64).sum(0) for s, e in zip([0] + OFFSETS[offs][:-1], OFFSETS[offs])])
    assert rel(layer.bias.grad, want_db) < 1e-6


@pytest.mark.parametrize("name", [None, *RECIPES])
def test_empty_experts_get_zero_gradients(name):
    torch.manual_seed(0)
    layer = GroupedLinear(5, 32, 16, bias=True, recipe=None if name is None else RECIPES[name])
    offsets = torch.tensor([0, 7, 7, 20, 20], dtype=torch.int32)  # experts 0, 2 and 4 get no tokens
    x = torch.randn(20, 32, requires_grad=True)
    layer(x, offsets).square().sum().backward()
    for e in (0, 2, 4):
        assert torch.count_nonzero(layer.weight.grad[e]) == 0 and torch.count_nonzero(layer.bias.grad[e]) == 0
    for e in (1, 3):
        assert layer.weight.grad[e].abs().sum() > 0
    # no tokens at all
    layer.zero_grad()
    x0 = torch.randn(0, 32, requires_grad=True)
    y0 = layer(x0, torch.zeros(5, dtype=torch.int32))
    y0.sum().backward()
    assert y0.shape == (0, 16) and torch.equal(layer.weight.grad, torch.zeros(5, 16, 32))


def test_grouped_recipe_none_matches_fp64():
    torch.manual_seed(0)
    layer = GroupedLinear(3, 32, 16, bias=True, recipe=None)
    offsets = torch.tensor([4, 4, 12], dtype=torch.int32)
    x = torch.randn(14, 32, requires_grad=True)  # 2 rows past the last expert
    y = layer(x, offsets)
    dy = torch.randn_like(y)
    y.backward(dy)
    w = layer.weight.detach()
    for g, (s, e) in enumerate(((0, 4), (4, 4), (4, 12))):
        assert torch.allclose(y[s:e], x[s:e] @ w[g].T + layer.bias[g], atol=1e-5)
        assert torch.allclose(layer.weight.grad[g], dy[s:e].T @ x.detach()[s:e], atol=1e-5)
    assert torch.equal(y[12:], torch.zeros(2, 16)) and torch.equal(x.grad[12:], torch.zeros(2, 32))


@pytest.mark.parametrize("name", RECIPES)
def test_grouped_rows_past_the_experts_are_zero(name, monkeypatch):
    """Rows of x past the last expert's offset: y and dx are exactly zero there with every recipe, although the
    grouped GEMMs' outputs start uninitialised (torch.empty poisoned here with NaN / 7)."""
    real_empty = torch.empty

    def poisoned(*a, **k):
        t = real_empty(*a, **k)
        return t.fill_(float("nan") if t.is_floating_point() else 7)
    monkeypatch.setattr(torch, "empty", poisoned)
    torch.manual_seed(1)
    layer = GroupedLinear(3, 32, 16, recipe=RECIPES[name])
    x = torch.randn(14, 32, requires_grad=True)
    y = layer(x, torch.tensor([4, 4, 12], dtype=torch.int32))
    y.backward(torch.randn_like(y))
    assert y[:12].isfinite().all() and x.grad[:12].isfinite().all()
    assert torch.equal(y[12:], torch.zeros(2, 16)) and torch.equal(x.grad[12:], torch.zeros(2, 32))


def test_grouped_linear_errors():
    with pytest.raises(ValueError, match="'num_experts' must be a positive int"):
        GroupedLinear(0, 32, 16)
    with pytest.raises(ValueError, match=r"GroupedLinear\(in_features=24, out_features=16\) cannot run"):
        GroupedLinear(2, 24, 16)
    layer = GroupedLinear(2, 32, 16)
    where = r"GroupedLinear\(num_experts=2, in_features=32, out_features=16\)"
    with pytest.raises(ValueError, match=where + ": offsets must be an int32 tensor"):
        layer(torch.randn(4, 32), torch.tensor([2, 4]))
    with pytest.raises(ValueError, match=where + r": x must be 2-D"):
        layer(torch.randn(1, 4, 32), torch.tensor([2, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="'offsets' must be non-decreasing"):
        layer(torch.randn(4, 32), torch.tensor([3, 2], dtype=torch.int32))


def test_linear_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"Linear\(in_features=40, out_features=32\) cannot run the scalemm GEMMs: "
                                         r"in_features = 40 must be a positive multiple of 16"):
        Linear(40, 32)
    with pytest.raises(ValueError, match="out_features = 24 must be a positive multiple of 16.*dgrad reduces"):
        Linear(32, 24)
    layer = Linear(32, 16)
    where = r"Linear\(in_features=32, out_features=16\)"
    with pytest.raises(TypeError, match=where + ": x must be bfloat16, float16 or float32, got torch.float64"):
        layer(torch.randn(2, 32, dtype=F64))
    with pytest.raises(ValueError, match=where + r": expected x\[\.\.\., 32\], got shape \(2, 16\)"):
        layer(torch.randn(2, 16))
    with pytest.raises(TypeError, match="'cache_weight' must be a bool"):
        Linear(32, 16, cache_weight=1)
    layer.recipe = None  # assignable; None takes any shape
    assert layer(torch.randn(2, 32)).shape == (2, 16)
    with pytest.raises(ValueError, match="cannot run"):
        Linear(32, 24, recipe=None).recipe = FP8Rowwise()


# ---------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------

class _Sub(torch.nn.Linear):
    pass


def test_convert_swaps_eligible_layers_in_place():
    torch.manual_seed(0)
    shared = torch.nn.Linear(64, 64)
    inner = torch.nn.Sequential(torch.nn.Linear(128, 10), _Sub(64, 64), torch.nn.Linear(64, 64).double())
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), shared, shared, inner,
                                torch.nn.Linear(64, 32))
    params = {id(p) for p in model.parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = convert(model, FP8Rowwise(), filter=lambda name, m: name != "5")
    assert isinstance(report, ConvertReport)
    assert report.converted == ["0", "2", "3"]
    assert set(report.skipped) == {"4.0", "4.1", "4.2", "5"}
    assert "in_features = 128" not in report.skipped["4.0"] and "out_features = 10" in report.skipped["4.0"]
    assert "subclass" in report.skipped["4.1"] and "float64" in report.skipped["4.2"]
    assert report.skipped["5"] == "excluded by the filter" and "3 converted, 4 skipped" in str(report)
    assert isinstance(model[0], Linear) and model[2] is model[3] and isinstance(model[2], Linear)
    assert type(model[4][0]) is torch.nn.Linear and type(model[5]) is torch.nn.Linear
    assert {id(p) for p in model.parameters()} == params  # the same Parameters: the optimizer still works
    before = model[0].weight.detach().clone()
    model[0](torch.randn(16, 64)).sum().backward()
    opt.step()
    assert not torch.equal(model[0].weight, before)
    with pytest.raises(TypeError, match="cannot replace the model itself"):
        convert(torch.nn.Linear(64, 64), FP8Rowwise())
    with pytest.raises(TypeError, match="'recipe' must be"):
        convert(model, None)
    assert convert(model, NVFP4()).converted == ["5"]  # converted layers are left alone
    fused = torch.nn.Sequential(torch.nn.Linear(64, 64))
    convert(fused, FP8Rowwise(), fuse_wgrad_accumulation=True)
    assert fused[0].fuse_wgrad_accumulation and not model[0].fuse_wgrad_accumulation
    with pytest.raises(TypeError, match="fuse_wgrad_accumulation"):
        convert(fused, FP8Rowwise(), fuse_wgrad_accumulation=None)


def test_linear_eligibility_reads_the_gemm_rules():
    assert linear_eligibility(4096, 14336) is None
    assert "in_features = 8 " in linear_eligibility(8, 16)
    assert "out_features = 0 " in linear_eligibility(16, 0)


# ---------------------------------------------------------------------------
# the reference MoE block (examples/moe.py) end to end
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fp8_rowwise", "nvfp4"])
def test_moe_block_end_to_end(name):
    moe = _load_example("moe")
    torch.manual_seed(0)
    ref = moe.MoEBlock(64, 32, 8, 2, recipe=None)
    block = moe.MoEBlock(64, 32, 8, 2, recipe=RECIPES[name])
    block.load_state_dict(ref.state_dict())
    x = torch.randn(2, 40, 64)
    outs = []
    for m in (ref, block):
        xi = x.clone().requires_grad_()
        y = m(xi)
        y.square().mean().backward()
        outs.append((y, xi.grad, m.gate_up.weight.grad, m.down.weight.grad, m.router.weight.grad))
    floor = 20.0 if name.startswith("fp8") else 8.0
    for got, want in zip(outs[1], outs[0]):
        assert sqnr(got, want) > floor, sqnr(got, want)


def test_moe_block_micro_steps_with_fused_accumulation():
    """examples/moe.py with fuse_wgrad_accumulation: two micro-steps give the experts' gradients of the unfused block
    (within a rounding of the sum)."""
    moe = _load_example("moe")
    torch.manual_seed(0)
    blocks = [moe.MoEBlock(64, 32, 8, 2, fuse_wgrad_accumulation=f) for f in (False, True)]
    blocks[1].load_state_dict(blocks[0].state_dict())
    x = torch.randn(2, 40, 64)
    for _ in range(2):
        for b in blocks:
            b(x).square().mean().backward()
    for name in ("gate_up", "down"):
        a, b = getattr(blocks[0], name).weight.grad, getattr(blocks[1], name).weight.grad
        assert rel(b, a) < 1e-5 and torch.count_nonzero(a) > 0


@pytest.mark.parametrize("name", ["fp8_rowwise", "nvfp4"])
def test_train_ops_pass_opcheck(name):
    """torch.library.opcheck: schema (no aliasing or mutation), fakes, AOT dispatch. The GEMM ops skip
    test_schema, which tries to perturb their float8 inputs with ops float8 does not have."""
    recipe = RECIPES[name]
    key, n, m = recipe.key(), training.field_count(recipe), training.field_count(recipe, grouped=True)
    ops = torch.ops.scalemm
    x, w = torch.randn(32, 64), torch.randn(48, 64)
    offs, xo, we = torch.tensor([5, 5, 40], dtype=torch.int32), torch.randn(40, 64), torch.randn(3, 48, 64)
    for op, args in ((ops.train_quantize, (x, key, "input", True, True)),
                     (ops.train_quantize_grouped, (xo, offs, key, "input", True, True)),
                     (ops.train_quantize_stacked, (we, key, True)),
                     (ops.train_quantize_stacked_pair, (we, key))):
        torch.library.opcheck(op.default, args)
    xq, wq = ops.train_quantize(x, key, "input", True, True), ops.train_quantize(w, key, "weight", True, True)
    gq, sq = ops.train_quantize_grouped(xo, offs, key, "input", True, False), ops.train_quantize_stacked(we, key, False)
    utils = ("test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(ops.train_gemm.default, ("fprop", xq[:n], wq[:n], None, key, torch.float32), test_utils=utils)
    torch.library.opcheck(ops.train_grouped_gemm.default, ("fprop", gq[:m], sq, offs, None, key, torch.float32, 40),
                          test_utils=utils)


def fused_wgrad_accumulation_check(device, dtype=torch.bfloat16):
    """Linear / GroupedLinear(fuse_wgrad_accumulation=True) over three micro-steps against the same layer without
    it: the first step (no .grad yet) gives the same bits; later steps add dW into weight.grad in the wgrad's
    epilogue (one rounding instead of two: within a rounding of the unfused sum), empty experts' gradients stay 0,
    x's gradient is unchanged, and autograd never sees the fused dW (a hook on the weight gets None)."""
    torch.manual_seed(0)
    E, K, N = 4, 256, 128  # layers of the train kernel set (python -m scalemm build --set train)
    offsets = torch.tensor([80, 80, 200, 290], dtype=torch.int32, device=device)
    x = torch.randn(300, K, device=device, dtype=torch.bfloat16)
    layers = {"grouped": lambda fuse, recipe: GroupedLinear(E, K, N, recipe=recipe, device=device, dtype=dtype,
                                                            fuse_wgrad_accumulation=fuse),
              "dense": lambda fuse, recipe: Linear(K, 2 * K, recipe=recipe, device=device, dtype=dtype,
                                                   fuse_wgrad_accumulation=fuse),
              # 64 out features: dW's 64 rows put the wgrad on the swap-AB kernel (D written transposed, and
              # .grad read through the same transposed view)
              "narrow": lambda fuse, recipe: Linear(2 * K, 64, recipe=recipe, device=device, dtype=dtype,
                                                    fuse_wgrad_accumulation=fuse)}
    inputs = {"grouped": x, "dense": x[:210], "narrow": torch.randn(512, 2 * K, device=device, dtype=torch.bfloat16)}
    for kind, make in layers.items():
        for recipe in (FP8Rowwise(), FP8Tensorwise()):
            plain, fused = make(False, recipe), make(True, recipe)
            fused.load_state_dict(plain.state_dict())
            seen = []
            fused.weight.register_hook(lambda g: seen.append(g))
            for step in range(3):
                grads = []
                for layer in (plain, fused):
                    xi = inputs[kind].clone().requires_grad_()
                    y = layer(xi, offsets) if kind == "grouped" else layer(xi)
                    y.backward(torch.linspace(-1, 1, y.numel(), device=device).reshape(y.shape).to(y.dtype))
                    grads.append(xi.grad)
                assert torch.equal(grads[0], grads[1])
                if step == 0:
                    assert torch.equal(plain.weight.grad, fused.weight.grad) and len(seen) == 1
                else:
                    assert len(seen) == step + 1 and seen[-1] is None, "a fused step hands autograd no dW"
                    assert rel(fused.weight.grad, plain.weight.grad) < 4e-3
                    ulp = plain.weight.grad.float().abs() * 2.0 ** -7 + 1e-30
                    assert ((fused.weight.grad.float() - plain.weight.grad.float()).abs() <= ulp).all(), (kind, step)
                if kind == "grouped":
                    assert torch.count_nonzero(fused.weight.grad[1]) == 0
        # torch.autograd.grad wants dW returned: never fused, .grad untouched
        before = fused.weight.grad.clone()
        xi = inputs[kind].clone().requires_grad_()
        y = fused(xi, offsets) if kind == "grouped" else fused(xi)
        (dw,) = torch.autograd.grad(y.float().sum(), [fused.weight])
        assert dw is not None and torch.count_nonzero(dw) > 0 and torch.equal(fused.weight.grad, before)
    # not fused: NVFP4 recipes, and a .grad that is not contiguous (a backward that accumulates: the engine
    # reports the weight's node as executed)
    from scalemm.nn import _fused_grad
    for kind, make in layers.items():
        layer = make(True, NVFP4())
        w = layer.weight
        fusing = (layer, None)
        layer.weight.grad = torch.zeros_like(w)
        assert _fused_grad(fusing, dtype) is None
        layer.recipe = FP8Rowwise()
        assert _fused_grad(fusing, dtype) is None  # no node: not inside a backward that accumulates
        layer.weight.grad = torch.zeros(*w.shape[:-2], w.shape[-1], w.shape[-2], dtype=w.dtype, device=device).mT
        assert not layer.weight.grad.is_contiguous()
        assert _fused_grad(fusing, dtype) is None
    with pytest.raises(TypeError, match="fuse_wgrad_accumulation"):
        GroupedLinear(E, K, N, fuse_wgrad_accumulation=1)
    with pytest.raises(TypeError, match="fuse_wgrad_accumulation"):
        Linear(K, N, fuse_wgrad_accumulation="yes")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_wgrad_accumulation(dtype):
    fused_wgrad_accumulation_check("cpu", dtype)


def test_nvfp4_wgrad_kernel_helpers_check_their_arguments():
    """The CUDA helpers behind the NVFP4 grouped wgrad refuse what their kernels cannot read, before launching."""
    from scalemm.gemm_nvfp4 import decode_wgrad_blocks_bf16, scale_grouped_wgrad
    acc = torch.zeros(2, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="acc must be a CUDA bf16 tensor"):
        scale_grouped_wgrad(acc, torch.ones(2), torch.ones(2), torch.ones(2, dtype=torch.bool), torch.bfloat16)
    blocks = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="qdata must be CUDA uint8"):
        decode_wgrad_blocks_bf16(torch.zeros(4, 16, dtype=torch.uint8), torch.zeros(512, dtype=torch.uint8), blocks,
                                 blocks, blocks)


# ---------------------------------------------------------------------------
# FP8DelayedScaling
# ---------------------------------------------------------------------------

def _amax(t, offsets=None):
    """max|t| (fp32), per expert group when offsets are given (0 for an empty group)."""
    t = t.detach().float()
    if offsets is None:
        return t.abs().amax()
    starts, ends = (v.tolist() for v in layout.group_bounds(offsets, t.shape[0]))
    return torch.stack([t[s:e].abs().amax() if e > s else t.new_zeros(()) for s, e in zip(starts, ends)])


def delayed_scaling_check(device, grouped, tol, dtype=torch.float32):
    """Four steps of a layer under FP8DelayedScaling(amax_history_len=2), the weight updated in place between steps
    (so it is quantized again), step 2's x 100x larger than before (its values saturate); x, dy and the parameters
    in `dtype`:
    - step 0 is FP8Tensorwise's step bit for bit (current scaling seeds each history);
    - every later step is the emulated reference with each operand scaled from the largest amax of its last two
      quantizations, within `tol` (accumulation order and the output rounding);
    - the histories hold exactly those amaxes (per expert group for GroupedLinear), newest first."""
    torch.manual_seed(0)
    E, K, N = 4, 64, 48
    kw = dict(device=device, dtype=dtype)
    if grouped:
        layer = GroupedLinear(E, K, N, bias=True, recipe=FP8DelayedScaling(amax_history_len=2), **kw)
        twin = GroupedLinear(E, K, N, bias=True, recipe=FP8Tensorwise(), **kw)
        offsets = torch.tensor([30, 30, 70, 90], dtype=torch.int32, device=device)  # an empty expert, 6 rows past
    else:
        layer = Linear(K, N, recipe=FP8DelayedScaling(amax_history_len=2), **kw)
        twin = Linear(K, N, recipe=FP8Tensorwise(), **kw)
        offsets = None
    twin.load_state_dict(layer.state_dict())
    run = (lambda m, x: m(x, offsets)) if grouped else (lambda m, x: m(x))
    amaxes = {"input": [], "weight": [], "grad": []}
    for step in range(4):
        x = (torch.randn(96, K, device=device) * (100.0 if step == 2 else 1.0)).to(dtype)
        dy = torch.randn(96, N, device=device, dtype=dtype)
        hist = None if step == 0 else {r: getattr(layer, f"amax_history_{r}").clone() for r in amaxes}
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        y = run(layer, xi)
        y.backward(dy)
        w = layer.weight.detach()
        amaxes["input"].insert(0, _amax(x, offsets))
        amaxes["weight"].insert(0, w.float().abs().amax(dim=(1, 2)) if grouped else _amax(w))
        amaxes["grad"].insert(0, _amax(dy, offsets))
        if step == 0:
            twin.zero_grad()
            xt = x.clone().requires_grad_()
            run(twin, xt).backward(dy)
            assert torch.equal(xi.grad, xt.grad) and torch.equal(layer.weight.grad, twin.weight.grad)
        else:
            if grouped:
                ye, dxe, dwe = emulated_grouped(x, offsets, w, layer.bias.detach(), dy, layer.recipe, 0, hist)
            else:
                ye, dxe, dwe = emulated_linear(x, w, layer.bias.detach(), dy, layer.recipe, 0, hist)
            assert rel(y, ye) < tol and rel(xi.grad, dxe) < tol and rel(layer.weight.grad, dwe) < tol, step
        for role, seen in amaxes.items():
            h = getattr(layer, f"amax_history_{role}")
            want = torch.stack((seen + [torch.zeros_like(seen[0])])[:2])
            assert torch.equal(h, want), (step, role, h, want)
        with torch.no_grad():
            layer.weight.mul_(0.5 if step == 1 else 1.1)  # an optimizer step: the weight is quantized again
    assert torch.isfinite(layer.weight.grad).all()


@pytest.mark.parametrize("grouped", [False, True])
def test_delayed_scaling_steps(grouped):
    delayed_scaling_check("cpu", grouped, tol=1e-5)


def delayed_history_edit_check(device, grouped, tol=1e-5):
    """A history edited in place (reset, or values copied in) is what the role's next quantization scales from:
    the layer keeps the history's max beside it (advance_amax_history) and takes it again when the history's
    version moved. The edited input history's max (0.5) is below x's amax, so a stale max would not saturate."""
    torch.manual_seed(0)
    E, K, N = 3, 64, 48
    recipe = FP8DelayedScaling(amax_history_len=4)
    if grouped:
        layer = GroupedLinear(E, K, N, bias=True, recipe=recipe, device=device)
        offsets = torch.tensor([20, 20, 64], dtype=torch.int32, device=device)
        run = lambda x: layer(x, offsets)  # noqa: E731
    else:
        layer, offsets = Linear(K, N, recipe=recipe, device=device), None
        run = layer
    x, dy = torch.randn(64, K, device=device), torch.randn(64, N, device=device)
    for _ in range(2):
        run(x).backward(dy)
    layer.zero_grad()
    layer.amax_history_input.fill_(0.5)
    hist = {r: getattr(layer, f"amax_history_{r}").clone() for r in ("input", "weight", "grad")}
    xi = x.clone().requires_grad_()
    y = run(xi)
    y.backward(dy)
    w, b = layer.weight.detach(), layer.bias.detach()
    if grouped:
        want = emulated_grouped(x, offsets, w, b, dy, recipe, 0, hist)
    else:
        want = emulated_linear(x, w, b, dy, recipe, 0, hist)
    for got, ref in zip((y, xi.grad, layer.weight.grad), want):
        assert rel(got, ref) < tol
    top = _amax(x, offsets)
    assert torch.equal(layer.amax_history_input, torch.stack([top] + [torch.full_like(top, 0.5)] * 3))


@pytest.mark.parametrize("grouped", [False, True])
def test_delayed_scaling_follows_an_edited_history(grouped):
    delayed_history_edit_check("cpu", grouped)


def test_delayed_scaling_layer_state():
    """The histories are non-persistent buffers (the state dict stays nn.Linear's), made on the weight's device
    (also for a layer built on the meta device by from_linear), dropped with the recipe; the recipe refuses a bad
    history length, round-trips its key, and refuses torch.compile with a clear error."""
    base = torch.nn.Linear(32, 16)
    layer = Linear.from_linear(base, FP8DelayedScaling(amax_history_len=3))
    layer(torch.randn(5, 32)).sum().backward()
    assert list(layer.state_dict()) == ["weight", "bias"]
    assert layer.amax_history_input.shape == (3,) and layer.amax_history_input.device.type == "cpu"
    r = FP8DelayedScaling(amax_history_len=7)
    assert from_key(r.key()) == r and r.amax_history() == 7 and FP8Tensorwise().amax_history() == 0
    assert r.scaling("grad") == "tensor" and r.fprop.fast_accum
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="amax_history_len"):
            FP8DelayedScaling(amax_history_len=bad)
    layer.recipe = FP8Tensorwise()
    assert not hasattr(layer, "amax_history_input")
    layer.recipe = FP8DelayedScaling()
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception, match="does not run under torch.compile"):
        compiled(torch.randn(5, 32))


def test_delayed_scaling_quantizer_arguments():
    """The quantizers' amax / amax_out: tensor scaling only, fp32, the right shape and device, apart."""
    x = torch.randn(32, 64)
    offsets = torch.tensor([10, 32], dtype=torch.int32)
    a = torch.tensor(1.0)
    with pytest.raises(ValueError, match="take scaling='tensor'"):
        scalemm.quantize_fp8(x, scaling="token", amax=a)
    with pytest.raises(TypeError, match="'amax' must be float32"):
        scalemm.quantize_fp8(x, amax=a.double())
    with pytest.raises(ValueError, match=r"'amax_out' must have shape \(\)"):
        scalemm.quantize_fp8(x, amax_out=torch.empty(1))
    with pytest.raises(ValueError, match=r"'amax' must have shape \(2,\)"):
        scalemm.quantize_fp8_grouped(x, offsets, amax=a)
    with pytest.raises(ValueError, match="must not share memory"):
        buf = torch.ones(4)
        scalemm.quantize_fp8_grouped(x, offsets, amax=buf[:2], amax_out=buf[2:])
    out = torch.empty(2)
    q = scalemm.quantize_fp8_grouped(x, offsets, amax=torch.tensor([0.5, 0.0]), amax_out=out)
    assert torch.equal(out, _amax(x, offsets))
    assert q.data[:10].float().abs().max() == 448  # beyond the given amax: saturated
    assert torch.equal(q.scale_inv, scalemm.reference.fp8_scale_inv(torch.tensor([0.5, 0.0])))  # amax 0: scale 1


@pytest.mark.parametrize("grouped", [False, True])
def test_delayed_scaling_under_activation_checkpointing(grouped):
    """The recomputed forward quantizes x with the amax its first forward used and records nothing: the gradients
    and the histories are those of the step without checkpointing, bit for bit (also for the seeding first step)."""
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    recipe = FP8DelayedScaling(amax_history_len=3)
    if grouped:
        plain = GroupedLinear(4, 64, 32, recipe=recipe, cache_weight=False)
        offsets = torch.tensor([10, 10, 40, 64], dtype=torch.int32)
        args = (offsets,)
    else:
        plain = Linear(64, 32, recipe=recipe, cache_weight=False)
        args = ()
    ckpt = copy.deepcopy(plain)
    for step in range(3):
        x = torch.randn(64, 64) * (1 + step)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya = plain(xa, *args)
        ya.square().sum().backward()
        yb = checkpoint(ckpt, xb, *args, use_reentrant=False)
        yb.square().sum().backward()
        assert torch.equal(ya, yb) and torch.equal(xa.grad, xb.grad), step
        assert torch.equal(plain.weight.grad, ckpt.weight.grad), step
        for role in ("input", "weight", "grad"):
            assert torch.equal(getattr(plain, f"amax_history_{role}"), getattr(ckpt, f"amax_history_{role}")), role
        plain.zero_grad()
        ckpt.zero_grad()


def test_stacked_offsets_made_once():
    """training._stacked_offsets: layout.stacked_offsets' values, made once per (E, N, device) and kept (outside a
    CUDA-graph capture): the rebuilt stacked weights' own offsets, otherwise made on every grouped GEMM."""
    from scalemm.formats import layout
    cpu = torch.device("cpu")
    t = training._stacked_offsets(5, 48, cpu)
    assert torch.equal(t, layout.stacked_offsets(5, 48, cpu)) and t.dtype == torch.int32
    assert training._stacked_offsets(5, 48, cpu) is t
    assert training._stacked_offsets(5, 64, cpu) is not t
