"""NVFP4-weight GEMMs on the GPU (W4A16 and W4A4) against the exact-dequant reference.

The reference dequantizes both operands exactly (code x block scale, in fp64), multiplies in
fp64 and applies the global scales and the epilogue in fp64. fp32 outputs must match within
1e-5 relative Frobenius error (fp32 accumulation order only), bf16 outputs within 4e-3.
Outputs are poisoned with NaN first, so an unwritten element fails the test.
"""
from dataclasses import replace

import pytest
import torch

import scalemm
from scalemm import reference as ref
from scalemm.cutlass_kernels import GemmConfig
from scalemm.cutlass_kernels.configs import SkinnyConfig, default_nvfp4_skinny_config, skinny_config_for_tokens, sm90
from scalemm.gemm_nvfp4 import default_nvfp4_config, prepare_sm90_weight, dequantize_rows_bf16

pytestmark = pytest.mark.gpu

# (N, K) of real models' linear layers, plus edges: N not a multiple of 128, K not a multiple of 64.
SHAPES_NK = [(6144, 4096), (4096, 14336), (576, 7168), (2048, 768), (1000, 2064)]
TOL = {torch.float32: 1e-5, torch.bfloat16: 4e-3, torch.float16: 1e-3}


def _wide(shape, seed, device="cuda"):
    """Random data over many binades, with zero rows and tiny rows (subnormal e4m3 scales)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*shape, device=device, generator=g)
    x = x * torch.rand(shape[0], 1, device=device, generator=g).mul(8).sub(4).exp2()
    x[3::37] = 0
    x[5::41] *= 1e-6
    return x


def _weights(N, K, scaling, seed):
    return scalemm.quantize_nvfp4(_wide((N, K), seed).to(torch.bfloat16), scaling=scaling)


def _exact(a, b, bias=None, act=None):
    """fp64 exact-dequant reference of the W4A16 / W4A4 GEMM (alphas in fp64 on the product)."""
    wd = ref.dequantize_nvfp4(b, torch.float32, apply_alpha=False).double()
    if isinstance(a, torch.Tensor):
        xd, alpha_a = a.double(), torch.ones((), dtype=torch.float64, device=a.device)
    else:
        xd, alpha_a = ref.dequantize_nvfp4(a, torch.float32, apply_alpha=False).double(), a.alpha.double()
    acc = xd @ wd.T
    r = (alpha_a.reshape(-1, 1) if alpha_a.dim() else alpha_a) * b.alpha.double().reshape(1, -1) * acc
    if bias is not None:
        r = r + bias.double()
    if act is not None:
        r = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[act](r)
    return r


def _rel_err(out, exact):
    err = (out.double() - exact).norm()
    return (err / exact.norm()).item() if exact.norm() > 0 else err.item()


def _drop_exact_rows(a):
    """a without the exact bf16 rows its quantizer wrote (the W4A4 GEMMs then run the decode pass)."""
    from scalemm.formats.nvfp4 import exact_rows
    assert exact_rows(a) is not None
    a._exact = None
    return a


def _assert_rows_and_cols_match(out, exact, tol=1e-5):
    """Nothing unwritten; the whole output within tol of the exact product, and every row and column on its own
    within 10 tol (a misplaced token tile or weight column would hide in the whole)."""
    assert not out.isnan().any(), "unwritten outputs"
    assert _rel_err(out, exact) <= tol
    rows = (out.double() - exact).norm(dim=1) / exact.norm(dim=1).clamp_min(1e-300)
    cols = (out.double() - exact).norm(dim=0) / exact.norm(dim=0).clamp_min(1e-300)
    assert rows[exact.norm(dim=1) > 0].max() <= 10 * tol and cols[exact.norm(dim=0) > 0].max() <= 10 * tol


def _poisoned(M, N, dtype):
    return torch.full((M, N), float("nan"), dtype=dtype, device="cuda")


def _record_passes(monkeypatch) -> list:
    """The shapes the bf16 decode pass (gemm_nvfp4.dequantize_rows_bf16) runs on from now on, in call order."""
    import scalemm.gemm_nvfp4 as g
    seen, real = [], g.dequantize_rows_bf16
    monkeypatch.setattr(g, "dequantize_rows_bf16", lambda q, **kw: seen.append(tuple(q.shape)) or real(q, **kw))
    return seen


@pytest.mark.parametrize("M", [1, 7, 100, 129, 4096])  # 100: two 64-token tiles where N <= 4096
@pytest.mark.parametrize("N,K", SHAPES_NK)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_w4a16_fp32_matches_exact_dequant(M, N, K, scaling):
    w = _weights(N, K, scaling, seed=N + K)
    x = _wide((M, K), seed=M).to(torch.bfloat16)
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(x, w, out_dtype=torch.float32, out=out)
    assert not out.isnan().any(), "unwritten outputs"
    assert _rel_err(out, _exact(x, w)) <= 1e-5


@pytest.mark.parametrize("M", [1, 16, 33, 300])
@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_w4a16_dtypes_bias_relu(M, act_dtype, out_dtype):
    N, K = 2048, 1024
    w = _weights(N, K, "token", seed=3)
    x = _wide((M, K), seed=4).clamp(-6e4, 6e4).to(act_dtype)
    bias = torch.randn(N, device="cuda").to(out_dtype)
    out = _poisoned(M, N, out_dtype)
    scalemm.gemm(x, w, bias=bias, epilogue="relu", out_dtype=out_dtype, out=out)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(x, w, bias, "relu")) <= TOL[out_dtype]


@pytest.mark.parametrize("M,N,K,tile", [(192, 4096, 4096, "t128x64x64_c1x1_coop_swap"),
                                         (384, 4096, 4096, "t128x128x64_c1x1_coop_swap"),
                                         (768, 6144, 4096, "t128x256x64_c1x1_coop_swap_sk"),
                                         (300, 2048, 2080, "t128x64x64_c1x1_coop_swap"),
                                         (700, 1536, 7168, "t128x256x64_c1x1_coop_swap_sk"),
                                         (512, 2048, 7168, "t128x128x64_c1x1_coop_swap_sk"),
                                         (4096, 1536, 7168, "t128x256x64_c1x1_coop_swap_sk"),
                                         (576, 4096, 4096, "t128x160x64_c1x1_coop_swap"),
                                         (4096, 576, 7168, "t128x160x64_c1x1_coop_swap"),
                                         (2048, 1536, 7168, "t128x192x64_c1x1_coop_swap"),
                                         (333, 9216, 4096, "t128x192x64_c1x1_coop_swap_sk"),
                                         (448, 9216, 2080, "t128x224x64_c1x1_coop_swap_sk"),
                                         (200, 28672, 4096, "t128x224x64_c1x1_coop_swap")])
@pytest.mark.parametrize("w4a4", [False, True], ids=["w4a16", "w4a4"])
def test_mid_token_defaults_match_exact_dequant(M, N, K, tile, w4a4):
    """Above 128 tokens: default_nvfp4_config's one-wave narrow tiles, its stream-K over a short last wave of
    128x256 tiles (from 1024 tokens up to half a wave) and over 128-token tiles where 128x256 ones would be few, and
    its token tiles of 160 / 192 / 224 (CUTLASS's extended wgmma shapes for 160 and 224; a last token tile partly
    empty, data-parallel and stream-K) (each pick checked), with a bias, bf16 out (K = 2080: the last k-tile half
    past K). The config is passed: without it narrow layers at prefill put the tokens on A."""
    config = default_nvfp4_config(M, N, K)
    assert config.key() == tile
    w = _weights(N, K, "token", seed=M)
    x = _wide((M, K), seed=M + 1).to(torch.bfloat16)
    a = scalemm.quantize_nvfp4(x, scaling="token") if w4a4 else x
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a, w, bias=bias, out=out, config=config)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w, bias)) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("M", [1, 7, 129, 2048])
@pytest.mark.parametrize("a_scaling,w_scaling", [("tensor", "tensor"), ("token", "token"), ("token", "tensor")])
def test_w4a4_matches_exact_dequant(M, a_scaling, w_scaling):
    N, K = 4096, 2064
    w = _weights(N, K, w_scaling, seed=11)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=12).to(torch.bfloat16), scaling=a_scaling)
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(a, w, out_dtype=torch.float32, out=out)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w)) <= 1e-5


# W4A4 decoded in the CUTLASS mainloop (cooperative, tile_n a multiple of 128) or by the bf16 pass: the same
# exact products summed in the same order, so the same bits; M = 1 leaves 127 rows of a 128-row token tile
# empty, K = 2080 ends in half a k-tile, N = 1000 in a partial weight tile.
W4A4_MAINLOOP_CONFIGS = [GemmConfig(128, n, 64, cm, 1, "cooperative", swap_ab=True, stream_k=sk)
                         for n, cm, sk in [(128, 1, False), (256, 1, False), (256, 1, True), (128, 2, False)]]


@pytest.mark.parametrize("config", W4A4_MAINLOOP_CONFIGS, ids=lambda c: c.key())
@pytest.mark.parametrize("M,N,K", [(1, 1000, 2080), (129, 4096, 2048), (300, 576, 7168), (4096, 2048, 1024)])
@pytest.mark.parametrize("a_scaling", ["tensor", "token"])
def test_w4a4_mainloop_decode_matches_the_pass_bit_for_bit(config, M, N, K, a_scaling):
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    w = _weights(N, K, "token", seed=31)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=32).to(torch.bfloat16), scaling=a_scaling)
    outs = {}
    for how in ("mainloop", "pass"):
        outs[how] = _poisoned(M, N, torch.float32)
        gemm_nvfp4(a, w, out_dtype=torch.float32, out=outs[how], config=config, activation_decode=how)
    assert not outs["mainloop"].isnan().any(), "unwritten outputs"
    assert torch.equal(outs["mainloop"], outs["pass"])
    assert _rel_err(outs["mainloop"], _exact(a, w)) <= 1e-5


@pytest.mark.parametrize("M,tile_n", [(100, 128), (300, 256)])
def test_w4a4_mainloop_decode_bias_activation(monkeypatch, M, tile_n):
    """activation_decode="mainloop" with bias and an activation, bf16 out: no bf16 pass runs."""
    import scalemm.gemm_nvfp4 as g
    N, K = 2048, 1024
    w = _weights(N, K, "tensor", seed=33)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=34).to(torch.bfloat16), scaling="token")
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    monkeypatch.setattr(g, "dequantize_rows_bf16", None)  # the pass must not run
    out = _poisoned(M, N, torch.bfloat16)
    g.gemm_nvfp4(a, w, bias=bias, epilogue="gelu", out=out, activation_decode="mainloop",
                 config=GemmConfig(128, tile_n, 64, 1, 1, "cooperative", swap_ab=True))
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w, bias, "gelu")) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("M,N,tile_n", [(192, 4096, 64), (384, 6144, 192)])
def test_w4a4_mainloop_decode_default_config(monkeypatch, M, N, tile_n):
    """activation_decode="mainloop" without a config: the default's 64- / 192-wide token tiles cannot decode NVFP4
    activations in the mainloop, so the call runs the same tile at 128 / 256 tokens (no bf16 pass) instead of
    refusing; fp32 out against the exact product."""
    import scalemm.gemm_nvfp4 as g
    K = 2048
    assert default_nvfp4_config(M, N, K).tile_n == tile_n
    w = _weights(N, K, "token", seed=37)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=38).to(torch.bfloat16), scaling="token")
    monkeypatch.setattr(g, "dequantize_rows_bf16", None)  # the pass must not run
    monkeypatch.setenv("SCALEMM_NVFP4_SKINNY", "0")
    out = _poisoned(M, N, torch.float32)
    g.gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, activation_decode="mainloop")
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w)) <= 1e-5


def test_w4a4_mainloop_decode_refuses_what_it_cannot_run():
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    w = _weights(256, 2064, "tensor", seed=35)
    a = scalemm.quantize_nvfp4(_wide((300, 2064), seed=36).to(torch.bfloat16))
    with pytest.raises(ValueError, match="K = 2064 is not a multiple of 32"):
        gemm_nvfp4(a, w, config=GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True), activation_decode="mainloop")
    with pytest.raises(ValueError, match="not cooperative with tile_n a multiple of 128"):
        gemm_nvfp4(a, w, config=GemmConfig(128, 64, 64, 1, 1, "cooperative", swap_ab=True), activation_decode="mainloop")


# W4A4 with the tokens on A (activation_decode="registers", swap_ab=False configs): the activations' codes decoded in
# registers in their own order, the weights decoded to bf16 by the pass. M = 1 / 300 leave most of a 128-token tile
# empty, K = 2080 ends in half a k-tile (TMA zero-fills the codes past K), N = 1000 / 576 end in partial tiles.
TOKENS_ON_A_CONFIGS = [GemmConfig(128, n, 64, cm, 1, "cooperative", swap_ab=False, stream_k=sk)
                       for n, cm, sk in [(64, 1, False), (128, 1, True), (192, 1, False), (256, 1, False),
                                         (128, 2, False)]]


@pytest.mark.parametrize("config", TOKENS_ON_A_CONFIGS, ids=lambda c: c.key())
@pytest.mark.parametrize("M,N,K", [(1, 1000, 2080), (300, 576, 7168), (4096, 1000, 2080), (2500, 2048, 1024)])
@pytest.mark.parametrize("a_scaling,w_scaling", [("tensor", "token"), ("token", "tensor")])
def test_w4a4_tokens_on_a_matches_exact_dequant(config, M, N, K, a_scaling, w_scaling):
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    w = _weights(N, K, w_scaling, seed=41)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=42).to(torch.bfloat16), scaling=a_scaling)  # no exact rows
    out = _poisoned(M, N, torch.float32)
    gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, config=config, activation_decode="registers")
    exact = _exact(a, w)
    _assert_rows_and_cols_match(out, exact)
    assert torch.equal(out[exact.norm(dim=1) == 0], torch.zeros_like(out[exact.norm(dim=1) == 0]))


@pytest.mark.parametrize("M,N,K", [(4096, 576, 7168), (2048, 1000, 2080)])
def test_w4a4_tokens_on_a_is_the_default_where_the_rule_says(monkeypatch, M, N, K):
    """No config, activation_decode "auto": from NVFP4_TOKENS_ON_A_MIN_TOKENS tokens and M >= RATIO x N the tokens go
    on A and only the weights are decoded by the pass; bias, gelu, bf16 out."""
    import scalemm.gemm_nvfp4 as g
    from scalemm.cutlass_kernels.configs import sm90
    assert sm90.nvfp4_tokens_on_a(M, N, K)
    w = _weights(N, K, "token", seed=43)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=44).to(torch.bfloat16), scaling="token")
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    decoded = _record_passes(monkeypatch)
    out = _poisoned(M, N, torch.bfloat16)
    g.gemm_nvfp4(a, w, bias=bias, epilogue="gelu", out=out)
    assert decoded == [(N, K)], "only the weights go through the pass"
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w, bias, "gelu")) <= TOL[torch.bfloat16]
    decoded.clear()
    want = _poisoned(M, N, torch.bfloat16)
    g.gemm_nvfp4(a, w, bias=bias, epilogue="gelu", out=want, activation_decode="pass")
    assert decoded == [(M, K)]
    assert _rel_err(out, want.double()) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("N", [16, 48])
def test_w4a4_tokens_on_a_few_weight_rows(monkeypatch, N):
    """Fewer weight rows than the narrowest tokens-on-A tile (64): "registers" runs them on it, partly empty (only
    the weights through the pass); the default keeps the activations' pass there (NVFP4_TOKENS_ON_A_MIN_WIDTH)."""
    import scalemm.gemm_nvfp4 as g
    from scalemm.cutlass_kernels.configs import sm90
    M, K = 2048, 1024
    assert not sm90.nvfp4_tokens_on_a(M, N, K) and sm90.default_nvfp4_tokens_on_a_config(M, N, K).tile_n == 64
    w = _weights(N, K, "token", seed=56)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=57).to(torch.bfloat16), scaling="token")
    decoded = _record_passes(monkeypatch)
    for decode, passed in (("registers", (N, K)), ("auto", (M, K))):
        decoded.clear()
        out = _poisoned(M, N, torch.float32)
        g.gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, activation_decode=decode)
        assert decoded == [passed], (decode, decoded)
        _assert_rows_and_cols_match(out, _exact(a, w))


def _random_tokens_on_a_case(seed):
    """(M, N, K) that the default takes with the tokens on A: odd token counts, N of models and multiples of 16,
    K a multiple of 32 (of models, or not a multiple of 64)."""
    import random
    from scalemm.cutlass_kernels.configs import sm90
    r = random.Random(seed)
    while True:
        M = r.randint(sm90.NVFP4_TOKENS_ON_A_MIN_TOKENS, 9000)
        N = r.choice([512, 576, 1024, 1536, 2048, 2880, 3072, 4096]) if r.random() < 0.6 else 16 * r.randint(1, 200)
        K = r.choice([1024, 2048, 2880, 4096, 7168]) if r.random() < 0.6 else 32 * r.randint(8, 160)
        if sm90.nvfp4_tokens_on_a(M, N, K):
            return M, N, K


@pytest.mark.parametrize("seed", range(10))
def test_w4a4_tokens_on_a_random_shapes(seed):
    """The default dispatch on random prefill shapes it takes with the tokens on A, against the exact product: the
    whole output, each row and column, fp32 or bf16 out, with or without bias."""
    import random
    M, N, K = _random_tokens_on_a_case(seed)
    r = random.Random(seed + 1000)
    out_dtype = r.choice([torch.float32, torch.bfloat16])
    w = _weights(N, K, r.choice(["tensor", "token"]), seed=seed)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=seed + 1).to(torch.bfloat16), scaling=r.choice(["tensor", "token"]))
    bias = torch.randn(N, device="cuda").to(out_dtype) if r.random() < 0.5 else None
    out = _poisoned(M, N, out_dtype)
    scalemm.gemm(a, w, bias=bias, out_dtype=out_dtype, out=out)
    assert not out.isnan().any(), f"unwritten outputs at {(M, N, K)}"
    exact = _exact(a, w, bias)
    tol = TOL[out_dtype]
    assert _rel_err(out, exact) <= tol, (M, N, K)
    nz_rows, nz_cols = exact.norm(dim=1) > 0, exact.norm(dim=0) > 0
    err = out.double() - exact
    assert (err.norm(dim=1)[nz_rows] / exact.norm(dim=1)[nz_rows]).max() <= 10 * tol, (M, N, K)
    assert (err.norm(dim=0)[nz_cols] / exact.norm(dim=0)[nz_cols]).max() <= 10 * tol, (M, N, K)


def _random_w4a16_on_a_case(seed):
    """(M, N, K) where W4A16 runs with the tokens on A by default (sm90.nvfp4_w4a16_on_a) and the skinny kernel does
    not take it: odd token counts, narrow layers of models and multiples of 16, K a multiple of 32."""
    import random
    r = random.Random(seed)
    while True:
        M = r.randint(sm90.NVFP4_TOKENS_ON_A_MIN_TOKENS, 9000)
        N = r.choice([256, 288, 512, 576, 768, 1024]) if r.random() < 0.6 else 16 * r.randint(4, 100)
        K = r.choice([896, 2048, 3584, 4096, 7168]) if r.random() < 0.6 else 32 * r.randint(8, 160)
        if sm90.nvfp4_w4a16_on_a(M, N, K) and default_nvfp4_skinny_config(M, N, K, nvfp4_activations=False) is None:
            return M, N, K


@pytest.mark.parametrize("seed", range(6))
def test_w4a16_tokens_on_a_random_shapes(seed):
    """W4A16's default on random shapes it takes with the tokens on A, against the exact product: fp32 or bf16 out,
    with or without bias, every row and column."""
    import random
    M, N, K = _random_w4a16_on_a_case(seed)
    r = random.Random(seed + 2000)
    out_dtype = r.choice([torch.float32, torch.bfloat16])
    w = _weights(N, K, r.choice(["tensor", "token"]), seed=seed + 70)
    x = _wide((M, K), seed=seed + 71).to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(out_dtype) if r.random() < 0.5 else None
    out = _poisoned(M, N, out_dtype)
    scalemm.gemm(x, w, bias=bias, out_dtype=out_dtype, out=out)
    _assert_rows_and_cols_match(out, _exact(x, w, bias), tol=TOL[out_dtype])


def test_w4a4_tokens_on_a_graph_replay():
    """Captured with its weights' pass and temporary inside the graph; replayed on new activations."""
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    M, N, K = 2048, 576, 7168
    w = _weights(N, K, "token", seed=45)
    x = _wide((M, K), seed=46).to(torch.bfloat16)
    a = scalemm.quantize_nvfp4(x, scaling="token")
    out = _poisoned(M, N, torch.float32)
    gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, activation_decode="registers")  # build outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, activation_decode="registers")
    a2 = scalemm.quantize_nvfp4(_wide((M, K), seed=47).to(torch.bfloat16), scaling="token")
    a.qdata.copy_(a2.qdata)
    a.scales.copy_(a2.scales)
    a.alpha.copy_(a2.alpha)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(out, _exact(a2, w)) <= 1e-5


def test_w4a4_tokens_on_a_refuses_what_it_cannot_run():
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    w = _weights(256, 2064, "tensor", seed=48)
    a = scalemm.quantize_nvfp4(_wide((300, 2064), seed=49).to(torch.bfloat16))
    flipped = GemmConfig(128, 128, 64, 1, 1, "cooperative", swap_ab=False)
    with pytest.raises(ValueError, match="K = 2064 is not a multiple of 32"):
        gemm_nvfp4(a, w, config=flipped)
    w2 = _weights(256, 2048, "tensor", seed=48)
    a2 = scalemm.quantize_nvfp4(_wide((300, 2048), seed=49).to(torch.bfloat16))
    with pytest.raises(ValueError, match="is swapped"):
        gemm_nvfp4(a2, w2, config=GemmConfig(128, 128, 64, 1, 1, "cooperative", swap_ab=True),
                   activation_decode="registers")
    with pytest.raises(ValueError, match="not by 'mainloop'"):
        gemm_nvfp4(a2, w2, config=flipped, activation_decode="mainloop")
    with pytest.raises(ValueError, match="takes bf16 activations"):  # W4A16 on A: the weights decode to bf16
        gemm_nvfp4(_wide((300, 2048), seed=50).to(torch.float16), w2, config=flipped)
    with pytest.raises(ValueError, match="a is not NVFP4"):  # "registers" decodes NVFP4 activations only
        gemm_nvfp4(_wide((300, 2048), seed=50).to(torch.bfloat16), w2, config=flipped, activation_decode="registers")


# W4A16 with the tokens on A (a swap_ab=False config with bf16 activations): the weights decoded to bf16 by the pass,
# then the FP8 GEMM's kernel with bf16 operands (templates/gemm_sm90.cu) and the same epilogue.
W4A16_ON_A_CONFIGS = [GemmConfig(128, n, 64, cm, 1, "cooperative", swap_ab=False, stream_k=sk)
                      for n, cm, sk in [(64, 1, False), (128, 1, True), (192, 1, False), (256, 1, False)]]


@pytest.mark.parametrize("config", W4A16_ON_A_CONFIGS, ids=lambda c: c.key())
@pytest.mark.parametrize("M,N,K", [(1, 1000, 2064), (300, 576, 7168), (4096, 1000, 2080)])
def test_w4a16_tokens_on_a_matches_exact_dequant(config, M, N, K):
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    w = _weights(N, K, "token" if M % 2 else "tensor", seed=51)
    x = _wide((M, K), seed=52).to(torch.bfloat16)
    out = _poisoned(M, N, torch.float32)
    gemm_nvfp4(x, w, out_dtype=torch.float32, out=out, config=config)
    _assert_rows_and_cols_match(out, _exact(x, w))


def test_w4a16_tokens_on_a_bias_gelu_and_graph_replay():
    """bias + gelu, bf16 out, through scalemm.gemm with a config; captured (the weights' pass inside the graph) and
    replayed on new activations."""
    M, N, K = 2048, 576, 7168
    w = _weights(N, K, "token", seed=53)
    x = _wide((M, K), seed=54).to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    cfg = GemmConfig(128, 192, 64, 1, 1, "cooperative", swap_ab=False, stream_k=True)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(x, w, bias=bias, epilogue="gelu", out=out, config=cfg)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(x, w, bias, "gelu")) <= TOL[torch.bfloat16]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.gemm(x, w, bias=bias, epilogue="gelu", out=out, config=cfg)
    x.copy_(_wide((M, K), seed=55).to(torch.bfloat16))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(out, _exact(x, w, bias, "gelu")) <= TOL[torch.bfloat16]


# The weight-tile widths the tokens-on-A rule narrows to (sm90.NVFP4_TOKENS_ON_A_WIDTHS) beyond the configs above:
# CUTLASS's extended wgmma shapes 144 / 208 / 240 and 96; N ends in a partial weight tile, K % 64 == 32.
FITTED_WIDTHS = [w for w in sm90.NVFP4_TOKENS_ON_A_WIDTHS if w not in (64, 128, 160, 192, 224, 256)]


@pytest.mark.parametrize("width", FITTED_WIDTHS)
@pytest.mark.parametrize("M,N,K", [(300, 576, 2080), (2500, 1000, 1024)])
@pytest.mark.parametrize("kind", ["w4a4", "w4a16"])
def test_tokens_on_a_fitted_widths_match_exact_dequant(width, M, N, K, kind):
    from scalemm.gemm_nvfp4 import gemm_nvfp4
    config = GemmConfig(128, width, 64, 1, 1, "cooperative", swap_ab=False)
    w = _weights(N, K, "token", seed=57)
    x = _wide((M, K), seed=58).to(torch.bfloat16)
    a = scalemm.quantize_nvfp4(x, scaling="token") if kind == "w4a4" else x
    out = _poisoned(M, N, torch.float32)
    gemm_nvfp4(a, w, out_dtype=torch.float32, out=out, config=config,
               **({"activation_decode": "registers"} if kind == "w4a4" else {}))
    _assert_rows_and_cols_match(out, _exact(a, w))


@pytest.mark.parametrize("M,N,K", [(4096, 576, 7168), (4096, 512, 3584), (12000, 288, 2560), (8192, 320, 960)])
def test_w4a16_tokens_on_a_is_the_default_where_the_rule_says(monkeypatch, M, N, K):
    """No config, bf16 activations: where sm90.nvfp4_w4a16_on_a holds, the weights go through the pass and a bf16 x
    bf16 GEMM runs on W4A16's tokens-on-A tile (144, 128, 144 and 160 weight rows wide here, the last two by the
    weight-row padding term; 12000 tokens data-parallel where W4A4's tile takes stream-K); bias, gelu, bf16 out,
    against the exact product and within accumulation order of the swapped kernel (an explicit swapped config)."""
    assert sm90.nvfp4_w4a16_on_a(M, N, K)
    w = _weights(N, K, "token", seed=59)
    x = _wide((M, K), seed=60).to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    decoded = _record_passes(monkeypatch)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(x, w, bias=bias, epilogue="gelu", out=out)
    assert decoded == [(N, K)], "the weights go through the pass"
    assert not out.isnan().any()
    want = _exact(x, w, bias, "gelu")
    assert _rel_err(out, want) <= TOL[torch.bfloat16]
    swapped = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(x, w, bias=bias, epilogue="gelu", out=swapped, config=sm90.default_nvfp4_config(M, N, K))
    assert decoded == [(N, K)], "the swapped kernel decodes the weights in registers"
    assert _rel_err(swapped, want) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("K", [2064, 4096])  # a word at a time (K % 32 != 0), four words at a time
def test_dequant_rows_is_exact(K):
    a = scalemm.quantize_nvfp4(_wide((300, K), seed=5).to(torch.bfloat16), scaling="token")
    got = dequantize_rows_bf16(a)
    want = ref.dequantize_nvfp4(a, torch.float32, apply_alpha=False)
    assert torch.equal(got.float(), want)


@pytest.mark.parametrize("M", [9, 16, 33, 64, 100, 129, 256])
@pytest.mark.parametrize("N,K", [(4096, 4096), (576, 7168), (1000, 2080)])
@pytest.mark.parametrize("a_scaling", ["tensor", "token"])
def test_w4a4_exact_rows_same_bits(monkeypatch, M, N, K, a_scaling):
    """W4A4 by the default dispatch on activations with the quantizer's exact bf16 rows runs as W4A16 on those rows
    (skinny wgmma loop, skinny blocks, CUTLASS kernel): no decode pass, and the bits of the W4A16 call on the same
    bf16 values with alpha_a folded in the epilogue, i.e. of the call on the pass's output where the W4A4 rule picks
    the same kernel."""
    w = _weights(N, K, "token", seed=M + N)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=M + K).to(torch.bfloat16), scaling=a_scaling)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    passes = _record_passes(monkeypatch)
    with_rows = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a, w, bias=bias, out=with_rows)
    assert passes == []
    same_kernel = (default_nvfp4_skinny_config(M, N, K, nvfp4_activations=True)
                   == default_nvfp4_skinny_config(M, N, K, nvfp4_activations=False))
    passed = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(_drop_exact_rows(a), w, bias=bias, out=passed)
    assert not with_rows.isnan().any()
    if same_kernel:
        assert torch.equal(with_rows, passed)
    assert _rel_err(with_rows, _exact(a, w, bias)) <= TOL[torch.bfloat16]


def test_w4a4_exact_rows_dropped_after_in_place_change(monkeypatch):
    """Codes changed in place after quantization: the GEMM decodes the changed codes (the pass), not the stale rows."""
    passes = _record_passes(monkeypatch)
    M, N, K = 32, 1024, 1024
    w = _weights(N, K, "token", seed=5)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=6).to(torch.bfloat16), scaling="token")
    a.qdata[:, :16] = 0x77  # every one of those codes now 6.0 * its block scale
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(a, w, out_dtype=torch.float32, out=out)
    assert len(passes) == 1
    assert _rel_err(out, _exact(a, w)) <= 1e-5


CONFIGS = [GemmConfig(128, n, 64, cm, 1, sched, swap_ab=True, stream_k=sk)
           for n, cm, sched, sk in [(16, 1, "cooperative", True), (16, 1, "cooperative", False),
                                    (64, 1, "cooperative", False), (128, 1, "cooperative", False),
                                    (256, 1, "cooperative", False), (128, 1, "pingpong", False),
                                    (16, 1, "pingpong", False), (128, 2, "cooperative", False),
                                    (128, 1, "cooperative", True)]]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.key())
def test_every_config_is_exact(config):
    M, N, K = 333, 1536, 3136
    w = _weights(N, K, "token", seed=21)
    x = _wide((M, K), seed=22).to(torch.bfloat16)
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=config)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(x, w)) <= 1e-5


# Stream-K (CUTLASS's deterministic reduction of the K-split partial sums): several peers per tile with unequal K
# ranges (4096^2 at 64 tokens: 32 tiles over 132 CTAs), K not a multiple of 64, an even split that CUTLASS runs as
# split-K (12 tiles, 132 CTAs: 11 peers each), two token tiles, 256-wide tiles, and one tile of 512 K tiles (64
# peers). Three runs must give the same bits.
STREAM_K_CASES = [(64, 4096, 4096, 64), (7, 2048, 2064, 16), (64, 1536, 8192, 64), (200, 1536, 8192, 128),
                  (300, 4096, 4096, 256), (16, 128, 32768, 16)]


@pytest.mark.parametrize("M,N,K,tile_n", STREAM_K_CASES)
def test_stream_k_is_exact_and_deterministic(M, N, K, tile_n):
    config = GemmConfig(128, tile_n, 64, 1, 1, "cooperative", swap_ab=True, stream_k=True)
    w = _weights(N, K, "token", seed=N + K)
    x = _wide((M, K), seed=M + 5).to(torch.bfloat16)
    outs = []
    for _ in range(3):
        out = _poisoned(M, N, torch.float32)
        scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=config)
        outs.append(out)
    assert not outs[0].isnan().any()
    assert _rel_err(outs[0], _exact(x, w)) <= 1e-5
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_nan_weight_block_propagates_to_its_column_only():
    N, K, M = 256, 512, 8
    wf = _wide((N, K), seed=31)
    wf[3, 100] = float("nan")
    # per-tensor scaling: the NaN reaches only its block's e4m3 scale (0x7F), not other rows' alphas
    w = scalemm.quantize_nvfp4(wf.to(torch.bfloat16), scaling="tensor", amax=torch.tensor(50.0, device="cuda"))
    assert (w.scales.view(torch.uint8) == 0x7F).sum() == 1
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    out = scalemm.gemm(x, w, out_dtype=torch.float32)
    assert out[:, 3].isnan().all()
    assert not out[:, torch.arange(N, device="cuda") != 3].isnan().any()


@pytest.mark.parametrize("shape", [(256, 128), (3, 40, 1040), (7, 8), (5, 48), (2, 64, 2048)])
def test_prepare_kernel_is_the_torch_permutation(shape):
    """prepare_sm90_weight on CUDA (one pass of the prepare_sm90 kernel) gives the bytes of its torch form, for
    whole and partial 64-element chunks (K % 64 != 0: zero codes pad), stacked experts, a non-contiguous view."""
    from scalemm.gemm_nvfp4 import _prepare_sm90_torch
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    q = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=g)
    got = prepare_sm90_weight(q)
    assert torch.equal(got, _prepare_sm90_torch(q))
    assert torch.equal(got.cpu(), prepare_sm90_weight(q.cpu()))
    wide = torch.randint(0, 256, (*shape[:-1], shape[-1] + 8), dtype=torch.uint8, device="cuda", generator=g)
    view = wide[..., 8:]  # rows 8 bytes off the 16-byte alignment
    assert torch.equal(prepare_sm90_weight(view), _prepare_sm90_torch(view))


def test_prepared_weight_is_cached_and_refreshed():
    w = _weights(256, 256, "tensor", seed=41)
    from scalemm.gemm_nvfp4 import _prepared_weight
    p1 = _prepared_weight(w.qdata)
    assert _prepared_weight(w.qdata) is p1
    w.qdata.add_(0)  # an in-place change bumps the version
    assert _prepared_weight(w.qdata) is not p1
    assert torch.equal(_prepared_weight(w.qdata), prepare_sm90_weight(w.qdata))


def test_weight_first_prepared_inside_a_graph_capture():
    """A weight whose first CUTLASS-kernel call is captured: the graph prepares it on each replay, and an
    eager call before the first replay does not read the graph's (not yet written) copy."""
    M, N, K = 16, 512, 1024
    cfg = default_nvfp4_config(M, N, K)  # the CUTLASS kernel (the skinny one, the default here, needs no copy)
    scalemm.gemm(_wide((M, K), seed=97).to(torch.bfloat16), _weights(N, K, "token", seed=98),
                 out_dtype=torch.float32, config=cfg)  # builds the kernel (and the device constants) outside the capture
    w = _weights(N, K, "token", seed=95)
    x = _wide((M, K), seed=96).to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=cfg)
    assert _rel_err(scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg), _exact(x, w)) <= 1e-5
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(out, _exact(x, w)) <= 1e-5


# ---------------------------------------------------------------------------------------
# the skinny kernel (decode: up to 64 tokens per block of CTAs)
# ---------------------------------------------------------------------------------------

# K with a partial last 128-chunk (2080, 4128, 96), N not a multiple of the 64-row CTA tile
SKINNY_LOOPS = ["stepped", "lean", "wgmma", "resident"]  # SkinnyConfig.mainloop: the default, the baseline, ...
MMA_SYNC_LOOPS = ["stepped", "lean", "resident"]  # the same MMAs in the same order: bit-identical outputs


def _loop_takes(loop: str, M: int) -> bool:
    """Whether `loop` runs M tokens in one kernel ("resident": one token tile)."""
    return loop != "resident" or M <= 8
SKINNY_NK = [(4096, 4096), (1000, 2080), (72, 96), (8, 4128), (576, 7168)]


@pytest.mark.parametrize("M,loop", [(M, loop) for loop in SKINNY_LOOPS for M in (1, 5, 8, 9, 16, 17, 33, 64)
                                    if _loop_takes(loop, M)])
@pytest.mark.parametrize("N,K", SKINNY_NK)
def test_skinny_matches_exact_dequant(M, N, K, loop):
    cfg = replace(skinny_config_for_tokens(M), mainloop=loop)
    w = _weights(N, K, "token", seed=N + K + 1)
    x = _wide((M, K), seed=M + 100).to(torch.bfloat16)
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=cfg)
    assert not out.isnan().any(), "unwritten outputs"
    assert _rel_err(out, _exact(x, w)) <= 1e-5


@pytest.mark.parametrize("loop", SKINNY_LOOPS)
def test_skinny_reads_stay_inside_inputs(loop, guarded_reads):
    """Every input of the skinny kernel against unmapped memory (tests/guarded_reads.py), dense and
    grouped, W4A16 and W4A4: a read past either end of any input is an illegal address. torch's
    allocator hides such reads (the next tensor is mapped); the first lean loop had one (its ring
    prologue's loads were hoisted above their guards) and faulted only in some processes."""
    import subprocess
    import sys
    cases = guarded_reads
    r = subprocess.run([sys.executable, str(cases.PATH), loop], capture_output=True, text=True, timeout=600)
    lines = (r.stdout + r.stderr).strip().splitlines()
    tail = "\n".join(lines[-25:])
    assert r.returncode == 0, tail  # 700 (illegal address) ends the child with a traceback
    assert lines[-1] == "0 mismatches", tail
    ran = [line for line in lines if line.endswith(": ok")]
    assert len(ran) == 2 * cases.cases(loop), tail  # both sides of every case the loop takes


@pytest.mark.parametrize("N,K", [(4096, 4096), (576, 7168), (4096, 4224), (136, 4192)])  # 136: a partial tile
def test_skinny_loops_agree_bit_for_bit(N, K):
    """Every main loop makes the same loads and MMAs in the same order, so at a fixed split count
    (which sets the order of the cross-CTA sum) their outputs are identical, W4A16 and W4A4."""
    w = _weights(N, K, "token", seed=N + K)
    for M in (1, 5, 8, 9, 16):
        x = _wide((M, K), seed=M).to(torch.bfloat16)
        for a in (x, scalemm.quantize_nvfp4(x, scaling="token")):
            base = replace(skinny_config_for_tokens(M), splits=3)
            loops = [loop for loop in MMA_SYNC_LOOPS if _loop_takes(loop, M)]
            outs = [scalemm.gemm(a, w, config=replace(base, mainloop=loop)) for loop in loops]
            for loop, o in zip(loops[1:], outs[1:]):
                assert torch.equal(o, outs[0]), (loop, M)


@pytest.mark.parametrize("N,K", [(4096, 4096), (14336, 4096), (1024, 8192), (136, 4192)])
def test_skinny_auto_split_is_the_reported_one(N, K):
    """skinny_splits reports the split the launcher runs for splits=0 (nothing launched): pinning that split
    gives the same bits (the cross-CTA sum's order depends only on the split count); a pinned config
    reports its own split, an empty call 0."""
    from scalemm.gemm_nvfp4 import skinny_splits
    w = _weights(N, K, "token", seed=N + 1)
    x = _wide((1, K), seed=K + 1).to(torch.bfloat16)
    cfg = SkinnyConfig(1)
    s = skinny_splits(x, w, cfg, out_dtype=torch.float32)
    assert 1 <= s <= 8
    auto = scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg)
    assert torch.equal(auto, scalemm.gemm(x, w, out_dtype=torch.float32, config=SkinnyConfig(1, s)))
    assert skinny_splits(x, w, SkinnyConfig(1, 2), out_dtype=torch.float32) == 2
    assert skinny_splits(x[:0], w, cfg, out_dtype=torch.float32) == 0
    # 9 tokens: two blocks of 8 side by side, which the split model counts as twice the CTAs
    x9 = _wide((9, K), seed=K + 2).to(torch.bfloat16)
    s9 = skinny_splits(x9, w, cfg, out_dtype=torch.float32)
    assert 1 <= s9 <= s
    assert torch.equal(scalemm.gemm(x9, w, out_dtype=torch.float32, config=cfg),
                       scalemm.gemm(x9, w, out_dtype=torch.float32, config=SkinnyConfig(1, s9)))


@pytest.mark.parametrize("loop", SKINNY_LOOPS)
def test_skinny_column_probe(loop):
    """Tokens that are unit vectors e_k return column k of dequant(W), exactly (one product per output):
    a wrong element, row or scale placement names the columns it moved (the first GPU run's wrong
    pair decode showed up as sign flips and garbage in alternate columns)."""
    N, K = 72, 384  # 3 chunks; rows past the 64-row tile
    w = _weights(N, K, "token", seed=31)
    wd = (ref.dequantize_nvfp4(w, torch.float32, apply_alpha=False) * w.alpha.reshape(-1, 1)).T  # [K, N]
    cfg = SkinnyConfig(1, 0, loop)
    bad = []
    for k0 in range(0, K, 8):  # 8 unit tokens per call
        x = torch.zeros(8, K, device="cuda", dtype=torch.bfloat16)
        x[torch.arange(8), torch.arange(k0, k0 + 8)] = 1
        out = scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg)
        for i in range(8):
            if not torch.equal(out[i], wd[k0 + i]):
                hits = [k for k in range(K) if torch.equal(out[i], wd[k])]
                rows = (out[i] != wd[k0 + i]).nonzero().flatten()[:4].tolist()
                bad.append(f"k={k0 + i}: equals columns {hits}, wrong rows {rows}")
    assert not bad, f"{len(bad)} of {K} columns wrong: " + "; ".join(bad[:6])


def test_skinny_resident_split_rule_is_the_launchers():
    """skinny_problem's shared-memory rule for the resident loop is the launcher's (plan in nvfp4_skinny.cuh): for a
    fixed split the launcher accepts or refuses what Python accepts or refuses; with splits=0 a split the launcher
    picks is accepted only where its tokens fit, and a refused pick is a ValueError naming shared memory."""
    import ctypes
    from scalemm import abi
    from scalemm.gemm_nvfp4 import _skinny_call, _skinny_splits_fn, skinny_problem
    from scalemm.jit import KernelError

    def launcher_accepts(x, w, cfg):
        spec, args, _ = _skinny_call(x, w, None, None, cfg, None, out_dtype=torch.bfloat16)
        got = ctypes.c_int64(-1)
        try:  # the launcher's plan, without Python's check (a refusal: KernelError)
            _skinny_splits_fn(spec)(ctypes.byref(abi.Nvfp4SkinnySplitsArgs(call=ctypes.addressof(args),
                                                                           splits=ctypes.addressof(got))))
        except KernelError:
            return None
        return got.value

    N = 64
    for M, K, splits in [(8, 23552, 8), (8, 23584, 8), (3, 23584, 8), (8, 4096, 1), (8, 4096, 2), (1, 14336, 1),
                         (8, 2080, 1), (8, 23552, 0), (1, 4096, 0)]:
        w = _weights(N, K, "token", seed=K)
        x = _wide((M, K), seed=M).to(torch.bfloat16)
        cfg = SkinnyConfig(1, splits, "resident")
        got = launcher_accepts(x, w, cfg)
        if splits:
            assert (got is not None) == (skinny_problem(M, N, K, cfg, []) is None), (M, K, splits)
        if got is not None:
            assert skinny_problem(M, N, K, cfg, []) is None
            per = -(-(-(-K // 128)) // got)
            assert M * (per * 128 + 8) * 2 + 16 <= abi.kSkinnyResidentTokenBytes, (M, K, got)
    # 28672 x 8192 at 8 tokens: the launcher's split leaves more chunks than 8 token rows can hold in 48 KB on an
    # H100 (1 split of 64); fixed splits that fit run, bit-identical to the stepped loop
    M, N, K = 8, 28672, 8192
    w = _weights(N, K, "token", seed=93)
    x = _wide((M, K), seed=94).to(torch.bfloat16)
    auto = SkinnyConfig(1, 0, "resident")
    if launcher_accepts(x, w, auto) is None:
        with pytest.raises(ValueError, match="shared memory"):
            scalemm.gemm(x, w, config=auto)
    out = scalemm.gemm(x, w, out_dtype=torch.float32, config=SkinnyConfig(1, 3, "resident"))
    assert torch.equal(out, scalemm.gemm(x, w, out_dtype=torch.float32, config=SkinnyConfig(1, 3)))
    assert _rel_err(out, _exact(x, w)) <= 1e-5
    with pytest.raises(ValueError, match="shared memory"):
        scalemm.gemm(x, w, config=SkinnyConfig(1, 2, "resident"))
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert launcher_accepts(x, w, auto) is None


@pytest.mark.parametrize("splits", range(0, 9))
@pytest.mark.parametrize("loop", SKINNY_LOOPS)
def test_skinny_every_split_is_exact_and_deterministic(splits, loop):
    M = 9 if _loop_takes(loop, 9) else 8  # 9 tokens: two tiles of 8 (the resident loop: one tile, full)
    N, K = 1000, 2080  # 17 chunks of 128: uneven splits, a CTA tile past N
    w = _weights(N, K, "tensor", seed=51)
    x = _wide((M, K), seed=52).to(torch.bfloat16)
    cfg = SkinnyConfig(skinny_config_for_tokens(M).token_tiles, splits, loop)
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=cfg)
    assert not out.isnan().any()
    assert _rel_err(out, _exact(x, w)) <= 1e-5
    assert torch.equal(scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg), out)


@pytest.mark.parametrize("M,via", [(1, "default"), (7, "default"), (16, "default"), (1, "config"), (7, "config"),
                                   (16, "config"), (33, "config"), (7, "lean"), (33, "lean"), (9, "wgmma"),
                                   (33, "wgmma"), (64, "wgmma"), (1, "resident"), (7, "resident")])
@pytest.mark.parametrize("a_scaling,w_scaling", [("tensor", "tensor"), ("token", "token")])
def test_skinny_w4a4_matches_exact_dequant(monkeypatch, M, a_scaling, w_scaling, via):
    """The skinny kernel's mma.sync loops decode the NVFP4 activations themselves (no bf16 pass); its wgmma loop
    (the default above 8 tokens) takes them as exact bf16 rows, alpha_a in its epilogue: the rows the quantizer
    wrote beside them (no pass), or without those the decode pass's, with the same bits."""
    import scalemm.gemm_nvfp4 as g
    N, K = 4096, 2048
    w = _weights(N, K, w_scaling, seed=61)
    a = scalemm.quantize_nvfp4(_wide((M, K), seed=62).to(torch.bfloat16), scaling=a_scaling)
    out = _poisoned(M, N, torch.float32)
    config = (default_nvfp4_skinny_config(M, N, K, nvfp4_activations=True) if via == "default" else
              skinny_config_for_tokens(M) if via == "config" else replace(skinny_config_for_tokens(M), mainloop=via))
    passes = _record_passes(monkeypatch)
    if via == "default":  # up to 16 NVFP4 tokens the default is the skinny kernel
        assert config is not None
    has_rows = g.exact_rows(a) is not None
    assert has_rows == (9 <= M <= 256)  # quantize.EXACT_ROWS_MIN / MAX
    outs, loops = [], []
    for exact in (True, False) if has_rows else (False,):
        if has_rows and not exact:
            _drop_exact_rows(a)
        # the default with exact rows: the W4A16 rule (they run as W4A16); an explicit config as given
        cfg = (default_nvfp4_skinny_config(M, N, K, nvfp4_activations=not exact) if via == "default" else config)
        outs.append(_poisoned(M, N, torch.float32))
        scalemm.gemm(a, w, out_dtype=torch.float32, out=outs[-1], config=None if via == "default" else config)
        # the decode pass runs for the wgmma loop only, and only without the quantizer's exact rows
        assert len(passes) == (not exact and cfg.mainloop == "wgmma")
        passes.clear()
        loops.append(cfg.mainloop)
    if len(outs) == 2 and loops[0] == loops[1]:  # the same kernel on the rows or on the pass's output
        assert torch.equal(outs[0], outs[1])
    out = outs[0]
    assert not out.isnan().any()
    assert _rel_err(out, _exact(a, w)) <= 1e-5


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_skinny_activations(act):
    M, N, K = 3, 2048, 1024
    w = _weights(N, K, "token", seed=71)
    x = _wide((M, K), seed=72).to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = scalemm.gemm(x, w, bias=bias, epilogue=act, out_dtype=torch.bfloat16, config=SkinnyConfig(1))
    assert _rel_err(out, _exact(x, w, bias, act)) <= TOL[torch.bfloat16]


@pytest.mark.parametrize("M", [1, 16, 33, 300])
@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_decode_default_dispatch(monkeypatch, M, act_dtype, out_dtype):
    """Calls of up to 8 tokens take the skinny kernel by default (dtypes, bias, relu), and its wgmma loop at
    9-16 tokens, at 17-64 where N * K <= 2^25 (here 2048 x 1024) and above in blocks of 64 tokens on small
    layers (300 tokens: 5 blocks of 32 CTAs); SCALEMM_NVFP4_SKINNY=0 keeps them on the CUTLASS kernel. (Not
    named "skinny": `-k skinny` selects the tests that need only the kernels of --set skinny, and this one runs
    CUTLASS kernels too.)"""
    import scalemm.gemm_nvfp4 as g
    calls = []
    real = g._gemm_skinny
    monkeypatch.setattr(g, "_gemm_skinny", lambda *a: calls.append(a[4]) or real(*a))
    test_w4a16_dtypes_bias_relu(M, act_dtype, out_dtype)
    assert calls == ([SkinnyConfig(1)] if M <= 8 else [SkinnyConfig(2, mainloop="wgmma")] if M <= 16 else
                     [SkinnyConfig(8, mainloop="wgmma")])
    calls.clear()
    monkeypatch.setenv(g.SKINNY_ENV, "0")
    test_w4a16_dtypes_bias_relu(M, act_dtype, out_dtype)
    assert calls == []


@pytest.mark.parametrize("loop", ["stepped", "wgmma", "resident"])
def test_skinny_graph_replay_sees_new_tokens(loop):
    M, N, K = 4, 4096, 4096
    w = _weights(N, K, "token", seed=81)
    x = _wide((M, K), seed=82).to(torch.bfloat16)
    out = torch.empty(M, N, dtype=torch.float32, device="cuda")
    cfg = SkinnyConfig(1, mainloop=loop)
    scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=cfg)  # build and warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.gemm(x, w, out_dtype=torch.float32, out=out, config=cfg)
    x.copy_(_wide((M, K), seed=83).to(torch.bfloat16))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg))
    assert _rel_err(out, _exact(x, w)) <= 1e-5


def test_skinny_w4a4_default_resident_where_it_pays(monkeypatch):
    """NVFP4 activations of up to 8 tokens take the resident loop by default where the launcher's split leaves each
    CTA enough chunks of K (resident_pays; 4096 x 14336: 6 splits of 19 chunks on an H100's 132 SMs), else the
    stepped loop: few chunks per CTA (4096^2: 4 splits of 8), or tokens that cannot fit its shared memory (K = 2^18:
    even one token's row of 256 chunks x 128 + 8 elements in each of 8 splits is 64 KB). Never the CUTLASS kernel."""
    import scalemm.gemm_nvfp4 as g
    from scalemm.cutlass_kernels.configs.sm90 import resident_pays
    calls = []
    real = g._gemm_skinny
    monkeypatch.setattr(g, "_gemm_skinny", lambda *a: calls.append(a[4]) or real(*a))
    M, expected = 3, []
    for N, K in ((4096, 14336), (4096, 4096), (128, 1 << 18)):
        w = _weights(N, K, "token", seed=K)
        a = scalemm.quantize_nvfp4(_wide((M, K), seed=M).to(torch.bfloat16), scaling="token")
        out = scalemm.gemm(a, w, out_dtype=torch.float32)
        assert _rel_err(out, _exact(a, w)) <= 1e-5
        res = SkinnyConfig(1, mainloop="resident")
        per = g._resident_chunks_per_split(g.skinny_kernel_spec(res, act_dtype="nvfp4", out_dtype=torch.float32,
                                                                activation=None), N, M, K, 0)
        pays = resident_pays(M, per)
        if torch.cuda.get_device_properties(0).multi_processor_count == 132:  # the splits the docstring names
            assert pays == (K == 14336), (N, K, per)
        expected.append(res if pays else SkinnyConfig(1))
    assert calls == expected


def test_skinny_config_refuses_what_it_cannot_run():
    w = _weights(256, 2064, "tensor", seed=91)  # K % 32 != 0
    x = torch.randn(4, 2064, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not a multiple of 32"):
        scalemm.gemm(x, w, config=SkinnyConfig(1))
    assert default_nvfp4_skinny_config(4, 256, 2064) is not None  # the default falls back to the CUTLASS kernel
    assert _rel_err(scalemm.gemm(x, w, out_dtype=torch.float32), _exact(x, w)) <= 1e-5


@pytest.mark.parametrize("loop", SKINNY_LOOPS)
@pytest.mark.parametrize("M,tiles", [(9, 1), (70, 8), (200, 4), (130, 2)])  # every last block partial
def test_skinny_dense_token_blocks(M, tiles, loop):
    """More tokens than a CTA's token tiles hold run in blocks of 8 x token_tiles tokens side by side (the grid's
    z): each block's outputs are the bits of the same kernel run on that block's tokens alone (same split), W4A16
    and W4A4 (NVFP4 activations quantized per token, so a block's rows quantize alone to the same codes), and the
    whole matches the exact dequantized product. Also under a CUDA graph."""
    tiles = 1 if loop == "resident" else tiles  # the resident loop holds one token tile
    N, K = 1000, 2080  # a partial 64-row weight tile and a partial last 128-chunk
    cfg = SkinnyConfig(tiles, splits=2, mainloop=loop)
    block = cfg.max_tokens
    w = _weights(N, K, "token", seed=M + tiles)
    x = _wide((M, K), seed=M + 7).to(torch.bfloat16)
    for x4 in (False, True):
        prep = (lambda t: scalemm.quantize_nvfp4(t, scaling="token")) if x4 else (lambda t: t)
        a = prep(x)
        out = _poisoned(M, N, torch.float32)
        scalemm.gemm(a, w, out_dtype=torch.float32, out=out, config=cfg)
        assert not out.isnan().any(), "unwritten outputs"
        assert _rel_err(out, _exact(a, w)) <= 1e-5
        for r in range(0, M, block):
            alone = scalemm.gemm(prep(x[r:r + block]), w, out_dtype=torch.float32, config=cfg)
            assert torch.equal(out[r:r + block], alone), (x4, r)
        replayed = _poisoned(M, N, torch.float32)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            scalemm.gemm(a, w, out_dtype=torch.float32, out=replayed, config=cfg)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(replayed, out)


# ---------------------------------------------------------------------------------------
# grouped (MoE)
# ---------------------------------------------------------------------------------------

from scalemm.formats import NVFP4Tensor  # noqa: E402


def _offsets(sizes):
    return torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)


def _expert(w, e):
    """Expert e of stacked NVFP4 weights as a plain NVFP4Tensor (its batched scale block)."""
    N, K = w.group_rows, w.shape[1]
    rp, cp = -(-N // 128) * 128, -(-(K // 16) // 4) * 4
    alpha = w.alpha[e] if w.scaling == "tensor" else w.alpha[e * N:(e + 1) * N]
    return NVFP4Tensor(w.qdata[e * N:(e + 1) * N], w.scales[e * rp * cp:(e + 1) * rp * cp], alpha, alpha.clone(),
                       (N, K), w.scaling, w.orig_dtype)


def _starts(sizes):
    return [0] + torch.tensor(sizes).cumsum(0)[:-1].tolist()


def _group_rows(q, sizes):
    """Group g's rows of a grouped rowwise copy as a plain NVFP4Tensor (None for an empty group)."""
    K = q.shape[1]
    cp = -(-(K // 16) // 4) * 4
    out = []
    for g, (s, m) in enumerate(zip(_starts(sizes), sizes)):
        sf, rp = int(q.sf_offsets[g]), -(-m // 128) * 128
        alpha = q.alpha[g] if q.scaling == "tensor" else q.alpha[s:s + m]
        out.append(NVFP4Tensor(q.qdata[s:s + m], q.scales[sf * cp:(sf + rp) * cp], alpha, alpha.clone(), (m, K),
                               q.scaling, q.orig_dtype) if m else None)
    return out


def _exact_grouped(a, w, sizes, N, bias=None):
    """fp64 exact-dequant reference of a grouped GEMM, group by group; bias [G, N] per expert."""
    r = torch.zeros(sum(sizes), N, dtype=torch.float64, device="cuda")
    rows = _group_rows(a, sizes) if not isinstance(a, torch.Tensor) else None
    for g, (s, m) in enumerate(zip(_starts(sizes), sizes)):
        if m:
            r[s:s + m] = _exact(a[s:s + m] if rows is None else rows[g], _expert(w, g),
                                None if bias is None else bias[g])
    return r


SIZES = {"ragged": [5, 0, 130, 1, 0, 17, 300, 64], "one": [777], "decode": [1] * 8 + [0] * 8,
         "many": [(i * 37) % 50 for i in range(64)]}


@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize("w_scaling", ["tensor", "token"])
def test_grouped_w4a16_matches_exact_dequant(case, w_scaling):
    sizes = SIZES[case]
    G, N, K = len(sizes), 1024, 2064
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=G).reshape(G, N, K).to(torch.bfloat16),
                                       scaling=w_scaling)
    T = sum(sizes)
    x = _wide((T + 3, K), seed=T).to(torch.bfloat16)  # 3 rows past the last group: never written
    out = _poisoned(T + 3, N, torch.float32)
    scalemm.grouped_gemm(x, w, _offsets(sizes), out_dtype=torch.float32, out=out)
    assert not out[:T].isnan().any(), "unwritten rows"
    assert out[T:].isnan().all(), "rows past the last group were written"
    assert _rel_err(out[:T], _exact_grouped(x[:T], w, sizes, N)) <= 1e-5


@pytest.mark.parametrize("a_scaling", ["tensor", "token"])
@pytest.mark.parametrize("sizes,config,skinny_env,kernel", [
    (SIZES["ragged"], None, "1", "cutlass"),               # 64 rows per expert on average: CUTLASS
    ([1, 0, 3, 0, 0, 2, 1, 9], None, "1", "skinny"),       # decode routing, 16 rows: the skinny kernel, stepped
    ([3, 0, 5, 0, 0, 2, 1, 13], None, "1", "wgmma"),       # 24 rows, 3 per expert: its wgmma loop, after the bf16 pass
    ([1, 0, 3, 0, 0, 2, 1, 9], None, "0", "cutlass"),      # ... unless SCALEMM_NVFP4_SKINNY=0
    ([1, 0, 3, 0, 0, 2, 1, 9], SkinnyConfig(2, 3), "0", "skinny"),  # config= always
    ([1, 0, 3, 0, 0, 2, 1, 9], SkinnyConfig(2, 0, "wgmma"), "1", "wgmma"),  # the wgmma loop: after the bf16 pass
], ids=["ragged", "decode-default", "decode-default-24", "decode-cutlass", "decode-skinny", "decode-wgmma"])
def test_grouped_w4a4_matches_exact_dequant(monkeypatch, a_scaling, sizes, config, skinny_env, kernel):
    """W4A4 with per-expert bias (the skinny kernel: scale rows at each group's sf_offset). Without a config,
    grouped calls take the skinny kernel up to 4 rows per expert on average (its stepped loop decoding the
    activations itself; from 24 rows on large experts or 2 rows per expert its wgmma loop, after a bf16 decode
    pass: default_nvfp4_grouped_skinny_config), the CUTLASS kernel (after the pass) above."""
    import scalemm.gemm_nvfp4 as g
    G, N, K = len(sizes), 512, 1024
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=3).reshape(G, N, K).to(torch.bfloat16), scaling="token")
    T = sum(sizes)
    offsets = _offsets(sizes)
    a = scalemm.quantize_nvfp4_grouped(_wide((T, K), seed=4).to(torch.bfloat16), offsets, scaling=a_scaling)
    bias = torch.randn(G, N, device="cuda").to(torch.float32)
    out = _poisoned(T, N, torch.float32)
    monkeypatch.setenv(g.SKINNY_ENV, skinny_env)
    if kernel == "cutlass":
        monkeypatch.setattr(g, "_gemm_skinny", None)  # must not take the skinny kernel
    elif kernel == "skinny":
        monkeypatch.setattr(g, "dequantize_rows_bf16", None)  # the decode pass must not run
    loops, skinny = [], g._gemm_skinny
    if kernel == "wgmma":  # the skinny kernel's config (argument 4) says which loop ran
        monkeypatch.setattr(g, "_gemm_skinny", lambda *args, **kw: (loops.append(args[4].mainloop), skinny(*args, **kw))[1])
    scalemm.grouped_gemm(a, w, None, bias=bias, out_dtype=torch.float32, out=out, config=config)
    assert loops == (["wgmma"] if kernel == "wgmma" else [])
    assert not out.isnan().any()
    assert _rel_err(out, _exact_grouped(a, w, sizes, N, bias)) <= 1e-5


@pytest.mark.parametrize("sizes", [SIZES["ragged"], SIZES["many"], [0, 0, 1000, 3, 0, 257, 1, 0]],
                         ids=["ragged", "many", "wide"])
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("a_scaling", ["tensor", "token"])
def test_grouped_w4a4_mainloop_decode_matches_the_pass_bit_for_bit(sizes, tile_n, a_scaling):
    """Each group's token tiles read their scale atoms from the group's sf_offset (tiles past a group's
    last atom repeat it); empty groups, one-row groups, K ending in half a k-tile."""
    from scalemm.gemm_nvfp4 import grouped_gemm_nvfp4
    G, N, K = len(sizes), 384, 2080
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=37).reshape(G, N, K).to(torch.bfloat16), scaling="token")
    T = sum(sizes)
    offsets = _offsets(sizes)
    a = scalemm.quantize_nvfp4_grouped(_wide((T, K), seed=38).to(torch.bfloat16), offsets, scaling=a_scaling)
    config = GemmConfig(128, tile_n, 64, 1, 1, "cooperative", swap_ab=True)
    outs = {}
    for how in ("mainloop", "pass"):
        outs[how] = _poisoned(T, N, torch.float32)
        grouped_gemm_nvfp4(a, w, offsets, out_dtype=torch.float32, out=outs[how], config=config, activation_decode=how)
    assert not outs["mainloop"].isnan().any(), "unwritten rows"
    assert torch.equal(outs["mainloop"], outs["pass"])
    assert _rel_err(outs["mainloop"], _exact_grouped(a, w, sizes, N)) <= 1e-5


def test_grouped_w4a4_mainloop_decode_default_config(monkeypatch):
    """Grouped W4A4 with activation_decode="mainloop" and no config: the default's 32-wide token tiles (mean rows per
    expert 25) cannot decode NVFP4 activations in the mainloop, so the call runs 128-wide tiles (no bf16 pass) instead
    of refusing; ragged and empty groups, bit for bit the pass's result and within 1e-5 of the exact product."""
    import scalemm.gemm_nvfp4 as g
    from scalemm.cutlass_kernels.configs import default_nvfp4_grouped_config
    sizes = [5, 0, 63, 1, 0, 17, 90, 24]
    G, N, K, T = len(sizes), 384, 1024, sum(sizes)
    assert default_nvfp4_grouped_config(T, G, N, K).tile_n == 32
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=41).reshape(G, N, K).to(torch.bfloat16), scaling="token")
    offsets = _offsets(sizes)
    a = scalemm.quantize_nvfp4_grouped(_wide((T, K), seed=42).to(torch.bfloat16), offsets, scaling="token")
    monkeypatch.setenv("SCALEMM_NVFP4_SKINNY", "0")
    passed = _poisoned(T, N, torch.float32)
    g.grouped_gemm_nvfp4(a, w, offsets, out_dtype=torch.float32, out=passed)
    monkeypatch.setattr(g, "dequantize_rows_bf16", None)  # the pass must not run
    out = _poisoned(T, N, torch.float32)
    g.grouped_gemm_nvfp4(a, w, offsets, out_dtype=torch.float32, out=out, activation_decode="mainloop")
    assert not out.isnan().any(), "unwritten rows"
    assert torch.equal(out, passed)
    assert _rel_err(out, _exact_grouped(a, w, sizes, N)) <= 1e-5


@pytest.mark.parametrize("sizes", [[3, 0, 5, 0, 0, 2, 1, 13], [1] * 8 + [0] * 8, [30, 0, 70, 1, 0, 17, 90, 24],
                                   [0, 1, 0, 1, 1, 0, 0, 0]],
                         ids=["wgmma", "decode", "cutlass", "decode-8-rows"])
@pytest.mark.parametrize("a_scaling", ["tensor", "token"])
def test_grouped_w4a4_exact_rows_same_bits(monkeypatch, sizes, a_scaling):
    """Grouped W4A4 by the default dispatch on activations with the quantizer's exact rows (rows past the last
    group: zeros, as the pass writes them): no decode pass, the bits of the same call after the pass or of the
    kernel's own decode (decode-8-rows: 8 rows, fewer than the dense quantizer's bound, carry rows too)."""
    G, N, K = len(sizes), 512, 1024
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=7).reshape(G, N, K).to(torch.bfloat16), scaling="token")
    T = sum(sizes) + 5  # 5 rows past the last group
    a = scalemm.quantize_nvfp4_grouped(_wide((T, K), seed=8).to(torch.bfloat16), _offsets(sizes), scaling=a_scaling)
    passes = _record_passes(monkeypatch)
    outs = [torch.zeros(T, N, device="cuda") for _ in range(2)]
    scalemm.grouped_gemm(a, w, None, out_dtype=torch.float32, out=outs[0])
    assert passes == []
    scalemm.grouped_gemm(_drop_exact_rows(a), w, None, out_dtype=torch.float32, out=outs[1])
    assert len(passes) == (max(sizes) > 1)  # the stepped loop at <= 1 row per expert decodes them itself
    assert torch.equal(outs[0], outs[1])
    assert _rel_err(outs[0][:T - 5], _exact_grouped(a, w, sizes, N)) <= 1e-5


def test_grouped_w4a4_exact_rows_graph_replay_sees_new_routing():
    """Quantize + grouped W4A4 GEMM (the skinny wgmma loop on the exact rows) captured once, replayed with new
    offsets: the replayed quantizer rewrites the exact rows for the new routing."""
    import scalemm.gemm_nvfp4 as g
    G, N, K, T = 8, 512, 1024, 24
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=43).reshape(G, N, K).to(torch.bfloat16))
    x = _wide((T, K), seed=44).to(torch.bfloat16)
    offsets = _offsets([3, 0, 5, 0, 0, 2, 1, 13])
    out = torch.zeros(T, N, device="cuda")
    loops, skinny = [], g._gemm_skinny

    def step():
        a = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        scalemm.grouped_gemm(a, w, None, out_dtype=torch.float32, out=out)
        return a

    step()  # build + load outside the capture
    g._gemm_skinny = lambda *args, **kw: (loops.append(args[4].mainloop), skinny(*args, **kw))[1]
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            a = step()
    finally:
        g._gemm_skinny = skinny
    assert loops == ["wgmma"]
    for sizes in ([3, 0, 5, 0, 0, 2, 1, 13], [0, 12, 0, 6, 6, 0, 0, 0], [24, 0, 0, 0, 0, 0, 0, 0],
                  [1, 2, 3, 4, 5, 6, 3, 0]):
        offsets.copy_(_offsets(sizes))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(out, _exact_grouped(a, w, sizes, N)) <= 1e-5


def test_grouped_w4a4_graph_replay_sees_new_routing():
    """Quantize + grouped W4A4 GEMM (mainloop decode) captured once, replayed with new offsets."""
    from scalemm.gemm_nvfp4 import grouped_gemm_nvfp4
    G, N, K, T = 8, 256, 512, 600
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=39).reshape(G, N, K).to(torch.bfloat16))
    x = _wide((T, K), seed=40).to(torch.bfloat16)
    offsets = _offsets([75] * 8)
    out = torch.zeros(T, N, device="cuda")
    config = GemmConfig(128, 128, 64, 1, 1, "cooperative", swap_ab=True)

    def step():
        a = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        grouped_gemm_nvfp4(a, w, offsets, out_dtype=torch.float32, out=out, config=config, activation_decode="mainloop")
        return a

    step()  # build + load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a = step()
    for sizes in ([75] * 8, [0, 300, 0, 150, 150, 0, 0, 0], [600, 0, 0, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 572]):
        offsets.copy_(_offsets(sizes))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(out, _exact_grouped(a, w, sizes, N)) <= 1e-5


def test_grouped_dequant_rows_is_exact():
    sizes = SIZES["ragged"]
    offsets = _offsets(sizes)
    q = scalemm.quantize_nvfp4_grouped(_wide((sum(sizes), 1024), seed=6).to(torch.bfloat16), offsets, scaling="token")
    got = dequantize_rows_bf16(q, offsets=offsets).float()
    for s, m, rows in zip(_starts(sizes), sizes, _group_rows(q, sizes)):
        if m:
            assert torch.equal(got[s:s + m], ref.dequantize_nvfp4(rows, torch.float32, apply_alpha=False))


def test_grouped_graph_replay_sees_new_offsets():
    G, N, K, T = 8, 256, 512, 200
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=8).reshape(G, N, K).to(torch.bfloat16))
    x = _wide((T, K), seed=9).to(torch.bfloat16)
    offsets = _offsets([25] * 8)
    out = torch.zeros(T, N, device="cuda")
    scalemm.grouped_gemm(x, w, offsets, out_dtype=torch.float32, out=out)  # build + load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.grouped_gemm(x, w, offsets, out_dtype=torch.float32, out=out)
    for sizes in ([25] * 8, [0, 100, 0, 50, 50, 0, 0, 0], [200, 0, 0, 0, 0, 0, 0, 0]):
        offsets.copy_(_offsets(sizes))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(out, _exact_grouped(x, w, sizes, N)) <= 1e-5


# the skinny kernel, grouped (MoE decode): expert blocks of up to 8 * token_tiles rows, more in turn

@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize("w_scaling", ["tensor", "token"])
@pytest.mark.parametrize("tiles,loop", [(t, loop) for loop in SKINNY_LOOPS for t in (1, 8) if _loop_takes(loop, 8 * t)])
def test_grouped_skinny_w4a16_matches_exact_dequant(case, w_scaling, tiles, loop):
    sizes = SIZES[case]
    G, N, K = len(sizes), 1000, 2080  # N past the 64-row tile, K past the last 128-chunk
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=G + 1).reshape(G, N, K).to(torch.bfloat16),
                                       scaling=w_scaling)
    T = sum(sizes)
    x = _wide((T + 3, K), seed=T + 1).to(torch.bfloat16)  # 3 rows past the last group: never written
    out = _poisoned(T + 3, N, torch.float32)
    scalemm.grouped_gemm(x, w, _offsets(sizes), out_dtype=torch.float32, out=out,
                         config=SkinnyConfig(tiles, mainloop=loop))
    assert not out[:T].isnan().any(), "unwritten rows"
    assert out[T:].isnan().all(), "rows past the last group were written"
    assert _rel_err(out[:T], _exact_grouped(x[:T], w, sizes, N)) <= 1e-5


GROUPED_SLOT_CASES = {  # G, T, offsets: more groups than tokens (a compact launch of T slots) or not (slot = group)
    # a decode step routed to a few of many experts (groups 0, 7, 128, 129, 255 and 299 hold rows); 300 groups:
    # find_group's lanes scan runs of 10
    "sparse": (300, 12, [2] + [2] * 6 + [4] + [4] * 120 + [5, 7] + [7] * 125 + [10] + [10] * 43 + [12]),
    # the same count of rows with offsets that break the rules: decreasing, negative, past T (group_bounds' rule)
    "sparse-bad": (300, 12, [3, -1, 2] + [3] * 125 + [8, 100] + [-5] * 169 + [12]),
    # fewer groups than tokens (slot z = group z), bad offsets
    "bad": (16, 40, [3, -1, 2, 10, 8, 100, 40, 5, 41, 39, 60, 0, 20, 40, 39, 40]),
}


@pytest.mark.parametrize("case", list(GROUPED_SLOT_CASES))
@pytest.mark.parametrize("loop", SKINNY_LOOPS)
@pytest.mark.parametrize("x4", [False, True], ids=["w4a16", "w4a4"])
def test_grouped_skinny_runs_the_groups_holding_rows(case, loop, x4):
    """The launch runs min(G, T) slots: with G > T slot z takes a group holding rows (find_group), else group z;
    every group's rows by scalemm.formats.layout.group_bounds, also for offsets that break the rules."""
    from scalemm.formats.layout import group_bounds
    G, T, ends = GROUPED_SLOT_CASES[case]
    N, K = 136, 512
    assert len(ends) == G
    offsets = torch.tensor(ends, dtype=torch.int32, device="cuda")
    starts, group_ends = group_bounds(offsets, T)
    sizes = (group_ends - starts).tolist()
    assert sum(sizes) == T
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=51).reshape(G, N, K).to(torch.bfloat16), scaling="token")
    x = _wide((T, K), seed=52).to(torch.bfloat16)
    out = _poisoned(T, N, torch.float32)
    cfg = SkinnyConfig(1, mainloop=loop)
    if x4:  # the quantized copy's own (valid) offsets give the same groups
        a = scalemm.quantize_nvfp4_grouped(x, _offsets(sizes), scaling="token")
        scalemm.grouped_gemm(a, w, None, out_dtype=torch.float32, out=out, config=cfg)
    else:
        a = x
        scalemm.grouped_gemm(a, w, offsets, out_dtype=torch.float32, out=out, config=cfg)
    assert not out.isnan().any(), "unwritten rows"
    assert _rel_err(out, _exact_grouped(a, w, sizes, N)) <= 1e-5


def test_grouped_skinny_graph_replay_and_bad_offsets():
    G, N, K, T = 8, 256, 512, 40
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed=18).reshape(G, N, K).to(torch.bfloat16))
    x = _wide((T, K), seed=19).to(torch.bfloat16)
    offsets = _offsets([5] * 8)
    out = torch.zeros(T, N, device="cuda")
    cfg = SkinnyConfig(1)
    scalemm.grouped_gemm(x, w, offsets, out_dtype=torch.float32, out=out, config=cfg)  # build outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.grouped_gemm(x, w, offsets, out_dtype=torch.float32, out=out, config=cfg)
    for sizes in ([5] * 8, [0, 20, 0, 10, 10, 0, 0, 0], [40, 0, 0, 0, 0, 0, 0, 0]):
        offsets.copy_(_offsets(sizes))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(out, _exact_grouped(x, w, sizes, N)) <= 1e-5
    # offsets past T or decreasing: clamped into [0, T], nothing out of bounds (compute-sanitizer checks the rest)
    offsets.copy_(torch.tensor([10, 5, 500, -3, 40, 41, 39, 1000], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()


@pytest.mark.parametrize("tokens", [1, 16, 64, 256])
@pytest.mark.parametrize("w4a4", [False, True])
def test_weight_quantized_under_inference_mode(tokens, w4a4):
    """An NVFP4 weight made under torch.inference_mode is an inference tensor (no version counter): every CUDA path
    (the skinny loops, the wgmma loop, the CUTLASS kernel, all through the prepared copy) takes it, inside and outside
    inference_mode, and gives what the same weight made outside it gives, bit for bit."""
    N, K = 4096, 4096
    w_hp = _wide((N, K), 31).to(torch.bfloat16)
    x = _wide((tokens, K), 32).to(torch.bfloat16)
    a = scalemm.quantize_nvfp4(x, scaling="token") if w4a4 else x
    plain = scalemm.quantize_nvfp4(w_hp)
    want = scalemm.gemm(a, plain, out_dtype=torch.float32)
    with torch.inference_mode():
        w = scalemm.quantize_nvfp4(w_hp)
        assert w.qdata.is_inference()
        got_inside = scalemm.gemm(a, w, out_dtype=torch.float32)
        again = scalemm.gemm(a, w, out_dtype=torch.float32)  # the kept prepared copy
    got_outside = scalemm.gemm(a, w, out_dtype=torch.float32)
    assert _rel_err(want, _exact(a, plain)) <= TOL[torch.float32]
    for got in (got_inside, again, got_outside):
        assert torch.equal(got, want)
