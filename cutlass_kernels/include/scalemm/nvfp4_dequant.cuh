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

namespace scalemm::dequant {

constexpr int kThreads = 256;

__device__ __forceinline__ float e2m1_value(uint32_t code) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0)
  const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = mag[code & 7];
  return (code & 8) ? -v : v;
}

struct Params {
  const uint8_t* qdata;   // [rows, k / 2]
  const uint8_t* scales;  // 128x4 swizzled e4m3, row pitch cp
  __nv_bfloat16* out;     // [rows, k]
  int64_t rows, k, cp;
  quant::grouped::Table tb;  // grouped: the group table (ends, pos128 = sf_offsets); tb.G = 0 for dense
};

// One thread per (row, 64-element chunk): 32 code bytes and 4 scale bytes in, 128 bytes out.
__global__ void __launch_bounds__(kThreads) nvfp4_rows_to_bf16(const Params p) {
  const int64_t chunks = (p.k + 63) / 64;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.rows * chunks) return;
  const int64_t r = i / chunks, c = i % chunks;
  const int64_t left = p.k / 16 - 4 * c;
  const int nblk = left < 4 ? int(left) : 4;  // 16-element blocks in this chunk
  int64_t srow = r;
  bool live = true;
  if (p.tb.G > 0) {
    const int g = quant::grouped::group_of_row(p.tb, r);
    live = g < p.tb.G;
    if (live) srow = __ldg(p.tb.pos128 + g) + (r - quant::grouped::group_start(p.tb, g));
  }
  uint32_t s4 = 0;
  if (live) {
    const int64_t off = (srow / 128) * 128 * p.cp + c * 512 + (srow % 32) * 16 + ((srow / 32) % 4) * 4;
    s4 = __ldg(reinterpret_cast<const uint32_t*>(p.scales + off));
  }
  const uint8_t* q = p.qdata + r * (p.k / 2) + c * 32;
  __nv_bfloat16* o = p.out + r * p.k + c * 64;
  for (int b = 0; b < nblk; ++b) {
    const uint2 codes = live ? __ldg(reinterpret_cast<const uint2*>(q + 8 * b)) : make_uint2(0, 0);
    const uint8_t sb = (s4 >> (8 * b)) & 0xff;
    const float s = float(*reinterpret_cast<const __nv_fp8_e4m3*>(&sb));  // exact; NaN stays NaN
    uint32_t packed[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t word = j < 4 ? codes.x : codes.y;
      const uint32_t byte = (word >> (8 * (j % 4))) & 0xff;
      // value * s has at most 6 significant bits: the bf16 conversion is exact
      const __nv_bfloat162 v = __floats2bfloat162_rn(live ? e2m1_value(byte & 15) * s : 0.f,
                                                     live ? e2m1_value(byte >> 4) * s : 0.f);
      packed[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
    uint4* dst = reinterpret_cast<uint4*>(o + 16 * b);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
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
  const int64_t work = rows * ((k + 63) / 64);
  if (work > 0) nvfp4_rows_to_bf16<<<unsigned((work + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::dequant
