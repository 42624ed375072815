// NVFP4 rows -> bf16 operand rows for the W4A4 GEMM: out[r, k] = value(code) * s(r, k / 16),
// without the global scale (the GEMM's epilogue applies it in fp32). value * s is exact in bf16
// (docs/numerics.md section 4), so the GEMM on these rows is the exact block-scaled product.
// Dense rows read scale row r; grouped rows (scales grouped along M, docs/numerics.md section 5)
// read scale row sf_offsets[g] + (r - start of g), rows past the last group are written as 0.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
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
// the warp is contiguous. Decoded like the GEMM mainloop (scalemm/sm90/nvfp4_numerics.cuh): value * s *
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
  const uint8_t* srow_scales = p.scales + (srow / 128) * 128 * p.cp + (srow % 32) * 16 + ((srow / 32) % 4) * 4;
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
    if (live) {
      uint32_t pairs[4];
      sm90::e4m3x4_to_scale_pairs<cutlass::bfloat16_t>(scales[j], pairs);
      const uint32_t up = 0x43804380u;  // bf16x2 (256, 256) = 2^kDecodeShift
      static_assert(sm90::kDecodeShift == 8, "update `up` with kDecodeShift");
      uint32_t o[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {  // byte b: elements 2b (low nibble) and 2b + 1
        const uint32_t t = words[j] >> (8 * b);
        const uint32_t x = (t & 0xFu) | ((t & 0xF0u) << 12);
        o[b] = sm90::mul2<cutlass::bfloat16_t>(
            sm90::mul2<cutlass::bfloat16_t>(sm90::e2m1x2_tiny<cutlass::bfloat16_t>(x), pairs[0]), up);
      }
      v = make_uint4(o[0], o[1], o[2], o[3]);
    }
    out[w] = v;
  }
}

// table: int32 scratch of grouped::table_ints(G) entries for grouped rows (offsets non-null),
// unused for dense rows.
inline int launch_rows_to_bf16(const uint8_t* qdata, const uint8_t* scales, __nv_bfloat16* out, int64_t rows,
                               int64_t k, int64_t cp, const int* offsets, int G, int* table, cudaStream_t stream) {
  Params p{qdata, scales, out, rows, k, cp, quant::grouped::Table{nullptr, nullptr, nullptr, nullptr, 0}};
  if (offsets != nullptr) {
    quant::grouped::group_table_kernel<<<1, quant::grouped::kSetupThreads, 0, stream>>>(offsets, G, int(rows), table);
    p.tb = quant::grouped::make_table(table, G);
  }
  if (rows > 0 && k > 0) {
    const dim3 grid(unsigned((rows + kWarps - 1) / kWarps), unsigned((k / 8 + kChunkWords - 1) / kChunkWords));
    nvfp4_rows_to_bf16<<<grid, kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::dequant
