// Device-side numerics of scalemm's quantizers, bit for bit as docs/numerics.md and
// py_api/reference/ define them. Everything here is a small __forceinline__ function so
// that the kernels in quant.cuh read as the spec does.
//
// Rules kept throughout (they are what makes the kernels bit-exact with the reference):
// - every product/sum that the spec rounds to fp32 uses __fmul_rn/__fadd_rn, which nvcc
//   never contracts into an FMA;
// - reciprocals are IEEE round-to-nearest (__frcp_rn, __fdiv_rn), never rcp.approx;
// - maxima propagate NaN (PTX max.NaN), unlike fmaxf.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace scalemm {
namespace quant {

constexpr float kFltMax = 3.40282346638528859811704183484516925e+38f;
constexpr float kOneSixth = 1.0f / 6.0f;  // fl(1/6): constant-folded with IEEE RNE
constexpr float kOne448 = 1.0f / 448.0f;  // fl(1/448)
constexpr float kNvfp4GlobalMax = 2688.0f;  // 6 * 448
constexpr float kE4m3Max = 448.0f;
constexpr uint32_t kRhtSignMask = 0xD7E8u;  // bit k set: s_k = -1 (NUMERICS section 8)
constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------
// input element types: raw 16-byte words <-> fp32
// ---------------------------------------------------------------------------

// Eight consecutive input elements as raw 16-byte words (one for 16-bit types, two for fp32).
template <typename T>
struct Raw8 {
  static constexpr int kWords = sizeof(T) / 2;
  uint4 w[kWords];
};

template <typename T>
__device__ __forceinline__ void load8(Raw8<T>& r, const T* p, bool ok) {
#pragma unroll
  for (int i = 0; i < Raw8<T>::kWords; ++i)
    r.w[i] = ok ? __ldg(reinterpret_cast<const uint4*>(p) + i) : make_uint4(0, 0, 0, 0);
}

template <typename T>
__device__ __forceinline__ void to_float8(const Raw8<T>& r, float (&f)[8]) {
  if constexpr (sizeof(T) == 4) {
    const float* s = reinterpret_cast<const float*>(r.w);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = s[i];
  } else {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(r.w);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        f[2 * i] = __uint_as_float(u[i] << 16);  // bf16 -> fp32 is a shift, exact
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      } else {
        __half2 h = *reinterpret_cast<const __half2*>(&u[i]);
        float2 g = __half22float2(h);
        f[2 * i] = g.x;
        f[2 * i + 1] = g.y;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// maxima (NaN-propagating), e4m3, e2m1
// ---------------------------------------------------------------------------

__device__ __forceinline__ float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

template <int N>
__device__ __forceinline__ float absmax_nan(const float* v) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) m = max_nan(m, fabsf(v[i]));
  return m;
}

// atomicMax on the bits of a non-negative float: integer order = float order, and every
// NaN's bits (sign cleared) exceed +Inf's, so the maximum propagates NaN.
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(addr), __float_as_uint(v) & 0x7fffffffu);
}

// Maxima of |x| on the raw bits (the grouped amax pass): with the sign cleared, an element's bits order as its
// magnitude and every NaN's lie above +Inf's, in bf16 and fp16 (two to a word, compared by __vmaxu2) as in fp32. The
// maxima come out as the fp32 bits of max|x|, a NaN as max.NaN.f32 gives it (0x7fffffff), so they equal
// absmax_nan's bit for bit and feed atomicMax on float bits.
template <typename T>
struct MagCols {  // per-column running maxima of the 8 columns of a Raw8, on the sign-cleared bits
  static constexpr int kWords = sizeof(T) == 4 ? 8 : 4;
  uint32_t w[kWords];
};

template <typename T>
__device__ __forceinline__ uint32_t mag_f32_bits(uint32_t key) {  // a sign-cleared element -> fp32 bits
  uint32_t b = key;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) b = key << 16;
  else if constexpr (sizeof(T) == 2)
    b = __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(key))));
  return b > 0x7f800000u ? 0x7fffffffu : b;
}

template <typename T>
__device__ __forceinline__ void mag_cols_max(MagCols<T>& acc, const Raw8<T>& r) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(r.w);
#pragma unroll
  for (int i = 0; i < MagCols<T>::kWords; ++i) {
    if constexpr (sizeof(T) == 4) acc.w[i] = max(acc.w[i], u[i] & 0x7fffffffu);
    else acc.w[i] = __vmaxu2(acc.w[i], u[i] & 0x7fff7fffu);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t mag_col_bits(const MagCols<T>& acc, int j) {  // column j's max |x|, fp32 bits
  if constexpr (sizeof(T) == 4) return mag_f32_bits<T>(acc.w[j]);
  else return mag_f32_bits<T>((acc.w[j >> 1] >> (16 * (j & 1))) & 0xffffu);
}

template <typename T>
__device__ __forceinline__ uint32_t mag_row_bits(const Raw8<T>& r) {  // max |x| of the 8 elements, fp32 bits
  MagCols<T> a{};
  mag_cols_max(a, r);
  uint32_t m = 0u;
#pragma unroll
  for (int i = 0; i < MagCols<T>::kWords; ++i) m = sizeof(T) == 4 ? max(m, a.w[i]) : __vmaxu2(m, a.w[i]);
  if constexpr (sizeof(T) == 2) m = max(m & 0xffffu, m >> 16);
  return mag_f32_bits<T>(m);
}

__device__ __forceinline__ void atomic_max_bits(float* addr, uint32_t bits) {  // bits: a non-negative float's
  atomicMax(reinterpret_cast<unsigned int*>(addr), bits);
}

__device__ __forceinline__ uint32_t e4m3_satfinite(float v) {  // cvt.rn.satfinite.e4m3x2.f32
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ uint32_t e4m3x2_satfinite(float lo, float hi) {  // lo in bits 0..7
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float e4m3_to_float(uint32_t b) {  // exact
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// E2M1 without an e2m1 cvt (Hopper has none): a = min(|y|, 6) is rounded onto the e2m1 grid
// by ONE fp32 add of a magic number M whose ulp is the grid step there (0.5 below 2, 1 below
// 4, 2 above), M = 2^22, 2^23 + 2 or 2^24 + 8. The add's own rounding does the work (RNE
// for round-to-nearest, RZ = floor for stochastic rounding), and the low 3 mantissa bits of
// a + M are then the e2m1 magnitude code: the +2 / +8 in M are the code offsets 2 and 4 of
// the [2, 4) and [4, 6] binades (even, so ties still go to the even code). The exponent of
// max(a, 1) selects M with one multiply-add: e = 127, 128, 129 -> bits e * 0x800002 + C.
// NaN: fminf(NaN, 6) = 6 -> code 7; callers force whole NaN blocks to 0x7 (the sign of a
// NaN product is not relied on). Checked exhaustively against reference.e2m1_encode.
__device__ __forceinline__ float e2m1_magic(float a) {  // a in [0, 6]
  const uint32_t e = max(__float_as_uint(a), 0x3f800000u) >> 23;
  return __uint_as_float(e * 0x800002u + 0x0affff02u);
}

// The e2m1 nibble from the magic sum's bits r (magnitude code in bits 0..2) and y's sign:
// (r & 7) | (bits(y) >> 28 & 8) as ONE lop3 (bits(y) >> 28 has nothing above bit 3, so & ~7
// keeps just the sign); nvcc emits two LOP3s for the plain expression.
__device__ __forceinline__ uint32_t e2m1_code(uint32_t r, float y) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, 7, 0xE4;" : "=r"(d) : "r"(r), "r"(__float_as_uint(y) >> 28));  // (a & c) | (b & ~c)
  return d;
}

// round-to-nearest-even, |y| > 6 saturates, -0 and negatives rounding to 0 keep the sign (0x8)
__device__ __forceinline__ uint32_t e2m1_rn(float y) {
  const float a = fminf(fabsf(y), 6.0f);
  return e2m1_code(__float_as_uint(__fadd_rn(a, e2m1_magic(a))), y);
}

// e2m1_rn for |y| < 7 (a block whose fl(bm * mult) < 7, i.e. nearly every block): no clamp to 6,
// since a value in (6, 7) already rounds to 6 on the step-2 grid; max(|y|, 1) in float (one
// FMNMX with the |.| modifier) replaces the clamp and the integer max of e2m1_magic.
__device__ __forceinline__ uint32_t e2m1_rn_small(float y) {
  const float a = fabsf(y);
  const uint32_t e = __float_as_uint(fmaxf(a, 1.0f)) >> 23;
  return e2m1_code(__float_as_uint(__fadd_rn(a, __uint_as_float(e * 0x800002u + 0x0affff02u))), y);
}

// Stochastic rounding (NUMERICS section 9) with 8 random bits u: t = |y| + (u/256) * step(|y|)
// (the product is exact, so one fma rounds like the reference's add), then floor onto the grid
// of step(t), capped at 6. Clamping |y| to 6 first changes nothing: step is 2 from 4 up.
__device__ __forceinline__ uint32_t e2m1_sr(float y, uint32_t u) {
  const float a = fminf(fabsf(y), 6.0f);
  const float step = __uint_as_float((max(__float_as_uint(a), 0x3f800000u) & 0x7f800000u) - 0x00800000u);
  const float noise = __fsub_rn(__uint_as_float(0x3f800000u | (u << 15)), 1.0f);  // u / 256, exact
  const float t = fminf(__fmaf_rn(noise, step, a), 6.0f);
  return e2m1_code(__float_as_uint(__fadd_rz(t, e2m1_magic(t))), y);
}

// ---------------------------------------------------------------------------
// scale formulas
// ---------------------------------------------------------------------------

// NVFP4 global encode scale (NUMERICS section 2): min(2688/amax, FLT_MAX), 1 for amax 0 or Inf.
__device__ __forceinline__ float nvfp4_s_enc(float amax) {
  float s = fminf(__fdiv_rn(kNvfp4GlobalMax, amax), kFltMax);  // NaN amax -> FLT_MAX
  return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

struct Nvfp4Global {
  float s_dec;  // fl(1 / S_enc): the alpha the GEMM folds in
  float sx;     // fl(S_enc * fl(1/6)): block max -> e4m3 scale
  Nvfp4Global() = default;
  __device__ __forceinline__ explicit Nvfp4Global(float amax) {
    const float s_enc = nvfp4_s_enc(amax);
    s_dec = __frcp_rn(s_enc);
    sx = __fmul_rn(s_enc, kOneSixth);
  }
};

// Block scale byte and encode multiplier: s = e4m3(bm * sx); mult = min(1/(s * S_dec), FLT_MAX).
__device__ __forceinline__ uint32_t nvfp4_block_scale(float bm, const Nvfp4Global& g, float& mult) {
  const uint32_t sb = e4m3_satfinite(__fmul_rn(bm, g.sx));
  const float inv = __frcp_rn(__fmul_rn(e4m3_to_float(sb), g.s_dec));
  mult = inv != inv ? inv : fminf(inv, kFltMax);  // a NaN scale keeps a NaN multiplier
  return sb;
}

// FP8 current scaling (NUMERICS section 7): scale = 448/amax; 1 for amax 0/Inf/NaN; Inf -> FLT_MAX.
__device__ __forceinline__ float fp8_scale(float amax) {
  if (amax == 0.0f || !(fabsf(amax) < INFINITY)) return 1.0f;
  return fminf(__fdiv_rn(kE4m3Max, amax), kFltMax);
}

// The global (per tensor or per row of a copy) scales both NVFP4 and FP8 derive from an amax.
struct GlobalScale {
  Nvfp4Global nv;   // NVFP4
  float scale;      // FP8 encode scale
  float scale_inv;  // FP8 decode scale
};

template <bool kNvfp4>
__device__ __forceinline__ GlobalScale global_scale(float amax) {
  GlobalScale g{};
  if constexpr (kNvfp4) {
    g.nv = Nvfp4Global(amax);
  } else {
    g.scale = fp8_scale(amax);
    g.scale_inv = __frcp_rn(g.scale);
  }
  return g;
}

// MXFP8 e8m0 scale byte: biased exponent of the smallest power of two >= fl(bm * fl(1/448)),
// clamped to [0, 254]; 0 -> 0, NaN -> 0xFF, Inf -> 254.
__device__ __forceinline__ uint32_t mxfp8_scale_byte(float bm) {
  const float v = __fmul_rn(bm, kOne448);
  const uint32_t b = __float_as_uint(v) & 0x7fffffffu;
  if (b > 0x7f800000u) return 0xffu;
  const uint32_t e = b >> 23, mant = b & 0x7fffffu;
  if (e != 0) return min(e + (mant != 0 ? 1u : 0u), 254u);
  // subnormal v: the smallest power of two >= v is 2^-127 (b = 0) up to v = 2^-127, else 2^-126
  return mant > 0x400000u ? 1u : 0u;
}

// 2^(127 - b) built from bits: b in [0, 254] (2^-127 is the fp32 subnormal 0x00400000);
// b = 0xFF (a block holding a NaN) gives NaN, so the whole block encodes as NaN.
__device__ __forceinline__ float mxfp8_inv_scale(uint32_t b) {
  if (b == 0xffu) return __uint_as_float(0x7fc00000u);
  return b < 254u ? __uint_as_float((254u - b) << 23) : __uint_as_float(0x00400000u);
}

// ---------------------------------------------------------------------------
// 128x4 swizzled scale layout (NUMERICS section 5)
// ---------------------------------------------------------------------------

__host__ __device__ __forceinline__ int64_t swizzle_offset(int64_t r, int64_t c, int64_t cp) {
  return (r >> 7) * 128 * cp + (c >> 2) * 512 + (r & 31) * 16 + ((r >> 5) & 3) * 4 + (c & 3);
}

// ---------------------------------------------------------------------------
// Philox4x32-10 (Random123 constants) and the SR bit layout
// ---------------------------------------------------------------------------

__device__ __forceinline__ uint4 philox4x32_10(uint4 ctr, uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int i = 0; i < 10; ++i) {
    const uint32_t lo0 = ctr.x * 0xD2511F53u, hi0 = __umulhi(ctr.x, 0xD2511F53u);
    const uint32_t lo1 = ctr.z * 0xCD9E8D57u, hi1 = __umulhi(ctr.z, 0xCD9E8D57u);
    ctr = make_uint4(hi1 ^ ctr.y ^ k0, lo1, hi0 ^ ctr.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// The four 32-bit words that hold the random bytes of elements 16n .. 16n+15 of a copy
// (element e uses byte e % 4 of word e / 4; word w comes from counter (w/4, offset), lane w%4).
__device__ __forceinline__ uint4 sr_words(uint64_t n, uint64_t seed, uint64_t offset) {
  const uint4 ctr = make_uint4(static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32),
                               static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32));
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The Philox key (seed, offset) of a launch: as passed by value, or, when `device` is set, the seed
// read from device[0] and device[1] added to the offset at run time. A CUDA graph bakes the by-value
// pair into every replay; a pair written on the device before each replay (scalemm draws it with
// torch's capture-safe RNG) gives each replay fresh bits.
__device__ __forceinline__ uint64_t sr_seed(uint64_t seed, const uint64_t* device) {
  return device ? __ldg(reinterpret_cast<const unsigned long long*>(device)) : seed;
}
__device__ __forceinline__ uint64_t sr_offset(uint64_t offset, const uint64_t* device) {
  return device ? offset + __ldg(reinterpret_cast<const unsigned long long*>(device) + 1) : offset;
}

// ---------------------------------------------------------------------------
// 16-point random Hadamard transform (NUMERICS section 8), result rounded to bf16
// ---------------------------------------------------------------------------

__device__ __forceinline__ void rht16(float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((kRhtSignMask >> i) & 1u) v[i] = -v[i];
#pragma unroll
  for (int h = 1; h < 16; h <<= 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if ((i & h) == 0) {
        const float a = v[i], b = v[i + h];
        v[i] = __fadd_rn(a, b);
        v[i + h] = __fsub_rn(a, b);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = __bfloat162float(__float2bfloat16_rn(__fmul_rn(v[i], 0.25f)));
}

// ---------------------------------------------------------------------------
// NVFP4 encoding of 16 scaled values into packed nibbles (even index = low nibble)
// ---------------------------------------------------------------------------

// The 16 nibbles of one block; kSmall: every |v * mult| < 7 (see e2m1_rn_small).
template <bool SR, bool kSmall>
__device__ __forceinline__ uint2 nvfp4_codes16(const float (&v)[16], float mult, const uint4& rnd) {
  uint32_t out[2];
  const uint32_t r[4] = {rnd.x, rnd.y, rnd.z, rnd.w};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = 8 * w + i;
      const float y = __fmul_rn(v[e], mult);
      uint32_t code;
      if constexpr (SR)
        code = e2m1_sr(y, (r[e >> 2] >> (8 * (e & 3))) & 0xffu);
      else if constexpr (kSmall)
        code = e2m1_rn_small(y);
      else
        code = e2m1_rn(y);
      word += code << (4 * i);  // disjoint nibbles: + is |, and folds into one LEA
    }
    out[w] = word;
  }
  return make_uint2(out[0], out[1]);
}

// bm: the block's max |v| (NaN if it holds a NaN). rnd: the block's 4 Philox words (SR only).
// A block whose max is NaN has mult = NaN and encodes as all 0x7 (reference: NaN -> 0x7 whatever
// its sign). Round-to-nearest blocks with fl(bm * mult) < 7 (every |y| is then < 7: rounding is
// monotone) take the clamp-free encode.
template <bool SR>
__device__ __forceinline__ uint2 nvfp4_pack16(const float (&v)[16], float mult, const uint4& rnd, float bm) {
  if (bm != bm) return make_uint2(0x77777777u, 0x77777777u);
  if (!SR && __fmul_rn(bm, mult) < 7.0f) return nvfp4_codes16<SR, true>(v, mult, rnd);
  return nvfp4_codes16<SR, false>(v, mult, rnd);
}

}  // namespace quant
}  // namespace scalemm
