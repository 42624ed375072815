// NVFP4 operand decoding for Hopper's bf16 tensor cores (docs/numerics.md sections 1, 4).
//
// Hopper has no FP4 tensor cores and no e2m1 convert instruction. value(code) * s (s the e4m3
// block scale) has at most 6 significant bits and lies in [2^-10, 2688], so it is exact in bf16;
// a product of two bf16 values is exact in fp32. Dequantizing in registers and feeding bf16
// wgmma therefore reproduces the block-scaled product up to fp32 accumulation order.
//
// How one element is decoded, in two exact steps (the MMA type T is bf16, or fp16 when the
// activations are fp16: value * s is exact in fp16 too, range [2^-10, 2688], <= 6 bits):
//  1. The 3 magnitude bits of a code go to the low exponent bits and the top mantissa bit of
//     T (bf16 bits [8:6], fp16 bits [11:9]) and its sign to bit 15. Read as T that is
//     value(code) * 2^-(bias - 1) (2^-126 for bf16, 2^-14 for fp16); code 1, value 0.5, is a
//     subnormal, which both types' multiplies keep.
//  2. One T x2 multiply by X = s * 2^(bias - 1 - kDecodeShift) gives value * s * 2^-kDecodeShift.
//     X must stay finite for s up to 448 and the product exact: kDecodeShift in [7, 118] for
//     bf16 and [7, 9] for fp16; 8 serves both. The accumulator is multiplied back by
//     2^kDecodeShift after the mainloop, which is exact in fp32.
// A NaN block scale (e4m3 0x7F/0xFF, written for blocks holding a NaN) stays NaN.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutlass/numeric_types.h"

namespace scalemm::sm90 {

constexpr int kDecodeShift = 8;
constexpr float kDecodeUnscale = 256.0f;  // 2^kDecodeShift

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, cutlass::half_t>;

// Two e2m1 codes -> T x2 of value * 2^-(bias - 1): the codes sit at bits [3:0] (low half, the
// even element) and [19:16] (high half) of `x`; every other bit of `x` is ignored.
template <class T>
__device__ __forceinline__ uint32_t e2m1x2_tiny(uint32_t x) {
  if constexpr (kIsHalf<T>) {
    return ((x & 0x00070007u) << 9) | ((x & 0x00080008u) << 12);
  } else {
    // (y * 0x1040) puts copies of each code at bit 6 and bit 12; the mask keeps the magnitude
    // from the first copy (bits 8:6) and the sign from the second (bit 15).
    return ((x & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
  }
}

// e2m1x2_tiny for an `x` whose bits outside [3:0] and [19:16] are already zero (one mask fewer).
template <class T>
__device__ __forceinline__ uint32_t e2m1x2_tiny_clean(uint32_t x) {
  if constexpr (kIsHalf<T>) {
    return ((x & 0x00070007u) << 9) | ((x & 0x00080008u) << 12);
  } else {
    return (x * 0x1040u) & 0x81C081C0u;  // the two copies of each code cannot overlap or carry
  }
}

// PTX prmt.b32 in its default mode: result byte i is byte (sel nibble i & 7) of {b, a} (bytes 0-3
// from a, 4-7 from b), or, where the nibble's bit 3 is set, that byte's sign bit replicated (0x00
// or 0xFF). CUDA's __byte_perm is documented to read only bits 2:0 of each nibble (nvcc masks the
// selector), so code that needs the sign replication calls this instead.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Four e4m3 block scales (byte i = scale of k-block i) -> four T x2 pairs (X, X). cvt.e4m3x2 ->
// f16x2 is exact for every byte (subnormals and NaN included); the power-of-two multiplies are
// exact, and X has at most 4 significant bits, so for bf16 its bits are the high half of fp32's.
template <class T>
__device__ __forceinline__ void e4m3x4_to_scale_pairs(uint32_t bytes, uint32_t (&pairs)[4]) {
  uint32_t h01, h23;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(h01), "=r"(h23) : "r"(bytes));
  if constexpr (kIsHalf<T>) {
    static_assert(14 - kDecodeShift == 6, "update the fp16 scale factor with kDecodeShift");
    const __half2 up = __float2half2_rn(64.0f);  // 2^(14 - kDecodeShift): 448 * 64 < 65504
    __half2 a = __hmul2(*reinterpret_cast<const __half2*>(&h01), up);
    __half2 b = __hmul2(*reinterpret_cast<const __half2*>(&h23), up);
    const uint32_t ua = *reinterpret_cast<const uint32_t*>(&a), ub = *reinterpret_cast<const uint32_t*>(&b);
    pairs[0] = __byte_perm(ua, ua, 0x1010);
    pairs[1] = __byte_perm(ua, ua, 0x3232);
    pairs[2] = __byte_perm(ub, ub, 0x1010);
    pairs[3] = __byte_perm(ub, ub, 0x3232);
  } else {
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
}

template <class T>
__device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
  if constexpr (kIsHalf<T>) {
    __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// value(code) x s exactly in bf16 (no global scale) for one word of packed codes (8 elements of one 16-element block,
// even ones in the low nibbles) and that block's e4m3 scale byte `scale` (bits 7:0): the bf16 rows the W4A4 GEMMs
// take, written by the decode pass (scalemm/nvfp4_dequant.cuh) and beside the rowwise copy by the quantizers
// (scalemm/quant.cuh: exact_row). Two exact steps as above, value * s * 2^-kDecodeShift, then * 2^kDecodeShift.
__device__ __forceinline__ uint4 exact_bf16_word(uint32_t word, uint32_t scale) {
  using T = cutlass::bfloat16_t;
  static_assert(kDecodeShift == 8, "update `up` with kDecodeShift");
  const uint32_t up = 0x43804380u;  // bf16x2 (256, 256) = 2^kDecodeShift
  uint32_t pairs[4];
  e4m3x4_to_scale_pairs<T>(scale, pairs);
  uint32_t o[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {  // byte b: elements 2b (low nibble) and 2b + 1
    const uint32_t t = word >> (8 * b);
    const uint32_t x = (t & 0xFu) | ((t & 0xF0u) << 12);
    o[b] = mul2<T>(mul2<T>(e2m1x2_tiny<T>(x), pairs[0]), up);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Byte offset, inside one 512-byte atom of the 128x4 swizzled scale layout (docs/numerics.md
// section 5), of the 4 scales of row r (0 <= r < 128): they are consecutive bytes.
__device__ __forceinline__ int scale_atom_row_offset(int r) { return (r & 31) * 16 + (r >> 5) * 4; }

}  // namespace scalemm::sm90
