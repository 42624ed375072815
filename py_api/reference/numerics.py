"""The numeric primitives of the reference: e2m1 / e4m3 / e8m0 encodings, the 16-point RHT,
Philox4x32-10 bits and stochastic rounding (docs/numerics.md sections 1, 6, 8, 9).

The decodes (e2m1_decode, e8m0_decode) and the FP4 packing are facts of their formats and live in
scalemm.formats.nvfp4 / .mxfp8; they are re-exported here.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..formats import E2M1_NAN_CODE, E4M3_MAX, E4M3_NAN_BYTE, E8M0_MAX_FINITE, E8M0_NAN, FP4_MAX, RHT_SIGN_MASK, \
    RHT_SIZE
from ..formats.base import check_input, check_last_dim, check_u64
from ..formats.mxfp8 import e8m0_decode, e8m0_pow2
from ..formats.nvfp4 import e2m1_decode, pack_fp4, unpack_fp4

__all__ = ["e2m1_encode", "e2m1_decode", "pack_fp4", "unpack_fp4", "e4m3_satfinite", "e8m0_scale_ceil",
           "e8m0_decode", "e8m0_pow2", "rht16_columnwise", "philox4x32_10", "sr_bits"]

_F32 = torch.float32


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
    check_input(x, name)
    if x.dim() != 2:
        raise ValueError(f"'{name}' must be 2-D [M, K], got shape {tuple(x.shape)}")
    check_last_dim(x, name)


def _abs_amax(x: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """NaN-propagating max of |x| (over everything, or along `dim`), fp32. The max over an empty
    set (an empty x, an empty group) is 0, which gives S_enc = 1 / scale = 1."""
    a = x.abs()
    if a.numel() == 0:
        shape = [] if dim is None else [n for d, n in enumerate(a.shape) if d != dim % a.dim()]
        return torch.zeros(shape, dtype=_F32, device=x.device)
    return a.amax() if dim is None else a.amax(dim=dim)


# ---------------------------------------------------------------------------
# Section 1: E2M1 RNE encoding
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
# Section 9: Philox4x32-10 random bits and stochastic rounding
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
    check_u64(seed, "seed")
    check_u64(offset, "offset")
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
