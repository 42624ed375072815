"""Training layers on a Hopper GPU: the CPU checks of tests/test_train.py on CUDA (emulated reference,
empty experts), no host synchronisation in a MoE step, torch.compile, and the convergence run of
scripts/train_convergence.py (bf16 vs FP8 vs NVFP4). Prebuild the kernels first (the tests then take
well under a minute): python -m scalemm build --set train
"""
import importlib.util
import os
import sys

import pytest
import torch

from scalemm.nn import GroupedLinear, Linear
from test_train import (RECIPES, _load_example, decode_wgrad_check, delayed_history_edit_check, delayed_scaling_check,
                        emulated_grouped, emulated_linear, fused_wgrad_accumulation_check, rel)

pytestmark = pytest.mark.gpu
HERE = os.path.dirname(os.path.abspath(__file__))

# bf16 outputs (y, dx): one output rounding plus the tensor cores' accumulation (fast accumulation in
# fprop); fp32 wgrad (full accumulation). Layout or scale bugs give errors of order 1.
TOL_BF16, TOL_F32 = 1e-2, 2e-3


# 3 x 1024 tokens (NVFP4 recipes): fprop and dgrad are W4A4 GEMMs with M >= 1024 and M >= 2 N, which run
# with the tokens on A (gemm_nvfp4's default there).
@pytest.mark.parametrize("name,tokens", [(n, 70) for n in RECIPES] + [(n, 1024) for n in RECIPES if "nvfp4" in n])
def test_linear_on_gpu_matches_emulated_reference(name, tokens):
    recipe = RECIPES[name]
    torch.manual_seed(0)
    layer = Linear(256, 512, recipe=recipe, device="cuda")  # fp32 master weight
    x = (torch.randn(3, tokens, 256, device="cuda") * torch.logspace(-1, 1, 256, device="cuda")).to(torch.bfloat16)
    x.requires_grad_()
    y = layer(x)
    dy = torch.randn_like(y)
    torch.manual_seed(1)
    y.backward(dy)
    ye, dxe, dwe = emulated_linear(x.detach().reshape(-1, 256), layer.weight.detach(), layer.bias.detach(),
                                   dy.reshape(-1, 512), recipe, seed=1)
    assert y.dtype == torch.bfloat16 and layer.weight.grad.dtype == torch.float32
    assert rel(y.reshape(-1, 512), ye) < TOL_BF16
    assert rel(x.grad.reshape(-1, 256), dxe) < TOL_BF16
    assert rel(layer.weight.grad, dwe) < TOL_F32


@pytest.mark.parametrize("name", RECIPES)
def test_grouped_linear_on_gpu_matches_emulated_reference(name):
    recipe = RECIPES[name]
    torch.manual_seed(0)
    layer = GroupedLinear(4, 256, 128, bias=True, recipe=recipe, device="cuda")
    offsets = torch.tensor([0, 100, 100, 290], dtype=torch.int32, device="cuda")  # empty experts, 10 rows past
    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = layer(x, offsets)
    dy = torch.randn_like(y)
    torch.manual_seed(1)
    y.backward(dy)
    ye, dxe, dwe = emulated_grouped(x.detach(), offsets, layer.weight.detach(), layer.bias.detach(), dy, recipe, 1)
    assert rel(y, ye) < TOL_BF16 and rel(x.grad, dxe) < TOL_BF16
    assert rel(layer.weight.grad, dwe) < (TOL_BF16 if recipe.format == "nvfp4" else TOL_F32)
    for e in (0, 2):
        assert torch.count_nonzero(layer.weight.grad[e]) == 0 and torch.count_nonzero(layer.bias.grad[e]) == 0
    assert torch.count_nonzero(y[290:]) == 0 and torch.count_nonzero(x.grad[290:]) == 0


@pytest.mark.parametrize("name", [None, "fp8_rowwise", "nvfp4"])
def test_moe_step_never_syncs_with_the_host(name):
    moe = _load_example("moe")
    torch.manual_seed(0)
    block = moe.MoEBlock(256, 128, 8, 2, recipe=None if name is None else RECIPES[name], device="cuda")
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        block(x).float().square().mean().backward()  # warm-up: kernels built and loaded
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            block(x).float().square().mean().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(block.gate_up.weight.grad).all()


@pytest.mark.parametrize("name", ["fp8_rowwise", "nvfp4"])
def test_compile_on_gpu(name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(Linear(256, 512, recipe=RECIPES[name]), torch.nn.GELU(),
                                Linear(512, 256, recipe=RECIPES[name])).cuda()
    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    outs = []
    for fn in (model, torch.compile(model, fullgraph=True)):
        model.zero_grad()
        xi = x.clone().requires_grad_()
        torch.manual_seed(3)
        y = fn(xi)
        y.float().square().sum().backward()
        outs.append((y, xi.grad, model[0].weight.grad.clone()))
    for a, b in zip(*outs):  # inductor may fuse the GELU differently: small differences only
        assert rel(a, b) < TOL_BF16


def test_convergence_bf16_fp8_nvfp4():
    """scripts/train_convergence.py's default task (300 steps, 4-layer MLP): final loss within 1% of bf16
    for the FP8 recipes and 3% for NVFP4."""
    spec = importlib.util.spec_from_file_location("train_convergence",
                                                  os.path.join(HERE, "..", "scripts", "train_convergence.py"))
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    curves, finals, gaps, passed = tc.run(device="cuda")
    print({n: f"{100 * g:+.2f}%" for n, g in gaps.items()}, file=sys.stderr)
    assert passed and all(passed.values()), (finals, gaps)


@pytest.mark.parametrize("name", RECIPES)
def test_stacked_pair_on_gpu_is_the_two_passes(name):
    """W and W^T from one quantizer pass (the columnwise copy) equal the two separate passes, on CUDA."""
    from scalemm import training
    recipe = RECIPES[name]
    g = torch.Generator(device="cuda").manual_seed(7)
    w = (torch.randn(8, 192, 256, device="cuda", generator=g)
         * torch.rand(8, 192, 1, device="cuda", generator=g).mul(8).exp2()).to(torch.bfloat16)
    want = [training.quantize_stacked(w, recipe), training.quantize_stacked(w, recipe, transposed=True)]
    for a, b in zip(training.quantize_stacked_pair(w, recipe), want):
        for x, y in zip(training.flatten(a, grouped=True), training.flatten(b, grouped=True)):
            assert x.shape == y.shape and x.dtype == y.dtype
            assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)) if x.element_size() == 1 else torch.equal(x, y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_wgrad_accumulation_on_gpu(dtype):
    fused_wgrad_accumulation_check("cuda", dtype)


def test_fused_wgrad_accumulation_in_a_cuda_graph():
    """A captured micro-step adds into weight.grad on every replay, bit for bit as the same eager steps do."""
    from scalemm.recipes import FP8Rowwise
    torch.manual_seed(0)
    offsets = torch.tensor([80, 80, 200, 290], dtype=torch.int32, device="cuda")
    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(300, 128, device="cuda", dtype=torch.bfloat16)
    layers = [GroupedLinear(4, 256, 128, recipe=FP8Rowwise(), device="cuda", fuse_wgrad_accumulation=True)
              for _ in range(2)]
    layers[1].load_state_dict(layers[0].state_dict())
    for layer in layers:
        layer(x, offsets).backward(dy)  # creates .grad; the next steps fuse
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layers[0](x, offsets).backward(dy)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layers[0](x, offsets).backward(dy)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        graph.replay()
    for _ in range(4):  # the warm step inside the side stream, then the three replays
        layers[1](x, offsets).backward(dy)
    torch.cuda.synchronize()
    assert torch.equal(layers[0].weight.grad, layers[1].weight.grad)


def test_decode_wgrad_kernel_matches_the_host_dequantization():
    decode_wgrad_check("cuda")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("K", [64, 36])  # 36: no 16-byte rows (one element per thread)
def test_grouped_wgrad_scale_kernel_is_the_torch_formula(out_dtype, per_channel, K):
    """scale_grouped_wgrad: fl(fl(alpha_dy * alpha_x) * acc) rounded once to out_dtype, zeros for groups without
    rows, bit for bit against the same formula in torch ops (training._nvfp4_grouped_wgrad's CPU path)."""
    from scalemm.gemm_nvfp4 import scale_grouped_wgrad
    G, N = 5, 24
    g = torch.Generator(device="cuda").manual_seed(3)
    acc = (torch.randn(G, N, K, device="cuda", generator=g) * 100).to(torch.bfloat16)
    a_dy = torch.rand((G, N) if per_channel else (G,), device="cuda", generator=g) * 3
    a_x = torch.rand((G, K) if per_channel else (G,), device="cuda", generator=g) * 3
    has_rows = torch.tensor([True, False, True, True, False], device="cuda")
    ar = a_dy[:, None, None] if a_dy.dim() == 1 else a_dy[:, :, None]
    ac = a_x[:, None, None] if a_x.dim() == 1 else a_x[:, None, :]
    want = torch.empty(acc.shape, dtype=out_dtype, device="cuda")
    torch.mul(acc, ar * ac, out=want)
    want.masked_fill_(~has_rows[:, None, None], 0.0)
    got = scale_grouped_wgrad(acc.clone(), a_dy, a_x, has_rows, out_dtype)
    assert got.dtype == out_dtype and torch.equal(got, want)
    assert not torch.signbit(got[~has_rows]).any()


def test_nvfp4_wgrad_kernel_helpers_refuse_bad_shapes():
    from scalemm.gemm_nvfp4 import decode_wgrad_blocks_bf16, scale_grouped_wgrad
    acc = torch.zeros(2, 4, 8, dtype=torch.bfloat16, device="cuda")
    rows = torch.ones(2, dtype=torch.bool, device="cuda")
    with pytest.raises(ValueError, match=r"alpha_x must be \[2\] or \[2, 8\]"):
        scale_grouped_wgrad(acc, torch.ones(2, device="cuda"), torch.ones(2, 4, device="cuda"), rows, torch.bfloat16)
    with pytest.raises(ValueError, match="has_rows"):
        scale_grouped_wgrad(acc, torch.ones(2, device="cuda"), torch.ones(2, device="cuda"), rows[:1], torch.bfloat16)
    q = torch.zeros(4, 16, dtype=torch.uint8, device="cuda")  # W = 32: two blocks
    short = torch.zeros(1, dtype=torch.int64, device="cuda")
    with pytest.raises(ValueError, match="need 2 entries"):
        decode_wgrad_blocks_bf16(q, torch.zeros(512, dtype=torch.uint8, device="cuda"), short, short, short)


@pytest.mark.parametrize("grouped", [False, True])
def test_delayed_scaling_steps_on_gpu(grouped):
    delayed_scaling_check("cuda", grouped, tol=TOL_BF16, dtype=torch.bfloat16)


@pytest.mark.parametrize("grouped", [False, True])
def test_delayed_scaling_follows_an_edited_history_on_gpu(grouped):
    delayed_history_edit_check("cuda", grouped, tol=TOL_F32)


def test_delayed_scaling_refresh_reaches_a_cuda_graph():
    """A history edited between replays of a captured forward reaches the replay through refresh_amax_histories():
    the replay scales x from the edited history's max (0.5, below x's amax, so x saturates), not from the stale
    one the graph would otherwise read."""
    from scalemm import training
    from scalemm.recipes import FP8DelayedScaling
    torch.manual_seed(0)
    layer = Linear(64, 48, recipe=FP8DelayedScaling(amax_history_len=4), device="cuda")
    x = torch.randn(64, 64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        layer(x)  # seeds the input and weight histories
        layer(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        y = layer(x)
    layer.amax_history_input.fill_(0.5)
    layer.refresh_amax_histories()
    g.replay()
    torch.cuda.synchronize()
    f64 = torch.float64
    xq = training.quantize(x, layer.recipe, "input", amax=torch.tensor(0.5, device="cuda"))
    wq = training.quantize(layer.weight.detach(), layer.recipe, "weight", amax=layer.amax_history_weight.amax(0))
    want = xq.dequantize(f64) @ wq.dequantize(f64).T + layer.bias.detach().to(f64)
    assert rel(y, want) < TOL_F32


def test_delayed_scaling_moe_step_in_a_cuda_graph_without_host_syncs():
    """The MoE block under FP8DelayedScaling: after the eager step that seeds the histories, a step syncs with
    nothing on the host, and a CUDA graph of a step, replayed from the same histories, gives the eager step's
    gradients and advances the histories as it did (they live on the device)."""
    from scalemm.recipes import FP8DelayedScaling
    moe = _load_example("moe")
    torch.manual_seed(0)
    block = moe.MoEBlock(256, 128, 8, 2, recipe=FP8DelayedScaling(amax_history_len=4), device="cuda",
                         dtype=torch.bfloat16)
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    layers = [m for m in block.modules() if isinstance(m, GroupedLinear)]
    roles = ("input", "weight", "grad")

    def step():
        block.zero_grad(set_to_none=False)
        block(x).float().square().mean().backward()

    def histories():
        return [getattr(m, f"amax_history_{r}") for m in layers for r in roles]
    block(x).float().square().mean().backward()  # seeds the histories (current scaling), builds the kernels
    assert all(m._amax_seeded == set(roles) for m in layers)
    before = [h.clone() for h in histories()]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    eager_grads = [p.grad.clone() for p in block.parameters()]
    eager_after = [h.clone() for h in histories()]
    assert any(not torch.equal(a, b) for a, b in zip(before, eager_after))  # the step advanced them
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for h, b in zip(histories(), before):
        h.copy_(b)
    for m in layers:  # the amax each role scales from next, taken again from the edited histories
        m.refresh_amax_histories()
    g.replay()
    torch.cuda.synchronize()
    for p, want in zip(block.parameters(), eager_grads):
        assert torch.equal(p.grad, want)
    for h, want in zip(histories(), eager_after):
        assert torch.equal(h, want)
