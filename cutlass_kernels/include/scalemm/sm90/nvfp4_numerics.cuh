// NVFP4 operand decoding for Hopper's bf16 tensor cores (docs/numerics.md sections 1, 4).
//
// Hopper has no FP4 tensor cores and no e2m1 convert instruction. value(code) * s (s the e4m3
// block scale) has at most 6 significant bits and lies in [2^-10, 2688], so it is exact in bf16;
// a product of two bf16 values is exact in fp32. Dequantizing in registers and feeding bf16
// wgmma therefore reproduces the block-scaled product up to fp32 accumulation order.
//
// How one element is decoded, in two exact steps:
//  1. The 3 magnitude bits of a code go to bf16 bits [8:6] and its sign to bit 15. Read as bf16
//     that is value(code) * 2^-126 (code 1, value 0.5, is the subnormal 2^-127; the exponent
//     field holds the e2m1 exponent, the top mantissa bit its mantissa bit).
//  2. One bf16x2 multiply by X = s * 2^(126 - kDecodeShift) gives value * s * 2^-kDecodeShift.
//     X must stay finite for s up to 448 (so kDecodeShift >= 7) and the product normal (so
//     kDecodeShift <= 118); the accumulator is multiplied back by 2^kDecodeShift after the
//     mainloop, which is exact in fp32.
// A NaN block scale (e4m3 0x7F/0xFF, written for blocks holding a NaN) stays NaN.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace scalemm::sm90 {

constexpr int kDecodeShift = 8;
constexpr float kDecodeUnscale = 256.0f;  // 2^kDecodeShift

// Two e2m1 codes -> bf16x2 of value * 2^-126: the codes sit at bits [3:0] (low half, the
// even element) and [19:16] (high half) of `x`; every other bit of `x` is ignored.
// (y * 0x1040) puts copies of each code at bit 6 and bit 12; the mask keeps the magnitude
// from the first copy (bits 8:6) and the sign from the second (bit 15).
__device__ __forceinline__ uint32_t e2m1x2_tiny_bf16x2(uint32_t x) {
  return ((x & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
}

// Four e4m3 block scales (one byte each, byte i = scale of k-block i) -> four bf16x2 pairs
// (X, X), X = s * 2^(126 - kDecodeShift). cvt.e4m3x2 -> f16x2 is exact for every byte
// (subnormals and NaN included), f16 -> f32 and the power-of-two multiply are exact, and X has
// at most 4 significant bits, so its bf16 bits are the high half of its fp32 bits.
__device__ __forceinline__ void e4m3x4_to_scale_pairs(uint32_t bytes, uint32_t (&pairs)[4]) {
  uint32_t h01, h23;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(h01), "=r"(h23) : "r"(bytes));
  constexpr float kUp = 0x1p118f;  // 2^(126 - kDecodeShift)
  static_assert(126 - kDecodeShift == 118, "update kUp with kDecodeShift");
  const __half2 a = *reinterpret_cast<const __half2*>(&h01);
  const __half2 b = *reinterpret_cast<const __half2*>(&h23);
  const float f[4] = {__low2float(a), __high2float(a), __low2float(b), __high2float(b)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t u = __float_as_uint(f[i] * kUp);
    pairs[i] = __byte_perm(u, u, 0x3232);
  }
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Byte offset, inside one 512-byte atom of the 128x4 swizzled scale layout (docs/numerics.md
// section 5), of the 4 scales of row r (0 <= r < 128): they are consecutive bytes.
__device__ __forceinline__ int scale_atom_row_offset(int r) { return (r & 31) * 16 + (r >> 5) * 4; }

}  // namespace scalemm::sm90
