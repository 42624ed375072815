"""The pure-torch reference of scalemm's numerics: shared/NUMERICS.md in code.

Every CUDA quantization kernel must match these functions bit for bit (FP4 codes,
e4m3/e8m0 scale bytes including the zeroed padding, global/row scales); the GEMMs are
compared with ``gemm_reference`` on the exact dequantized operands. Everything here is
vectorized torch and runs unchanged on CPU and CUDA tensors.

Arithmetic is fp32: every torch fp32 op rounds to fp32 nearest-even, which is fl().
Two torch habits would break that and are avoided on purpose:
- ``t / python_scalar`` is computed as ``t * (1 / scalar)`` on CUDA (two roundings), so
  every division here is tensor / tensor (``_div``);
- torch's float -> float8_e4m3fn cast has not always saturated (older releases give NaN
  for |x| > 464; saturation is not a documented guarantee) and keeps the sign of NaN, so
  ``e4m3_satfinite`` clamps first and writes NaN as 0x7F.
fp32 subnormals are kept (no flush-to-zero), like torch on both devices; kernels must not
be built with FTZ either (S_dec = 1 / FLT_MAX is subnormal).

Decisions NUMERICS.md leaves open, fixed here (the kernels match them):
- amax (tensor, row, column, block) is a NaN-propagating max of |x| (torch.amax): any
  NaN in the reduced set gives NaN.
- NVFP4 block scale: s = e4m3_satfinite(bm * fl(S_enc * fl(1/6))), fl(1/6) being the
  fp32 value of 1/6 and each product rounded to fp32. Encode multiplier
  mult = min(fl(1 / fl(s * S_dec)), FLT_MAX) with IEEE division: s = 0 gives
  1/0 = Inf -> FLT_MAX; a NaN s (a block holding a NaN) keeps mult = NaN, so every
  element of that block encodes as 0x7 and the block dequantizes to NaN.
- e2m1: NaN (either sign) -> 0x7; -0 and negative values that round to zero keep the
  sign bit (0x8), like the hardware cvt.
- e4m3: NaN -> 0x7F (canonical, sign dropped; PTX cvt.satfinite writes 0x7F).
- RHT (section 8): fp32, v = x * s first, then the butterfly
  for h in (1, 2, 4, 8): for i with (i & h) == 0: v[i], v[i+h] = v[i] + v[i+h], v[i] - v[i+h]
  then y = v * 0.25, rounded to bf16. Only the columnwise copy is transformed.
- Philox4x32-10 (Random123): key = (seed & 0xFFFFFFFF, seed >> 32); word w comes from
  counter (n & 0xFFFFFFFF, n >> 32, offset & 0xFFFFFFFF, offset >> 32), n = w // 4,
  output lane w % 4. Element e (row-major index within the copy being quantized: the
  rowwise [M, K] or the columnwise [K, M]) uses byte e % 4 (0 = least significant) of
  word e // 4. Both copies use the same (seed, offset).
- SR (section 9) replaces RNE on the scaled value y = fl(x * mult):
  t = fl(|y| + (u / 256) * step(|y|)) (the product is exact), q = min(6, step(t) *
  floor(t / step(t))) with the sign of y (so -0 stays 0x8); NaN y -> 0x7.
- MXFP8: b = biased exponent of the smallest power of two >= v = fl(bm * fl(1/448)),
  computed exactly from the fp32 bits (subnormal v included), clamped to [0, 254];
  v = 0 -> 0, NaN -> 0xFF, Inf -> 254. Data e4m3_satfinite(x * 2^(127 - b)), the power of
  two built from bits (2^-127 is the fp32 subnormal 0x00400000; NaN for b = 255).
- FP8: scale = fl(448 / amax); amax 0, Inf or NaN -> 1; Inf -> FLT_MAX (tiny amax);
  scale_inv = fl(1 / scale).
- NVFP4 amax argument: used as is (0-d for "tensor", [M] for "token") for the rowwise
  copy, and for the columnwise copy only with scaling="tensor" and rht=False (the same
  global amax). The columnwise "token" copy uses the per-column amax of x; with rht the
  columnwise copy uses the amax of the RHT'd bf16 data (per tensor or per row of x.T).
- GEMM epilogue order: D = cast(fl(fl(alpha_row[i] * alpha_col[j]) * acc[i, j]) + bias[j]).
- NaN encodings: the byte formats are canonical (e2m1 0x7, e4m3 0x7F, e8m0 0xFF); the
  payload and sign of a NaN in an fp32/bf16 output (amax, dequantized values, the RHT
  output) are unspecified (CPU and CUDA differ): compare those as "both NaN".
  Checked on an H200 (torch 2.11): CPU and CUDA give identical bits for every output
  here apart from those NaN payloads.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .formats import (
    E2M1_NAN_CODE,
    E4M3_MAX,
    E4M3_NAN_BYTE,
    E8M0_MAX_FINITE,
    E8M0_NAN,
    FLT_MAX,
    FP4_MAX,
    INPUT_DTYPES,
    MXFP8,
    NVFP4,
    NVFP4_GLOBAL_MAX,
    RHT_SIGN_MASK,
    RHT_SIZE,
    SCALINGS,
    SF_TILE_COLS,
    SF_TILE_ROWS,
)
from .tensors import FP8Tensor, MXFP8Tensor, NVFP4Tensor

__all__ = [
    "e2m1_encode", "e2m1_decode", "pack_fp4", "unpack_fp4", "e4m3_satfinite",
    "e8m0_scale_ceil", "e8m0_decode",
    "swizzle_offset", "swizzled_size", "swizzle_scales", "unswizzle_scales",
    "nvfp4_global_scale", "quantize_nvfp4", "dequantize_nvfp4",
    "quantize_fp8", "dequantize_fp8", "quantize_mxfp8", "dequantize_mxfp8",
    "rht16_columnwise", "philox4x32_10", "sr_bits", "gemm_reference",
]

_F32 = torch.float32
_U64_LIMIT = 1 << 64


def _div(num, den: torch.Tensor) -> torch.Tensor:
    """fl(num / den) with IEEE division; `num` a Python number or tensor, den fp32."""
    if not isinstance(num, torch.Tensor):
        num = torch.full_like(den, num)
    return torch.div(num, den)


# fp32 constants as exact Python floats (a Python float equal to an fp32 value converts
# to that value exactly when it meets an fp32 tensor).
_ONE_SIXTH = _div(torch.tensor(1.0), torch.tensor(6.0)).item()  # fl(1/6)
_ONE_OVER_448 = _div(torch.tensor(1.0), torch.tensor(E4M3_MAX)).item()  # fl(1/448)


def _as_f32(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype == _F32:
        return x
    if x.dtype in (torch.bfloat16, torch.float16):
        return x.to(_F32)  # exact
    raise TypeError(f"'{name}' must be float32, bfloat16 or float16, got {x.dtype}")


def _check_matrix(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"'{name}' must be bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"'{name}' must be 2-D [M, K], got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"'{name}' must not be empty, got shape {tuple(x.shape)}")


def _check_u64(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{name}' must be an int, got {type(value).__name__}")
    if not 0 <= value < _U64_LIMIT:
        raise ValueError(f"'{name}' must be in [0, 2^64), got {value}")
    return value


def _check_scaling(scaling) -> None:
    if scaling not in SCALINGS:
        raise ValueError(f"'scaling' must be one of {SCALINGS}, got {scaling!r}")


def _abs_amax(x: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """NaN-propagating max of |x| (over everything, or along `dim`), fp32."""
    a = x.abs()
    return a.amax() if dim is None else a.amax(dim=dim)


# ---------------------------------------------------------------------------
# Section 1: E2M1 values, RNE encoding, packing
# ---------------------------------------------------------------------------


# Round-to-nearest-even on the code: the magnitude code is the number of thresholds
# passed. At a tie the even code wins, so the comparison is ">=" where the upper
# neighbour is even (0.75 -> 1.0, 1.75 -> 2.0, 3.5 -> 4.0) and ">" elsewhere
# (0.25 -> 0, 1.25 -> 1.0, 2.5 -> 2.0, 5 -> 4.0). |x| > 5 (Inf included) -> 6.
_E2M1_RNE_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                        (2.5, False), (3.5, True), (5.0, False))


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """E2M1 codes of `x` (fp32, or bf16/fp16 widened exactly), RNE, saturating.

    Returns uint8 of x's shape, values 0..15: bit 3 sign, bits 2..0 the magnitude code
    (0, 0.5, 1, 1.5, 2, 3, 4, 6). |x| > 6 and +-Inf saturate to +-6; NaN -> 0x7 (+6);
    -0 and negative values that round to zero -> 0x8.
    """
    x = _as_f32(x, "x")
    a = x.abs()
    code = torch.zeros_like(x, dtype=torch.uint8)
    for threshold, inclusive in _E2M1_RNE_THRESHOLDS:
        passed = (a >= threshold) if inclusive else (a > threshold)
        code = code + passed.to(torch.uint8)
    code = code | (torch.signbit(x).to(torch.uint8) << 3)
    return torch.where(torch.isnan(x), torch.full_like(code, E2M1_NAN_CODE), code)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of E2M1 codes (uint8, same shape); code 0x8 decodes to -0.0.

    Only the low 4 bits of each code are read.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"'codes' must be a uint8 tensor, got "
                        f"{getattr(codes, 'dtype', type(codes).__name__)}")
    # computed from the bits (no lookup table to copy to the device): exponent field e
    # (bias 1), mantissa bit m: e == 0 -> m * 0.5, else 2^(e-1) * (1 + m/2)
    exponent = ((codes >> 1) & 0x3).to(_F32)
    mantissa = (codes & 0x1).to(_F32)
    magnitude = torch.where(exponent == 0, mantissa * 0.5,
                            torch.exp2(exponent - 1) * (1 + mantissa * 0.5))
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)  # code 0x8 -> -0.0


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] (K even, values < 16) -> uint8 [..., K // 2].

    byte i = codes[2i] | codes[2i+1] << 4: the even element in the LOW nibble.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError("'codes' must be a uint8 tensor")
    if codes.dim() == 0 or codes.shape[-1] % 2 != 0:
        raise ValueError(f"'codes' last dimension must be even, got shape {tuple(codes.shape)}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K // 2] -> uint8 codes [..., K] (low nibble first)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise TypeError("'packed' must be a uint8 tensor")
    if packed.dim() == 0:
        raise ValueError("'packed' must have at least one dimension")
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# ---------------------------------------------------------------------------
# e4m3 and e8m0 scalars
# ---------------------------------------------------------------------------

def e4m3_satfinite(x: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn of `x` (fp32, or bf16/fp16 widened exactly): clamp to +-448, then
    round-to-nearest-even (subnormals included). NaN -> 0x7F (positive NaN byte).
    Same shape as x.
    """
    x = _as_f32(x, "x")
    q = x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)  # clamp keeps NaN
    b = q.view(torch.uint8)
    b = torch.where((b & 0x7F) == 0x7F, torch.full_like(b, E4M3_NAN_BYTE), b)
    return b.view(torch.float8_e4m3fn)


def _pow2_from_e8m0(e: torch.Tensor) -> torch.Tensor:
    """fp32 2^(e - 127) built from bits, for an integer tensor e in [0, 255]; 255 -> NaN."""
    e = e.to(torch.int32)
    bits = e << 23
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), bits)  # 2^-127 is subnormal
    bits = torch.where(e == 255, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(_F32)


def e8m0_decode(b: torch.Tensor) -> torch.Tensor:
    """fp32 values 2^(b - 127) of e8m0 bytes (uint8); 0xFF -> NaN."""
    if not isinstance(b, torch.Tensor) or b.dtype != torch.uint8:
        raise TypeError("'b' must be a uint8 tensor")
    return _pow2_from_e8m0(b)


def e8m0_scale_ceil(v: torch.Tensor) -> torch.Tensor:
    """e8m0 byte (uint8) of the smallest power of two >= v, for fp32 v >= 0 (RCEIL).

    Exact, from the bits: normal v -> exponent + (mantissa != 0); subnormal v -> 0 if
    v <= 2^-127 else 1; clamped to [0, 254]; 0 -> 0; +Inf -> 254; NaN -> 0xFF.
    """
    v = _as_f32(v, "v")
    bits = v.view(torch.int32) & 0x7FFFFFFF
    exponent = bits >> 23
    mantissa = bits & 0x7FFFFF
    normal = exponent + (mantissa != 0).to(torch.int32)
    subnormal = (mantissa > 0x400000).to(torch.int32)
    b = torch.where(exponent == 0, subnormal, normal).clamp(0, E8M0_MAX_FINITE)
    b = torch.where(torch.isnan(v), torch.full_like(b, E8M0_NAN), b)
    return b.to(torch.uint8)


# ---------------------------------------------------------------------------
# Section 5: the 128x4 swizzled scale layout
# ---------------------------------------------------------------------------

def swizzled_size(R: int, C: int) -> Tuple[int, int]:
    """(Rp, Cp): R rounded up to 128 and C rounded up to 4. The buffer holds Rp * Cp bytes."""
    return (-(-R // SF_TILE_ROWS) * SF_TILE_ROWS, -(-C // SF_TILE_COLS) * SF_TILE_COLS)


def swizzle_offset(r, c, Cp: int):
    """Byte offset of scale (r, c) in the swizzled buffer of padded width Cp.

    (r div 128)*128*Cp + (c div 4)*512 + (r mod 32)*16 + ((r div 32) mod 4)*4 + (c mod 4).
    r, c: Python ints or integer tensors (broadcast).
    """
    return ((r // 128) * 128 * Cp + (c // 4) * 512 + (r % 32) * 16
            + ((r // 32) % 4) * 4 + (c % 4))


def _swizzle_index(R: int, C: int, device) -> Tuple[torch.Tensor, int, int]:
    Rp, Cp = swizzled_size(R, C)
    r = torch.arange(R, device=device, dtype=torch.int64)[:, None]
    c = torch.arange(C, device=device, dtype=torch.int64)[None, :]
    return swizzle_offset(r, c, Cp).reshape(-1), Rp, Cp


def swizzle_scales(s: torch.Tensor) -> torch.Tensor:
    """Scales [..., R, C] (a 1-byte dtype: uint8 or float8) -> [..., Rp * Cp], same dtype.

    Scale (r, c) goes to swizzle_offset(r, c, Cp); padding bytes are zero. Leading
    (batch / expert) dimensions are kept, so flattening the result gives the stacked
    layout (offset + b * Rp * Cp).
    """
    if not isinstance(s, torch.Tensor) or s.element_size() != 1 or s.dim() < 2:
        raise TypeError("'s' must be a tensor of a 1-byte dtype with at least 2 dims [..., R, C]")
    *batch, R, C = s.shape
    index, Rp, Cp = _swizzle_index(R, C, s.device)
    raw = s.reshape(*batch, R * C).view(torch.uint8)
    buf = torch.zeros((*batch, Rp * Cp), dtype=torch.uint8, device=s.device)
    return buf.index_copy(-1, index, raw).view(s.dtype)


def unswizzle_scales(buf: torch.Tensor, R: int, C: int) -> torch.Tensor:
    """Swizzled buffer [..., Rp * Cp] (1-byte dtype) -> scales [..., R, C], same dtype."""
    if not isinstance(buf, torch.Tensor) or buf.element_size() != 1 or buf.dim() < 1:
        raise TypeError("'buf' must be a tensor of a 1-byte dtype")
    index, Rp, Cp = _swizzle_index(R, C, buf.device)
    if buf.shape[-1] != Rp * Cp:
        raise ValueError(f"'buf' last dimension must be Rp*Cp = {Rp}*{Cp} = {Rp * Cp} for "
                         f"R={R}, C={C}, got {buf.shape[-1]}")
    raw = buf.view(torch.uint8).index_select(-1, index)
    return raw.reshape(*buf.shape[:-1], R, C).view(buf.dtype)


# ---------------------------------------------------------------------------
# Sections 2 and 3: NVFP4 (per-tensor and per-token global scale)
# ---------------------------------------------------------------------------

def nvfp4_global_scale(amax: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(S_enc, S_dec), fp32, elementwise over `amax` (0-d per tensor, [M] per token).

    S_enc = fminf(fl(2688 / amax), FLT_MAX) (NaN amax -> FLT_MAX); S_enc = 1 where
    amax == 0 or S_enc == 0 (amax = Inf). S_dec = fl(1 / S_enc). amax must be >= 0.
    """
    amax = _as_f32(amax, "amax")
    s_enc = _div(NVFP4_GLOBAL_MAX, amax)
    s_enc = torch.where(torch.isnan(s_enc), torch.full_like(s_enc, FLT_MAX),
                        s_enc.clamp(max=FLT_MAX))
    s_enc = torch.where((amax == 0) | (s_enc == 0), torch.ones_like(s_enc), s_enc)
    return s_enc, _div(1.0, s_enc)


def _sr_step(a: torch.Tensor) -> torch.Tensor:
    """E2M1 grid spacing above |value| a: 0.5 below 2, 1 below 4, else 2."""
    return torch.where(a < 2, torch.full_like(a, 0.5),
                       torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))


def _e2m1_encode_stochastic(y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """E2M1 codes of fp32 y with stochastic rounding by random bytes u (uint8, y's shape)."""
    a = y.abs()
    t = a + (u.to(_F32) * (1.0 / 256)) * _sr_step(a)  # the product is exact
    step = _sr_step(t)
    q = (step * torch.floor(torch.div(t, step))).clamp(max=FP4_MAX)  # NaN stays NaN
    return e2m1_encode(torch.copysign(q, y))


def _nvfp4_rows(x: torch.Tensor, amax: torch.Tensor, u: Optional[torch.Tensor] = None):
    """Quantize the rows of fp32 contiguous x [R, C] (C % 16 == 0) with amax (0-d or [R]);
    u: None (RNE) or the SR random bytes (uint8, x's shape).

    Returns (qdata uint8 [R, C/2], scales e4m3 swizzled [Rp*Cp], S_dec, amax).
    """
    R, C = x.shape
    s_enc, s_dec = nvfp4_global_scale(amax)
    if amax.dim() == 1:  # per token: one global scale per row
        s_enc, s_dec_b = s_enc[:, None], s_dec[:, None]
    else:
        s_dec_b = s_dec
    xb = x.reshape(R, C // NVFP4.block_size, NVFP4.block_size)
    block_amax = _abs_amax(xb, dim=-1)  # [R, C/16]
    s = e4m3_satfinite(block_amax * (s_enc * _ONE_SIXTH))
    mult = _div(1.0, s.to(_F32) * s_dec_b).clamp(max=FLT_MAX)  # 1/0 -> FLT_MAX, NaN stays
    y = xb * mult[..., None]
    if u is not None:
        codes = _e2m1_encode_stochastic(y, u.reshape(y.shape))
    else:
        codes = e2m1_encode(y)
    return pack_fp4(codes.reshape(R, C)), swizzle_scales(s), s_dec, amax


def _check_amax_arg(amax, scaling: str, M: int, device) -> torch.Tensor:
    if not isinstance(amax, torch.Tensor):
        raise TypeError(f"'amax' must be a torch.Tensor or None, got {type(amax).__name__}")
    want = () if scaling == "tensor" else (M,)
    if tuple(amax.shape) != want:
        raise ValueError(f"'amax' must have shape {want} for scaling={scaling!r}, "
                         f"got {tuple(amax.shape)}")
    if amax.device != device:
        raise ValueError(f"'amax' is on {amax.device} but 'x' is on {device}")
    return _as_f32(amax, "amax")


def quantize_nvfp4(x: torch.Tensor, *, scaling: str = "tensor",
                   amax: Optional[torch.Tensor] = None, rowwise: bool = True,
                   columnwise: bool = False, rht: bool = False,
                   stochastic_rounding: bool = False, seed: int = 0,
                   offset: int = 0) -> NVFP4Tensor:
    """NVFP4 quantization of x (NUMERICS sections 2, 3, 8, 9).

    x: bf16/fp16/fp32 [M, K], K % 16 == 0 (and M % 16 == 0 when columnwise); any strides.
    scaling: "tensor" (one fp32 global scale) or "token" (one per row of each copy).
    amax: optional fp32 amax used as is for the rowwise copy (0-d for "tensor", [M] for
      "token"); also for the columnwise copy when scaling="tensor" and rht=False. Else
      computed (NaN-propagating max of |x|). Must be on x's device.
    rowwise: produce the [M, K] copy. If False the container's qdata/scales/alpha/amax
      are None and only `.columnwise` is set.
    columnwise: also quantize x.T ([K, M]) into `.columnwise` ("token": per-column amax
      of x). rht: apply rht16_columnwise first (columnwise only; amax taken after it).
    stochastic_rounding: SR instead of RNE for the E2M1 codes of every copy produced,
      bits from sr_bits(seed, offset, numel of that copy); seed, offset in [0, 2^64).
    Returns an NVFP4Tensor (qdata uint8 [M, K/2], scales e4m3 swizzled, alpha = S_dec).
    """
    _check_matrix(x, "x")
    _check_scaling(scaling)
    M, K = x.shape
    if K % NVFP4.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {NVFP4.block_size}, got K={K}")
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")
    if columnwise and M % NVFP4.block_size != 0:
        raise ValueError(f"'x' M must be a multiple of {NVFP4.block_size} for the columnwise "
                         f"copy, got M={M}")
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    if stochastic_rounding:
        _check_u64(seed, "seed")
        _check_u64(offset, "offset")
    shared_amax = scaling == "tensor" and not rht  # the columnwise copy reuses the amax
    if amax is not None:
        if not (rowwise or (columnwise and shared_amax)):
            raise ValueError("'amax' is given but no copy uses it: it applies to the rowwise "
                             "copy, and to the columnwise copy only for scaling='tensor' "
                             "without rht")
        amax = _check_amax_arg(amax, scaling, M, x.device)

    x32 = x.to(_F32).contiguous()
    if amax is None and scaling == "tensor" and (rowwise or shared_amax):
        amax = _abs_amax(x32)

    row = (None, None, None, None)
    if rowwise:
        row_amax = amax if amax is not None else _abs_amax(x32, dim=1)
        u = sr_bits(seed, offset, M * K, device=x.device) if stochastic_rounding else None
        row = _nvfp4_rows(x32, row_amax, u)

    col = None
    if columnwise:
        xt = rht16_columnwise(x).to(_F32) if rht else x32.t().contiguous()
        if shared_amax:
            col_amax = amax
        else:
            col_amax = _abs_amax(xt) if scaling == "tensor" else _abs_amax(xt, dim=1)
        u = sr_bits(seed, offset, K * M, device=x.device) if stochastic_rounding else None
        qdata, scales, s_dec, col_amax = _nvfp4_rows(xt, col_amax, u)
        col = NVFP4Tensor(qdata, scales, s_dec, col_amax, (K, M), scaling, x.dtype, rht=rht)

    return NVFP4Tensor(*row, (M, K), scaling, x.dtype, rht=False, columnwise=col)


def dequantize_nvfp4(t: NVFP4Tensor, dtype: torch.dtype = torch.float32, *,
                     apply_alpha: bool = True) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: fl(fl(value(code) * s) * S_dec).

    value(code) * s is exact. apply_alpha=False leaves out S_dec: that is the operand the
    GEMM multiplies (alpha is applied in the epilogue, see gemm_reference).
    """
    if not isinstance(t, NVFP4Tensor):
        raise TypeError(f"'t' must be an NVFP4Tensor, got {type(t).__name__}")
    if t.qdata is None:
        raise ValueError("'t' has no rowwise copy (rowwise=False); dequantize t.columnwise "
                         "to get x.T")
    M, K = t.shape
    nb = K // NVFP4.block_size
    values = e2m1_decode(unpack_fp4(t.qdata)).reshape(M, nb, NVFP4.block_size)
    s = unswizzle_scales(t.scales, M, nb).to(_F32)
    out = values * s[..., None]
    if apply_alpha:
        alpha = t.alpha if t.alpha.dim() == 0 else t.alpha[:, None, None]
        out = out * alpha
    return out.reshape(M, K).to(dtype)


# ---------------------------------------------------------------------------
# Section 7: FP8 (e4m3) per-tensor / per-token current scaling
# ---------------------------------------------------------------------------

def _fp8_scale(amax: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(scale, scale_inv) fp32 from amax: fl(448 / amax); 0/Inf/NaN amax -> 1; Inf -> FLT_MAX."""
    scale = _div(E4M3_MAX, amax).clamp(max=FLT_MAX)
    degenerate = (amax == 0) | torch.isinf(amax) | torch.isnan(amax)
    scale = torch.where(degenerate, torch.ones_like(scale), scale)
    return scale, _div(1.0, scale)


def _fp8_rows(x: torch.Tensor, scaling: str):
    amax = _abs_amax(x) if scaling == "tensor" else _abs_amax(x, dim=1)
    scale, scale_inv = _fp8_scale(amax)
    scale_b = scale if scaling == "tensor" else scale[:, None]
    return e4m3_satfinite(x * scale_b), scale_inv


def quantize_fp8(x: torch.Tensor, *, scaling: str = "tensor", rowwise: bool = True,
                 columnwise: bool = False) -> FP8Tensor:
    """FP8 e4m3 current scaling (NUMERICS section 7).

    x: bf16/fp16/fp32 [M, K], any strides. scaling "tensor": one amax over x (both copies
    share it); "token": per row of x for the rowwise copy, per column of x for the
    columnwise one. data = e4m3_satfinite(fl(x * scale)), scale_inv = fl(1 / scale).
    Returns an FP8Tensor (data float8_e4m3fn [M, K], scale_inv fp32 0-d or [M]);
    rowwise=False leaves data/scale_inv None, columnwise=True sets `.columnwise` (x.T).
    """
    _check_matrix(x, "x")
    _check_scaling(scaling)
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")
    x32 = x.to(_F32).contiguous()
    data, scale_inv = _fp8_rows(x32, scaling) if rowwise else (None, None)
    col = None
    if columnwise:
        col = FP8Tensor(*_fp8_rows(x32.t().contiguous(), scaling), scaling, x.dtype)
    return FP8Tensor(data, scale_inv, scaling, x.dtype, columnwise=col)


def dequantize_fp8(t: FP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: fl(data * scale_inv)."""
    if not isinstance(t, FP8Tensor):
        raise TypeError(f"'t' must be an FP8Tensor, got {type(t).__name__}")
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise to get x.T")
    scale_inv = t.scale_inv if t.scale_inv.dim() == 0 else t.scale_inv[:, None]
    return (t.data.to(_F32) * scale_inv).to(dtype)


# ---------------------------------------------------------------------------
# Section 6: MXFP8 (e4m3 data, e8m0 scale per 32 elements)
# ---------------------------------------------------------------------------

def _mxfp8_rows(x: torch.Tensor):
    """fp32 contiguous x [R, C] (C % 32 == 0) -> (data e4m3 [R, C], swizzled e8m0 bytes)."""
    R, C = x.shape
    xb = x.reshape(R, C // MXFP8.block_size, MXFP8.block_size)
    b = e8m0_scale_ceil(_abs_amax(xb, dim=-1) * _ONE_OVER_448)  # uint8 [R, C/32]
    b32 = b.to(torch.int32)
    encode = _pow2_from_e8m0((254 - b32).clamp(min=0))  # 2^(127 - b), exact
    encode = torch.where(b32 == E8M0_NAN, torch.full_like(encode, float("nan")), encode)
    data = e4m3_satfinite(xb * encode[..., None]).reshape(R, C)
    return data, swizzle_scales(b)


def quantize_mxfp8(x: torch.Tensor, *, rowwise: bool = True,
                   columnwise: bool = False) -> MXFP8Tensor:
    """MXFP8 quantization (NUMERICS section 6, RCEIL scales).

    x: bf16/fp16/fp32 [M, K], K % 32 == 0 (M % 32 == 0 when columnwise); any strides.
    Rowwise: blocks of 32 along K; data float8_e4m3fn [M, K]; scales uint8 swizzled
    [Rp * Cp] with R = M, C = K / 32. Columnwise: the same for x.T (blocks of 32 along M).
    rowwise=False leaves data/scales None.
    """
    _check_matrix(x, "x")
    M, K = x.shape
    bs = MXFP8.block_size
    if K % bs != 0:
        raise ValueError(f"'x' K must be a multiple of {bs}, got K={K}")
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")
    if columnwise and M % bs != 0:
        raise ValueError(f"'x' M must be a multiple of {bs} for the columnwise copy, got M={M}")
    x32 = x.to(_F32).contiguous()
    data, scales = _mxfp8_rows(x32) if rowwise else (None, None)
    col = None
    if columnwise:
        col = MXFP8Tensor(*_mxfp8_rows(x32.t().contiguous()), (K, M), x.dtype)
    return MXFP8Tensor(data, scales, (M, K), x.dtype, columnwise=col)


def dequantize_mxfp8(t: MXFP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: data * 2^(b - 127) per 32-block."""
    if not isinstance(t, MXFP8Tensor):
        raise TypeError(f"'t' must be an MXFP8Tensor, got {type(t).__name__}")
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise to get x.T")
    M, K = t.shape
    nb = K // MXFP8.block_size
    scale = e8m0_decode(unswizzle_scales(t.scales, M, nb))
    out = t.data.to(_F32).reshape(M, nb, MXFP8.block_size) * scale[..., None]
    return out.reshape(M, K).to(dtype)


# ---------------------------------------------------------------------------
# Section 8: 16-point random Hadamard transform (columnwise copy)
# ---------------------------------------------------------------------------

def _rht_signs(device) -> torch.Tensor:
    """The fixed sign vector s (fp32 [16]): -1 where bit k of 0xD7E8 is set."""
    bit = (RHT_SIGN_MASK >> torch.arange(RHT_SIZE, device=device)) & 1
    return (1 - 2 * bit).to(_F32)


def _fwht16(v: torch.Tensor) -> torch.Tensor:
    """Unnormalised Walsh-Hadamard butterfly on the last dim (16) of fp32 v: v @ H16.

    Stage h pairs element i (i & h == 0) with i + h: (a, b) -> (a + b, a - b); the
    stages run h = 1, 2, 4, 8, which fixes the fp32 addition order.
    """
    shape = v.shape
    for h in (1, 2, 4, 8):
        v = v.reshape(*shape[:-1], RHT_SIZE // (2 * h), 2, h)
        a, b = v[..., 0, :], v[..., 1, :]
        v = torch.stack((a + b, a - b), dim=-2)
    return v.reshape(shape)


def _rht16_columnwise_fp32(x: torch.Tensor) -> torch.Tensor:
    """fp32 [K, M] RHT of x.T before the bf16 rounding (see rht16_columnwise)."""
    M, K = x.shape
    v = _as_f32(x, "x").t().reshape(K, M // RHT_SIZE, RHT_SIZE) * _rht_signs(x.device)
    return (_fwht16(v) * 0.25).reshape(K, M)


def rht16_columnwise(x: torch.Tensor) -> torch.Tensor:
    """bf16 [K, M]: the 16-point RHT of x.T along its rows (x's first dimension).

    x: bf16/fp16/fp32 [M, K], M % 16 == 0. Each 16-chunk c of a row of x.T becomes
    bf16(((c * s) @ H16) / 4), computed in fp32 with the butterfly of _fwht16.
    """
    _check_matrix(x, "x")
    if x.shape[0] % RHT_SIZE != 0:
        raise ValueError(f"'x' M must be a multiple of {RHT_SIZE} for the RHT, got M={x.shape[0]}")
    return _rht16_columnwise_fp32(x).to(torch.bfloat16)


# ---------------------------------------------------------------------------
# Section 9: Philox4x32-10 random bits for stochastic rounding
# ---------------------------------------------------------------------------

_MASK32 = 0xFFFFFFFF
_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def _mulhilo32(a: int, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of the 64-bit product a * b (a a 32-bit int, b int64 tensor
    of uint32 values), from 16-bit limbs so no int64 product overflows."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    b_hi, b_lo = b >> 16, b & 0xFFFF
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> 16) + (lh & 0xFFFF) + (hl & 0xFFFF)
    lo = ((mid & 0xFFFF) << 16) | (ll & 0xFFFF)
    hi = hh + (lh >> 16) + (hl >> 16) + (mid >> 16)
    return hi, lo


def _philox4x32_10_block(c0, c1, c2, c3, k0: int, k1: int):
    """Philox4x32-10 of counters (c0..c3: int64 tensors of uint32 values) under key
    (k0, k1); returns the 4 output words in Random123's order."""
    for rnd in range(10):
        if rnd > 0:  # key bumped between rounds
            k0, k1 = (k0 + _PHILOX_W0) & _MASK32, (k1 + _PHILOX_W1) & _MASK32
        hi0, lo0 = _mulhilo32(_PHILOX_M0, c0)
        hi1, lo1 = _mulhilo32(_PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox4x32_10(seed: int, offset: int, n_words: int, device=None) -> torch.Tensor:
    """int64 [n_words] of uint32 values: the SR random stream for (seed, offset).

    Key (seed & 0xFFFFFFFF, seed >> 32); word w is lane w % 4 of Philox4x32-10 at counter
    (n & 0xFFFFFFFF, n >> 32, offset & 0xFFFFFFFF, offset >> 32), n = w // 4.
    seed, offset in [0, 2^64).
    """
    _check_u64(seed, "seed")
    _check_u64(offset, "offset")
    if isinstance(n_words, bool) or not isinstance(n_words, int) or n_words < 0:
        raise ValueError(f"'n_words' must be a non-negative int, got {n_words!r}")
    n = torch.arange(-(-n_words // 4), dtype=torch.int64, device=device)
    words = _philox4x32_10_block(n & _MASK32, n >> 32,
                                 torch.full_like(n, offset & _MASK32),
                                 torch.full_like(n, offset >> 32),
                                 seed & _MASK32, seed >> 32)
    return torch.stack(words, dim=-1).reshape(-1)[:n_words]


def sr_bits(seed: int, offset: int, numel: int, device=None) -> torch.Tensor:
    """uint8 [numel]: the random byte u of each element (byte e % 4 of word e // 4,
    byte 0 = least significant)."""
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"'numel' must be a non-negative int, got {numel!r}")
    words = philox4x32_10(seed, offset, -(-numel // 4), device=device)
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=words.device)
    return ((words[:, None] >> shifts) & 0xFF).reshape(-1)[:numel].to(torch.uint8)


# ---------------------------------------------------------------------------
# Section 4: GEMM with folded scales
# ---------------------------------------------------------------------------

def _check_alpha(alpha, name: str, n: int, device) -> Optional[torch.Tensor]:
    if alpha is None:
        return None
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(float(alpha), dtype=_F32, device=device)
    if tuple(alpha.shape) not in ((), (n,)):
        raise ValueError(f"'{name}' must be a scalar or have shape ({n},), "
                         f"got {tuple(alpha.shape)}")
    return _as_f32(alpha, name).to(device)


def gemm_reference(a_deq: torch.Tensor, b_deq: torch.Tensor,
                   alpha_row: Optional[torch.Tensor] = None,
                   alpha_col: Optional[torch.Tensor] = None,
                   bias: Optional[torch.Tensor] = None,
                   out_dtype: torch.dtype = torch.float32, *,
                   accum_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """D [M, N] = cast_out(alpha_row[i] * alpha_col[j] * (A @ B^T)[i, j] + bias[j]).

    a_deq: [M, K], b_deq: [N, K] (nn.Linear weight layout): the block-dequantized
      operands WITHOUT their global scales (dequantize_nvfp4(t, apply_alpha=False), FP8
      data as fp32), or fully dequantized operands with the alphas left None.
    alpha_row: None, scalar or [M] (S_dec / scale_inv of A); alpha_col: None, scalar or
      [N] (of B, per output channel). bias: None or [N].
    The product is computed in accum_dtype (fp64 by default: the exact-dequant reference)
    and rounded to fp32; the epilogue is fp32: fl(fl(alpha_row * alpha_col) * acc), then
    + bias in fp32, and only the final result is cast to out_dtype.
    """
    for name, t in (("a_deq", a_deq), ("b_deq", b_deq)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"'{name}' must be a 2-D tensor")
    M, K = a_deq.shape
    N, Kb = b_deq.shape
    if K != Kb:
        raise ValueError(f"'a_deq' [M, K] and 'b_deq' [N, K] disagree on K: {K} vs {Kb}")
    device = a_deq.device
    acc = (a_deq.to(accum_dtype) @ b_deq.to(accum_dtype).t()).to(_F32)
    alpha_row = _check_alpha(alpha_row, "alpha_row", M, device)
    alpha_col = _check_alpha(alpha_col, "alpha_col", N, device)
    if alpha_row is not None or alpha_col is not None:
        ar = torch.ones((), dtype=_F32, device=device) if alpha_row is None else alpha_row
        ac = torch.ones((), dtype=_F32, device=device) if alpha_col is None else alpha_col
        ar = ar[:, None] if ar.dim() == 1 else ar
        acc = (ar * ac) * acc
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (N,):
            raise ValueError(f"'bias' must be a tensor of shape ({N},)")
        acc = acc + bias.to(_F32)
    return acc.to(out_dtype)


# ---------------------------------------------------------------------------
# Grouped (MoE) quantization: groups of rows given by cumulative row ends
# (NUMERICS sections 5 "Grouped along M / K" and 7). Loops over groups in plain torch; host
# syncs are fine here (the CUDA kernels in quant_grouped.cuh never read the offsets on the host).
#
# Conventions shared with the kernels:
# - offsets int32 [G]: group g owns rows [ends[g-1], ends[g]) of x [T, K], where the ends are the
#   offsets clamped into [0, T] and made non-decreasing (group_bounds): bad offsets give short or
#   empty groups, never out-of-bounds reads.
# - Rows past ends[G-1] belong to no group: their rowwise data is zero, they take no scale rows,
#   and with "token" scaling their amax is 0 (scale_inv / alpha = 1).
# - Empty groups have amax 0 (scale_inv / alpha = 1) and take no rows or columns.
# ---------------------------------------------------------------------------

from .tensors import GroupedFP8Tensor, GroupedNVFP4Tensor  # noqa: E402

__all__ += ["group_bounds", "sf_offsets", "wgrad_column_offsets", "wgrad_width", "grouped_scale_rows",
            "wgrad_scale_cols", "quantize_fp8_grouped", "dequantize_fp8_grouped", "quantize_nvfp4_grouped",
            "dequantize_nvfp4_grouped", "quantize_mxfp8_grouped", "quantize_fp8_stacked",
            "quantize_nvfp4_stacked", "residual_width", "prepare_residual_weight", "quantize_nvfp4_residual"]


def group_bounds(offsets: torch.Tensor, num_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(starts, ends) int64 [G] of the groups: ends = offsets clamped into [0, num_rows] and made
    non-decreasing (running max); starts[g] = ends[g-1] (0 for g = 0)."""
    ends = torch.cummax(offsets.to(torch.int64).clamp(0, num_rows), 0).values
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    return starts, ends


def _padded_starts(offsets: torch.Tensor, num_rows: int, align: int) -> torch.Tensor:
    """int64 [G + 1]: sum_{j<g} ceil(m_j / align) * align, for g = 0..G."""
    starts, ends = group_bounds(offsets, num_rows)
    padded = (ends - starts + align - 1) // align * align
    return torch.cat([padded.new_zeros(1), torch.cumsum(padded, 0)])


def sf_offsets(offsets: torch.Tensor, num_rows: Optional[int] = None) -> torch.Tensor:
    """int32 [G]: first scale row of each group in a scale buffer grouped along M (NUMERICS 5),
    sf_offsets[g] = sum_{j<g} ceil(m_j / 128) * 128. num_rows: T, for the clamping of the
    offsets (default: only clamped at 0 and made non-decreasing)."""
    return _padded_starts(offsets, (1 << 31) - 1 if num_rows is None else num_rows, 128)[:-1].to(torch.int32)


def wgrad_column_offsets(offsets: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int64 [G + 1]: first column p_g of each group in the wgrad layout (16-aligned), and p_G."""
    return _padded_starts(offsets, num_rows, 16)


def wgrad_width(T: int, G: int) -> int:
    """W = ceil((T + 15 G) / 16) * 16: the host-known width of the wgrad layout."""
    return -(-(T + 15 * G) // 16) * 16


def grouped_scale_rows(T: int, G: int) -> int:
    """Rows of a scale buffer grouped along M: ceil(T / 128) * 128 + 128 G (host-known bound)."""
    return -(-T // SF_TILE_ROWS) * SF_TILE_ROWS + SF_TILE_ROWS * G


def wgrad_scale_cols(T: int, G: int) -> int:
    """Scale columns of an NVFP4 buffer grouped along K: 4 * ceil((T + 63 G) / 64), a bound of
    sum_g ceil(m_g / 64) * 4 (each group's ceil(m_g / 16) columns padded to a multiple of 4)."""
    return 4 * -(-(T + 63 * G) // 64)


def _check_grouped(x, offsets) -> Tuple[int, int, int]:
    _check_matrix(x, "x")
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1 \
            or offsets.numel() == 0:
        raise ValueError("'offsets' must be a non-empty 1-D int32 tensor [G]")
    if offsets.device != x.device:
        raise ValueError(f"'offsets' is on {offsets.device} but 'x' is on {x.device}")
    T, K = x.shape
    return T, K, offsets.numel()


def _group_amax(xs: torch.Tensor, dim: Optional[int] = None, width: int = 0) -> torch.Tensor:
    """NaN-propagating amax of a group's rows (0 / zeros for an empty group)."""
    if xs.shape[0] == 0:
        return torch.zeros((), dtype=_F32, device=xs.device) if dim is None else \
            torch.zeros(width, dtype=_F32, device=xs.device)
    return _abs_amax(xs, dim)


def quantize_fp8_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                         rowwise: bool = True, columnwise: bool = False) -> GroupedFP8Tensor:
    """Grouped FP8 e4m3 current scaling (NUMERICS 7), one loop iteration per group.

    x: [T, K] bf16/fp16/fp32, rows sorted by group; offsets int32 [G] cumulative row ends.
    scaling "tensor": one amax per group (both copies); "token": per row (rowwise) and per
    column of x within each group (columnwise).
    Rowwise: data [T, K], scale_inv [G] or [T]. Columnwise (wgrad layout): data [K, W],
    W = wgrad_width(T, G), group g's rows as columns [p_g, p_g + m_g), zero padding;
    scale_inv [G] or [G, K].
    """
    T, K, G = _check_grouped(x, offsets)
    _check_scaling(scaling)
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")
    x32 = x.to(_F32).contiguous()
    starts, ends = (t.tolist() for t in group_bounds(offsets, T))
    last = ends[-1]
    tensor = scaling == "tensor"
    g_amax = torch.stack([_group_amax(x32[s:e]) for s, e in zip(starts, ends)]) if tensor else None
    e4m3 = torch.float8_e4m3fn

    data = scale_inv = None
    if rowwise:
        data = torch.zeros(T, K, dtype=torch.uint8, device=x.device)
        if tensor:
            scale, scale_inv = _fp8_scale(g_amax)
            for g, (s, e) in enumerate(zip(starts, ends)):
                data[s:e] = e4m3_satfinite(x32[s:e] * scale[g]).view(torch.uint8)
        else:
            amax = _abs_amax(x32, dim=1)
            amax[last:] = 0
            scale, scale_inv = _fp8_scale(amax)
            data[:last] = e4m3_satfinite(x32[:last] * scale[:last, None]).view(torch.uint8)
        data = data.view(e4m3)

    col = None
    if columnwise:
        W = wgrad_width(T, G)
        p16 = wgrad_column_offsets(offsets, T).tolist()
        cdata = torch.zeros(K, W, dtype=torch.uint8, device=x.device)
        if tensor:
            cscale, csinv = _fp8_scale(g_amax)
        else:
            camax = torch.stack([_group_amax(x32[s:e], 0, K) for s, e in zip(starts, ends)])  # [G, K]
            cscale, csinv = _fp8_scale(camax)
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                sc = cscale[g] if tensor else cscale[g][:, None]
                cdata[:, p16[g]:p16[g] + e - s] = e4m3_satfinite(x32[s:e].t() * sc).view(torch.uint8)
        col = GroupedFP8Tensor(cdata.view(e4m3), csinv, offsets, (T, K), scaling, x.dtype, layout="wgrad")
    return GroupedFP8Tensor(data, scale_inv, offsets, (T, K), scaling, x.dtype, columnwise=col)


def _group_of_rows(offsets: torch.Tensor, T: int) -> torch.Tensor:
    """int64 [T]: the group of each row (G for rows past the last group)."""
    _, ends = group_bounds(offsets, T)
    return torch.searchsorted(ends, torch.arange(T, device=offsets.device), right=True)


def dequantize_fp8_grouped(t: GroupedFP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """"rows" layout: [T, K] = data * scale_inv of the row's group (or row); "wgrad" layout:
    [K, T] (x.T, the padding columns dropped). Rows past the last group decode as 0."""
    if not isinstance(t, GroupedFP8Tensor):
        raise TypeError(f"'t' must be a GroupedFP8Tensor, got {type(t).__name__}")
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise")
    T, K = t.shape
    G = t.offsets.numel()
    if t.layout == "rows":
        if t.scaling == "token":
            sinv = t.scale_inv
        else:
            grp = _group_of_rows(t.offsets, T)
            sinv = torch.cat([t.scale_inv, torch.zeros(1, dtype=_F32, device=t.data.device)])[grp]
        return (t.data.to(_F32) * sinv[:, None]).to(dtype)
    starts, ends = (v.tolist() for v in group_bounds(t.offsets, T))
    p16 = wgrad_column_offsets(t.offsets, T).tolist()
    out = torch.zeros(K, T, dtype=_F32, device=t.data.device)
    for g in range(G):
        m = ends[g] - starts[g]
        if m:
            sinv = t.scale_inv[g] if t.scaling == "tensor" else t.scale_inv[g][:, None]
            out[:, starts[g]:ends[g]] = t.data[:, p16[g]:p16[g] + m].to(_F32) * sinv
    return out.to(dtype)


def _nvfp4_grouped(x, offsets, scaling, rowwise, columnwise, scale_rows, group_rows=None, rht=False,
                   stochastic_rounding=False, seed=0, offset=0):
    T, K, G = _check_grouped(x, offsets)
    _check_scaling(scaling)
    if K % NVFP4.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {NVFP4.block_size}, got K={K}")
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    if stochastic_rounding:
        _check_u64(seed, "seed")
        _check_u64(offset, "offset")
    x32 = x.to(_F32).contiguous()
    dev = x.device
    starts, ends = (t.tolist() for t in group_bounds(offsets, T))
    last = ends[-1]
    tensor = scaling == "tensor"
    g_amax = torch.stack([_group_amax(x32[s:e]) for s, e in zip(starts, ends)]) if tensor else None
    e4m3 = torch.float8_e4m3fn
    row = (None,) * 5
    if rowwise:
        _, Cp = swizzled_size(1, K // NVFP4.block_size)
        sf = _padded_starts(offsets, T, SF_TILE_ROWS)
        sf_l = sf.tolist()
        qdata = torch.zeros(T, K // 2, dtype=torch.uint8, device=dev)
        scales = torch.zeros(scale_rows * Cp, dtype=torch.uint8, device=dev)
        u = sr_bits(seed, offset, T * K, device=dev).reshape(T, K) if stochastic_rounding else None
        if not tensor:
            r_amax = _abs_amax(x32, dim=1)
            r_amax[last:] = 0
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                q, sc, _, _ = _nvfp4_rows(x32[s:e], g_amax[g] if tensor else r_amax[s:e],
                                          None if u is None else u[s:e])
                qdata[s:e] = q
                scales[sf_l[g] * Cp:sf_l[g] * Cp + sc.numel()] = sc.view(torch.uint8)
        amax = g_amax if tensor else r_amax
        row = (qdata, scales.view(e4m3), sf[:-1].to(torch.int32), nvfp4_global_scale(amax)[1], amax)
    col = None
    if columnwise:
        W = wgrad_width(T, G)
        Rp = -(-K // SF_TILE_ROWS) * SF_TILE_ROWS
        cb = wgrad_scale_cols(T, G)
        p16 = wgrad_column_offsets(offsets, T).tolist()
        p64 = _padded_starts(offsets, T, 64)
        p64_l = p64.tolist()
        cq = torch.zeros(K, W // 2, dtype=torch.uint8, device=dev)
        cs = torch.zeros(Rp * cb, dtype=torch.uint8, device=dev)
        u = sr_bits(seed, offset, K * W, device=dev).reshape(K, W) if stochastic_rounding else None
        xts = []  # each group's [K, ceil(m/16)*16] block: x_g.T zero-padded, RHT'd over 16-chunks
        for s, e in zip(starts, ends):
            m16 = -(-(e - s) // 16) * 16
            xg = torch.zeros(m16, K, dtype=_F32, device=dev)
            xg[:e - s] = x32[s:e]
            xts.append(_rht16_columnwise_fp32(xg).to(torch.bfloat16).to(_F32) if rht else xg.t().contiguous())
        if tensor and not rht:
            camax = g_amax
        else:
            camax = torch.stack([_group_amax(xt.t(), None if tensor else 0, K) for xt in xts])
        for g, xt in enumerate(xts):
            m16 = xt.shape[1]
            if m16:
                uc = None if u is None else u[:, p16[g]:p16[g] + m16]
                q, sc, _, _ = _nvfp4_rows(xt, camax[g], uc)
                cq[:, p16[g] // 2:(p16[g] + m16) // 2] = q
                base = Rp * (p64_l[g] // 16)
                cs[base:base + sc.numel()] = sc.view(torch.uint8)
        col = GroupedNVFP4Tensor(cq, cs.view(e4m3), (p64[:-1] // 16).to(torch.int32),
                                 nvfp4_global_scale(camax)[1], camax, offsets, (T, K), scaling, x.dtype,
                                 layout="wgrad", rht=rht)
    return GroupedNVFP4Tensor(*row, offsets, (T, K), scaling, x.dtype, scale_rows=scale_rows,
                              columnwise=col, group_rows=group_rows)


def quantize_nvfp4_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                           rowwise: bool = True, columnwise: bool = False, rht: bool = False,
                           stochastic_rounding: bool = False, seed: int = 0,
                           offset: int = 0) -> GroupedNVFP4Tensor:
    """Grouped NVFP4 (NUMERICS 2, 3, 5, 8, 9), one loop iteration per group.

    Rowwise: qdata uint8 [T, K/2]; scales e4m3 [grouped_scale_rows(T, G) * Cp] with group g's
    scale rows at sf_offsets[g] = sum_{j<g} ceil(m_j/128)*128 (each group's block swizzled as
    one tensor of ceil(m_g/128)*128 rows; every other byte zero); alpha = S_dec and amax [G]
    ("tensor": per group) or [T] ("token").
    Columnwise (wgrad layout): qdata [K, W/2] (group g's tokens in columns [p_g, p_g + m_g),
    blocks of 16 along tokens, zero padding); scales grouped along K: group g's K x ceil(m_g/16)
    matrix padded to Cp_g = ceil(m_g/64)*4 columns and Rp = ceil(K/128)*128 rows, swizzled on
    its own at byte Rp * sf_offsets[g], sf_offsets[g] = sum_{j<g} ceil(m_j/64)*4; buffer
    Rp * wgrad_scale_cols(T, G) bytes. alpha/amax [G] ("tensor": the rowwise amax, or the amax
    of the transformed data with rht) or [G, K].
    rht (columnwise only): group g's tokens, zero-padded to m16 = ceil(m_g/16)*16, go through
    the 16-point RHT in 16-chunks from the group's first token (rht16_columnwise of the padded
    [m16, K] block), so all m16 columns p_g .. p_g + m16 - 1 hold transformed data (the
    padding columns too: they are what makes the transform cancel in dY_g^T X_g).
    stochastic_rounding: SR of every copy's E2M1 codes; element e of a copy (row-major index in
    [T, K] for the rowwise copy, in the [K, W] wgrad data for the columnwise copy) uses byte e
    of sr_bits(seed, offset, numel of that copy).
    """
    T, _, G = _check_grouped(x, offsets)
    return _nvfp4_grouped(x, offsets, scaling, rowwise, columnwise, grouped_scale_rows(T, G), rht=rht,
                          stochastic_rounding=stochastic_rounding, seed=seed, offset=offset)


def dequantize_nvfp4_grouped(t: GroupedNVFP4Tensor, dtype: torch.dtype = torch.float32, *,
                             padded: bool = False) -> torch.Tensor:
    """"rows": [T, K] (rows past the last group decode as 0); "wgrad": [K, T] (x.T, RHT-transformed
    if t.rht), or with padded=True the [K, W] wgrad data itself, every group's ceil(m_g/16)*16
    columns included (what a wgrad GEMM sums over; with rht the padding columns carry data)."""
    if padded and t.layout != "wgrad":
        raise ValueError("'padded' applies to a 'wgrad'-layout container")
    if not isinstance(t, GroupedNVFP4Tensor):
        raise TypeError(f"'t' must be a GroupedNVFP4Tensor, got {type(t).__name__}")
    if t.qdata is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise")
    T, K = t.shape
    G = t.offsets.numel()
    bs = NVFP4.block_size
    starts, ends = (v.tolist() for v in group_bounds(t.offsets, T))
    sf = t.sf_offsets.tolist()
    raw = t.scales.view(torch.uint8)
    if t.layout == "rows":
        out = torch.zeros(T, K, dtype=_F32, device=t.qdata.device)
        _, Cp = swizzled_size(1, K // bs)
        for g in range(G):
            s, e = starts[g], ends[g]
            if e > s:
                Rp, _ = swizzled_size(e - s, K // bs)
                sc = unswizzle_scales(raw[sf[g] * Cp:(sf[g] + Rp) * Cp], e - s, K // bs).view(torch.float8_e4m3fn)
                vals = e2m1_decode(unpack_fp4(t.qdata[s:e])).reshape(e - s, K // bs, bs) * sc.to(_F32)[..., None]
                alpha = t.alpha[g] if t.scaling == "tensor" else t.alpha[s:e, None, None]
                out[s:e] = (vals * alpha).reshape(e - s, K)
        return out.to(dtype)
    out = torch.zeros(K, t.qdata.shape[1] * 2 if padded else T, dtype=_F32, device=t.qdata.device)
    p16 = wgrad_column_offsets(t.offsets, T).tolist()
    Rp = -(-K // SF_TILE_ROWS) * SF_TILE_ROWS
    for g in range(G):
        s, e = starts[g], ends[g]
        m = e - s
        if m:
            m16 = -(-m // 16) * 16
            _, Cp = swizzled_size(K, m16 // bs)
            sc = unswizzle_scales(raw[Rp * sf[g]:Rp * (sf[g] + Cp)], K, m16 // bs).view(torch.float8_e4m3fn)
            codes = unpack_fp4(t.qdata[:, p16[g] // 2:(p16[g] + m16) // 2])
            vals = e2m1_decode(codes).reshape(K, m16 // bs, bs) * sc.to(_F32)[..., None]
            alpha = t.alpha[g] if t.scaling == "tensor" else t.alpha[g][:, None, None]
            if padded:
                out[:, p16[g]:p16[g] + m16] = (vals * alpha).reshape(K, m16)
            else:
                out[:, s:e] = (vals * alpha).reshape(K, m16)[:, :m]
    return out.to(dtype)


def quantize_mxfp8_grouped(x: torch.Tensor, offsets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Grouped MXFP8 rowwise (NUMERICS 6, 5): (data e4m3 [T, K], scales uint8 e8m0
    [grouped_scale_rows(T, G) * Cp] grouped along M like NVFP4 (sf_offsets), sf_offsets int32 [G]).
    Rows past the last group: data 0, no scale rows."""
    T, K, G = _check_grouped(x, offsets)
    if K % MXFP8.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {MXFP8.block_size}, got K={K}")
    x32 = x.to(_F32).contiguous()
    starts, ends = (t.tolist() for t in group_bounds(offsets, T))
    _, Cp = swizzled_size(1, K // MXFP8.block_size)
    sf = _padded_starts(offsets, T, SF_TILE_ROWS)
    sf_l = sf.tolist()
    data = torch.zeros(T, K, dtype=torch.uint8, device=x.device)
    scales = torch.zeros(grouped_scale_rows(T, G) * Cp, dtype=torch.uint8, device=x.device)
    for g, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            d, sc = _mxfp8_rows(x32[s:e])
            data[s:e] = d.view(torch.uint8)
            scales[sf_l[g] * Cp:sf_l[g] * Cp + sc.numel()] = sc
    return data.view(torch.float8_e4m3fn), scales, sf[:-1].to(torch.int32)


def _stacked_offsets(w: torch.Tensor) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or w.dim() != 3 or w.numel() == 0:
        raise ValueError(f"'w' must be a non-empty 3-D tensor [E, N, K], got "
                         f"{tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
    E, N, _ = w.shape
    return (torch.arange(1, E + 1, dtype=torch.int32, device=w.device) * N)


def quantize_fp8_stacked(w: torch.Tensor, *, scaling: str = "tensor") -> GroupedFP8Tensor:
    """Stacked expert weights w [E, N, K] as E independent FP8 tensors: data [E*N, K]
    (view as [E, N, K]), scale_inv [E] ("tensor") or [E*N] ("token": per output channel)."""
    offsets = _stacked_offsets(w)
    E, N, K = w.shape
    t = quantize_fp8_grouped(w.reshape(E * N, K), offsets, scaling=scaling)
    t.group_rows = N
    return t


def quantize_nvfp4_stacked(w: torch.Tensor, *, scaling: str = "tensor") -> GroupedNVFP4Tensor:
    """Stacked expert weights w [E, N, K] as E independent NVFP4 tensors: qdata [E*N, K/2],
    scales batched (expert e's Rp x Cp swizzled block at byte e * Rp * Cp, NUMERICS 5), alpha/amax
    [E] ("tensor") or [E*N] ("token")."""
    offsets = _stacked_offsets(w)
    E, N, K = w.shape
    Rp = -(-N // SF_TILE_ROWS) * SF_TILE_ROWS
    return _nvfp4_grouped(w.reshape(E * N, K), offsets, scaling, True, False, E * Rp, group_rows=N)


# ---------------------------------------------------------------------------
# Section 10: residual NVFP4. scalemm's layout: the K_e residual channels ride AFTER the main K,
#   x' = [Q(x) | Q(r[:, channels]) | 0 ...],  w' = [w | w[:, channels] | 0 ...],
# K_e padded with zero columns to a multiple of 16 (one NVFP4 block). The residual is quantized
# with the SAME global scale (amax) as x, so one GEMM with one alpha computes
# Q(x) W^T + Q(r_e) W_e^T. Block scales of x' are those of x followed by those of the residual.
# ---------------------------------------------------------------------------

def residual_width(num_channels: int) -> int:
    """K_e padded to a multiple of 16."""
    return -(-num_channels // NVFP4.block_size) * NVFP4.block_size


def _channel_index(channels, K: int, device) -> torch.Tensor:
    idx = torch.as_tensor(channels, device=device)
    if idx.dtype not in (torch.int32, torch.int64) or idx.dim() != 1 or idx.numel() == 0:
        raise ValueError("'channels' must be a non-empty 1-D sequence or tensor of integer channel indices")
    if idx.device.type == "cpu" and (bool((idx < 0).any()) or bool((idx >= K).any())):
        raise ValueError(f"'channels' must lie in [0, {K})")
    return idx.to(torch.int64)


def prepare_residual_weight(w: torch.Tensor, channels) -> torch.Tensor:
    """w [N, K] -> w' [N, K + residual_width(K_e)] = [w | w[:, channels] | 0] (w's dtype)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError("'w' must be a 2-D tensor [N, K]")
    N, K = w.shape
    idx = _channel_index(channels, K, w.device)
    ke = residual_width(idx.numel())
    extra = torch.zeros(N, ke, dtype=w.dtype, device=w.device)
    extra[:, :idx.numel()] = w[:, idx]
    return torch.cat([w, extra], dim=1)


def _residual_parts(x: torch.Tensor, channels, scaling: str, quantize):
    """(Q(x), r_e, padded width): the residual r_e = (x - dequant(Q(x)))[:, channels] in fp32,
    zero-padded to residual_width columns."""
    M, K = x.shape
    idx = _channel_index(channels, K, x.device)
    q = quantize(x, scaling=scaling)
    r = x.to(_F32) - dequantize_nvfp4(q, _F32)
    ke = residual_width(idx.numel())
    r_e = torch.zeros(M, ke, dtype=_F32, device=x.device)
    r_e[:, :idx.numel()] = r[:, idx]
    return q, r_e, ke


def _residual_combine(q: NVFP4Tensor, q2: NVFP4Tensor, M: int, K: int, ke: int, orig_dtype) -> NVFP4Tensor:
    bs = NVFP4.block_size
    s1 = unswizzle_scales(q.scales, M, K // bs)
    s2 = unswizzle_scales(q2.scales, M, ke // bs)
    scales = swizzle_scales(torch.cat([s1, s2], dim=1))
    return NVFP4Tensor(torch.cat([q.qdata, q2.qdata], dim=1), scales, q.alpha, q.amax, (M, K + ke),
                       q.scaling, orig_dtype)


def quantize_nvfp4_residual(x: torch.Tensor, channels, *, scaling: str = "tensor") -> NVFP4Tensor:
    """x [M, K] -> NVFP4Tensor of shape (M, K + residual_width(K_e)): [Q(x) | Q(r[:, channels])]
    with r = x - dequant(Q(x)) (fp32) quantized with x's own amax (same alpha). Multiply it with
    prepare_residual_weight(w, channels) quantized as usual."""
    _check_matrix(x, "x")
    M, K = x.shape
    q, r_e, ke = _residual_parts(x, channels, scaling, quantize_nvfp4)
    q2 = quantize_nvfp4(r_e, scaling=scaling, amax=q.amax)
    return _residual_combine(q, q2, M, K, ke, x.dtype)
