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

// One thread per 8 codes (one 32-bit word: reads and 16-byte writes coalesce across the warp).
// Decoded like the GEMM mainloop (scalemm/sm90/nvfp4_numerics.cuh): value * s * 2^-8 exactly in
// bf16, then * 2^8 (exact).
__global__ void __launch_bounds__(kThreads) nvfp4_rows_to_bf16(const Params p) {
  const int64_t words_per_row = p.k / 8;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.rows * words_per_row) return;
  const int64_t r = i / words_per_row, c = (i % words_per_row) / 2;  // row, 16-element block
  int64_t srow = r;
  bool live = true;
  if (p.tb.G > 0) {
    const int g = quant::grouped::group_of_row(p.tb, r);
    live = g < p.tb.G;
    if (live) srow = __ldg(p.tb.pos128 + g) + (r - quant::grouped::group_start(p.tb, g));
  }
  uint4 v = make_uint4(0, 0, 0, 0);
  if (live) {
    const uint32_t q = __ldg(reinterpret_cast<const uint32_t*>(p.qdata) + i);
    const int64_t off = (srow / 128) * 128 * p.cp + (c / 4) * 512 + (srow % 32) * 16 + ((srow / 32) % 4) * 4 + c % 4;
    uint32_t pairs[4];
    sm90::e4m3x4_to_scale_pairs<cutlass::bfloat16_t>(__ldg(p.scales + off), pairs);
    const uint32_t up = 0x43804380u;  // bf16x2 (256, 256) = 2^kDecodeShift
    static_assert(sm90::kDecodeShift == 8, "update `up` with kDecodeShift");
    uint32_t o[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // byte b: elements 2b (low nibble) and 2b + 1
      const uint32_t t = q >> (8 * b);
      const uint32_t x = (t & 0xFu) | ((t & 0xF0u) << 12);
      o[b] = sm90::mul2<cutlass::bfloat16_t>(sm90::mul2<cutlass::bfloat16_t>(sm90::e2m1x2_tiny<cutlass::bfloat16_t>(x),
                                                                              pairs[0]), up);
    }
    v = make_uint4(o[0], o[1], o[2], o[3]);
  }
  reinterpret_cast<uint4*>(p.out)[i] = v;
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
  const int64_t work = rows * (k / 8);
  if (work > 0) nvfp4_rows_to_bf16<<<unsigned((work + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::dequant
