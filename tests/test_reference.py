"""CPU tests of the pure-torch reference (docs/numerics.md) and the containers.

Bit-exact checks compare against independent formulations (brute-force nearest value
searches, a reshape/permute swizzle, a literal scalar RHT loop, Python-int Philox
arithmetic, Random123's known-answer vectors); lossy checks use explicit error bounds.
"""

import math

import pytest
import torch

from scalemm import reference as ref
from scalemm.formats import FLT_MAX, MXFP8, NVFP4
from scalemm.formats import FP8Tensor, MXFP8Tensor, NVFP4Tensor

F32 = torch.float32
NAN, INF = float("nan"), float("inf")
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def wide_range(M, K, seed, block=16):
    """Gaussian data whose blocks span 2^-12 .. 2^12 (wide dynamic range)."""
    g = gen(seed)
    x = torch.randn(M, K, generator=g)
    exps = torch.randint(-12, 13, (M, K // block), generator=g).to(F32)
    return x * torch.exp2(exps).repeat_interleave(block, dim=1)


def f32(v):
    """Python float rounded to fp32 (RNE) and back."""
    return torch.tensor(v, dtype=torch.float64).to(F32).item()


def bytes_of(t):
    return t.view(torch.uint8)


def block_scales(q, dtype=F32):
    """Unswizzled e4m3 block scales [M, K/16] of an NVFP4Tensor, as fp32."""
    return ref.unswizzle_scales(q.scales, q.M, q.K // 16).to(dtype)


# ---------------------------------------------------------------------------
# E2M1
# ---------------------------------------------------------------------------

E2M1_CASES = [  # (x, code): the docs/numerics.md section 1 ties, specials, saturation
    (0.25, 0x0), (0.75, 0x2), (1.25, 0x2), (1.75, 0x4), (2.5, 0x4), (3.5, 0x6), (5.0, 0x6),
    (-0.25, 0x8), (-0.75, 0xA), (-1.25, 0xA), (-1.75, 0xC), (-2.5, 0xC), (-3.5, 0xE),
    (-5.0, 0xE), (0.0, 0x0), (-0.0, 0x8), (-0.1, 0x8), (0.26, 0x1), (0.74, 0x1),
    (1.3, 0x3), (2.6, 0x5), (5.01, 0x7), (6.0, 0x7), (7.0, 0x7), (1e30, 0x7), (INF, 0x7),
    (-INF, 0xF), (-6.5, 0xF), (NAN, 0x7), (-NAN, 0x7),
]


def test_e2m1_ties_specials_saturation():
    x = torch.tensor([v for v, _ in E2M1_CASES], dtype=F32)
    codes = ref.e2m1_encode(x)
    assert codes.dtype == torch.uint8
    assert codes.tolist() == [c for _, c in E2M1_CASES]


def test_e2m1_matches_bruteforce_nearest_even():
    g = gen(1)
    mids = torch.tensor([(a + b) / 2 for a, b in zip(E2M1_GRID, E2M1_GRID[1:])])
    eps = torch.tensor(1e-6)
    pts = torch.cat([mids, mids + eps, mids - eps, torch.tensor(E2M1_GRID),
                     torch.rand(2000, generator=g) * 8])
    x = torch.cat([pts, -pts]).to(F32)
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    # nearest grid value, ties to the even code: even codes listed first, argmin takes the first
    order = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    dist = (x.double().abs()[:, None] - grid[order][None, :]).abs()
    mag = order[dist.argmin(dim=1)]
    expected = mag | (torch.signbit(x).long() << 3)
    assert torch.equal(ref.e2m1_encode(x).long(), expected)


def test_e2m1_decode_all_codes_and_roundtrip():
    codes = torch.arange(16, dtype=torch.uint8)
    vals = ref.e2m1_decode(codes)
    assert vals.abs().tolist() == list(E2M1_GRID) * 2
    assert torch.signbit(vals).tolist() == [False] * 8 + [True] * 8  # 0x8 is -0.0
    assert torch.equal(ref.e2m1_encode(vals), codes)


def test_e2m1_accepts_bf16_exactly():
    x = torch.randn(512, generator=gen(2)) * 3
    assert torch.equal(ref.e2m1_encode(x.bfloat16()), ref.e2m1_encode(x.bfloat16().float()))


def test_pack_order_low_nibble_is_even_element():
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x8]], dtype=torch.uint8)
    assert ref.pack_fp4(codes).tolist() == [[0x21, 0x8F]]
    rnd = torch.randint(0, 16, (3, 5, 32), generator=gen(3)).to(torch.uint8)
    packed = ref.pack_fp4(rnd)
    assert packed.shape == (3, 5, 16)
    assert torch.equal(packed & 0xF, rnd[..., 0::2])
    assert torch.equal(ref.unpack_fp4(packed), rnd)
    with pytest.raises(ValueError, match="even"):
        ref.pack_fp4(torch.zeros(3, dtype=torch.uint8))


# ---------------------------------------------------------------------------
# e4m3 (satfinite, RNE)
# ---------------------------------------------------------------------------

def _e4m3_table():
    byts = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
    return byts, byts.view(torch.float8_e4m3fn).double()


def test_e4m3_satfinite_matches_bruteforce():
    byts, vals = _e4m3_table()
    pos = torch.unique(vals[vals >= 0])  # 0 .. 448, sorted
    mids = (pos[1:] + pos[:-1]) / 2
    g = gen(4)
    pts = torch.cat([pos, mids, mids * (1 + 2**-20), mids * (1 - 2**-20),
                     torch.exp2(torch.rand(3000, generator=g) * 22 - 13),
                     torch.tensor([448.0, 449.0, 463.9, 464.0, 480.0, 1e10, 2.0**-10,
                                   2.0**-11, 3 * 2.0**-11])]).float()
    x = torch.cat([pts, -pts])
    # nearest finite e4m3 to min(|x|, 448); ties -> even byte (mantissa LSB 0)
    target = x.double().abs().clamp(max=448.0)
    dist = (target[:, None] - pos[None, :]).abs()
    even_first = torch.argsort(pos_bytes_parity(pos), stable=True)
    choice = even_first[dist[:, even_first].argmin(dim=1)]
    expected = pos[choice] * torch.where(torch.signbit(x), -1.0, 1.0).double()
    got = ref.e4m3_satfinite(x)
    assert got.dtype == torch.float8_e4m3fn
    assert torch.equal(got.double(), expected)
    assert torch.equal(torch.signbit(got.float()), torch.signbit(x))


def pos_bytes_parity(pos):
    """Mantissa LSB of the byte encoding each non-negative e4m3 value in `pos`."""
    return bytes_of(pos.float().to(torch.float8_e4m3fn)).long() & 1


def test_e4m3_satfinite_saturates_and_canonical_nan():
    x = torch.tensor([500.0, -500.0, INF, -INF, NAN, -NAN, -0.0])
    got = bytes_of(ref.e4m3_satfinite(x)).tolist()
    assert got == [0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x7F, 0x80]
    # the sign of -NaN is dropped (torch's own cast keeps it: 0xFF)
    assert bytes_of(ref.e4m3_satfinite(torch.tensor([-NAN, 1.0]))).tolist() == [0x7F, 0x38]


# ---------------------------------------------------------------------------
# swizzled 128x4 scale layout
# ---------------------------------------------------------------------------

def test_swizzle_offsets_known_values():
    R, C = 128, 128 // 16
    Rp, Cp = ref.swizzled_size(R, C)
    assert (Rp, Cp) == (128, 8)
    assert ref.swizzle_offset(5, 2, Cp) == 82
    assert ref.swizzle_offset(5, 5, Cp) == 593
    assert ref.swizzled_size(129, 5) == (256, 8)
    assert ref.swizzled_size(1, 1) == (128, 4)
    r = torch.tensor([5, 5])
    c = torch.tensor([2, 5])
    assert ref.swizzle_offset(r, c, Cp).tolist() == [82, 593]


def _swizzle_by_permute(s):
    R, C = s.shape
    Rp, Cp = -(-R // 128) * 128, -(-C // 4) * 4
    padded = torch.zeros(Rp, Cp, dtype=s.dtype)
    padded[:R, :C] = s
    return padded.reshape(Rp // 128, 4, 32, Cp // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)


@pytest.mark.parametrize("R,C", [(1, 1), (7, 3), (32, 2), (128, 4), (129, 5), (256, 8),
                                 (300, 17)])
def test_swizzle_matches_permute_formulation(R, C):
    s = torch.randint(1, 256, (R, C), generator=gen(R * 31 + C)).to(torch.uint8)
    buf = ref.swizzle_scales(s)
    Rp, Cp = ref.swizzled_size(R, C)
    assert buf.shape == (Rp * Cp,) and buf.dtype == torch.uint8
    assert torch.equal(buf, _swizzle_by_permute(s))
    assert int((buf == 0).sum()) == Rp * Cp - R * C  # padding zero, data (all nonzero) kept
    assert torch.equal(ref.unswizzle_scales(buf, R, C), s)


def test_swizzle_keeps_fp8_dtype_and_stacks_batches():
    s = torch.randint(1, 127, (3, 130, 6), generator=gen(5)).to(torch.uint8)
    buf = ref.swizzle_scales(s)
    Rp, Cp = ref.swizzled_size(130, 6)
    assert buf.shape == (3, Rp * Cp)
    assert torch.equal(buf.reshape(-1), torch.cat([_swizzle_by_permute(si) for si in s]))
    s8 = s[0].view(torch.float8_e4m3fn)
    buf8 = ref.swizzle_scales(s8)
    assert buf8.dtype == torch.float8_e4m3fn
    assert torch.equal(bytes_of(buf8), buf[0])
    assert torch.equal(bytes_of(ref.unswizzle_scales(buf8, 130, 6)), s[0])
    with pytest.raises(ValueError, match="Rp\\*Cp"):
        ref.unswizzle_scales(buf[0][:-1], 130, 6)


# ---------------------------------------------------------------------------
# NVFP4 global scale
# ---------------------------------------------------------------------------

def test_nvfp4_global_scale_rules():
    amax = torch.tensor([0.0, INF, NAN, 2688.0, 1e-40, 1.0, 3.0, 2688.0 * 4])
    s_enc, s_dec = ref.nvfp4_global_scale(amax)
    expected = [1.0, 1.0, FLT_MAX, 1.0, FLT_MAX, 2688.0, 896.0, 0.25]
    assert s_enc.dtype == F32 and s_enc.tolist() == expected
    assert s_dec.tolist() == [f32(1.0 / v) for v in expected]
    assert s_dec[2].item() > 0  # 1 / FLT_MAX is a (kept) fp32 subnormal
    e0, d0 = ref.nvfp4_global_scale(torch.tensor(7.0))
    assert e0.shape == () and e0.item() == f32(2688.0 / 7.0) and d0.item() == f32(1 / e0.item())


# ---------------------------------------------------------------------------
# NVFP4 quantize / dequantize
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_roundtrip_picks_nearest_grid_value(scaling):
    x = wide_range(32, 256, seed=6)
    q = ref.quantize_nvfp4(x, scaling=scaling)
    assert q.qdata.shape == (32, 128) and q.qdata.dtype == torch.uint8
    assert q.scales.dtype == torch.float8_e4m3fn and q.scales.shape == (128 * 16,)
    deq = q.dequantize()
    alpha = q.alpha if scaling == "tensor" else q.alpha[:, None]
    eff = (block_scales(q) * alpha)[..., None]  # [M, K/16, 1]: the block's decode scale
    xb, db = x.reshape(32, 16, 16), deq.reshape(32, 16, 16)
    grid = ref.e2m1_decode(torch.arange(16, dtype=torch.uint8))
    best = (xb[..., None] - grid * eff[..., None]).abs().amin(dim=-1)
    err = (xb - db).abs()
    assert (err <= best + 1e-5 * eff).all()  # RNE: no representable value is closer
    # blocks with a normal e4m3 scale (>= 2^-6): the scale is bm / 6 to 4 significant
    # bits, and the error is at most half the widest grid step (2)
    normal = (block_scales(q) >= 2.0**-6)[..., None].expand_as(xb)
    bm = xb.abs().amax(dim=-1, keepdim=True).expand_as(xb)
    assert normal.float().mean() > 0.5
    assert ((eff.expand_as(xb) * 6 / bm - 1).abs()[normal] <= 2.0**-4 + 1e-6).all()
    assert (err <= eff)[normal].all()
    assert (deq - x).norm() / x.norm() < 0.12


def test_nvfp4_bf16_input_equals_fp32_of_same_values():
    x = wide_range(16, 64, seed=7).bfloat16()
    a, b = ref.quantize_nvfp4(x), ref.quantize_nvfp4(x.float())
    assert a.orig_dtype == torch.bfloat16
    assert torch.equal(a.qdata, b.qdata) and torch.equal(bytes_of(a.scales), bytes_of(b.scales))
    assert torch.equal(a.alpha, b.alpha)
    assert a.dequantize(torch.bfloat16).dtype == torch.bfloat16


def test_nvfp4_noncontiguous_input():
    x = wide_range(64, 32, seed=8)
    xt = x.t()  # [32, 64], transposed strides
    a, b = ref.quantize_nvfp4(xt), ref.quantize_nvfp4(xt.contiguous())
    assert torch.equal(a.qdata, b.qdata) and torch.equal(bytes_of(a.scales), bytes_of(b.scales))


def test_nvfp4_known_scale_bytes_subnormal_and_underflow():
    # amax given as 2688 -> S_enc = S_dec = 1, so s = e4m3(bm * fl(1/6))
    x = torch.zeros(1, 96)
    grid = ref.e2m1_decode(torch.arange(16, dtype=torch.uint8))  # the 16 E2M1 values
    x[0, 0:16] = grid  # bm 6 -> s = 1.0 (0x38)
    x[0, 16:32] = grid * 2.0**-8  # s = 2^-8: e4m3 subnormal 0x02
    x[0, 32:48] = 3 * 2.0**-10  # bm * 1/6 = 2^-11 < 2^-10: s underflows to 0
    x[0, 48:64] = 0.0  # zero block
    x[0, 64:80] = 1.0
    x[0, 64] = 6.18  # s = e4m3(1.03) = 1.0 -> y = 6.18 saturates to 6
    x[0, 80:96] = torch.tensor([448.0 * 6, -1.0] + [0.0] * 14)  # s = 448 (0x7E)
    q = ref.quantize_nvfp4(x, amax=torch.tensor(2688.0))
    assert q.alpha.item() == 1.0 and q.amax.item() == 2688.0
    s = bytes_of(ref.unswizzle_scales(q.scales, 1, 6))[0].tolist()
    assert s == [0x38, 0x02, 0x00, 0x00, 0x38, 0x7E]
    codes = ref.unpack_fp4(q.qdata)[0]
    assert (codes[32:48] == 0x7).all()  # tiny nonzero values with s = 0 -> +6 codes ...
    deq = q.dequantize()[0]
    assert (deq[32:64] == 0).all()  # ... which still dequantize to 0
    assert (codes[48:64] == 0).all()
    assert codes[64].item() == 0x7 and deq[64].item() == 6.0
    assert torch.equal(deq[16:32], x[0, 16:32])  # grid values * 2^-8 are exact
    assert torch.equal(deq[0:16], x[0, 0:16])
    assert torch.equal(codes[0:16], torch.arange(16, dtype=torch.uint8))
    assert deq[80].item() == 6 * 448.0 and codes[81].item() == 0x8  # -1/448 -> -0


def test_nvfp4_rounding_order_of_scale_and_multiplier():
    """s = e4m3(bm * fl(S_enc * fl(1/6))) and mult = fl(1 / fl(s * S_dec)), op by op.

    Other association orders differ by an ulp, which only matters next to an e4m3 or an
    e2m1 tie: the data sits there (block maxima next to e4m3 midpoints, elements next to
    the E2M1 ties in the scaled domain), and the test checks that the orders disagree.
    """
    amax = torch.tensor(1000.0)  # S_enc = fl(2.688): not a power of two
    s_enc, s_dec = ref.nvfp4_global_scale(amax)
    sixth = torch.tensor(1.0) / torch.tensor(6.0)
    c = s_enc * sixth
    _, vals = _e4m3_table()
    pos = torch.unique(vals[vals >= 2.0**-6]).float()  # normal e4m3: s within 2^-4 of bm*c
    mids = (pos[1:] + pos[:-1]) / 2
    nudge = torch.arange(-4, 5, dtype=F32) * 2.0**-23
    bm = ((mids / c)[:, None] * (1 + nudge)[None, :]).reshape(-1)  # [rows]
    s = ref.e4m3_satfinite(bm * c)
    mult = (torch.ones_like(bm) / (s.float() * s_dec)).clamp(max=FLT_MAX)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    y_tie = torch.cat([ties, -ties, torch.zeros(1)])  # 15 elements
    rows = bm.numel()
    k = torch.arange(rows, dtype=F32)[:, None] % 9 - 4
    x = torch.cat([bm[:, None], (y_tie[None, :] / mult[:, None]) * (1 + k * 2.0**-23)], dim=1)
    assert (x[:, 1:].abs() <= bm[:, None]).all()
    q = ref.quantize_nvfp4(x, amax=amax)
    got_s = ref.unswizzle_scales(q.scales, rows, 1)[:, 0]
    assert torch.equal(bytes_of(got_s), bytes_of(s))
    assert torch.equal(ref.unpack_fp4(q.qdata), ref.e2m1_encode(x * mult[:, None]))
    # the data discriminates: other orders give other scale bytes / codes
    s_alt = ref.e4m3_satfinite((bm * s_enc) * sixth)
    assert not torch.equal(bytes_of(s_alt), bytes_of(s))
    for mult_alt in (s_enc / s.float(), (torch.ones_like(bm) / s.float()) * s_enc):
        assert not torch.equal(ref.e2m1_encode(x * mult_alt[:, None]),
                               ref.e2m1_encode(x * mult[:, None]))


def test_nvfp4_zero_tensor():
    q = ref.quantize_nvfp4(torch.zeros(16, 32), columnwise=True)
    assert q.amax.item() == 0 and q.alpha.item() == 1.0
    assert (q.qdata == 0).all() and (bytes_of(q.scales) == 0).all()
    assert (q.dequantize() == 0).all() and (q.columnwise.dequantize() == 0).all()


def test_nvfp4_inf_nan_spots_token():
    x = wide_range(32, 64, seed=9)
    bad = x.clone()
    bad[3, 5] = NAN
    bad[7, 20] = INF
    bad[9, 33] = -INF
    q = ref.quantize_nvfp4(bad, scaling="token")
    clean = ref.quantize_nvfp4(x, scaling="token")
    s = bytes_of(ref.unswizzle_scales(q.scales, 32, 4))
    codes = ref.unpack_fp4(q.qdata)
    # NaN row: S_enc = FLT_MAX; the NaN block has a NaN scale and all-0x7 codes
    assert math.isnan(q.amax[3].item()) and q.alpha[3].item() == f32(1 / FLT_MAX)
    assert s[3, 0].item() == 0x7F and (codes[3, 0:16] == 0x7).all()
    assert torch.isnan(q.dequantize()[3, 0:16]).all()
    # Inf rows: S_enc = 1; the Inf block's scale saturates to 448, the Inf itself to +-6
    assert q.alpha[7].item() == 1.0 and s[7, 1].item() == 0x7E and codes[7, 20].item() == 0x7
    assert s[9, 2].item() == 0x7E and codes[9, 33].item() == 0xF
    # rows are independent under per-token scaling
    keep = [i for i in range(32) if i not in (3, 7, 9)]
    assert torch.equal(q.qdata[keep], clean.qdata[keep])
    assert torch.equal(s[keep], bytes_of(ref.unswizzle_scales(clean.scales, 32, 4))[keep])
    assert torch.equal(q.alpha[keep], clean.alpha[keep])


def test_nvfp4_inf_nan_spots_tensor():
    x = wide_range(16, 64, seed=10)
    x_inf = x.clone()
    x_inf[2, 3] = -INF
    q = ref.quantize_nvfp4(x_inf)
    assert q.amax.item() == INF and q.alpha.item() == 1.0  # S_enc = 1
    s = ref.unswizzle_scales(q.scales, 16, 4)
    expected = ref.e4m3_satfinite(x_inf.reshape(16, 4, 16).abs().amax(-1) * f32(1 / 6))
    assert torch.equal(bytes_of(s), bytes_of(expected))
    assert ref.unpack_fp4(q.qdata)[2, 3].item() == 0xF
    x_nan = x.clone()
    x_nan[5, 40] = NAN
    q = ref.quantize_nvfp4(x_nan)
    assert math.isnan(q.amax.item()) and q.alpha.item() == f32(1 / FLT_MAX)
    assert (ref.unpack_fp4(q.qdata)[5, 32:48] == 0x7).all()


def test_per_token_rows_equal_per_tensor_of_each_row():
    x = wide_range(16, 64, seed=11) * torch.exp2(torch.arange(16.0) - 8)[:, None]
    tok = ref.quantize_nvfp4(x, scaling="token")
    s_tok = bytes_of(ref.unswizzle_scales(tok.scales, 16, 4))
    for i in range(16):
        row = ref.quantize_nvfp4(x[i:i + 1], scaling="tensor")
        assert torch.equal(tok.qdata[i:i + 1], row.qdata)
        assert torch.equal(s_tok[i:i + 1], bytes_of(ref.unswizzle_scales(row.scales, 1, 4)))
        assert tok.alpha[i] == row.alpha and tok.amax[i] == row.amax
    # rows 2^-8 .. 2^7 apart: one global scale crushes the small rows' block scales
    ten = ref.quantize_nvfp4(x, scaling="tensor")
    err_tok = ((tok.dequantize() - x).norm(dim=1) / x.norm(dim=1)).max()
    err_ten = ((ten.dequantize() - x).norm(dim=1) / x.norm(dim=1)).max()
    assert err_tok < 0.15 < err_ten


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_columnwise_equals_rowwise_of_transpose(scaling):
    x = wide_range(48, 64, seed=12)
    q = ref.quantize_nvfp4(x, scaling=scaling, columnwise=True)
    amax = x.abs().amax() if scaling == "tensor" else None
    t = ref.quantize_nvfp4(x.t().contiguous(), scaling=scaling, amax=amax)
    c = q.columnwise
    assert c.shape == (64, 48) and not c.rht and c.columnwise is None
    assert torch.equal(c.qdata, t.qdata)
    assert torch.equal(bytes_of(c.scales), bytes_of(t.scales))
    assert torch.equal(c.alpha, t.alpha) and torch.equal(c.amax, t.amax)
    if scaling == "token":
        assert torch.equal(c.amax, x.abs().amax(dim=0))
    only = ref.quantize_nvfp4(x, scaling=scaling, rowwise=False, columnwise=True)
    assert only.qdata is None and only.scales is None and only.alpha is None
    assert only.shape == (48, 64) and torch.equal(only.columnwise.qdata, c.qdata)
    with pytest.raises(ValueError, match="rowwise"):
        only.dequantize()


def test_nvfp4_given_amax_used_as_is():
    x = wide_range(16, 32, seed=13)
    amax = x.abs().amax() * 4
    q = ref.quantize_nvfp4(x, amax=amax, columnwise=True)
    assert q.amax.item() == amax.item() and q.columnwise.amax.item() == amax.item()
    assert q.alpha.item() == ref.nvfp4_global_scale(amax)[1].item()
    row_amax = x.abs().amax(dim=1) * 2
    q = ref.quantize_nvfp4(x, scaling="token", amax=row_amax)
    assert torch.equal(q.amax, row_amax)
    with pytest.raises(ValueError, match="amax"):
        ref.quantize_nvfp4(x, scaling="token", amax=amax)
    with pytest.raises(ValueError, match="amax"):
        ref.quantize_nvfp4(x, scaling="token", amax=row_amax, rowwise=False, columnwise=True)


def test_nvfp4_input_validation():
    with pytest.raises(ValueError, match="multiple of 16"):
        ref.quantize_nvfp4(torch.randn(4, 24))
    with pytest.raises(ValueError, match="M must be a multiple of 16"):
        ref.quantize_nvfp4(torch.randn(4, 32), columnwise=True)
    with pytest.raises(TypeError, match="'x'"):
        ref.quantize_nvfp4(torch.randn(4, 32).double())
    with pytest.raises(ValueError, match="rht"):
        ref.quantize_nvfp4(torch.randn(16, 32), rht=True)
    with pytest.raises(ValueError, match="scaling"):
        ref.quantize_nvfp4(torch.randn(16, 32), scaling="block")


# ---------------------------------------------------------------------------
# RHT
# ---------------------------------------------------------------------------

def _sylvester16():
    idx = torch.arange(16)
    pc = torch.tensor([bin(int(v)).count("1") for v in (idx[:, None] & idx[None, :]).flatten()])
    return torch.where(pc % 2 == 0, 1.0, -1.0).reshape(16, 16).double()


RHT_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def test_hadamard_butterfly_is_sylvester_and_orthogonal():
    H = ref._fwht16(torch.eye(16)).double()  # rows: e_r @ H16
    assert torch.equal(H, _sylvester16())
    assert torch.equal(H @ H.t(), 16 * torch.eye(16, dtype=torch.float64))
    assert ref._rht_signs("cpu").tolist() == RHT_SIGNS


def test_rht_equals_matmul_definition():
    M, K = 64, 48
    x = torch.randn(M, K, generator=gen(14)) * torch.exp2(torch.randint(-6, 7, (M, 1),
                                                                      generator=gen(15)).float())
    s = torch.tensor(RHT_SIGNS, dtype=torch.float64)
    exact = ((x.t().double().reshape(K, M // 16, 16) * s) @ _sylvester16() / 4).reshape(K, M)
    y32 = ref._rht16_columnwise_fp32(x)
    bound = 4 * 2.0**-24 * (x.t().abs().double().reshape(K, M // 16, 16).sum(-1, keepdim=True)
                            .expand(K, M // 16, 16).reshape(K, M))
    assert ((y32.double() - exact).abs() <= bound).all()
    y = ref.rht16_columnwise(x)
    assert y.dtype == torch.bfloat16 and y.shape == (K, M)
    assert torch.equal(y, y32.bfloat16())
    # against the exact value: within one bf16 ulp everywhere, equal almost everywhere
    assert ((y.double() - exact).abs() <= 2.0**-7 * exact.abs() + 1e-30).all()
    assert (y == exact.bfloat16()).float().mean() > 0.99


def test_rht_bitexact_with_literal_butterfly_loop():
    M, K = 32, 3
    x = torch.randn(M, K, generator=gen(16)) * 100
    got = ref._rht16_columnwise_fp32(x)
    sign = [torch.tensor(float(v)) for v in RHT_SIGNS]
    for k in range(K):
        for chunk in range(M // 16):
            v = [x[chunk * 16 + i, k] * sign[i] for i in range(16)]  # fp32 0-d tensors
            for h in (1, 2, 4, 8):
                for i in range(16):
                    if i & h == 0:
                        a, b = v[i], v[i + h]
                        v[i], v[i + h] = a + b, a - b
            want = torch.stack([e * 0.25 for e in v])
            assert torch.equal(got[k, chunk * 16:(chunk + 1) * 16], want)


def test_rht_cancels_in_wgrad_product():
    M, N, K = 64, 24, 40
    dy = torch.randn(M, N, generator=gen(17))
    xx = torch.randn(M, K, generator=gen(18))
    got = ref._rht16_columnwise_fp32(dy).double() @ ref._rht16_columnwise_fp32(xx).double().t()
    exact = dy.double().t() @ xx.double()
    assert (got - exact).norm() / exact.norm() < 1e-6
    # and the transform is not the identity
    assert (ref._rht16_columnwise_fp32(xx) - xx.t()).abs().max() > 0.1


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_rht_columnwise_copy(scaling):
    x = wide_range(32, 48, seed=19)
    q = ref.quantize_nvfp4(x, scaling=scaling, columnwise=True, rht=True)
    y = ref.rht16_columnwise(x)
    t = ref.quantize_nvfp4(y, scaling=scaling)  # amax taken after the RHT
    c = q.columnwise
    assert c.rht and not q.rht
    assert torch.equal(c.qdata, t.qdata) and torch.equal(bytes_of(c.scales), bytes_of(t.scales))
    assert torch.equal(c.amax, t.amax) and torch.equal(c.alpha, t.alpha)
    plain = ref.quantize_nvfp4(x, scaling=scaling)
    assert torch.equal(q.qdata, plain.qdata)  # the rowwise copy is not transformed


# ---------------------------------------------------------------------------
# Philox4x32-10 and SR bits
# ---------------------------------------------------------------------------

M32 = 0xFFFFFFFF
PHILOX_KAT = [  # Random123 kat_vectors: (counter c0..c3, key k0 k1) -> output
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _philox_block(counter, key):
    c = [torch.tensor([v], dtype=torch.int64) for v in counter]
    return tuple(w.item() for w in ref._philox4x32_10_block(*c, *key))


@pytest.mark.parametrize("counter,key,want", PHILOX_KAT)
def test_philox_known_answers(counter, key, want):
    assert _philox_block(counter, key) == want


def test_mulhilo_matches_python_ints():
    b = torch.cat([torch.tensor([0, 1, M32, 0x80000000, 0xFFFF, 0x10000]),
                   torch.randint(0, 2**32, (200,), generator=gen(20), dtype=torch.int64)])
    for a in (0xD2511F53, 0xCD9E8D57, M32):
        hi, lo = ref._mulhilo32(a, b)
        prod = [a * v for v in b.tolist()]
        assert hi.tolist() == [p >> 32 for p in prod] and lo.tolist() == [p & M32 for p in prod]


def test_philox_stream_layout():
    assert tuple(ref.philox4x32_10(0, 0, 4).tolist()) == PHILOX_KAT[0][2]
    seed = offset = 2**64 - 1
    words = ref.philox4x32_10(seed, offset, 8).tolist()
    assert tuple(words[:4]) == _philox_block((0, 0, M32, M32), (M32, M32))
    assert tuple(words[4:]) == _philox_block((1, 0, M32, M32), (M32, M32))
    seed, offset = 0x299F31D0_A4093822, 0x03707344_13198A2E  # key (lo, hi), counter c2, c3
    words = ref.philox4x32_10(seed, offset, 12).tolist()
    assert tuple(words[8:]) == _philox_block((2, 0, 0x13198A2E, 0x03707344),
                                             (0xA4093822, 0x299F31D0))
    assert ref.philox4x32_10(5, 7, 6).tolist() == words_of(5, 7, 8)[:6]
    with pytest.raises(ValueError, match="seed"):
        ref.philox4x32_10(-1, 0, 4)


def words_of(seed, offset, n):
    return ref.philox4x32_10(seed, offset, n).tolist()


def test_sr_bits_byte_order():
    words = words_of(123, 45, 3)
    want = [(w >> (8 * i)) & 0xFF for w in words for i in range(4)][:10]
    got = ref.sr_bits(123, 45, 10)
    assert got.dtype == torch.uint8 and got.tolist() == want


# ---------------------------------------------------------------------------
# stochastic rounding
# ---------------------------------------------------------------------------

def _sr_input(rows, seed):
    """Blocks with max exactly 6 * 2^e and values on a 1/128 grid (times 2^e): with
    amax = 2688 (S_enc = 1) the block scale is exactly 2^e and y = x / 2^e, so SR is
    exactly unbiased and every t = |y| + u/256 * step is exact in fp32."""
    g = gen(seed)
    y = torch.randint(-768, 769, (rows, 64), generator=g).float() / 128  # [-6, 6]
    y[:, ::16] = 6.0
    e = torch.randint(-3, 4, (rows, 4), generator=g).float()
    return y * torch.exp2(e).repeat_interleave(16, dim=1), y


def test_sr_reproducible_and_between_neighbours():
    x, y = _sr_input(16, seed=21)
    amax = torch.tensor(2688.0)
    kw = dict(amax=amax, stochastic_rounding=True, columnwise=True)
    a = ref.quantize_nvfp4(x, seed=7, offset=3, **kw)
    b = ref.quantize_nvfp4(x, seed=7, offset=3, **kw)
    assert torch.equal(a.qdata, b.qdata) and torch.equal(a.columnwise.qdata, b.columnwise.qdata)
    c = ref.quantize_nvfp4(x, seed=7, offset=4, **kw)
    d = ref.quantize_nvfp4(x, seed=8, offset=3, **kw)
    assert not torch.equal(a.qdata, c.qdata) and not torch.equal(a.qdata, d.qdata)
    # scales are not affected by SR; codes are the grid neighbours below / above |y|
    rne = ref.quantize_nvfp4(x, amax=amax)
    assert torch.equal(bytes_of(a.scales), bytes_of(rne.scales))
    q = ref.e2m1_decode(ref.unpack_fp4(a.qdata))
    grid = torch.tensor(E2M1_GRID)
    lower = grid[(grid[None, :] <= y.abs().reshape(-1, 1)).sum(1) - 1].reshape(y.shape)
    upper = grid[(grid[None, :] < y.abs().reshape(-1, 1)).sum(1).clamp(max=7)].reshape(y.shape)
    assert ((q.abs() == lower) | (q.abs() == upper)).all()
    assert torch.equal(torch.signbit(q), torch.signbit(y))
    between = lower != upper
    assert ((q.abs() == lower) & between).any() and ((q.abs() == upper) & between).any()


def test_sr_matches_formula_on_explicit_bytes():
    y = torch.tensor([0.3, 0.3, 2.25, 2.25, 4.5, 5.9, -0.1, NAN])
    u = torch.tensor([0, 205, 63, 64, 63, 255, 255, 0], dtype=torch.uint8)
    # 0.3 + 205/256*0.5 = 0.7004 -> 0.5; 2.25 + 64/256 = 2.5 < 3; 4.5 + 63/128 < 6; 5.9 -> 6
    got = ref._e2m1_encode_stochastic(y, u)
    assert got.tolist() == [0x0, 0x1, 0x4, 0x4, 0x6, 0x7, 0x9, 0x7]
    u2 = torch.tensor([103, 103, 192, 192, 192, 0, 0, 0], dtype=torch.uint8)
    # 0.3 + 103/512 = 0.5012 -> 0.5; 2.25 + 0.75 = 3; 4.5 + 1.5 = 6; 5.9 + 0 = 5.9 -> 4
    got = ref._e2m1_encode_stochastic(y, u2)
    assert got.tolist() == [0x1, 0x1, 0x5, 0x5, 0x7, 0x6, 0x8, 0x7]
    # u = 255 adds 255/256 of a step: y = k*step + step/512 stays at k*step
    y3 = torch.tensor([2.0**-10, 2 + 2.0**-9, 4 + 2.0**-8, -(1 + 2.0**-10)])
    got = ref._e2m1_encode_stochastic(y3, torch.full((4,), 255, dtype=torch.uint8))
    assert got.tolist() == [0x0, 0x4, 0x6, 0xA]


def test_sr_is_unbiased():
    rows, reps = 4, 4096
    x, _ = _sr_input(rows, seed=22)
    big = x.repeat(reps, 1)  # every copy gets different random bytes (different index)
    q = ref.quantize_nvfp4(big, amax=torch.tensor(2688.0), stochastic_rounding=True, seed=1234,
                           offset=99)
    mean = q.dequantize().reshape(reps, rows, 64).mean(dim=0)
    scale = ref.unswizzle_scales(q.scales, rows * reps, 4)[:rows].float().repeat_interleave(16, 1)
    step = ref._sr_step((x / scale).abs()) * scale
    bound = 5 * (step / 2) / math.sqrt(reps)  # 5 sigma; per-sample std <= step / 2
    assert ((mean - x).abs() <= bound).all()
    assert abs(((mean - x) / bound).mean().item()) < 0.2  # no systematic drift
    # the bound is tight enough to catch RNE's bias
    rne = ref.quantize_nvfp4(x, amax=torch.tensor(2688.0)).dequantize()
    assert ((rne - x).abs() > bound).sum() > 20


# ---------------------------------------------------------------------------
# MXFP8
# ---------------------------------------------------------------------------

def test_mxfp8_known_scale_bytes():
    x = torch.zeros(1, 32 * 8)
    blocks = x.view(8, 32)
    blocks[0] = torch.linspace(-448, 448, 32)  # v = fl(448 * fl(1/448)) = 1 -> b = 127
    blocks[1] = torch.linspace(-449, 449, 32)  # v > 1 -> b = 128
    blocks[2] = torch.linspace(-1, 1, 32)  # v = 2^-8.8 -> 2^-8 -> b = 119
    blocks[3] = 0.0  # -> 0
    blocks[4, 7] = NAN  # -> 0xFF
    blocks[5, 0], blocks[5, 1] = INF, 1.0  # -> 254
    blocks[6, 0] = 2.0**-118  # v in (2^-127, 2^-126): subnormal fp32, rounds up to b = 1
    blocks[7, 0] = 2.0**-120  # v <= 2^-127 -> b = 0
    m = ref.quantize_mxfp8(x)
    assert m.scales.dtype == torch.uint8 and m.scales.shape == (128 * 8,)
    b = ref.unswizzle_scales(m.scales, 1, 8)[0].tolist()
    assert b == [127, 128, 119, 0, 0xFF, 254, 1, 0]
    data = m.data.view(8, 32).float()
    assert torch.equal(data[0], ref.e4m3_satfinite(blocks[0]).float())
    assert data[2].abs().max().item() == 256.0
    assert (data[3] == 0).all() and torch.isnan(data[4]).all()
    assert data[5, 0].item() == 448.0 and data[5, 1].item() == 0.0
    assert data[6, 0].item() == 2.0**-118 * 2.0**126 and data[7, 0].item() == 2.0**7
    deq = m.dequantize().view(8, 32)
    assert torch.equal(deq[0], data[0]) and deq[6, 0].item() == 2.0**-118
    assert deq[7, 0].item() == 2.0**-120 and torch.isnan(deq[4]).all()


def test_e8m0_scale_ceil_matches_frexp():
    g = gen(23)
    v = torch.cat([torch.exp2(torch.rand(3000, generator=g) * 300 - 150),  # subnormal .. 2^150
                   torch.exp2(torch.arange(-149.0, 128.0)),  # exact powers of two
                   torch.tensor([2.0**-127 * 1.0000001, FLT_MAX])]).float()
    v = v[torch.isfinite(v) & (v > 0)]

    def want(val):
        m, e = math.frexp(val)  # val = m * 2^e, m in [0.5, 1)
        ceil_log2 = e - 1 if m == 0.5 else e
        return min(max(ceil_log2 + 127, 0), 254)

    assert ref.e8m0_scale_ceil(v).tolist() == [want(val) for val in v.tolist()]
    special = ref.e8m0_scale_ceil(torch.tensor([0.0, INF, NAN])).tolist()
    assert special == [0, 254, 0xFF]
    dec = ref.e8m0_decode(torch.tensor([0, 1, 127, 254, 255], dtype=torch.uint8))
    assert dec[:4].tolist() == [2.0**-127, 2.0**-126, 1.0, 2.0**127] and math.isnan(dec[4])


def test_mxfp8_roundtrip_and_columnwise():
    x = wide_range(64, 96, seed=24, block=32)
    m = ref.quantize_mxfp8(x, columnwise=True)
    deq = m.dequantize()
    assert ((deq - x).abs() <= 2.0**-4 * x.abs() + 1e-30).all()
    t = ref.quantize_mxfp8(x.t().contiguous())
    assert m.columnwise.shape == (96, 64)
    assert torch.equal(bytes_of(m.columnwise.data), bytes_of(t.data))
    assert torch.equal(m.columnwise.scales, t.scales)
    with pytest.raises(ValueError, match="multiple of 32"):
        ref.quantize_mxfp8(torch.randn(16, 64), columnwise=True)


# ---------------------------------------------------------------------------
# FP8 current scaling
# ---------------------------------------------------------------------------

def test_fp8_known_values():
    x = torch.tensor([[448.0, -3.3, 0.1, 500.0 / 1000], [2.0, -1.0, 0.5, 0.0]])
    f = ref.quantize_fp8(x, scaling="tensor")
    assert f.scale_inv.item() == 1.0  # amax 448 -> scale 1
    assert torch.equal(bytes_of(f.data), bytes_of(ref.e4m3_satfinite(x)))
    t = ref.quantize_fp8(x, scaling="token")
    assert t.scale_inv.tolist() == [1.0, f32(1 / 224.0)]
    assert torch.equal(bytes_of(t.data[1]), bytes_of(ref.e4m3_satfinite(x[1] * 224.0)))
    assert t.data[1, 0].float().item() == 448.0


def test_fp8_degenerate_amax_rows():
    x = torch.randn(5, 32, generator=gen(25))
    x[0] = 0.0
    x[1, 3] = NAN
    x[2, 4] = -INF
    x[3] = 1e-37 * torch.rand(32, generator=gen(34))  # 448 / amax overflows: scale = FLT_MAX
    t = ref.quantize_fp8(x, scaling="token")
    inv = t.scale_inv.tolist()
    assert inv[:3] == [1.0, 1.0, 1.0] and inv[3] == f32(1 / FLT_MAX)
    assert t.data[2, 4].float().item() == -448.0 and torch.isnan(t.data[1, 3].float())
    assert bytes_of(t.data[1, 3]).item() == 0x7F
    assert (t.data[0].float() == 0).all()
    assert torch.equal(bytes_of(t.data[3]), bytes_of(ref.e4m3_satfinite(x[3] * FLT_MAX)))
    assert t.data[3].float().abs().max() > 1
    assert ((t.dequantize()[4] - x[4]).abs() <= 2.0**-4 * x[4].abs() + 1e-12).all()


def test_fp8_columnwise_and_roundtrip():
    x = wide_range(32, 48, seed=26) * 1e-3
    for scaling in ("tensor", "token"):
        f = ref.quantize_fp8(x, scaling=scaling, columnwise=True)
        t = ref.quantize_fp8(x.t().contiguous(), scaling=scaling)
        assert torch.equal(bytes_of(f.columnwise.data), bytes_of(t.data))
        assert torch.equal(f.columnwise.scale_inv, t.scale_inv)
        assert f.columnwise.shape == (48, 32)
    f = ref.quantize_fp8(x, scaling="token")
    rel = (f.dequantize() - x).abs() / x.abs().amax(dim=1, keepdim=True)
    assert rel.max() <= 2.0**-4 + 1e-6
    only = ref.quantize_fp8(x, rowwise=False, columnwise=True)
    assert only.data is None and only.shape == (32, 48)


# ---------------------------------------------------------------------------
# GEMM reference
# ---------------------------------------------------------------------------

def test_gemm_reference_exact_on_integer_data():
    g = gen(27)
    M, N, K = 5, 7, 32
    a = torch.randint(-4, 5, (M, K), generator=g).float()
    b = torch.randint(-4, 5, (N, K), generator=g).float()
    ar = torch.exp2(torch.randint(-3, 4, (M,), generator=g).float())
    ac = torch.exp2(torch.randint(-3, 4, (N,), generator=g).float())
    bias = torch.randint(-50, 50, (N,), generator=g).float()
    want = (a.long() @ b.long().t()).double() * ar.double()[:, None] * ac.double()[None, :]
    want = want + bias.double()
    got = ref.gemm_reference(a, b, ar, ac, bias, torch.float32)
    assert torch.equal(got.double(), want)
    assert torch.equal(ref.gemm_reference(a, b, ar, ac, bias, torch.bfloat16),
                       want.float().bfloat16())
    scalar = ref.gemm_reference(a, b, torch.tensor(0.5), None, None, torch.float32)
    assert torch.equal(scalar.double(), (a.long() @ b.long().t()).double() * 0.5)
    with pytest.raises(ValueError, match="alpha_row"):
        ref.gemm_reference(a, b, ac, ar, None, torch.float32)
    # epilogue order, op by op in fp32: fl(fl(fl(alpha_row * alpha_col) * acc) + bias)
    a, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)
    ar, ac = torch.rand(M, generator=g) + 0.5, torch.rand(N, generator=g) + 0.5
    acc = (a.double() @ b.double().t()).float()
    want = (ar[:, None] * ac[None, :]) * acc + bias
    assert torch.equal(ref.gemm_reference(a, b, ar, ac, bias, torch.float32), want)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_gemm_reference_with_nvfp4_operands(scaling):
    x = torch.randn(32, 64, generator=gen(28))
    w = torch.randn(48, 64, generator=gen(29))
    qa, qb = ref.quantize_nvfp4(x, scaling=scaling), ref.quantize_nvfp4(w, scaling=scaling)
    got = ref.gemm_reference(ref.dequantize_nvfp4(qa, apply_alpha=False),
                             ref.dequantize_nvfp4(qb, apply_alpha=False), qa.alpha, qb.alpha,
                             None, torch.float32)
    want = qa.dequantize().double() @ qb.dequantize().double().t()
    assert (got.double() - want).norm() / want.norm() < 1e-6
    assert (got - x @ w.t()).norm() / (x @ w.t()).norm() < 0.2


# ---------------------------------------------------------------------------
# containers
# ---------------------------------------------------------------------------

def test_nvfp4_container_validation_names_fields():
    q = ref.quantize_nvfp4(torch.randn(16, 32, generator=gen(30)), columnwise=True)
    args = dict(qdata=q.qdata, scales=q.scales, alpha=q.alpha, amax=q.amax, shape=(16, 32),
                scaling="tensor", orig_dtype=torch.float32)
    NVFP4Tensor(**args)
    bad = [
        (dict(qdata=q.qdata.view(torch.int8)), TypeError, "qdata"),
        (dict(qdata=q.qdata[:, :8]), ValueError, "qdata"),
        (dict(scales=bytes_of(q.scales)), TypeError, "scales"),
        (dict(scales=q.scales[:-1]), ValueError, "scales"),
        (dict(alpha=q.alpha.reshape(1)), ValueError, "alpha"),
        (dict(alpha=q.alpha.double()), TypeError, "alpha"),
        (dict(amax=None), ValueError, "amax"),
        (dict(shape=(16, 24)), ValueError, "shape"),
        (dict(scaling="token"), ValueError, "alpha"),
        (dict(scaling="block"), ValueError, "scaling"),
        (dict(orig_dtype=torch.int8), TypeError, "orig_dtype"),
        (dict(columnwise=q), ValueError, "columnwise"),
    ]
    for change, exc, field in bad:
        with pytest.raises(exc, match=field):
            NVFP4Tensor(**{**args, **change})


def test_containers_repr_to_and_dequantize():
    x = torch.randn(32, 64, generator=gen(31))
    items = [
        (ref.quantize_nvfp4(x, scaling="token", columnwise=True), "NVFP4Tensor"),
        (ref.quantize_fp8(x, columnwise=True), "FP8Tensor"),
        (ref.quantize_mxfp8(x, columnwise=True), "MXFP8Tensor"),
    ]
    for t, name in items:
        r = repr(t)
        assert r.startswith(name) and "(32, 64)" in r and "columnwise=True" in r
        assert "tensor(" not in r
        assert t.device == torch.device("cpu") and (t.M, t.K) == (32, 64)
        moved = t.to("cpu")
        assert type(moved) is type(t) and moved.columnwise is not None
        assert torch.equal(moved.dequantize(), t.dequantize())
        assert t.dequantize(torch.bfloat16).shape == (32, 64)
        assert t.columnwise.dequantize().shape == (64, 32)


def test_fp8_and_mxfp8_container_validation():
    f = ref.quantize_fp8(torch.randn(4, 32, generator=gen(32)), scaling="token")
    with pytest.raises(ValueError, match="scale_inv"):
        FP8Tensor(f.data, f.scale_inv[:2], "token", torch.float32)
    with pytest.raises(TypeError, match="data"):
        FP8Tensor(f.data.float(), f.scale_inv, "token", torch.float32)
    with pytest.raises(ValueError, match="columnwise"):
        FP8Tensor(None, None, "token", torch.float32)
    m = ref.quantize_mxfp8(torch.randn(4, 64, generator=gen(33)))
    with pytest.raises(ValueError, match="scales"):
        MXFP8Tensor(m.data, m.scales[:10], (4, 64), torch.float32)
    with pytest.raises(ValueError, match="multiple of 32"):
        MXFP8Tensor(m.data, m.scales, (4, 48), torch.float32)
    with pytest.raises(TypeError, match="columnwise"):
        MXFP8Tensor(m.data, m.scales, (4, 64), torch.float32, columnwise=f)
    assert MXFP8.block_size == 32 and NVFP4.block_size == 16
