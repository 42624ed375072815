// NVFP4 rows -> bf16 operand rows for the W4A4 GEMM: out[r, k] = value(code) * s(r, k / 16),
// without the global scale (the GEMM's epilogue applies it in fp32). value * s is exact in bf16
// (docs/numerics.md section 4), so the GEMM on these rows is the exact block-scaled product.
// Dense rows read scale row r; grouped rows (scales grouped along M, docs/numerics.md section 5)
// read scale row sf_offsets[g] + (r - start of g), rows past the last group are written as 0.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "scalemm/quant_grouped.cuh"
#include "scalemm/sm90/nvfp4_numerics.cuh"

namespace scalemm::dequant {

constexpr int kThreads = 256;

struct Params {
  const uint8_t* qdata;   // [rows, k / 2]
  const uint8_t* scales;  // 128x4 swizzled e4m3, row pitch cp
  __nv_bfloat16* out;     // [rows, k]
  int64_t rows, k, cp;
  quant::grouped::Table tb;  // grouped: the group table (ends, pos128 = sf_offsets); tb.G = 0 for dense
};

// One warp per (row, chunk of 128 words = 1024 codes): the row comes from the block index and its group
// from one search per warp; lane l decodes words l + 32 j, j < 4, so each load and each 16-byte store of
// the warp is contiguous. Decoded by sm90::exact_bf16_word (scalemm/sm90/nvfp4_numerics.cuh): value * s *
// 2^-8 exactly in bf16, then * 2^8 (exact). (The previous kernel, one thread per word over a flat index
// with a 64-bit division and a group search per word, was instruction-bound: 67% of memcpy grouped on an
// H100 against 89% for this one, perf/NOTES.md.)
constexpr int kChunkWords = 128;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) nvfp4_rows_to_bf16(const Params p) {
  const int64_t words_per_row = p.k / 8;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= p.rows) return;
  const int64_t w0 = int64_t(blockIdx.y) * kChunkWords + (threadIdx.x & 31);
  int64_t srow = r;
  bool live = true;
  if (p.tb.G > 0) {
    const int g = quant::grouped::group_of_row(p.tb, r);
    live = g < p.tb.G;
    if (live) srow = __ldg(p.tb.pos128 + g) + (r - quant::grouped::group_start(p.tb, g));
  }
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p.qdata) + r * words_per_row;
  uint4* out = reinterpret_cast<uint4*>(p.out) + r * words_per_row;
  // the row's scales in the 128x4 layout (docs/numerics.md section 5); block c at + (c / 4) * 512 + c % 4
  const uint8_t* srow_scales = p.scales + quant::swizzle_offset(srow, 0, p.cp);
  constexpr int kPerLane = kChunkWords / 32;
  uint32_t words[kPerLane], scales[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {  // every load first
    const int64_t w = w0 + 32 * j, c = w / 2;  // word w holds codes 8w .. 8w + 7 of block c
    const bool in = live && w < words_per_row;
    words[j] = in ? __ldg(q + w) : 0u;
    scales[j] = in ? __ldg(srow_scales + (c / 4) * 512 + c % 4) : 0u;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t w = w0 + 32 * j;
    if (w >= words_per_row) break;
    uint4 v = make_uint4(0, 0, 0, 0);  // rows past the last group
    if (live) v = sm90::exact_bf16_word(words[j], scales[j]);
    out[w] = v;
  }
}

// table: int32 scratch of grouped::table_ints(G) entries for grouped rows (offsets non-null),
// unused for dense rows.
inline int launch_rows_to_bf16(const uint8_t* qdata, const uint8_t* scales, __nv_bfloat16* out, int64_t rows,
                               int64_t k, int64_t cp, const int* offsets, int G, int* table, cudaStream_t stream) {
  Params p{qdata, scales, out, rows, k, cp, quant::grouped::Table{nullptr, nullptr, nullptr, nullptr, 0}};
  if (offsets != nullptr) {
    const int e = quant::grouped::launch_group_table(offsets, G, int(rows), table, stream);
    if (e) return e;
    p.tb = quant::grouped::make_table(table, G);
  }
  if (rows > 0 && k > 0) {
    const dim3 grid(unsigned((rows + kWarps - 1) / kWarps), unsigned((k / 8 + kChunkWords - 1) / kChunkWords));
    nvfp4_rows_to_bf16<<<grid, kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// The SM90 kernels' byte order of packed codes ("Prepared layout" in scalemm/sm90/nvfp4_mainloop.hpp;
// scalemm.gemm_nvfp4.prepare_sm90_weight does the same in torch ops for CPU tensors): [rows, half] bytes (even element in the low nibble) -> [rows, chunks * 32], chunks =
// ceil(2 half / 64), zero codes past the row. In each 32-byte chunk (64 elements), byte j holds elements lo(j)
// (low nibble) and lo(j) + 8 (high nibble); both sit in the same nibble (lo(j) % 2) of source bytes lo(j) / 2 and
// lo(j) / 2 + 4.
__host__ __device__ constexpr int prepared_lo(int j) {
  return 16 * (2 * ((j % 8) / 4) + j % 2) + 2 * (j / 8) + (j % 4) / 2;
}

// One thread per chunk: its 32 source bytes in registers, 32 prepared bytes out (two 16-byte stores).
__global__ void __launch_bounds__(kThreads) prepare_sm90(const uint8_t* q, uint8_t* out, int64_t rows, int64_t half,
                                                         int64_t chunks) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * chunks) return;
  const int64_t r = i / chunks, c = i - r * chunks;
  const uint8_t* src = q + r * half + 32 * c;
  const int64_t avail = half - 32 * c;  // < 32 in a row's last chunk when K % 64 != 0
  uint32_t w[8];
  if (avail >= 32 && reinterpret_cast<uintptr_t>(src) % 8 == 0) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const uint2 d = __ldg(reinterpret_cast<const uint2*>(src) + v);
      w[2 * v] = d.x;
      w[2 * v + 1] = d.y;
    }
  } else {
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      uint32_t x = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (4 * v + b < avail) x |= uint32_t(__ldg(src + 4 * v + b)) << (8 * b);
      w[v] = x;
    }
  }
  auto byte = [&](int i) { return (w[i / 4] >> (8 * (i % 4))) & 0xFFu; };
  uint32_t o[8];
#pragma unroll
  for (int v = 0; v < 8; ++v) {
    uint32_t x = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int j = 4 * v + b, lo = prepared_lo(j);
      const uint32_t a = byte(lo / 2), e = byte(lo / 2 + 4);
      const uint32_t y = (lo % 2) ? ((a >> 4) | (e & 0xF0u)) : ((a & 0x0Fu) | ((e << 4) & 0xF0u));
      x |= y << (8 * b);
    }
    o[v] = x;
  }
  uint4* dst = reinterpret_cast<uint4*>(out + (r * chunks + c) * 32);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

inline int launch_prepare_sm90(const uint8_t* q, uint8_t* out, int64_t rows, int64_t half, cudaStream_t stream) {
  const int64_t chunks = (2 * half + 63) / 64, n = rows * chunks;
  if (n > 0) prepare_sm90<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(q, out, rows, half, chunks);
  return static_cast<int>(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// An NVFP4 wgrad-layout copy [K, W] (tokens along W in 16-element blocks, each group's scales its own swizzled
// matrix: docs/numerics.md section 5) -> bf16 value(code) x block scale, exact, no global scale
// (scalemm.training.decode_wgrad_bf16 has the torch form). Per 16-column block b the caller gives where its
// group's scales start (base[b] = Rp * sf_offset of the group; -1: columns past every group, decoded as zeros),
// its column in that matrix (local[b]) and the matrix's padded width (cp[b]). One thread per (row k, block b).
__global__ void __launch_bounds__(kThreads) wgrad_to_bf16(const uint8_t* q, const uint8_t* scales, const int64_t* base,
                                                          const int32_t* local, const int32_t* cp, __nv_bfloat16* out,
                                                          int64_t K, int64_t blocks) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= K * blocks) return;
  const int64_t k = i / blocks, b = i - k * blocks;
  uint4* dst = reinterpret_cast<uint4*>(out + (k * blocks + b) * 16);
  const int64_t at = __ldg(base + b);
  if (at < 0) {
    dst[0] = dst[1] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint32_t s = __ldg(scales + at + quant::swizzle_offset(k, __ldg(local + b), __ldg(cp + b)));
  const uint2 codes = __ldg(reinterpret_cast<const uint2*>(q + (k * blocks + b) * 8));
  dst[0] = sm90::exact_bf16_word(codes.x, s);
  dst[1] = sm90::exact_bf16_word(codes.y, s);
}

inline int launch_wgrad_to_bf16(const uint8_t* q, const uint8_t* scales, const int64_t* base, const int32_t* local,
                                const int32_t* cp, __nv_bfloat16* out, int64_t K, int64_t W, cudaStream_t stream) {
  const int64_t blocks = W / 16, n = K * blocks;
  if (n > 0)
    wgrad_to_bf16<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(q, scales, base, local, cp, out, K,
                                                                                     blocks);
  return static_cast<int>(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// The NVFP4 grouped wgrad's global scales: out[g, n, k] = fl(fl(alpha_dy * alpha_x) * acc[g, n, k]) rounded once to
// Out, 0 for groups without rows (has_rows[g] == 0). acc: bf16 [G, N, K]; alpha_dy [G] or [G, N] (dy_vec),
// alpha_x [G] or [G, K] (x_vec). Eight consecutive k per thread (K % 8 == 0: 16-byte loads), else one.
template <class Out>
__device__ __forceinline__ Out out_of(float v) {
  if constexpr (std::is_same_v<Out, float>) return v;
  else if constexpr (std::is_same_v<Out, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return __float2half_rn(v);
}

template <class Out, int kVec>
__global__ void __launch_bounds__(kThreads) wgrad_scale(const __nv_bfloat16* acc, Out* out, const float* alpha_dy,
                                                        int dy_vec, const float* alpha_x, int x_vec,
                                                        const uint8_t* has_rows, int64_t G, int64_t N, int64_t K) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x, per_row = K / kVec;
  if (i >= G * N * per_row) return;
  const int64_t row = i / per_row, k0 = (i - row * per_row) * kVec, g = row / N, n = row - g * N;
  const bool live = __ldg(has_rows + g) != 0;
  const float a = __ldg(alpha_dy + (dy_vec ? g * N + n : g));
  __nv_bfloat16 v[kVec];
  if constexpr (kVec == 8) {
    *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(acc + row * K + k0));
  } else {
    v[0] = acc[row * K + k0];
  }
  Out r[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float s = __fmul_rn(a, __ldg(alpha_x + (x_vec ? g * K + k0 + j : g)));
    r[j] = out_of<Out>(live ? __fmul_rn(s, __bfloat162float(v[j])) : 0.0f);
  }
  if constexpr (kVec == 8 && sizeof(Out) == 2) {
    *reinterpret_cast<uint4*>(out + row * K + k0) = *reinterpret_cast<const uint4*>(r);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[row * K + k0 + j] = r[j];
  }
}

template <class Out>
int launch_wgrad_scale_as(const __nv_bfloat16* acc, Out* out, const float* alpha_dy, int dy_vec, const float* alpha_x,
                          int x_vec, const uint8_t* has_rows, int64_t G, int64_t N, int64_t K, cudaStream_t stream) {
  const bool vec = K % 8 == 0;
  const int64_t n = G * N * (vec ? K / 8 : K);
  if (n == 0) return static_cast<int>(cudaGetLastError());
  const unsigned grid = unsigned((n + kThreads - 1) / kThreads);
  if (vec)
    wgrad_scale<Out, 8><<<grid, kThreads, 0, stream>>>(acc, out, alpha_dy, dy_vec, alpha_x, x_vec, has_rows, G, N, K);
  else
    wgrad_scale<Out, 1><<<grid, kThreads, 0, stream>>>(acc, out, alpha_dy, dy_vec, alpha_x, x_vec, has_rows, G, N, K);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::dequant
