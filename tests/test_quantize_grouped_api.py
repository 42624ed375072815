"""scalemm grouped / stacked / residual quantization: argument validation and the CPU (reference)
path. No GPU needed.

Validation runs before the CPU/CUDA dispatch, so these errors are the ones a CUDA caller gets too,
before any kernel is built or launched (checked by making both paths raise if they are reached).
The CPU results are checked against independent constructions: the single-tensor quantizers on
each group's rows, grouped.pad_groups_transposed for the wgrad layout, hand-computed offsets.
"""
import pytest
import torch

import scalemm
import scalemm.quantize_grouped as sqg
from scalemm import reference as ref
from scalemm.grouped import _pad_groups_transposed_device, pad_groups_transposed

GROUPED = [scalemm.quantize_fp8_grouped, scalemm.quantize_nvfp4_grouped, scalemm.quantize_mxfp8_grouped]


def x_(T=40, K=64, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, K, generator=g) * torch.exp(torch.randn(T, K, generator=g))).to(dtype)


def offs(*ends):
    return torch.tensor(ends, dtype=torch.int32)


@pytest.fixture
def no_dispatch(monkeypatch):
    """Make the reference and the CUDA launchers raise: a validation error must come first."""
    def boom(*a, **k):
        raise AssertionError("dispatched before validation finished")
    for name in ("quantize_fp8_grouped", "quantize_nvfp4_grouped", "quantize_mxfp8_grouped",
                 "quantize_fp8_stacked", "quantize_nvfp4_stacked"):
        monkeypatch.setattr(ref, name, boom)
    monkeypatch.setattr(sqg, "_launcher", boom)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("fn", GROUPED)
def test_x_validation(fn, no_dispatch):
    o = offs(10, 40)
    with pytest.raises(TypeError, match="'x' must be a torch.Tensor"):
        fn([[1.0] * 64], o)
    with pytest.raises(TypeError, match="'x' must be bfloat16, float16 or float32"):
        fn(torch.zeros(40, 64, dtype=torch.float64), o)
    with pytest.raises(ValueError, match="'x' must be 2-D"):
        fn(torch.zeros(2, 20, 64, dtype=torch.bfloat16), o)
    with pytest.raises(ValueError, match="'x' must be 2-D"):
        fn(torch.zeros(64, dtype=torch.bfloat16), o)
    with pytest.raises(ValueError, match="must be contiguous"):
        fn(x_(64, 64).t(), o)
    with pytest.raises(ValueError, match=r"'x' last dim K must be >= 1"):  # T = 0 is fine (test_empty_x_*)
        fn(torch.zeros(40, 0, dtype=torch.bfloat16), o)


@pytest.mark.parametrize("fn", GROUPED)
def test_offsets_validation(fn, no_dispatch):
    x = x_()
    with pytest.raises(TypeError, match="'offsets' must be a torch.Tensor"):
        fn(x, [10, 40])
    with pytest.raises(TypeError, match="'offsets' must be int32"):
        fn(x, torch.tensor([10, 40]))  # int64
    with pytest.raises(TypeError, match="'offsets' must be int32"):
        fn(x, torch.tensor([10.0, 40.0]))
    with pytest.raises(ValueError, match=r"'offsets' must be 1-D \[G\]"):
        fn(x, offs(10, 40).view(1, 2))
    with pytest.raises(ValueError, match=r"'offsets' must be 1-D \[G\] with G >= 1"):
        fn(x, torch.zeros(0, dtype=torch.int32))
    with pytest.raises(ValueError, match="'offsets' is on meta but 'x' is on cpu"):
        fn(x, torch.empty(2, dtype=torch.int32, device="meta"))
    with pytest.raises(ValueError, match="'offsets' must be contiguous"):
        fn(x, offs(10, 0, 40, 0)[::2])


BAD_CPU_OFFSETS = [
    ((10, 5, 40), r"'offsets' must be non-decreasing: offsets\[1\] = 5 < offsets\[0\] = 10"),
    ((-3, 40), r"'offsets' must be >= 0: offsets\[0\] = -3"),
    ((10, 41), r"'offsets' must be <= T = 40 \(the rows of 'x'\): offsets\[1\] = 41"),
]


@pytest.mark.parametrize("fn", GROUPED)
@pytest.mark.parametrize("ends,match", BAD_CPU_OFFSETS)
def test_cpu_offsets_are_checked(fn, ends, match, no_dispatch):
    """CPU offsets cost nothing to read: bad ones are refused (CUDA offsets keep the clamping rule)."""
    with pytest.raises(ValueError, match=match):
        fn(x_(40, 64), offs(*ends))
    with pytest.raises(ValueError, match=r"'offsets' must be <= T = 0"):  # T = 0 too
        fn(x_(0, 64), offs(0, 3))


def test_k_multiple_and_flags(no_dispatch):
    o = offs(10, 40)
    with pytest.raises(ValueError, match=r"K \(last dim\) must be a multiple of 16, got 40"):
        scalemm.quantize_fp8_grouped(x_(40, 40), o)
    with pytest.raises(ValueError, match=r"K \(last dim\) must be a multiple of 16, got 24"):
        scalemm.quantize_nvfp4_grouped(x_(40, 24), o)
    with pytest.raises(ValueError, match=r"K \(last dim\) must be a multiple of 32, got 48"):
        scalemm.quantize_mxfp8_grouped(x_(40, 48), o)
    for fn in (scalemm.quantize_fp8_grouped, scalemm.quantize_nvfp4_grouped):
        with pytest.raises(ValueError, match="'scaling' must be one of"):
            fn(x_(), o, scaling="row")
        with pytest.raises(ValueError, match="'scaling' must be one of"):
            fn(x_(), o, scaling="group")
        with pytest.raises(ValueError, match="at least one of 'rowwise' and 'columnwise'"):
            fn(x_(), o, rowwise=False)
        with pytest.raises(TypeError, match="'columnwise' must be a bool"):
            fn(x_(), o, columnwise=1)
    with pytest.raises(ValueError, match="rowwise copy only"):
        scalemm.quantize_mxfp8_grouped(x_(), o, rowwise=False)
    nv = scalemm.quantize_nvfp4_grouped
    with pytest.raises(ValueError, match="'rht' applies only to the columnwise copy"):
        nv(x_(), o, rht=True)
    with pytest.raises(TypeError, match="'rht' must be a bool"):
        nv(x_(), o, columnwise=True, rht=1)
    with pytest.raises(TypeError, match="'stochastic_rounding' must be a bool"):
        nv(x_(), o, stochastic_rounding="yes")
    with pytest.raises(ValueError, match=r"'seed' must be in \[0, 2\^64\)"):
        nv(x_(), o, stochastic_rounding=True, seed=-1)
    with pytest.raises(ValueError, match=r"'offset' must be in \[0, 2\^64\)"):
        nv(x_(), o, stochastic_rounding=True, seed=1, offset=1 << 64)


def test_stacked_validation(no_dispatch):
    for fn in (scalemm.quantize_fp8_stacked, scalemm.quantize_nvfp4_stacked):
        with pytest.raises(ValueError, match=r"'w' must be 3-D \[E, N, K\]"):
            fn(x_())
        with pytest.raises(ValueError, match="'w' must be contiguous"):
            fn(x_(64, 64).view(4, 16, 64).transpose(1, 2))
        with pytest.raises(TypeError, match="'w' must be bfloat16"):
            fn(torch.zeros(2, 16, 64, dtype=torch.int8))
        with pytest.raises(ValueError, match=r"'w' K \(last dim\) must be a multiple of 16, got 40"):
            fn(torch.zeros(2, 16, 40, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="'scaling' must be one of"):
            fn(torch.zeros(2, 16, 64, dtype=torch.bfloat16), scaling="expert")
        with pytest.raises(TypeError, match="'columnwise' must be a bool"):
            fn(torch.zeros(2, 16, 64, dtype=torch.bfloat16), columnwise=1)
        with pytest.raises(ValueError, match="'w' must be a CPU or CUDA tensor, got device meta"):
            fn(torch.zeros(2, 16, 64, dtype=torch.bfloat16, device="meta"))


def test_residual_validation():
    with pytest.raises(ValueError, match="'channels' must be non-empty"):
        scalemm.quantize_nvfp4_residual(x_(), [])
    with pytest.raises(ValueError, match=r"in \[0, 64\)"):
        scalemm.quantize_nvfp4_residual(x_(), [3, 64])
    with pytest.raises(TypeError, match="'channels' must be a sequence of ints"):
        scalemm.quantize_nvfp4_residual(x_(), "abc")
    with pytest.raises(ValueError, match="multiple of 16"):
        scalemm.quantize_nvfp4_residual(x_(32, 40), [1])
    with pytest.raises(ValueError, match="'w' must be a 2-D tensor"):
        scalemm.prepare_residual_weight(torch.zeros(2, 3, 4), [1])


@pytest.mark.parametrize("fn", [lambda ch: scalemm.quantize_nvfp4_residual(x_(), ch),
                                lambda ch: scalemm.prepare_residual_weight(x_(48, 64), ch)])
def test_residual_channels_are_ints_on_the_host(fn):
    """channels: ints (a sequence, or a CPU int32/int64 tensor), each in [0, K), none repeated. Nothing
    is coerced (1.5 -> 1, "12" -> [1, 2] and booleans were), and a tensor on another device is refused
    (its range could not be checked without a sync)."""
    with pytest.raises(TypeError, match="'channels' must hold ints, got float 1.5"):
        fn([1.5, 2.7])
    with pytest.raises(TypeError, match="'channels' must be a sequence of ints or a CPU int32/int64 tensor, got str"):
        fn("12")
    with pytest.raises(TypeError, match="'channels' must hold ints, got bool True"):
        fn([True, False])
    with pytest.raises(ValueError, match="'channels' must not repeat a channel: 3 appears more than once"):
        fn([3, 5, 3])
    with pytest.raises(ValueError, match="'channels' must not repeat a channel: 3 appears more than once"):
        fn(torch.tensor([3, 5, 3]))
    with pytest.raises(ValueError, match=r"'channels' must lie in \[0, 64\), got -1"):
        fn(torch.tensor([-1, 5]))
    with pytest.raises(ValueError, match=r"'channels' must lie in \[0, 64\), got 64"):
        fn([5, 64])
    with pytest.raises(TypeError, match="'channels' must be a 1-D int32/int64 tensor, got torch.float32"):
        fn(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"'channels' must be a non-empty 1-D int32/int64 tensor, got shape \(1, 2\)"):
        fn(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="'channels' must be on the CPU .* got meta"):
        fn(torch.tensor([1, 2], device="meta"))
    import numpy as np
    want = fn([5, 0, 63])
    for same in ((5, 0, 63), np.array([5, 0, 63]), torch.tensor([5, 0, 63], dtype=torch.int32),
                 [np.int64(5), 0, torch.tensor(63)]):
        got = fn(same)
        assert torch.equal(got.qdata if hasattr(got, "qdata") else got, want.qdata if hasattr(want, "qdata") else want)


def test_container_validation():
    o = offs(10, 40)
    d = torch.zeros(40, 64, dtype=torch.float8_e4m3fn)
    scalemm.GroupedFP8Tensor(d, torch.ones(2), o, (40, 64), "tensor", torch.bfloat16)  # fine
    with pytest.raises(ValueError, match=r"'scale_inv' must have shape \(2,\)"):
        scalemm.GroupedFP8Tensor(d, torch.ones(40), o, (40, 64), "tensor", torch.bfloat16)
    with pytest.raises(ValueError, match=r"'data' must have shape \(64, 80\)"):  # W = ceil((40 + 2*15)/16)*16
        scalemm.GroupedFP8Tensor(torch.zeros(64, 40, dtype=torch.float8_e4m3fn), torch.ones(2), o, (40, 64),
                                 "tensor", torch.bfloat16, layout="wgrad")
    with pytest.raises(ValueError, match="'layout' must be one of"):
        scalemm.GroupedFP8Tensor(d, torch.ones(2), o, (40, 64), "tensor", torch.bfloat16, layout="cols")
    with pytest.raises(TypeError, match="'offsets' must be a non-empty 1-D int32"):
        scalemm.GroupedFP8Tensor(d, torch.ones(2), o.long(), (40, 64), "tensor", torch.bfloat16)
    q = scalemm.quantize_nvfp4_grouped(x_(), o)
    with pytest.raises(ValueError, match="'scales' must have shape"):
        scalemm.GroupedNVFP4Tensor(q.qdata, q.scales[:-4], q.sf_offsets, q.alpha, q.amax, o, (40, 64), "tensor",
                                   torch.bfloat16)
    with pytest.raises(ValueError, match="rowwise fields must be all set or all None"):
        scalemm.GroupedNVFP4Tensor(q.qdata, None, q.sf_offsets, q.alpha, q.amax, o, (40, 64), "tensor",
                                   torch.bfloat16)


# ---------------------------------------------------------------------------
# layout helpers
# ---------------------------------------------------------------------------

def test_offsets_helpers():
    o = offs(0, 17, 17, 150, 290)
    assert ref.sf_offsets(o).tolist() == [0, 0, 128, 128, 384]
    assert ref.wgrad_column_offsets(o, 300).tolist() == [0, 0, 32, 32, 176, 320]
    assert ref.wgrad_width(300, 5) == 384
    assert ref.grouped_scale_rows(300, 5) == 384 + 640
    assert ref.wgrad_scale_cols(300, 5) == 4 * 10
    # bad offsets: clamped into [0, T], made non-decreasing
    s, e = ref.group_bounds(offs(100, 50, 300, -4, 1000), 250)
    assert e.tolist() == [100, 100, 250, 250, 250] and s.tolist() == [0, 100, 100, 250, 250]
    assert ref.sf_offsets(offs(100, 50, 300), 250).tolist() == [0, 128, 128]
    # the grouped.py helper agrees on valid offsets
    assert ref.wgrad_column_offsets(o, 290).tolist() == scalemm.grouped.wgrad_column_starts(o).tolist()


@pytest.mark.parametrize("ends,T", [((10, 5, 20), 20), ((10, 5, 22), 22), ((10, 5, 15), 20), ((-3, 12, 99), 30)])
def test_wgrad_columns_one_rule(ends, T):
    """grouped.wgrad_column_starts and pad_groups_transposed's device path follow the layout's rule
    (offsets clamped into [0, T], then a running max), as the reference and the quantization kernels
    do: a group that ends before the previous one is empty, and the next one starts where the
    previous one ended. (CPU offsets like these are refused by the public functions.)"""
    o = offs(*ends)
    G = len(ends)
    clamped = [min(max(e, 0), T) for e in ends]
    bounds = [max(clamped[:g + 1]) for g in range(G)]
    starts, p = [0] + bounds[:-1], [0]
    for s, e in zip(starts, bounds):
        p.append(p[-1] + -(-(e - s) // 16) * 16)
    assert scalemm.grouped.wgrad_column_starts(o, T).tolist() == p
    assert ref.wgrad_column_offsets(o, T).tolist() == p
    x = x_(T, 32, seed=T)
    W = ref.wgrad_width(T, G)
    want = torch.zeros(32, W, dtype=x.dtype)
    for g, (s, e) in enumerate(zip(starts, bounds)):
        want[:, p[g]:p[g] + e - s] = x[s:e].t()  # rows past the last group end belong to no group
    assert torch.equal(_pad_groups_transposed_device(x, o, W), want)
    with pytest.raises(ValueError, match="'offsets' must be"):
        pad_groups_transposed(x, o, W)
    # the layout the FP8 quantizer writes: with per-group scales the wgrad copy is the rowwise bytes, transposed
    q = ref.quantize_fp8_grouped(x, o, columnwise=True)
    assert torch.equal(_pad_groups_transposed_device(q.data.view(torch.uint8), o, W),
                       q.columnwise.data.view(torch.uint8))


# ---------------------------------------------------------------------------
# CPU path results
# ---------------------------------------------------------------------------

SIZES = [[40], [0, 1, 0, 15, 16, 17, 0, 129, 1, 0], [7] * 9, [0, 0, 200]]


def _bounds(sizes):
    ends = torch.cumsum(torch.tensor(sizes), 0).tolist()
    return [(ends[g - 1] if g else 0, ends[g]) for g in range(len(sizes))]


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_cpu_matches_single_tensor(sizes, scaling):
    T = sum(sizes)
    x = x_(T, 96, seed=len(sizes))
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    q = scalemm.quantize_fp8_grouped(x, o, scaling=scaling, columnwise=True)
    assert isinstance(q, scalemm.GroupedFP8Tensor) and q.columnwise.layout == "wgrad"
    assert q.columnwise.data.shape == (96, ref.wgrad_width(T, len(sizes)))
    p16 = ref.wgrad_column_offsets(o, T).tolist()
    for g, (s, e) in enumerate(_bounds(sizes)):
        if e == s:
            assert q.scale_inv[g].item() == 1.0 if scaling == "tensor" else True
            continue
        single = scalemm.quantize_fp8(x[s:e], scaling=scaling)
        assert torch.equal(q.data[s:e].view(torch.uint8), single.data.view(torch.uint8))
        assert torch.equal(q.scale_inv[g] if scaling == "tensor" else q.scale_inv[s:e], single.scale_inv)
        if scaling == "token":  # columnwise: per column of x within the group
            colq = ref.quantize_fp8(x[s:e].t().contiguous(), scaling="token")
            assert torch.equal(q.columnwise.scale_inv[g], colq.scale_inv)
            assert torch.equal(q.columnwise.data[:, p16[g]:p16[g] + e - s].view(torch.uint8),
                               colq.data.view(torch.uint8))
    if scaling == "tensor":  # same scale for both copies: the wgrad copy is the padded transpose
        W = q.columnwise.data.shape[1]
        assert torch.equal(q.columnwise.data.view(torch.uint8), pad_groups_transposed(q.data.view(torch.uint8), o, W))
    # padding columns of the wgrad layout are zero
    used = torch.zeros(q.columnwise.data.shape[1], dtype=torch.bool)
    for g, (s, e) in enumerate(_bounds(sizes)):
        used[p16[g]:p16[g] + e - s] = True
    assert torch.count_nonzero(q.columnwise.data.view(torch.uint8)[:, ~used]) == 0
    # dequantize: both copies close to x
    xf = x.float()
    assert ((q.dequantize() - xf).norm() / xf.norm()) < 0.05
    assert ((q.columnwise.dequantize() - xf.t()).norm() / xf.norm()) < 0.05


def test_fp8_rows_past_last_group_and_bad_offsets():
    x = x_(50, 32, seed=3)
    q = scalemm.quantize_fp8_grouped(x, offs(10, 10, 30), scaling="token", columnwise=True)
    assert torch.count_nonzero(q.data[30:].view(torch.uint8)) == 0
    assert torch.equal(q.scale_inv[30:], torch.ones(20))
    assert torch.count_nonzero(q.data[:30].view(torch.uint8)) > 0
    assert torch.equal(q.columnwise.scale_inv[1], torch.ones(32))  # the empty group
    # bad offsets (refused on CPU; the reference, like the kernels, clamps them): group 1 (offset 5 < 10)
    # is empty after the clamp
    bad = ref.quantize_fp8_grouped(x, offs(10, 5, 30), scaling="token", columnwise=True)
    assert torch.equal(bad.columnwise.data.view(torch.uint8), q.columnwise.data.view(torch.uint8))
    assert torch.equal(bad.data.view(torch.uint8), q.data.view(torch.uint8))
    big = ref.quantize_fp8_grouped(x, offs(-3, 10_000))  # clamped: [0, 0), [0, 50)
    assert torch.equal(big.scale_inv[0], torch.tensor(1.0))
    assert torch.equal(big.scale_inv[1], scalemm.quantize_fp8(x).scale_inv)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_cpu_matches_single_tensor(sizes, scaling):
    T, K = sum(sizes), 64
    G = len(sizes)
    x = x_(T, K, seed=10 + len(sizes))
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    q = scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling, columnwise=True)
    assert q.sf_offsets.dtype == torch.int32
    assert q.sf_offsets.tolist() == ref.sf_offsets(o).tolist()
    raw = q.scales.view(torch.uint8)
    assert raw.numel() == ref.grouped_scale_rows(T, G) * 4
    used = torch.zeros_like(raw, dtype=torch.bool)
    craw = q.columnwise.scales.view(torch.uint8)
    cused = torch.zeros_like(craw, dtype=torch.bool)
    rp = 128
    p16 = ref.wgrad_column_offsets(o, T).tolist()
    csf = q.columnwise.sf_offsets.tolist()
    for g, (s, e) in enumerate(_bounds(sizes)):
        m = e - s
        if m == 0:
            continue
        single = scalemm.quantize_nvfp4(x[s:e], scaling=scaling, amax=None if scaling == "token" else q.amax[g])
        assert torch.equal(q.qdata[s:e], single.qdata)
        base = q.sf_offsets[g].item() * 4
        n = single.scales.numel()
        assert torch.equal(raw[base:base + n], single.scales.view(torch.uint8))
        used[base:base + n] = True
        if scaling == "tensor":
            assert torch.equal(q.amax[g], x[s:e].float().abs().amax())
            assert torch.equal(q.alpha[g], single.alpha)
        # columnwise: the group's tokens, zero-padded to 16, quantized as x_g.T
        m16 = -(-m // 16) * 16
        xt = torch.zeros(K, m16)
        xt[:, :m] = x[s:e].float().t()
        camax = q.amax[g] if scaling == "tensor" else x[s:e].float().abs().amax(0)
        cs = scalemm.quantize_nvfp4(xt, scaling=scaling, amax=camax)
        assert torch.equal(q.columnwise.qdata[:, p16[g] // 2:(p16[g] + m16) // 2], cs.qdata)
        cb = rp * csf[g]
        assert torch.equal(craw[cb:cb + cs.scales.numel()], cs.scales.view(torch.uint8))
        cused[cb:cb + cs.scales.numel()] = True
    assert torch.count_nonzero(raw[~used]) == 0  # every byte outside the groups' blocks is zero
    assert torch.count_nonzero(craw[~cused]) == 0
    xf = x.float()
    assert ((q.dequantize() - xf).norm() / xf.norm()) < 0.15
    assert ((q.columnwise.dequantize() - xf.t()).norm() / xf.norm()) < 0.15


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_rht_is_per_group_padded_rht(scaling):
    """rht: group g's columnwise block is quantize_nvfp4's RHT columnwise copy of its rows zero-padded
    to ceil(m_g/16)*16 (an independent construction: the single-tensor reference)."""
    sizes = [5, 0, 16, 33, 1, 70]
    T, K = sum(sizes), 48
    x = x_(T, K, seed=3)
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    q = scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling, columnwise=True, rht=True)
    assert q.columnwise.rht and not q.rht
    plain = scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling)
    assert torch.equal(q.qdata, plain.qdata)  # the rowwise copy is untouched
    p16 = ref.wgrad_column_offsets(o, T).tolist()
    craw = q.columnwise.scales.view(torch.uint8)
    for g, (s, e) in enumerate(_bounds(sizes)):
        m = e - s
        if m == 0:
            continue
        m16 = -(-m // 16) * 16
        xp = torch.zeros(m16, K, dtype=x.dtype)
        xp[:m] = x[s:e]
        single = scalemm.quantize_nvfp4(xp, scaling=scaling, rowwise=False, columnwise=True, rht=True).columnwise
        assert torch.equal(q.columnwise.qdata[:, p16[g] // 2:(p16[g] + m16) // 2], single.qdata)
        cb = 128 * q.columnwise.sf_offsets[g].item()
        assert torch.equal(craw[cb:cb + single.scales.numel()], single.scales.view(torch.uint8))
        assert torch.equal(q.columnwise.amax[g], single.amax)
        assert torch.equal(q.columnwise.alpha[g], single.alpha)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_rht_cancels_in_wgrad(scaling):
    """With the transform on both operands, dY_g^T X_g over the padded wgrad columns is as close
    to the bf16 product as without it; dropping the padding columns would break it."""
    sizes = [37, 0, 50, 9, 100]
    T = sum(sizes)
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    dy, x = x_(T, 32, seed=5), x_(T, 64, seed=6)
    p16 = ref.wgrad_column_offsets(o, T).tolist()
    errs = {}
    for rht in (False, True):
        qd = scalemm.quantize_nvfp4_grouped(dy, o, scaling=scaling, rowwise=False, columnwise=True, rht=rht)
        qx = scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling, rowwise=False, columnwise=True, rht=rht)
        d, xx = qd.columnwise.dequantize(padded=True), qx.columnwise.dequantize(padded=True)
        assert d.shape == (32, qd.columnwise.qdata.shape[1] * 2)
        for g, (s, e) in enumerate(_bounds(sizes)):
            if e == s:
                continue
            m16 = -(-(e - s) // 16) * 16
            cols = slice(p16[g], p16[g] + m16)
            want = dy[s:e].double().t() @ x[s:e].double()
            got = d[:, cols].double() @ xx[:, cols].double().t()
            errs[rht, g] = ((got - want).norm() / want.norm()).item()
            if rht and (e - s) % 16:  # the padding columns carry data: without them it is worse
                cut = d[:, p16[g]:p16[g] + e - s].double() @ xx[:, p16[g]:p16[g] + e - s].double().t()
                cut_err = ((cut - want).norm() / want.norm()).item()
                assert cut_err > (2 if e - s < 16 else 1) * errs[rht, g], (g, cut_err, errs[rht, g])
    for (rht, g), err in errs.items():
        assert err < 0.2, (rht, g, err)
        if rht:
            assert err < 1.5 * errs[False, g], (g, err, errs[False, g])


def test_nvfp4_grouped_sr():
    """SR: same seed -> same bytes; another seed or offset -> other bytes; G = 1 rowwise equals the
    single-tensor SR (same element order); the mean of many SR decodes approaches x (unbiased)."""
    sizes = [20, 0, 57, 3]
    T, K = sum(sizes), 64
    x = x_(T, K, seed=8)
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    kw = dict(columnwise=True, stochastic_rounding=True)
    a = scalemm.quantize_nvfp4_grouped(x, o, seed=11, **kw)
    b = scalemm.quantize_nvfp4_grouped(x, o, seed=11, **kw)
    assert torch.equal(a.qdata, b.qdata) and torch.equal(a.columnwise.qdata, b.columnwise.qdata)
    for other in (dict(seed=12), dict(seed=11, offset=1)):
        c = scalemm.quantize_nvfp4_grouped(x, o, **other, **kw)
        assert not torch.equal(a.qdata, c.qdata) and not torch.equal(a.columnwise.qdata, c.columnwise.qdata)
    one = scalemm.quantize_nvfp4_grouped(x, offs(T), seed=2**63 + 5, offset=7, stochastic_rounding=True)
    single = scalemm.quantize_nvfp4(x, seed=2**63 + 5, offset=7, stochastic_rounding=True)
    assert torch.equal(one.qdata, single.qdata)
    n = 300
    acc, acc_c = torch.zeros(T, K), torch.zeros(K, T)
    for i in range(n):
        q = scalemm.quantize_nvfp4_grouped(x, o, seed=i, **kw)
        acc += q.dequantize()
        acc_c += q.columnwise.dequantize()
    rne = scalemm.quantize_nvfp4_grouped(x, o, columnwise=True)
    xf = x.float()
    bias_rne = (rne.dequantize() - xf).abs().mean()
    assert (acc / n - xf).abs().mean() < 0.25 * bias_rne
    assert (acc_c / n - xf.t()).abs().mean() < 0.25 * bias_rne
    with pytest.raises(ValueError, match="'padded' applies to a 'wgrad'"):
        rne.dequantize(padded=True)


def test_mxfp8_cpu():
    sizes = [0, 1, 0, 15, 129, 0, 40]
    T = sum(sizes)
    x = x_(T, 96, seed=5)
    o = torch.cumsum(torch.tensor(sizes), 0).to(torch.int32)
    q = scalemm.quantize_mxfp8_grouped(x, o)
    assert q.sf_offsets.tolist() == ref.sf_offsets(o).tolist()
    for g, (s, e) in enumerate(_bounds(sizes)):
        if e > s:
            single = scalemm.quantize_mxfp8(x[s:e])
            assert torch.equal(q.data[s:e].view(torch.uint8), single.data.view(torch.uint8))
            base = q.sf_offsets[g].item() * 4
            assert torch.equal(q.scales[base:base + single.scales.numel()], single.scales)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_stacked_columnwise_cpu_is_the_grouped_wgrad_copy(scaling):
    """columnwise=True adds quantize_*_grouped's wgrad copy of the E groups of N rows; the rows copy is unchanged."""
    from scalemm.formats import layout
    E, N, K = 3, 48, 64
    w = x_(E * N, K, seed=9).view(E, N, K)
    offs = layout.stacked_offsets(E, N)
    for stacked, grouped in ((scalemm.quantize_nvfp4_stacked, scalemm.quantize_nvfp4_grouped),
                             (scalemm.quantize_fp8_stacked, scalemm.quantize_fp8_grouped)):
        q = stacked(w, scaling=scaling, columnwise=True)
        plain = stacked(w, scaling=scaling)
        g = grouped(w.reshape(E * N, K), offs, scaling=scaling, rowwise=False, columnwise=True)
        assert q.group_rows == N and q.columnwise is not None and plain.columnwise is None
        names = ("qdata", "scales", "alpha") if hasattr(q, "qdata") else ("data", "scale_inv")
        for name in names:
            assert torch.equal(getattr(q, name).view(torch.uint8) if getattr(q, name).element_size() == 1
                               else getattr(q, name), getattr(plain, name).view(torch.uint8)
                               if getattr(plain, name).element_size() == 1 else getattr(plain, name))
            a, b = getattr(q.columnwise, name), getattr(g.columnwise, name)
            assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                               b.view(torch.uint8) if b.element_size() == 1 else b)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_stacked_cpu(scaling):
    E, N, K = 3, 130, 64
    w = x_(E * N, K, seed=7).view(E, N, K)
    q = scalemm.quantize_nvfp4_stacked(w, scaling=scaling)
    rp, cp = ref.swizzled_size(N, K // 16)
    assert q.scales.numel() == E * rp * cp and q.group_rows == N and q.scale_rows == E * rp
    q8 = scalemm.quantize_fp8_stacked(w, scaling=scaling)
    assert q8.group_rows == N and q8.data.shape == (E * N, K)
    for e in range(E):
        single = scalemm.quantize_nvfp4(w[e], scaling=scaling)
        assert torch.equal(q.scales.view(E, rp * cp)[e].view(torch.uint8), single.scales.view(torch.uint8))
        assert torch.equal(q.qdata.view(E, N, K // 2)[e], single.qdata)
        a = q.alpha[e] if scaling == "tensor" else q.alpha.view(E, N)[e]
        assert torch.equal(a, single.alpha)
        s8 = scalemm.quantize_fp8(w[e], scaling=scaling)
        assert torch.equal(q8.data.view(E, N, K)[e].view(torch.uint8), s8.data.view(torch.uint8))
        assert torch.equal(q8.scale_inv[e] if scaling == "tensor" else q8.scale_inv.view(E, N)[e], s8.scale_inv)


def test_containers_to_and_repr():
    o = offs(10, 40)
    q = scalemm.quantize_nvfp4_grouped(x_(), o, columnwise=True)
    assert "GroupedNVFP4Tensor(shape=(40, 64), groups=2" in repr(q)
    q2 = q.to("cpu")
    assert torch.equal(q2.qdata, q.qdata) and q2.columnwise.layout == "wgrad"
    f = scalemm.quantize_fp8_grouped(x_(), o, rowwise=False, columnwise=True)
    assert f.data is None and f.columnwise is not None and "rowwise=False" in repr(f)
    with pytest.raises(ValueError, match="no rowwise copy"):
        f.dequantize()


def _every_container():
    x, o = x_(32, 64), offs(10, 32)
    return [scalemm.quantize_fp8(x), scalemm.quantize_nvfp4(x), scalemm.quantize_mxfp8(x),
            scalemm.quantize_fp8_grouped(x, o), scalemm.quantize_nvfp4_grouped(x, o), scalemm.quantize_mxfp8_grouped(x, o)]


@pytest.mark.parametrize("i", range(6))
def test_container_dequantize_and_to_check_their_argument(i):
    c = _every_container()[i]
    name = type(c).__name__
    with pytest.raises(TypeError, match=r"'dtype' must be a torch.dtype \(.*\), got str 'bf16'"):
        c.dequantize("bf16")
    for bad in (torch.int32, torch.uint8, torch.bool, torch.float8_e4m3fn):
        with pytest.raises(TypeError, match=f"'dtype' must be a floating-point dtype .*, got {bad}"):
            c.dequantize(bad)
    assert c.dequantize(torch.float64).dtype == torch.float64
    with pytest.raises(TypeError, match=f"{name}.to takes a device, got the dtype torch.bfloat16: a container "
                                        "keeps its format's dtypes"):
        c.to(torch.bfloat16)
    with pytest.raises(ValueError, match=f"{name}.to: 'device' must be a torch.device, a device string or an "
                                         "index, got 'bf16'"):
        c.to("bf16")
    assert c.to("cpu").device == torch.device("cpu") and c.to(torch.device("cpu")).shape == c.shape


# ---------------------------------------------------------------------------
# an empty x (T = 0, an expert-parallel rank with no tokens): every group is empty
# ---------------------------------------------------------------------------

def _assert_filled(t, shape, dtype, fill):
    assert t.dtype == dtype and tuple(t.shape) == tuple(shape), (t.dtype, tuple(t.shape), dtype, shape)
    assert torch.equal(t.float() if t.dtype.itemsize == 1 or t.dtype == torch.int32 else t,
                       torch.full(shape, float(fill)))


# (the public functions' offsets, the reference's): CPU offsets must be valid (all 0 for T = 0); the
# reference, like the CUDA path, clamps any offsets to 0 when T = 0
EMPTY_OFFSETS = [(offs(0, 0, 0), offs(0, 0, 0)), (offs(0, 0, 0), offs(5, -2, 9))]


@pytest.mark.parametrize("o", EMPTY_OFFSETS)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_empty_x_fp8_grouped(o, scaling):
    o, o_ref = o
    x = torch.zeros(0, 64, dtype=torch.bfloat16)
    q = scalemm.quantize_fp8_grouped(x, o, scaling=scaling, columnwise=True)
    W = 48  # wgrad_width(0, 3): 15 G padding columns rounded up to 16
    assert q.shape == (0, 64) and q.num_groups == 3 and q.columnwise.layout == "wgrad"
    _assert_filled(q.data, (0, 64), torch.float8_e4m3fn, 0)
    _assert_filled(q.scale_inv, (3,) if scaling == "tensor" else (0,), torch.float32, 1)  # empty group: amax 0
    _assert_filled(q.columnwise.data, (64, W), torch.float8_e4m3fn, 0)
    _assert_filled(q.columnwise.scale_inv, (3,) if scaling == "tensor" else (3, 64), torch.float32, 1)
    want = ref.quantize_fp8_grouped(x, o_ref, scaling=scaling, columnwise=True)
    for got, exp in ((q, want), (q.columnwise, want.columnwise)):
        assert torch.equal(got.data.view(torch.uint8), exp.data.view(torch.uint8))
        assert torch.equal(got.scale_inv, exp.scale_inv)
    assert q.dequantize().shape == (0, 64) and q.columnwise.dequantize().shape == (64, 0)
    only = scalemm.quantize_fp8_grouped(x, o, scaling=scaling, rowwise=False, columnwise=True)
    assert only.data is None and only.columnwise.data.shape == (64, W)


@pytest.mark.parametrize("o", EMPTY_OFFSETS)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rht", [False, True])
def test_empty_x_nvfp4_grouped(o, scaling, rht):
    o, o_ref = o
    x = torch.zeros(0, 64, dtype=torch.float32)
    q = scalemm.quantize_nvfp4_grouped(x, o, scaling=scaling, columnwise=True, rht=rht, stochastic_rounding=rht,
                                       seed=3)
    g = (3,) if scaling == "tensor" else (0,)
    assert q.shape == (0, 64) and q.scale_rows == ref.grouped_scale_rows(0, 3) == 384
    _assert_filled(q.qdata, (0, 32), torch.uint8, 0)
    _assert_filled(q.scales, (384 * 4,), torch.float8_e4m3fn, 0)  # 128 G scale rows, Cp = 4, all zero
    _assert_filled(q.sf_offsets, (3,), torch.int32, 0)
    _assert_filled(q.alpha, g, torch.float32, 1)
    _assert_filled(q.amax, g, torch.float32, 0)
    c = q.columnwise
    gc = (3,) if scaling == "tensor" else (3, 64)
    assert c.layout == "wgrad" and c.rht == rht
    _assert_filled(c.qdata, (64, 24), torch.uint8, 0)  # W = 48 token columns, packed
    _assert_filled(c.scales, (128 * ref.wgrad_scale_cols(0, 3),), torch.float8_e4m3fn, 0)
    _assert_filled(c.sf_offsets, (3,), torch.int32, 0)
    _assert_filled(c.alpha, gc, torch.float32, 1)
    _assert_filled(c.amax, gc, torch.float32, 0)
    want = ref.quantize_nvfp4_grouped(x, o_ref, scaling=scaling, columnwise=True, rht=rht, stochastic_rounding=rht,
                                      seed=3)
    for got, exp in ((q, want), (c, want.columnwise)):
        for f in ("qdata", "scales", "sf_offsets", "alpha", "amax"):
            a, b = getattr(got, f), getattr(exp, f)
            assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f
    assert q.dequantize().shape == (0, 64) and c.dequantize().shape == (64, 0)


@pytest.mark.parametrize("o", EMPTY_OFFSETS)
def test_empty_x_mxfp8_grouped(o):
    o, o_ref = o
    x = torch.zeros(0, 64, dtype=torch.bfloat16)
    q = scalemm.quantize_mxfp8_grouped(x, o)
    assert isinstance(q, scalemm.GroupedMXFP8) and q.shape == (0, 64)
    _assert_filled(q.data, (0, 64), torch.float8_e4m3fn, 0)
    _assert_filled(q.scales, (384 * 4,), torch.uint8, 0)
    _assert_filled(q.sf_offsets, (3,), torch.int32, 0)
    want = ref.quantize_mxfp8_grouped(x, o_ref)
    assert torch.equal(q.scales, want.scales) and torch.equal(q.sf_offsets, want.sf_offsets)
    assert q.dequantize().shape == (0, 64)


def test_empty_x_grouped_fakes():
    """The custom ops of an empty x: real results have the fake shapes."""
    import scalemm.ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode
    x, o = torch.zeros(0, 64, dtype=torch.bfloat16), offs(0, 0)
    real = torch.ops.scalemm.quantize_nvfp4_grouped(x, o, "tensor") + torch.ops.scalemm.quantize_fp8_grouped(
        x, o, "token") + torch.ops.scalemm.quantize_nvfp4(x, "token", None)
    with FakeTensorMode() as mode:
        fx, fo = mode.from_tensor(x), mode.from_tensor(o)
        fake = torch.ops.scalemm.quantize_nvfp4_grouped(fx, fo, "tensor") + torch.ops.scalemm.quantize_fp8_grouped(
            fx, fo, "token") + torch.ops.scalemm.quantize_nvfp4(fx, "token", None)
    for f, r in zip(fake, real):
        assert f.shape == r.shape and f.dtype == r.dtype


# ---------------------------------------------------------------------------
# residual NVFP4 (docs/numerics.md section 10)
# ---------------------------------------------------------------------------

def _outlier_input(M=128, K=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    hot = torch.randperm(K, generator=g)[:12]
    x[:, hot] *= 30  # a few outlier channels, as in LLM activations
    return x.to(torch.bfloat16), hot


def _sqnr_db(approx, exact):
    return (10 * torch.log10(exact.pow(2).sum() / (approx - exact).pow(2).sum())).item()


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_residual_layout_roundtrip(scaling):
    x, _ = _outlier_input()
    M, K = x.shape
    channels = x.float().abs().amax(0).topk(20).indices  # K_e = 20 -> padded to 32
    q = scalemm.quantize_nvfp4_residual(x, channels, scaling=scaling)
    assert q.shape == (M, K + 32)
    main = scalemm.quantize_nvfp4(x, scaling=scaling)
    # the first K columns are Q(x) exactly (codes, scales, alpha)
    assert torch.equal(q.qdata[:, :K // 2], main.qdata)
    s_all = ref.unswizzle_scales(q.scales, M, (K + 32) // 16).view(torch.uint8)
    assert torch.equal(s_all[:, :K // 16], ref.unswizzle_scales(main.scales, M, K // 16).view(torch.uint8))
    assert torch.equal(q.alpha, main.alpha)
    # the residual columns dequantize to (approximately) x - dequant(Q(x)) on those channels; padding is 0
    deq = q.dequantize()
    r = x.float() - main.dequantize()
    assert torch.count_nonzero(deq[:, K + 20:]) == 0
    r_e = r[:, channels]
    err = ((deq[:, K:K + 20] - r_e).norm() / r_e.norm()).item()
    assert err < 0.2, err
    # reconstruction: main + residual scattered back is closer to x than main alone
    recon = main.dequantize().clone()
    recon[:, channels] += deq[:, K:K + 20]
    xf = x.float()
    assert _sqnr_db(recon, xf) > _sqnr_db(main.dequantize(), xf) + 1
    # on the residual channels themselves the error drops by an order of magnitude
    assert _sqnr_db(recon[:, channels], xf[:, channels]) > _sqnr_db(main.dequantize()[:, channels], xf[:, channels]) + 10
    # the public CPU path is the reference
    want = ref.quantize_nvfp4_residual(x, channels, scaling=scaling)
    assert torch.equal(q.qdata, want.qdata) and torch.equal(q.scales.view(torch.uint8), want.scales.view(torch.uint8))


def test_residual_weight():
    w = x_(48, 64, seed=2)
    ch = [5, 0, 63]
    wp = scalemm.prepare_residual_weight(w, ch)
    assert wp.shape == (48, 80) and wp.dtype == w.dtype
    assert torch.equal(wp[:, :64], w) and torch.equal(wp[:, 64:67], w[:, ch])
    assert torch.count_nonzero(wp[:, 67:]) == 0


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_residual_gemm_sqnr_gain(scaling):
    """Q(X) W^T + Q(R) W_e^T (one GEMM over K + K_e, W in bf16) is closer to X W^T than Q(X) W^T."""
    x, _ = _outlier_input(256, 512, seed=4)
    w = (torch.randn(384, 512, generator=torch.Generator().manual_seed(5)) * 0.05).to(torch.bfloat16)
    exact = x.double() @ w.double().t()
    xq = scalemm.quantize_nvfp4(x, scaling=scaling)
    base = ref.gemm_reference(xq.dequantize(), w.float())
    # the caller's choice here: the 64 channels (1/8 of K) with the largest quantization error energy
    channels = (x.float() - xq.dequantize()).pow(2).sum(0).topk(64).indices
    xr = scalemm.quantize_nvfp4_residual(x, channels, scaling=scaling)
    res = ref.gemm_reference(xr.dequantize(), scalemm.prepare_residual_weight(w, channels).float())
    g_base, g_res = _sqnr_db(base.double(), exact), _sqnr_db(res.double(), exact)
    print(f"residual NVFP4 ({scaling}): GEMM SQNR {g_base:.2f} dB -> {g_res:.2f} dB (+{g_res - g_base:.2f} dB)")
    assert g_res > g_base + 2.0, (g_base, g_res)
    # the same single GEMM with folded alphas (the operands as a block-scaled GEMM sees them)
    folded = ref.gemm_reference(ref.dequantize_nvfp4(xr, apply_alpha=False),
                                scalemm.prepare_residual_weight(w, channels).float(), xr.alpha, None)
    assert _sqnr_db(folded.double(), exact) > g_base + 2.0


def test_fp8_stacked_pair_validation(no_dispatch):
    fn = scalemm.quantize_fp8_stacked_pair
    with pytest.raises(ValueError, match=r"'w' must be 3-D \[E, N, K\]"):
        fn(x_())
    with pytest.raises(ValueError, match="'w' must be contiguous"):
        fn(x_(64, 64).view(4, 16, 64).transpose(1, 2))
    with pytest.raises(ValueError, match=r"'w' K \(last dim\) must be a multiple of 16, got 40"):
        fn(torch.zeros(2, 16, 40, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="'scaling' must be one of"):
        fn(torch.zeros(2, 16, 64, dtype=torch.bfloat16), scaling="expert")
    with pytest.raises(ValueError, match=r"'w' N \(dim 1\) must be a multiple of 16, got 24"):
        scalemm.quantize_fp8_stacked_pair(torch.zeros(2, 24, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_stacked_pair_cpu(scaling):
    """The W^T copy is the stacked columnwise (wgrad-layout) copy with each expert's block transposed, what the
    one-pass kernel writes directly (checked on the GPU against the reference's two passes): the same bytes and
    scales as the reference's quantize_fp8_stacked of W^T."""
    from scalemm import training
    E, N, K = 3, 32, 48
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(E, N, K, generator=g) * torch.rand(E, N, 1, generator=g).mul(6).exp2()).to(torch.bfloat16)
    got, got_t = scalemm.quantize_fp8_stacked_pair(w, scaling=scaling)
    col = scalemm.quantize_fp8_stacked(w, scaling=scaling, columnwise=True).columnwise
    assert torch.equal(got_t.data.view(torch.uint8), training._experts_to_rows(col.data.view(torch.uint8)[:, :E * N], E))
    assert torch.equal(got_t.scale_inv, col.scale_inv.reshape(-1))
    assert torch.equal(got.data.view(torch.uint8), scalemm.quantize_fp8_stacked(w, scaling=scaling).data.view(torch.uint8))
    assert (got.group_rows, got_t.group_rows, got_t.shape) == (N, K, (E * K, N))


def test_zero_rows_past_groups_cpu():
    from scalemm.quantize_grouped import zero_rows_past_groups
    out = torch.ones(10, 4)
    assert zero_rows_past_groups(out, offs(2, 7, 5)) is out
    assert out[:7].eq(1).all() and out[7:].eq(0).all()
    out = torch.ones(3, 4)
    zero_rows_past_groups(out, offs(-1, 9))  # clamped: every row is in a group
    assert out.eq(1).all()
    with pytest.raises(ValueError, match="'offsets' must be a non-empty 1-D int32 tensor"):
        zero_rows_past_groups(out, torch.tensor([2]))
    with pytest.raises(ValueError, match="'out' must be a contiguous tensor"):
        zero_rows_past_groups(torch.ones(4, 6).t(), offs(2))
