"""scalemm.gemm input validation and the CPU (reference) path. No GPU needed."""
from dataclasses import replace

import pytest
import torch

import scalemm
from scalemm import epilogues as epi
from scalemm.cutlass_kernels import GemmConfig, default_config

E4M3 = torch.float8_e4m3fn


def _fp8(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 4).to(E4M3)


def test_cpu_path_is_the_reference():
    a, b = _fp8(7, 32), _fp8(24, 32, seed=1)
    sa, sb = torch.rand(7) + 0.5, torch.rand(24) + 0.5
    bias = torch.randn(24).to(torch.bfloat16)
    out = scalemm.gemm(a, b, sa, sb, bias=bias)
    ref = ((sa[:, None] * sb[None, :]) * (a.float() @ b.float().T) + bias.float()).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    out32 = scalemm.gemm(a, b, torch.tensor(2.0), torch.tensor([0.5]), out_dtype=torch.float32, epilogue="relu")
    assert torch.equal(out32, torch.relu(a.float() @ b.float().T))


@pytest.mark.parametrize("case,exc,match", [
    (dict(a=torch.zeros(4, 32)), TypeError, "float8_e4m3fn"),
    (dict(a=_fp8(4, 32)[:, :16]), ValueError, "contiguous"),
    (dict(a=_fp8(4, 48)), ValueError, "K differs"),
    (dict(a=_fp8(2, 4, 32)), ValueError, "2-D"),
    (dict(scale_a=torch.ones(5)), ValueError, "scale_a must hold one value or 4"),
    (dict(scale_b=torch.ones(16, dtype=torch.float64)), TypeError, "scale_b must be float32"),
    (dict(scale_a=None), ValueError, "required"),
    (dict(scale_b=torch.ones(8, 2)), ValueError, "scale_b"),
    (dict(bias=torch.ones(16)), ValueError, "bias must be a \\[N\\]"),
    (dict(bias=torch.ones(8, dtype=torch.bfloat16)), ValueError, "bias"),
    (dict(out_dtype=torch.int8), TypeError, "out_dtype"),
    (dict(out=torch.empty(4, 16)), ValueError, "out must be"),
    (dict(epilogue=3), TypeError, "epilogue must be"),
    (dict(epilogue="tanh"), ValueError, "activation"),
])
def test_bad_input_raises_clear_errors(case, exc, match):
    args = dict(a=_fp8(4, 32), b=_fp8(16, 32), scale_a=torch.ones(4), scale_b=torch.ones(16))
    args.update(case)
    a, b, sa, sb = args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b")
    with pytest.raises(exc, match=match):
        scalemm.gemm(a, b, sa, sb, **args)


def _misaligned(M, K):
    raw = _fp8(M * K + 1)
    return raw[1:].view(M, K)  # contiguous, one byte past a 16-byte boundary


@pytest.mark.parametrize("case,exc,match", [
    # the layout rules of the CUDA kernels hold on CPU too: one validation path for both devices
    (dict(a=_fp8(8, 8), b=_fp8(16, 8)), ValueError, r"K = 8 must be a positive multiple of 16"),
    (dict(a=_fp8(4, 0), b=_fp8(16, 0)), ValueError, r"K = 0 must be a positive multiple of 16"),
    (dict(b=_fp8(3, 32), scale_b=torch.ones(3)), ValueError, r"N = 3 must be a multiple of 8 for torch.bfloat16"),
    (dict(b=_fp8(6, 32), scale_b=torch.ones(6), out_dtype=torch.float32), ValueError, r"N = 6 must be a multiple of 4"),
    (dict(a=_misaligned(4, 32)), ValueError, "a must start on a 16-byte boundary"),
    (dict(a=_fp8(4, 32).to("meta")), ValueError, "a and b must be on the same device, CUDA or CPU"),
    (dict(config="fast"), TypeError, "config must be a GemmConfig or None, got str"),
    (dict(fast_accum="yes"), TypeError, "fast_accum must be a bool, got str"),
    (dict(fast_accum=1), TypeError, "fast_accum must be a bool, got int"),
    (dict(fast_accum=True, config=GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2)), ValueError,
     r"config.promotion_chunks = 2 is scalemm's full-accumulation mainloop: use it with fast_accum=False"),
    (dict(epilogue_inputs=[torch.ones(4)]), TypeError, r"epilogue_inputs must be a dict \{leaf name: tensor\}, got list"),
    (dict(epilogue_inputs={"shfit": torch.ones(4)}, bias=torch.ones(16, dtype=torch.bfloat16)), ValueError,
     r"epilogue_inputs\['shfit'\] is not a leaf of the epilogue tree \(its leaves: scale_a, scale_b, bias\)"),
    (dict(epilogue_inputs={"shfit": torch.ones(4)}, fast_accum=True), ValueError,  # no bias, no bias leaf
     r"epilogue_inputs\['shfit'\] is not a leaf of the epilogue tree \(its leaves: scale_a, scale_b\)"),
    (dict(epilogue_inputs={"shfit": torch.ones(4)}), ValueError,  # full accumulation: the same
     r"epilogue_inputs\['shfit'\] is not a leaf of the epilogue tree \(its leaves: scale_a, scale_b\)"),
    (dict(epilogue_inputs={"scale_a": torch.ones(4)}), ValueError,
     r"epilogue_inputs must not hold 'scale_a': pass it as the scale_a argument"),
])
def test_same_checks_on_both_devices(case, exc, match):
    test_bad_input_raises_clear_errors(case, exc, match)


def test_epilogue_inputs_checked_before_dispatch():
    """A wrong length or dtype of an epilogue input is a clear error on CPU too (it was a raw reshape error
    or went through silently), checked as the CUDA path checks it."""
    a, b = _fp8(4, 32), _fp8(16, 32, seed=2)
    tree = epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift") + epi.ColVector("col", broadcast=True)
    ok = {"shift": torch.zeros(4), "col": torch.zeros(16)}
    run = lambda **inputs: scalemm.gemm(a, b, torch.ones(4), torch.ones(16), out_dtype=torch.float32, epilogue=tree,
                                        epilogue_inputs={**ok, **inputs})
    assert run().shape == (4, 16) and run(col=torch.zeros(())).shape == (4, 16)  # a broadcast leaf: one value
    with pytest.raises(ValueError, match=r"epilogue input 'shift' must hold 4 values, got 5"):
        run(shift=torch.zeros(5))
    with pytest.raises(ValueError, match=r"epilogue input 'shift' must hold 4 values, got 1"):
        run(shift=torch.zeros(1))  # not a broadcast leaf
    with pytest.raises(TypeError, match=r"epilogue input 'shift' must be torch.float32, got torch.float64"):
        run(shift=torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"epilogue input 'col' must be a contiguous tensor on cpu"):
        run(col=torch.zeros(32)[::2])
    src = epi.Acc() + epi.Source("f32")
    with pytest.raises(ValueError, match=r"epilogue input 'c' must be \[4, 16\], got \(16, 4\)"):
        scalemm.gemm(a, b, torch.ones(4), torch.ones(16), out_dtype=torch.float32, epilogue=src,
                     epilogue_inputs={"c": torch.zeros(16, 4)})
    c = torch.randn(4, 16)
    assert torch.equal(scalemm.gemm(a, b, torch.ones(4), torch.ones(16), out_dtype=torch.float32, epilogue=src,
                                    epilogue_inputs={"c": c}), a.float() @ b.float().T + c)


def test_columnwise_only_fp8tensor():
    q = scalemm.quantize_fp8(torch.randn(32, 32), rowwise=False, columnwise=True)
    w = scalemm.quantize_fp8(torch.randn(16, 32))
    with pytest.raises(ValueError, match=r"a is an FP8Tensor without a rowwise copy \(quantized with rowwise=False\)"):
        scalemm.gemm(q, w)
    with pytest.raises(ValueError, match=r"b is an FP8Tensor without a rowwise copy"):
        scalemm.gemm(w, q)


def test_custom_epilogue_tree_with_extra_inputs():
    a, b = _fp8(8, 16), _fp8(8, 16, seed=2)
    tree = epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift")
    shift = torch.arange(8).float()
    out = scalemm.gemm(a, b, torch.ones(8), torch.ones(8), out_dtype=torch.float32, epilogue=tree,
                       epilogue_inputs={"shift": shift})
    assert torch.equal(out, a.float() @ b.float().T + shift[:, None])
    with pytest.raises(ValueError, match="shift"):
        scalemm.gemm(a, b, torch.ones(8), torch.ones(8), out_dtype=torch.float32, epilogue=tree)


def test_heuristic_is_readable_and_valid():
    assert default_config(1, 4096, 4096).swap_ab and default_config(1, 4096, 4096).schedule == "pingpong"
    assert default_config(16, 4096, 4096).tile_n == 16 and default_config(32, 4096, 4096).tile_n == 16
    assert default_config(33, 4096, 4096).tile_n == 32 and default_config(64, 4096, 4096).tile_k == 256
    assert default_config(32, 6144, 4096).tile_n == 32
    one_wave = default_config(64, 6144, 4096)  # 128 tiles of 48 weight rows, not 96 of 64 (swap-AB)
    assert (one_wave.tile_m, one_wave.tile_n, one_wave.swap_ab) == (64, 48, False)
    assert default_config(128, 4096, 4096).schedule == "pingpong" and default_config(128, 4096, 4096).swap_ab
    assert not default_config(128, 6144, 4096).swap_ab  # ping-pong 64x128: 2 x 48 tiles of 64 tokens
    big = default_config(8192, 8192, 8192)
    assert (big.tile_m, big.tile_n, big.schedule) == (128, 192, "pingpong")
    with pytest.raises(ValueError, match="cooperative"):
        GemmConfig(64, 128, 128, schedule="cooperative")
    cpp = big.cpp(fast_accum=True, out_dtype="bf16", epilogue=epi.emit(epi.scaled("bf16"), "bf16"))
    assert cpp["MAINLOOP_SCHEDULE"].endswith("PingpongFP8FastAccum") and cpp["LAYOUT_D"].endswith("RowMajor")
    assert cpp["EPILOGUE_SCHEDULE"] == "cutlass::epilogue::TmaWarpSpecialized"
    coop = default_config(8192, 8192, 8192, fast_accum=False)
    cpp = coop.cpp(fast_accum=False, out_dtype="bf16", epilogue=epi.emit(epi.scaled("bf16"), "bf16"))
    assert "Cooperative" in cpp["MAINLOOP_SCHEDULE"] and cpp["EPILOGUE_SCHEDULE"].endswith("Cooperative")


def test_decode_one_wave_rule():
    """33-128 tokens (fast accumulation): a one-wave tile with the weights on the wgmma's N side (any width of
    DECODE_WIDTHS) where it busies more SMs than the swap-AB token tiles or where those leave a nearly empty last
    token tile (65-128 tokens); the swap-AB tiles elsewhere and below 33 tokens."""
    from scalemm.cutlass_kernels.configs import sm90
    S = sm90.REFERENCE_SMS
    key = lambda M, N, **kw: default_config(M, N, 4096, **kw).key()
    assert key(64, 9216) == "t64x72x128_c1x1_ping"        # 128 tiles; the swap-AB pick: 288 in 3 waves
    assert key(40, 10240) == "t64x80x128_c1x1_ping"
    assert key(72, 9216) == "t64x144x128_c2x1_ping"       # 2 x 64 tiles, the second 8 of 64 tokens: clustered
    assert key(65, 4096) == "t64x128x128_c1x1_ping"       # the narrowest width with imbalance <= 1.5
    assert key(65, 18432) == "t128x144x128_c1x1_coop"     # no one-wave 64-token width: one 128-token tile
    assert key(64, 4096) == "t64x32x256_c1x1_ping_swap"   # 128 swap-AB tiles already fill the wave
    assert key(65, 576) == "t64x64x128_c1x1_ping_swap"    # unbalanced, but one wave would busy 10 SMs
    assert key(32, 9216) == "t64x16x256_c1x1_ping_swap"   # below DECODE_ONE_WAVE_MIN_TOKENS
    assert key(64, 57344) == "t64x64x128_c1x1_ping_swap"  # no width holds one wave
    assert key(64, 9216, fast_accum=False) != key(64, 9216)  # full accumulation keeps its own rule
    for M in range(33, 129):
        for N in (576, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 9216, 10240, 12288, 18432, 28672, 57344):
            cfg = replace(default_config(M, N, 4096), cluster_m=1, cluster_n=1)  # clusters: test_decode_cluster_rule
            wave = sm90.one_wave_decode_config(M, N, S)
            if wave is not None:
                assert sm90.tile_count(wave, M, N) <= S and wave.tile_n in sm90.DECODE_WIDTHS
                assert M <= 64 or wave.schedule == "cooperative" or (
                    sm90.token_imbalance(wave, M) <= sm90.DECODE_NEW_MAX_IMBALANCE)
            assert cfg in (wave, sm90._token_tiles_config(M, N, S))
            if cfg == wave and cfg != sm90._token_tiles_config(M, N, S):
                pick = sm90._token_tiles_config(M, N, S)
                assert (sm90.busy_fraction(cfg, M, N, S) >= sm90.busy_fraction(pick, M, N, S) + sm90.DECODE_BUSY_MARGIN
                        or sm90.token_imbalance(pick, M) > sm90.DECODE_OLD_MAX_IMBALANCE
                        and sm90.tile_count(cfg, M, N) >= S * sm90.DECODE_UNBALANCED_MIN_BUSY)
    assert sm90.token_imbalance(GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True), 65) == 128 / 65
    assert sm90.token_imbalance(GemmConfig(64, 160, 128, 1, 1, "pingpong"), 128) == 1.0
    with pytest.raises(ValueError, match="unsupported tile"):
        GemmConfig(64, 44, 128, 1, 1, "pingpong")  # widths are multiples of 8


def test_decode_cluster_rule():
    """33-128 tokens (fast accumulation): the pick in clusters of 2 along the tokens (the weights' tile multicast to
    both token tiles) where its token tiles are unbalanced and it busies 60% of the SMs; never at 1-32 tokens, never
    with one token tile, never in full accumulation."""
    from scalemm.cutlass_kernels.configs import sm90
    S = sm90.REFERENCE_SMS
    key = lambda M, N, **kw: default_config(M, N, 4096, **kw).key()
    assert key(65, 57344) == "t64x128x128_c2x1_ping"      # no one-wave tile; 896 tiles, the second token tile 1 token
    assert key(80, 4096) == "t64x80x128_c2x1_ping"        # the one-wave tile, 104 tiles
    assert key(100, 4096) == "t64x64x128_c1x2_ping_swap"  # swap-AB: the tokens on the kernel's N
    assert key(65, 4096) == "t64x128x128_c1x1_ping"       # 64 tiles: under half the SMs
    assert key(65, 18432) == "t128x144x128_c1x1_coop"     # one 128-token tile
    assert key(120, 4096) == "t64x64x128_c1x1_ping_swap"  # imbalance 128/120
    assert key(33, 4096) == "t64x32x256_c1x2_ping_swap"   # two 32-token tiles, the second 1 token
    assert key(33, 2048) == "t64x32x256_c1x1_ping_swap"   # 64 tiles
    assert key(65, 57344, fast_accum=False).count("_c1x1_") == 1
    for M in range(1, 129):
        for N in (576, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 9216, 10240, 12288, 18432, 28672, 57344):
            cfg = default_config(M, N, 4096)
            flat = replace(cfg, cluster_m=1, cluster_n=1)
            if cfg != flat:
                assert cfg == sm90.token_cluster(flat) and M > 32
                assert sm90.token_imbalance(flat, M) >= sm90.DECODE_CLUSTER_MIN_IMBALANCE
                assert sm90.tile_count(flat, M, N) >= sm90.DECODE_CLUSTER_MIN_BUSY * S
            elif M > 32 and sm90.tile_count(cfg, M, N) >= sm90.DECODE_CLUSTER_MIN_BUSY * S:
                assert sm90.token_imbalance(cfg, M) < sm90.DECODE_CLUSTER_MIN_IMBALANCE
    assert sm90.token_imbalance(GemmConfig(128, 144, 128, 1, 1, "cooperative"), 65) == 1.0  # one token tile


def test_few_tokens_rule():
    """1-16 tokens (fast accumulation): swap-AB 64x16x256, or the cooperative 128x16x256 where the 64-row tiles pass one
    wave by at most DECODE_TAIL_MAX_FRACTION of the SMs; full accumulation keeps 64x16x128."""
    from scalemm.cutlass_kernels.configs import sm90
    key = lambda M, N, **kw: default_config(M, N, 4096, **kw).key()
    assert key(1, 9216) == key(16, 10240) == "t128x16x256_c1x1_coop_swap"  # 144 / 160 tiles of 64 rows
    assert key(1, 8192) == "t64x16x256_c1x1_ping_swap"                     # 128 tiles: one wave
    assert key(1, 12288) == "t64x16x256_c1x1_ping_swap"                    # 192 tiles: a last wave 45% full
    assert key(1, 9216, fast_accum=False) == "t64x16x128_c1x1_ping_swap"
    assert key(1, 9216, num_sms=114) == "t64x16x256_c1x1_ping_swap"        # 144 tiles on 114 SMs: 26% over
    assert key(17, 9216) == "t64x16x256_c1x1_ping_swap"                    # not measured above 16 tokens
    for N in range(64, 40000, 64):
        cfg = sm90.few_tokens_config(N, 132)
        assert (cfg.tile_m == 128) == (132 < -(-N // 64) <= 165)


def test_chunked_promotion_config():
    """promotion_chunks selects scalemm's full-accumulation mainloop (scalemm/sm90/fp8_promotion.hpp) on
    CUTLASS's fast-accumulation collective; it is part of the kernel's name and refused where it has no
    meaning."""
    emitted = epi.emit(epi.scaled("bf16"), "bf16")
    cfg = GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2)
    assert cfg.key().endswith("_pc2") and GemmConfig(128, 256, 128, 2, 1, "cooperative").key() != cfg.key()
    cpp = cfg.cpp(fast_accum=False, out_dtype="bf16", epilogue=emitted)
    assert cpp["MAINLOOP_SCHEDULE"] == ("scalemm::sm90::Fp8ChunkedPromotion<"
                                        "cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum, 2>")
    ping = GemmConfig(64, 256, 128, 1, 1, "pingpong", promotion_chunks=2).cpp(fast_accum=False, out_dtype="bf16",
                                                                               epilogue=emitted)
    assert "KernelTmaWarpSpecializedPingpongFP8FastAccum, 2>" in ping["MAINLOOP_SCHEDULE"]
    with pytest.raises(ValueError, match="full accumulation"):
        cfg.cpp(fast_accum=True, out_dtype="bf16", epilogue=emitted)
    grouped = cfg.cpp(fast_accum=False, out_dtype="bf16", epilogue=emitted, grouped=True)
    assert grouped["MAINLOOP_SCHEDULE"] == ("scalemm::sm90::Fp8ChunkedPromotion<"
                                            "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum, 2>")
    for bad in (dict(promotion_chunks=-1), dict(promotion_chunks=3), dict(promotion_chunks=2, tile_k=256)):
        with pytest.raises(ValueError, match="promotion_chunks"):
            GemmConfig(**{**dict(tile_m=128, tile_n=256, tile_k=128), **bad})


def test_accumulating_epilogue_adds_into_out_cpu():
    """epilogues.accumulating with out as its own Source: out = bf16(out + the fp32 result), rounded once."""
    M, N, K = 64, 32, 48
    g = torch.Generator().manual_seed(0)
    a8 = (torch.randn(M, K, generator=g) * 4).to(torch.float8_e4m3fn)
    b8 = (torch.randn(N, K, generator=g) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M, generator=g) + 0.5, torch.rand(N, generator=g) + 0.5
    f32 = scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.float32, epilogue=epi.scaled("f32", bias=False))
    tree = epi.accumulating(epi.scaled("bf16"), "bf16")  # the bias leaf null
    prior = (torch.randn(M, N, generator=g) * 50).to(torch.bfloat16)
    out = prior.clone()
    assert scalemm.gemm(a8, b8, sa, sb, epilogue=tree, epilogue_inputs={epi.ACCUMULATOR: out}, out=out) is out
    assert torch.equal(out, (prior.float() + f32).to(torch.bfloat16))
