"""The pure-torch reference of scalemm's numerics: docs/numerics.md in code, the oracle only.

Every CUDA quantization kernel must match these functions bit for bit (FP4 codes,
e4m3/e8m0 scale bytes including the zeroed padding, global/row scales); the GEMMs are
compared with ``gemm_reference`` on the exact dequantized operands. Everything here is
plain torch and runs unchanged on CPU and CUDA tensors. Production code never sizes or lays
out buffers with it (scalemm.formats.layout owns those facts); it is the CPU implementation
of the ops.

Modules: numerics (e2m1 / e4m3 / e8m0, RHT, Philox and SR bits), quantize (single-tensor NVFP4,
FP8, MXFP8), grouped (grouped, stacked and residual), gemm (gemm_reference,
grouped_gemm_reference), activation (SwiGLU forward and backward: fp32 formulas, one rounding; the kernels agree to
one unit in the last place, not bit for bit).

Arithmetic is fp32: every torch fp32 op rounds to fp32 nearest-even, which is fl().
Two torch habits would break that and are avoided on purpose:
- ``t / python_scalar`` is computed as ``t * (1 / scalar)`` on CUDA (two roundings), so
  every division here is tensor / tensor (``_div``);
- torch's float -> float8_e4m3fn cast has not always saturated (older releases give NaN
  for |x| > 464; saturation is not a documented guarantee) and keeps the sign of NaN, so
  ``e4m3_satfinite`` clamps first and writes NaN as 0x7F.
fp32 subnormals are kept (no flush-to-zero), like torch on both devices; kernels must not
be built with FTZ either (S_dec = 1 / FLT_MAX is subnormal).

Decisions docs/numerics.md leaves open, fixed here (the kernels match them):
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
- FP8 delayed scaling ("tensor" only): a given amax (0-d, or [G] per group) replaces x's own in
  the scale above (values beyond it saturate to +-448: e4m3_satfinite); amax_out receives the
  NaN-propagating max|x| (per group; 0 for an empty group).
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

# format descriptors, constants and containers, reachable here as before the split
from ..formats import (E2M1_NAN_CODE, E4M3_MAX, E4M3_NAN_BYTE, E8M0_MAX_FINITE, E8M0_NAN, FLT_MAX, FP4_MAX,  # noqa: F401
                       INPUT_DTYPES, MXFP8, NVFP4, NVFP4_GLOBAL_MAX, RHT_SIGN_MASK, RHT_SIZE, SCALINGS, SF_TILE_COLS,
                       SF_TILE_ROWS, FP8Tensor, GroupedFP8Tensor, GroupedNVFP4Tensor, MXFP8Tensor, NVFP4Tensor)
from ..formats.layout import (group_bounds, grouped_scale_rows, sf_offsets, swizzle_offset, swizzle_scales,
                              swizzled_size, unswizzle_scales, wgrad_scale_cols, wgrad_width)
from ..formats.layout import wgrad_column_starts as wgrad_column_offsets
from .activation import swiglu, swiglu_backward
from .gemm import gemm_reference, grouped_gemm_reference
from .grouped import (dequantize_fp8_grouped, dequantize_nvfp4_grouped, prepare_residual_weight, quantize_fp8_grouped,
                      quantize_fp8_stacked, quantize_mxfp8_grouped, quantize_nvfp4_grouped, quantize_nvfp4_residual,
                      quantize_nvfp4_stacked, residual_width)
# (the underscored helpers are re-exported for the tests that check them one by one)
from .numerics import (_e2m1_encode_stochastic, _fwht16, _mulhilo32, _philox4x32_10_block, _rht16_columnwise_fp32,
                       _rht_signs, _sr_step, e2m1_decode, e2m1_encode, e4m3_satfinite, e8m0_decode, e8m0_scale_ceil,
                       pack_fp4, philox4x32_10, rht16_columnwise, sr_bits, unpack_fp4)
from .quantize import (advance_amax_history, dequantize_fp8, dequantize_mxfp8, dequantize_nvfp4, fp8_scale_inv,
                       nvfp4_global_scale, quantize_fp8, quantize_mxfp8, quantize_nvfp4)

__all__ = [
    "e2m1_encode", "e2m1_decode", "pack_fp4", "unpack_fp4", "e4m3_satfinite",
    "e8m0_scale_ceil", "e8m0_decode",
    "swizzle_offset", "swizzled_size", "swizzle_scales", "unswizzle_scales",
    "nvfp4_global_scale", "quantize_nvfp4", "dequantize_nvfp4",
    "quantize_fp8", "dequantize_fp8", "fp8_scale_inv", "advance_amax_history", "quantize_mxfp8", "dequantize_mxfp8",
    "rht16_columnwise", "philox4x32_10", "sr_bits", "gemm_reference", "grouped_gemm_reference",
    "group_bounds", "sf_offsets", "wgrad_column_offsets", "wgrad_width", "grouped_scale_rows",
    "wgrad_scale_cols", "quantize_fp8_grouped", "dequantize_fp8_grouped", "quantize_nvfp4_grouped",
    "dequantize_nvfp4_grouped", "quantize_mxfp8_grouped", "quantize_fp8_stacked",
    "quantize_nvfp4_stacked", "residual_width", "prepare_residual_weight", "quantize_nvfp4_residual",
    "swiglu", "swiglu_backward",
]
