"""scalemm.grouped_gemm / grouped_gemm_wgrad: input validation (the same on CPU and CUDA, before any
dispatch) and the CPU path, which is scalemm.reference.grouped_gemm_reference. No GPU needed.

Integer-valued e4m3 data and power-of-two scales keep every fp32 sum exact, so results are compared
with equality against independent constructions: the dense scalemm.gemm CPU path on each group's
rows, and plain torch per group.
"""
import pytest
import torch

import scalemm
from scalemm import epilogues as epi
from scalemm import reference as ref
from scalemm.grouped import fp8_grouped_gemm, pad_groups_transposed

E4M3 = torch.float8_e4m3fn
SIZES = [3, 0, 5, 8, 0]  # ragged, with empty experts


def _int_fp8(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-4, 5, shape, generator=g).float().to(E4M3)  # exact in e4m3


def _pow2(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.exp2(torch.randint(-2, 3, shape, generator=g).float())


def _problem(sizes=SIZES, N=16, K=32, seed=0):
    T, G = sum(sizes), len(sizes)
    offs = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    return _int_fp8(T, K, seed=seed), _int_fp8(G, N, K, seed=seed + 1), offs


def _bounds(offs):
    ends = offs.tolist()
    return list(zip([0] + ends[:-1], ends))


# ---------------------------------------------------------------------------
# validation: before the dispatch, the same errors on both devices
# ---------------------------------------------------------------------------

def test_grouped_gemm_validates_before_any_launch():
    a, b = _int_fp8(16, 32), _int_fp8(2, 16, 32)
    offs = torch.tensor([8, 16], dtype=torch.int32)
    with pytest.raises(ValueError, match="same device"):
        scalemm.grouped_gemm(a, b.to("meta"), offs, torch.ones(16), torch.ones(2, 16))
    with pytest.raises(ValueError, match="3-D"):
        scalemm.grouped_gemm(a, b[0], offs, torch.ones(16), torch.ones(2, 16))
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        scalemm.grouped_gemm(a.float(), b, offs, torch.ones(16), torch.ones(2, 16))


def test_grouped_bad_input_on_cpu():
    """The checks the GPU test test_grouped_bad_input makes, on CPU tensors."""
    a, b, offs = _problem([3, 5], N=256, K=128)
    sa, sb = torch.ones(8), torch.ones(2, 256)
    with pytest.raises(ValueError, match="offsets must be a contiguous int32"):
        scalemm.grouped_gemm(a, b, offs.long(), sa, sb)
    with pytest.raises(ValueError, match="K differs"):
        scalemm.grouped_gemm(a, b[:, :, :64].contiguous(), offs, sa, sb)
    with pytest.raises(ValueError, match="scale_b must be"):
        scalemm.grouped_gemm(a, b, offs, sa, torch.ones(3, 256))
    with pytest.raises(ValueError, match="scale_a must be"):
        scalemm.grouped_gemm(a, b, offs, torch.ones(7), sb)
    with pytest.raises(ValueError, match="bias"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, bias=torch.ones(2, 256))
    with pytest.raises(ValueError, match="multiple of 16"):
        scalemm.grouped_gemm(_int_fp8(8, 24), _int_fp8(2, 256, 24), offs, sa, sb)
    with pytest.raises(ValueError, match="multiple of 8"):
        scalemm.grouped_gemm(a, _int_fp8(2, 12, 128), offs, sa, torch.ones(2, 12))


@pytest.mark.parametrize("ends,match", [
    ((3, 2), r"'offsets' must be non-decreasing: offsets\[1\] = 2 < offsets\[0\] = 3"),
    ((-1, 8), r"'offsets' must be >= 0: offsets\[0\] = -1"),
    ((3, 9), r"'offsets' must be <= T = 8 \(the rows of 'a'\): offsets\[1\] = 9"),
])
def test_grouped_gemm_cpu_offsets_are_checked(ends, match):
    """CPU offsets cost nothing to read: bad ones are refused (on CUDA the kernels clamp them)."""
    a, b, _ = _problem([3, 5])
    o = torch.tensor(ends, dtype=torch.int32)
    with pytest.raises(ValueError, match=match):
        scalemm.grouped_gemm(a, b, o, torch.ones(8), torch.ones(2, 16))
    w4 = scalemm.quantize_nvfp4_stacked(torch.randn(2, 16, 32))
    with pytest.raises(ValueError, match=match):
        scalemm.grouped_gemm(torch.randn(8, 32).to(torch.bfloat16), w4, o)


def test_grouped_gemm_wgrad_cpu_offsets_are_checked():
    dy_t, x_t, s = _int_fp8(16, 32), _int_fp8(32, 32), torch.ones(2)
    with pytest.raises(ValueError, match=r"'offsets' must be non-decreasing: offsets\[1\] = 3 < offsets\[0\] = 5"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, torch.tensor([5, 3], dtype=torch.int32), s, s)
    with pytest.raises(ValueError, match=r"'offsets' must be >= 0"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, torch.tensor([-5, 3], dtype=torch.int32), s, s)
    # groups of 17 and 1 tokens take 32 + 16 = 48 padded columns: more than W = 32
    with pytest.raises(ValueError, match=r"'offsets' put the groups in 48 wgrad columns \(16-aligned starts\), "
                                         r"more than W = 32"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, torch.tensor([17, 18], dtype=torch.int32), s, s)
    assert scalemm.grouped_gemm_wgrad(dy_t, x_t, torch.tensor([16, 32], dtype=torch.int32), s, s).shape == (2, 16, 32)


def test_grouped_gemm_options_checked():
    a, b, offs = _problem([3, 5])
    sa, sb = torch.ones(8), torch.ones(2, 16)
    with pytest.raises(TypeError, match="fast_accum must be a bool, got str"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, fast_accum="yes")
    with pytest.raises(TypeError, match="config must be a GemmConfig or None, got str"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, config="fast")
    with pytest.raises(TypeError, match=r"epilogue_inputs must be a dict \{leaf name: tensor\}, got list"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue_inputs=[torch.ones(8)])
    with pytest.raises(ValueError, match=r"epilogue_inputs\['shift'\] is not a leaf of the epilogue tree"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue_inputs={"shift": torch.ones(8)})
    with pytest.raises(ValueError, match="epilogue_inputs must not hold 'scale_b': pass it as the scale_b argument"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue_inputs={"scale_b": sb})
    with pytest.raises(ValueError, match="K = 0 must be a positive multiple of 16"):
        scalemm.grouped_gemm(_int_fp8(8, 0), _int_fp8(2, 16, 0), offs, sa, sb)
    raw = _int_fp8(8 * 32 + 1)
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        scalemm.grouped_gemm(raw[1:].view(8, 32), b, offs, sa, sb)


def test_grouped_gemm_wgrad_options_checked():
    dy_t, x_t, offs, s = _int_fp8(16, 32), _int_fp8(32, 32), torch.tensor([16, 32], dtype=torch.int32), torch.ones(2)
    with pytest.raises(TypeError, match="fast_accum must be a bool, got str"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, s, fast_accum="yes")
    with pytest.raises(TypeError, match="config must be a GemmConfig or None, got str"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, s, config="fast")
    with pytest.raises(ValueError, match="the padded token width W = 0 must be a positive multiple of 16"):
        scalemm.grouped_gemm_wgrad(_int_fp8(16, 0), _int_fp8(32, 0), torch.zeros(2, dtype=torch.int32), s, s)
    with pytest.raises(ValueError, match="K = 12 must be a multiple of 8 for torch.bfloat16 output"):
        scalemm.grouped_gemm_wgrad(dy_t, _int_fp8(12, 32), offs, s, s)


def test_grouped_heuristic_and_scale_modes():
    from scalemm.cutlass_kernels.configs import default_grouped_config
    from scalemm.abi import (kLeafOne as ONE, kLeafPerGroup as PER_GROUP, kLeafPerGroupVec as PER_GROUP_VEC,
                             kLeafPerRow as PER_ROW, kLeafShared as SHARED)  # the modes: abi.h's GroupedLeafMode
    from scalemm.grouped import _scale_a_mode, _scale_b_mode
    assert default_grouped_config(2048, 256, 2048, 7168).swap_ab          # 8 rows per expert: decode form
    assert default_grouped_config(8 * 4096, 8, 4096, 7168).tile_n == 256    # long K: cooperative 128x256
    short = default_grouped_config(8 * 4096, 8, 4096, 4096)               # K <= 4096: ping-pong 128x192
    assert (short.tile_m, short.tile_n, short.schedule) == (128, 192, "pingpong")
    assert default_grouped_config(32 * 8, 8, 4096, 2048) == short              # from 32 rows per expert
    assert default_grouped_config(31 * 8, 8, 4096, 2048).tile_m == 64          # below: ping-pong 64x128
    assert default_grouped_config(48 * 8, 8, 4096, 2048, fast_accum=False).tile_m == 64  # full accumulation: as before
    full = default_grouped_config(8 * 4096, 8, 4096, 7168, fast_accum=False)  # chunked promotion: 128 + 64 registers
    assert (full.tile_n, full.promotion_chunks) == (256, 2)
    from scalemm.cutlass_kernels.configs import GemmConfig, default_wgrad_config
    assert default_wgrad_config(4096, 4096, fast_accum=False) == GemmConfig(128, 256, 128, 2, 1, "cooperative",
                                                                             promotion_chunks=2)
    assert default_wgrad_config(128, 4096, fast_accum=False).cluster_m == 1   # one tile of N: no pair to share
    assert default_wgrad_config(4096, 4096, fast_accum=True) == GemmConfig(128, 256, 128, 2, 1, "cooperative")
    assert default_wgrad_config(4096, 128, fast_accum=False) == GemmConfig(128, 128, 128, 1, 1, "cooperative",
                                                                            promotion_chunks=1)
    assert _scale_a_mode(torch.ones(10), 10, 4, None) == PER_ROW
    assert _scale_a_mode(torch.ones(4), 10, 4, None) == PER_GROUP
    assert _scale_a_mode(torch.ones(1), 10, 4, None) == ONE
    with pytest.raises(ValueError, match="T == G"):
        _scale_a_mode(torch.ones(4), 4, 4, None)
    assert _scale_a_mode(torch.ones(4), 4, 4, "group") == PER_GROUP
    assert _scale_b_mode(torch.ones(4, 16), 4, 16) == PER_GROUP_VEC
    assert _scale_b_mode(torch.ones(4), 4, 16) == PER_GROUP
    assert _scale_b_mode(torch.ones(16), 4, 16) == SHARED
    with pytest.raises(ValueError, match="scale_b must be"):
        _scale_b_mode(torch.ones(3, 16), 4, 16)


def test_grouped_gemm_scale_b_when_G_equals_N():
    """G == N: a [G] = [N] scale_b is per expert or per channel; the caller says which (scale_b_per),
    or gives the unambiguous shapes [G, 1] (per expert) / [1, N] (per channel)."""
    sizes = [3, 0, 5, 1, 0, 2, 4, 1]
    a, b, offs = _problem(sizes, N=8, K=32)
    T, G, N = a.shape[0], 8, 8
    sa, s = _pow2(T, seed=1), _pow2(8, seed=2)
    with pytest.raises(ValueError, match="scale_b has 8 values and G == N == 8: say scale_b_per='channel' or 'group'"):
        scalemm.grouped_gemm(a, b, offs, sa, s)
    f32 = dict(out_dtype=torch.float32)
    per_channel = scalemm.grouped_gemm(a, b, offs, sa, s, scale_b_per="channel", **f32)
    per_group = scalemm.grouped_gemm(a, b, offs, sa, s, scale_b_per="group", **f32)
    for g, (st, e) in enumerate(_bounds(offs)):
        acc = a[st:e].float() @ b[g].float().T
        assert torch.equal(per_channel[st:e], (sa[st:e, None] * s[None, :]) * acc), g
        assert torch.equal(per_group[st:e], (sa[st:e, None] * s[g]) * acc), g
    assert torch.equal(scalemm.grouped_gemm(a, b, offs, sa, s.view(1, N), **f32), per_channel)
    assert torch.equal(scalemm.grouped_gemm(a, b, offs, sa, s.view(G, 1), **f32), per_group)
    with pytest.raises(ValueError, match="scale_b_per must be None, 'channel' or 'group', got 'expert'"):
        scalemm.grouped_gemm(a, b, offs, sa, s, scale_b_per="expert")
    with pytest.raises(ValueError, match=r"scale_b is \[1, N\] \(per channel\) but scale_b_per='group'"):
        scalemm.grouped_gemm(a, b, offs, sa, s.view(1, N), scale_b_per="group")
    # G != N: the 1-D shape says it, and scale_b_per must agree with it
    a2, b2, offs2 = _problem([3, 5], N=16)
    with pytest.raises(ValueError, match=r"scale_b per group must hold G = 2 values, got 16"):
        scalemm.grouped_gemm(a2, b2, offs2, torch.ones(8), torch.ones(16), scale_b_per="group")
    with pytest.raises(ValueError, match=r"scale_b per channel must hold N = 16 values, got 2"):
        scalemm.grouped_gemm(a2, b2, offs2, torch.ones(8), torch.ones(2), scale_b_per="channel")
    # a stacked-weight container knows its scales: per expert ("tensor") or per channel ("token")
    w = torch.randn(8, 8, 32)
    for scaling in ("tensor", "token"):
        wq = scalemm.quantize_fp8_stacked(w, scaling=scaling)
        got = scalemm.grouped_gemm(a, wq, offs, sa, **f32)
        sb = wq.scale_inv.view(8, 1) if scaling == "tensor" else wq.scale_inv.view(8, 8)
        assert torch.equal(got, scalemm.grouped_gemm(a, wq.data.view(8, 8, 32), offs, sa, sb, **f32)), scaling
        with pytest.raises(ValueError, match="b is a GroupedFP8Tensor: it carries its own scale"):
            scalemm.grouped_gemm(a, wq, offs, sa, scale_b_per="channel")
    w4 = scalemm.quantize_nvfp4_stacked(torch.randn(2, 16, 32))
    with pytest.raises(ValueError, match="scale_b_per=None"):
        scalemm.grouped_gemm(torch.randn(8, 32).to(torch.bfloat16), w4, offs2, scale_b_per="channel")


# ---------------------------------------------------------------------------
# the CPU path: the reference, each group as scalemm.gemm's CPU path computes it
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("epilogue", [None, "relu"])
def test_grouped_gemm_cpu_is_gemm_per_group(epilogue):
    a, b, offs = _problem()
    T, (G, N, _) = a.shape[0], b.shape
    sa, sb = _pow2(T, seed=2), _pow2(G, N, seed=3)
    bias = torch.randint(-50, 50, (G, N)).to(torch.bfloat16)
    out = scalemm.grouped_gemm(a, b, offs, sa, sb, bias=bias, epilogue=epilogue)
    assert out.shape == (T, N) and out.dtype == torch.bfloat16
    for g, (s, e) in enumerate(_bounds(offs)):
        if e > s:
            want = scalemm.gemm(a[s:e], b[g], sa[s:e], sb[g], bias=bias[g], epilogue=epilogue)
            assert torch.equal(out[s:e], want), g
    want = ((sa[3:8, None] * sb[2]) * (a[3:8].float() @ b[2].float().T) + bias[2].float()).to(torch.bfloat16)
    assert torch.equal(out[3:8], want if epilogue is None else torch.relu(want))


def test_grouped_gemm_cpu_scale_modes_and_out():
    a, b, offs = _problem([4, 4, 0, 4])
    T, (G, N, _) = a.shape[0], b.shape
    sa_g, sb_g, sb_n = _pow2(G, seed=4), _pow2(G, seed=5), _pow2(N, seed=6)
    out = scalemm.grouped_gemm(a, b, offs, sa_g, sb_g, scale_a_per="group", out_dtype=torch.float32)
    shared = scalemm.grouped_gemm(a, b, offs, torch.tensor(0.5), sb_n, out_dtype=torch.float32)
    for g, (s, e) in enumerate(_bounds(offs)):
        acc = a[s:e].float() @ b[g].float().T
        assert torch.equal(out[s:e], (sa_g[g] * sb_g[g]) * acc)
        assert torch.equal(shared[s:e], (0.5 * sb_n) * acc)
    # rows past the last group end are not written (as on the GPU)
    short = torch.tensor([4, 4, 8, 8], dtype=torch.int32)  # group 1 is empty, group 2 rows 4..7
    buf = torch.full((T, N), float("nan"))
    scalemm.grouped_gemm(a, b, short, sa_g, sb_g, scale_a_per="group", out_dtype=torch.float32, out=buf)
    assert torch.isnan(buf[8:]).all() and not torch.isnan(buf[:8]).any()
    assert torch.equal(buf[4:8], (sa_g[2] * sb_g[2]) * (a[4:8].float() @ b[2].float().T))
    # the training layers' form: the rows past the last group set to zero, the others as above
    buf.fill_(float("nan"))
    fp8_grouped_gemm(a, b, short, sa_g, sb_g, scale_a_per="group", out_dtype=torch.float32, out=buf,
                     zero_rows_past_groups=True)
    assert (buf[8:] == 0).all() and torch.equal(buf[4:8], (sa_g[2] * sb_g[2]) * (a[4:8].float() @ b[2].float().T))
    none = torch.full((T, N), float("nan"))  # no groups: every row is past them
    fp8_grouped_gemm(a, b[:0], torch.zeros(0, dtype=torch.int32), torch.tensor(1.0), torch.tensor(1.0),
                     out_dtype=torch.float32, out=none, zero_rows_past_groups=True)
    assert (none == 0).all()
    with pytest.raises(TypeError, match="zero_rows_past_groups must be a bool"):
        fp8_grouped_gemm(a, b, short, sa_g, sb_g, scale_a_per="group", out_dtype=torch.float32, out=buf,
                         zero_rows_past_groups=1)
    # decreasing offsets are refused on CPU; the reference (what CUDA offsets get) clamps them: group 1 empty
    decreasing = torch.tensor([4, 2, 8, 8], dtype=torch.int32)
    got = ref.grouped_gemm_reference(a, b, decreasing, inputs={"scale_a": sa_g, "scale_b": sb_g, "bias": None},
                                     per_group={"scale_a", "scale_b"}, accum_dtype=torch.float32)
    assert torch.equal(got[:8], buf[:8]) and (got[8:] == 0).all()


def test_grouped_gemm_cpu_containers():
    """quantize_fp8_grouped / quantize_fp8_stacked containers go straight into the grouped GEMMs on CPU."""
    T, N, K = sum(SIZES), 16, 32
    offs = torch.cumsum(torch.tensor(SIZES), 0).to(torch.int32)
    g = torch.Generator().manual_seed(7)
    x, dy = torch.randn(T, K, generator=g), torch.randn(T, N, generator=g)
    w = torch.randn(len(SIZES), N, K, generator=g)
    xq = scalemm.quantize_fp8_grouped(x, offs, scaling="token", columnwise=True)
    wq = scalemm.quantize_fp8_stacked(w, scaling="token")
    y = scalemm.grouped_gemm(xq, wq, None, out_dtype=torch.float32)
    want = scalemm.grouped_gemm(xq.data, wq.data.view(len(SIZES), N, K), offs, xq.scale_inv,
                                wq.scale_inv.view(len(SIZES), N), out_dtype=torch.float32)
    assert torch.equal(y, want)
    assert torch.equal(scalemm.grouped_gemm(xq, wq, xq.offsets, out_dtype=torch.float32), want)  # its own: allowed
    with pytest.raises(ValueError, match="a is a GroupedFP8Tensor: pass offsets=None"):
        scalemm.grouped_gemm(xq, wq, offs.clone(), out_dtype=torch.float32)  # equal values, another tensor
    w4 = scalemm.quantize_nvfp4_stacked(w)
    x4 = scalemm.quantize_nvfp4_grouped(x, offs)
    assert torch.equal(scalemm.grouped_gemm(x4, w4, None), scalemm.grouped_gemm(x4, w4, x4.offsets))
    with pytest.raises(ValueError, match="a is a GroupedNVFP4Tensor: pass offsets=None"):
        scalemm.grouped_gemm(x4, w4, offs.clone())
    dyq = scalemm.quantize_fp8_grouped(dy, offs, scaling="token", columnwise=True)
    dw = scalemm.grouped_gemm_wgrad(dyq, xq, out_dtype=torch.float32)
    assert dw.shape == (len(SIZES), N, K) and (dw[1] == 0).all() and (dw[4] == 0).all()
    for e, (s, t) in enumerate(_bounds(offs)):
        if t > s:
            true_dw = dy[s:t].double().T @ x[s:t].double()
            assert ((dw[e].double() - true_dw).norm() / true_dw.norm()) < 0.1


@pytest.mark.parametrize("per_channel", [False, True])
def test_grouped_gemm_wgrad_cpu(per_channel):
    sizes = [5, 0, 17, 9]
    T, G, N, K = sum(sizes), len(sizes), 16, 32
    offs = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    dy, x = _int_fp8(T, N, seed=8), _int_fp8(T, K, seed=9)
    W = ref.wgrad_width(T, G)
    dy_t, x_t = pad_groups_transposed(dy, offs, W), pad_groups_transposed(x, offs, W)
    s_dy = _pow2(G, N, seed=10) if per_channel else _pow2(G, seed=10)
    s_x = _pow2(G, K, seed=11) if per_channel else _pow2(G, seed=11)
    out = torch.full((G, N, K), float("nan"), dtype=torch.bfloat16)
    scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out)
    for g, (s, e) in enumerate(_bounds(offs)):
        sd = s_dy[g][:, None] if per_channel else s_dy[g]
        sx = s_x[g][None, :] if per_channel else s_x[g]
        want = ((sd * sx) * (dy[s:e].float().T @ x[s:e].float())).to(torch.bfloat16)
        assert torch.equal(out[g], want), g  # the empty expert too: dW = 0
    # accumulate=True: out[g] += the same product, summed in fp32 and rounded once; the empty expert keeps its dW
    prior = torch.randn(G, N, K, generator=torch.Generator().manual_seed(12)).to(torch.bfloat16)
    acc = prior.clone()
    assert scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=acc, accumulate=True) is acc
    for g, (s, e) in enumerate(_bounds(offs)):
        sd = s_dy[g][:, None] if per_channel else s_dy[g]
        sx = s_x[g][None, :] if per_channel else s_x[g]
        want = ((sd * sx) * (dy[s:e].float().T @ x[s:e].float()) + prior[g].float()).to(torch.bfloat16)
        assert torch.equal(acc[g], want), g
    assert torch.equal(acc[1], prior[1])
    with pytest.raises(ValueError, match="accumulate=True adds into out"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, accumulate=True)
    with pytest.raises(TypeError, match="accumulate must be a bool"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=acc, accumulate=1)
    with pytest.raises(ValueError, match="W differs"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t[:, :W - 16].contiguous(), offs, s_dy, s_x)
    with pytest.raises(ValueError, match="scale_x must be"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, torch.ones(G, N + 1))


# ---------------------------------------------------------------------------
# epilogue trees (scalemm.epilogues), resolved as scalemm.gemm does
# ---------------------------------------------------------------------------

def _tree():
    base = epi.RowVector("scale_a", broadcast=True) * epi.ColVector("scale_b", broadcast=True) * epi.Acc()
    return epi.relu(base + epi.ColVector("bias", "bf16", nullable=True) + epi.RowVector("shift")
                    + epi.ColVector("expert_bias"))


@pytest.mark.parametrize("expert_bias_per_group", [True, False])
def test_grouped_gemm_epilogue_tree(expert_bias_per_group):
    a, b, offs = _problem()
    T, (G, N, _) = a.shape[0], b.shape
    sa, sb = _pow2(T, seed=12), _pow2(G, N, seed=13)
    shift = torch.randint(-20, 20, (T,)).float()
    eb = torch.randint(-20, 20, (G, N) if expert_bias_per_group else (N,)).float()
    tree = _tree()
    out = scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=tree, epilogue_inputs={"shift": shift, "expert_bias": eb},
                               out_dtype=torch.float32)
    for g, (s, e) in enumerate(_bounds(offs)):
        if e > s:
            want = scalemm.gemm(a[s:e], b[g], sa[s:e], sb[g], epilogue=tree, out_dtype=torch.float32,
                                epilogue_inputs={"shift": shift[s:e], "expert_bias": eb[g] if eb.dim() == 2 else eb})
            assert torch.equal(out[s:e], want), g
    # the same tree through the grouped emitter (the C++ the CUDA path compiles)
    from scalemm.cutlass_kernels.configs import default_grouped_config
    spec, emitted = scalemm.grouped.grouped_gemm_kernel_spec(default_grouped_config(T, G, N, 32), fast_accum=False,
                                                             out_dtype=torch.float32, epilogue=tree)
    assert [leaf.name for leaf in emitted.leaves] == ["scale_a", "scale_b", "bias", "shift", "expert_bias"]


def test_grouped_gemm_epilogue_tree_errors():
    a, b, offs = _problem()
    T, (G, N, _) = a.shape[0], b.shape
    sa, sb = torch.ones(T), torch.ones(G, N)
    tree = _tree()
    ok = {"shift": torch.zeros(T), "expert_bias": torch.zeros(N)}
    with pytest.raises(ValueError, match="'shift' is missing"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=tree, epilogue_inputs={"expert_bias": ok["expert_bias"]})
    with pytest.raises(ValueError, match=r"'shift' \(a RowVector\) must be \[16\]"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=tree, epilogue_inputs={**ok, "shift": torch.zeros(G)})
    with pytest.raises(ValueError, match=r"'expert_bias' \(a ColVector\) must be \[N\]"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=tree, epilogue_inputs={**ok, "expert_bias": torch.zeros(G)})
    with pytest.raises(TypeError, match="'shift' must be torch.float32"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=tree,
                             epilogue_inputs={**ok, "shift": torch.zeros(T, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match="RowVector/ColVector leaves only"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=epi.Scalar("alpha") * epi.Acc(),
                             epilogue_inputs={"alpha": torch.ones(())})
    plain = epi.RowVector("scale_a") * epi.ColVector("scale_b") * epi.Acc()  # no broadcast: vectors only
    with pytest.raises(ValueError, match="broadcast=True"):
        scalemm.grouped_gemm(a, b, offs, torch.ones(G), sb, epilogue=plain, scale_a_per="group")
    with pytest.raises(TypeError, match="epilogue must be"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, epilogue=3)


# ---------------------------------------------------------------------------
# pad_groups_transposed: every argument checked; CPU offsets read on the host, CUDA ones never
# ---------------------------------------------------------------------------

def _padded_by_rule(x, ends, width):
    """The wgrad layout of x built by hand from the layout's rule (offsets clamped into [0, T],
    then a running max; rows past the last group end belong to no group)."""
    T = x.shape[0]
    bounds, p = [], [0]
    for e in ends:
        bounds.append(max([min(max(e, 0), T)] + bounds[-1:]))
    starts = [0] + bounds[:-1]
    want = torch.zeros(x.shape[1], width, dtype=x.dtype)
    for s, e in zip(starts, bounds):
        want[:, p[-1]:p[-1] + e - s] = x[s:e].t()
        p.append(p[-1] + -(-(e - s) // 16) * 16)
    return want


def test_pad_groups_transposed_validates_arguments():
    x, o = torch.randn(48, 32).to(torch.bfloat16), torch.tensor([10, 10, 30, 48], dtype=torch.int32)
    with pytest.raises(TypeError, match="'x' must be a torch.Tensor"):
        pad_groups_transposed(x.tolist(), o, 112)
    with pytest.raises(ValueError, match=r"'x' must be 2-D \[T, C\]"):
        pad_groups_transposed(x[0], o, 112)
    with pytest.raises(TypeError, match="'x' must have an element size of 1, 2, 4 or 8 bytes"):
        pad_groups_transposed(torch.zeros(48, 32, dtype=torch.complex128), o, 112)
    with pytest.raises(TypeError, match="'offsets' must be int32"):
        pad_groups_transposed(x, o.long(), 112)
    with pytest.raises(ValueError, match="'offsets' is on meta"):
        pad_groups_transposed(x, o.to("meta"), 112)
    for bad in (112.0, True, None):
        with pytest.raises(TypeError, match="'width' must be an int"):
            pad_groups_transposed(x, o, bad)
    with pytest.raises(ValueError, match=r"'width' must be >= T \+ 15 G = 48 \+ 15 \* 4 = 108, got 107"):
        pad_groups_transposed(x, o, 107)
    assert pad_groups_transposed(x, o, 108).shape == (32, 108)  # the bound itself is enough


@pytest.mark.parametrize("ends,match", [
    ((10, 5, 30, 48), r"'offsets' must be non-decreasing: offsets\[1\] = 5 < offsets\[0\] = 10"),
    ((-1, 10, 30, 48), r"'offsets' must be >= 0: offsets\[0\] = -1"),
    ((10, 10, 30, 49), r"'offsets' must be <= T = 48 \(the rows of 'x'\): offsets\[3\] = 49"),
])
def test_pad_groups_transposed_cpu_offsets_checked(ends, match):
    x = _int_fp8(48, 32)
    with pytest.raises(ValueError, match=match):
        pad_groups_transposed(x, torch.tensor(ends, dtype=torch.int32), 112)


def test_pad_groups_transposed_rows_past_the_last_group():
    """offsets[-1] < T is allowed (as for the quantizers and the grouped GEMMs): rows past the last group
    end belong to no group and appear in no column. The brief's example: T = 48, offsets ending at 40."""
    x, ends = _int_fp8(48, 32), (10, 10, 30, 40)
    got = pad_groups_transposed(x, torch.tensor(ends, dtype=torch.int32), 112)
    assert torch.equal(got.view(torch.uint8), _padded_by_rule(x.view(torch.uint8), ends, 112))
    empty = pad_groups_transposed(_int_fp8(0, 32), torch.zeros(3, dtype=torch.int32), 48)  # T = 0
    assert empty.shape == (32, 48) and not empty.view(torch.uint8).any()


def test_pad_groups_transposed_device_path_stays_in_bounds():
    """The path a CUDA tensor takes (offsets never read on the host): any offsets, however bad, give
    the clamped rule's layout and only in-bounds accesses (an out-of-bounds index raises on CPU, and
    would be a device-side assert on CUDA), with the smallest width allowed."""
    from scalemm.grouped import _pad_groups_transposed_device
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        T, G = int(torch.randint(0, 70, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
        ends = torch.randint(-20, T + 40, (G,), generator=g)
        if trial % 3 == 0:
            ends = torch.sort(ends).values.clamp(0, T)  # valid offsets too
        x = torch.randint(-100, 100, (T, 5), generator=g, dtype=torch.int16)
        width = T + 15 * G
        got = _pad_groups_transposed_device(x, ends.to(torch.int32), width)
        assert torch.equal(got, _padded_by_rule(x, ends.tolist(), width)), (T, ends.tolist())
