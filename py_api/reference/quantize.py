"""Single-tensor quantization, the reference: NVFP4 (docs/numerics.md sections 2, 3, 8, 9), FP8
(section 7) and MXFP8 (section 6). Vectorized torch; runs unchanged on CPU and CUDA tensors.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..formats import E4M3_MAX, E8M0_NAN, FLT_MAX, MXFP8, NVFP4, NVFP4_GLOBAL_MAX
from ..formats.base import check_amax, check_amax_used, check_scaling, check_u64
from ..formats.fp8 import FP8Tensor, dequantize_fp8
from ..formats.layout import swizzle_scales
from ..formats.mxfp8 import MXFP8Tensor, dequantize_mxfp8, e8m0_pow2
from ..formats.nvfp4 import NVFP4Tensor, dequantize_nvfp4, pack_fp4
from .numerics import (_F32, _ONE_OVER_448, _ONE_SIXTH, _abs_amax, _as_f32, _check_matrix, _div,
                       _e2m1_encode_stochastic, e2m1_encode, e4m3_satfinite, e8m0_scale_ceil,
                       rht16_columnwise, sr_bits)

__all__ = ["nvfp4_global_scale", "quantize_nvfp4", "dequantize_nvfp4", "quantize_fp8", "dequantize_fp8",
           "fp8_scale_inv", "advance_amax_history", "quantize_mxfp8", "dequantize_mxfp8"]


def _check_copies(rowwise: bool, columnwise: bool) -> None:
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")


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
    xb = x.reshape(R, NVFP4.scale_cols(C), NVFP4.block_size)
    block_amax = _abs_amax(xb, dim=-1)  # [R, C/16]
    s = e4m3_satfinite(block_amax * (s_enc * _ONE_SIXTH))
    mult = _div(1.0, s.to(_F32) * s_dec_b).clamp(max=FLT_MAX)  # 1/0 -> FLT_MAX, NaN stays
    y = xb * mult[..., None]
    if u is not None:
        codes = _e2m1_encode_stochastic(y, u.reshape(y.shape))
    else:
        codes = e2m1_encode(y)
    return pack_fp4(codes.reshape(R, C)), swizzle_scales(s), s_dec, amax


def quantize_nvfp4(x: torch.Tensor, *, scaling: str = "tensor",
                   amax: Optional[torch.Tensor] = None, rowwise: bool = True,
                   columnwise: bool = False, rht: bool = False,
                   stochastic_rounding: bool = False, seed: int = 0,
                   offset: int = 0) -> NVFP4Tensor:
    """NVFP4 quantization of x (docs/numerics.md sections 2, 3, 8, 9).

    x: bf16/fp16/fp32 [M, K], K % 16 == 0 (and M % 16 == 0 when columnwise); any strides.
    scaling: "tensor" (one fp32 global scale) or "token" (one per row of each copy).
    amax: optional amax (fp32, bf16 or fp16) used as is for the rowwise copy (0-d for "tensor",
      [M] for "token"); also for the columnwise copy when scaling="tensor" and rht=False. Else
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
    check_scaling(scaling)
    M, K = x.shape
    if K % NVFP4.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {NVFP4.block_size}, got K={K}")
    _check_copies(rowwise, columnwise)
    if columnwise and M % NVFP4.block_size != 0:
        raise ValueError(f"'x' M must be a multiple of {NVFP4.block_size} for the columnwise "
                         f"copy, got M={M}")
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    if stochastic_rounding:
        check_u64(seed, "seed")
        check_u64(offset, "offset")
    shared_amax = scaling == "tensor" and not rht  # the columnwise copy reuses the amax
    if amax is not None:
        check_amax_used(scaling, rowwise, columnwise, rht)
        check_amax(amax, scaling, M, x.device)
        amax = _as_f32(amax, "amax")

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


# ---------------------------------------------------------------------------
# Section 7: FP8 (e4m3) per-tensor / per-token current scaling
# ---------------------------------------------------------------------------

def _fp8_scale(amax: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(scale, scale_inv) fp32 from amax: fl(448 / amax); 0/Inf/NaN amax -> 1; Inf -> FLT_MAX."""
    scale = _div(E4M3_MAX, amax).clamp(max=FLT_MAX)
    degenerate = (amax == 0) | torch.isinf(amax) | torch.isnan(amax)
    scale = torch.where(degenerate, torch.ones_like(scale), scale)
    return scale, _div(1.0, scale)


def fp8_scale_inv(amax: torch.Tensor) -> torch.Tensor:
    """The FP8 decode scale (scale_inv) of an amax: fl(1 / fl(448 / amax)), 1 for amax 0, Inf or NaN."""
    return _fp8_scale(amax.to(_F32))[1]


def _fp8_rows(x: torch.Tensor, scaling: str, amax: Optional[torch.Tensor] = None):
    if amax is None:
        amax = _abs_amax(x) if scaling == "tensor" else _abs_amax(x, dim=1)
    scale, scale_inv = _fp8_scale(amax)
    scale_b = scale if scaling == "tensor" else scale[:, None]
    return e4m3_satfinite(x * scale_b), scale_inv


def quantize_fp8(x: torch.Tensor, *, scaling: str = "tensor", rowwise: bool = True,
                 columnwise: bool = False, amax: Optional[torch.Tensor] = None,
                 amax_out: Optional[torch.Tensor] = None) -> FP8Tensor:
    """FP8 e4m3 current scaling, or delayed scaling given `amax` (docs/numerics.md section 7).

    x: bf16/fp16/fp32 [M, K], any strides. scaling "tensor": one amax over x (both copies
    share it); "token": per row of x for the rowwise copy, per column of x for the
    columnwise one. data = e4m3_satfinite(fl(x * scale)), scale_inv = fl(1 / scale).
    Delayed scaling ("tensor" only): a given 0-d `amax` replaces x's own (values beyond it
    saturate to +-448); `amax_out` (0-d fp32) receives max|x| (NaN if x holds one).
    Returns an FP8Tensor (data float8_e4m3fn [M, K], scale_inv fp32 0-d or [M]);
    rowwise=False leaves data/scale_inv None, columnwise=True sets `.columnwise` (x.T).
    """
    _check_matrix(x, "x")
    check_scaling(scaling)
    _check_copies(rowwise, columnwise)
    if (amax is not None or amax_out is not None) and scaling != "tensor":
        raise ValueError("'amax' / 'amax_out' (delayed scaling) take scaling='tensor'")
    x32 = x.to(_F32).contiguous()
    if amax_out is not None:
        amax_out.copy_(_abs_amax(x32))
    given = None if amax is None else amax.to(_F32)
    data, scale_inv = _fp8_rows(x32, scaling, given) if rowwise else (None, None)
    col = None
    if columnwise:
        col = FP8Tensor(*_fp8_rows(x32.t().contiguous(), scaling, given), scaling, x.dtype)
    return FP8Tensor(data, scale_inv, scaling, x.dtype, columnwise=col)


def advance_amax_history(history: torch.Tensor, amax: torch.Tensor, next_amax: torch.Tensor,
                         used: Optional[torch.Tensor] = None) -> None:
    """FP8 delayed scaling's history step, in place (docs/training.md): history (fp32 [H] or [H, G], row 0
    newest) rolled one row down with amax ([] or [G], the amax a quantization just measured) on top, the
    oldest row dropped; next_amax (amax's shape) = the new history's max over its rows (NaN where a row holds
    NaN, as torch.amax), the amax the next quantization scales from; used, if given, receives next_amax's value
    from before the step (the amax the quantization that measured `amax` scaled from)."""
    if used is not None:
        used.copy_(next_amax)
    history.copy_(torch.cat((amax[None], history[:-1])))
    next_amax.copy_(history.amax(0))


# ---------------------------------------------------------------------------
# Section 6: MXFP8 (e4m3 data, e8m0 scale per 32 elements)
# ---------------------------------------------------------------------------

def _mxfp8_rows(x: torch.Tensor):
    """fp32 contiguous x [R, C] (C % 32 == 0) -> (data e4m3 [R, C], swizzled e8m0 bytes)."""
    R, C = x.shape
    xb = x.reshape(R, MXFP8.scale_cols(C), MXFP8.block_size)
    b = e8m0_scale_ceil(_abs_amax(xb, dim=-1) * _ONE_OVER_448)  # uint8 [R, C/32]
    b32 = b.to(torch.int32)
    encode = e8m0_pow2((254 - b32).clamp(min=0))  # 2^(127 - b), exact
    encode = torch.where(b32 == E8M0_NAN, torch.full_like(encode, float("nan")), encode)
    data = e4m3_satfinite(xb * encode[..., None]).reshape(R, C)
    return data, swizzle_scales(b)


def quantize_mxfp8(x: torch.Tensor, *, rowwise: bool = True,
                   columnwise: bool = False) -> MXFP8Tensor:
    """MXFP8 quantization (docs/numerics.md section 6, RCEIL scales).

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
    _check_copies(rowwise, columnwise)
    if columnwise and M % bs != 0:
        raise ValueError(f"'x' M must be a multiple of {bs} for the columnwise copy, got M={M}")
    x32 = x.to(_F32).contiguous()
    data, scales = _mxfp8_rows(x32) if rowwise else (None, None)
    col = None
    if columnwise:
        col = MXFP8Tensor(*_mxfp8_rows(x32.t().contiguous()), (K, M), x.dtype)
    return MXFP8Tensor(data, scales, (M, K), x.dtype, columnwise=col)
