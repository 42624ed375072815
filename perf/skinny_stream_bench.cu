// Pure-load throughput of the skinny NVFP4 kernel's weight access pattern (scalemm/sm90/nvfp4_skinny.cuh:
// 64 rows per CTA, lane (g, q) of warp w reads 16 bytes of rows 16w + g and 16w + g + 8 per 128-element
// chunk, K split over `splits` CTAs) and of alternatives, with no decode or MMA: how fast the memory
// system serves this pattern, against a device-to-device memcpy of the same bytes. Standalone:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/stream perf/skinny_stream_bench.cu
//   /tmp/stream 8192 8192 3      # N K splits (the codes of an [N, K] NVFP4 weight: N x K / 2 bytes)
// "ringR spanS": R batches of S consecutive chunks in flight per lane; "rows512": a warp reads 512
// contiguous bytes of one row per load. Timed with CUDA events over 200 back-to-back launches,
// rotating 4 copies so that L2 does not hold the weights. perf/NOTES.md has an H100's numbers.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

template <int kHint>
__device__ __forceinline__ uint4 ld(const void* p) {
  uint4 v;
  if (kHint == 1)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (kHint == 2)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// mode 0 (the skinny kernel): lane (g, q) reads 16 B of rows r0+g, r0+g+8 at chunk*64 + 16q: a quad 64 B per row
//   per chunk; kSpan consecutive chunks per load batch (kSpan = 1: as today).
// the lanes of a quad read 64 * kSpan contiguous bytes of each row per batch: lane q reads [16q + 64 s] s < kSpan
template <int kRing, int kSpan, int kHint>
__global__ void __launch_bounds__(128, 4) stream(const uint8_t* w, int rowbytes, int chunks_per_split, int n_chunks,
                                                 unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int split = blockIdx.x;
  const int r0 = blockIdx.y * 64 + warp * 16;
  const int c0 = split * chunks_per_split;
  const int c1 = min(n_chunks, c0 + chunks_per_split);
  const uint8_t* row[2] = {w + int64_t(r0 + g) * rowbytes + 16 * q, w + int64_t(r0 + g + 8) * rowbytes + 16 * q};
  unsigned acc = 0;
  for (int c = c0; c + kRing * kSpan <= c1; c += kRing * kSpan) {
    uint4 v[kRing][kSpan][2];
#pragma unroll
    for (int i = 0; i < kRing; ++i)
#pragma unroll
      for (int s = 0; s < kSpan; ++s)
#pragma unroll
        for (int t = 0; t < 2; ++t) v[i][s][t] = ld<kHint>(row[t] + int64_t(c + i * kSpan + s) * 64);
#pragma unroll
    for (int i = 0; i < kRing; ++i)
#pragma unroll
      for (int s = 0; s < kSpan; ++s)
#pragma unroll
        for (int t = 0; t < 2; ++t) acc ^= v[i][s][t].x ^ v[i][s][t].y ^ v[i][s][t].z ^ v[i][s][t].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// whole rows: each warp reads 512 contiguous bytes of one row per load (lane l: 16 B at 16 l), rows of the CTA's 64
// in turn, the same K split
template <int kRing>
__global__ void __launch_bounds__(128, 4) rows512(const uint8_t* w, int rowbytes, int chunks_per_split, int n_chunks,
                                                  unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x;
  const int r0 = blockIdx.y * 64 + warp * 16;
  const int b0 = split * chunks_per_split * 64, b1 = min(n_chunks, (split + 1) * chunks_per_split) * 64;
  unsigned acc = 0;
  for (int r = 0; r < 16; ++r) {
    const uint8_t* p = w + int64_t(r0 + r) * rowbytes + 16 * lane;
    for (int b = b0; b + 512 * kRing <= b1; b += 512 * kRing) {
      uint4 v[kRing];
#pragma unroll
      for (int i = 0; i < kRing; ++i) v[i] = ld<0>(p + b + 512 * i);
#pragma unroll
      for (int i = 0; i < kRing; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

template <class F>
float time_it(F f, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000 / reps;
}

int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 8192, K = argc > 2 ? atoi(argv[2]) : 8192, S = argc > 3 ? atoi(argv[3]) : 3;
  const int rowbytes = K / 2, n_chunks = K / 128, cps = (n_chunks + S - 1) / S;
  const size_t bytes = size_t(N) * rowbytes;
  // rotate over several copies so L2 (50 MB) does not hold the weights between calls
  const int copies = 4;
  uint8_t* w;
  unsigned* sink;
  cudaMalloc(&w, bytes * copies);
  cudaMemset(w, 1, bytes * copies);
  cudaMalloc(&sink, 4);
  dim3 grid(S, N / 64);
  int it = 0;
  auto report = [&](const char* name, float us, int step) {  // bytes actually read: whole steps of each split
    size_t used = 0;
    for (int s = 0; s < S; ++s) {
      int count = n_chunks - s * cps < cps ? n_chunks - s * cps : cps;
      if (count > 0) used += size_t(count / step * step) * 64 * N;
    }
    printf("N=%d K=%d splits=%d %-28s %7.2f us  %6.0f GB/s (%.0f%% of the bytes)\n", N, K, S, name, us, used / us / 1e3,
           100.0 * used / bytes);
  };
#define RUN(NAME, KERNEL, STEP)                                                                                \
  report(NAME, time_it([&] { KERNEL<<<grid, 128>>>(w + bytes * (it++ % copies), rowbytes, cps, n_chunks, sink); }, 200), STEP);
  RUN("ring3 span1 (skinny)", (stream<3, 1, 1>), 3);
  RUN("ring3 span1 nohint", (stream<3, 1, 0>), 3);
  RUN("ring6 span1", (stream<6, 1, 1>), 6);
  RUN("ring1 span4", (stream<1, 4, 0>), 4);
  RUN("ring2 span4", (stream<2, 4, 0>), 8);
  RUN("ring3 span2", (stream<3, 2, 1>), 6);
  RUN("ring4 span1", (stream<4, 1, 1>), 4);
  RUN("ring2 span2", (stream<2, 2, 1>), 4);
  RUN("rows512 ring2", rows512<2>, 16);
  RUN("rows512 ring4", rows512<4>, 32);
  // a plain copy-read reference: memcpy of the same bytes (read + write)
  uint8_t* dst;
  cudaMalloc(&dst, bytes);
  float us = time_it([&] { cudaMemcpyAsync(dst, w + bytes * (it++ % copies), bytes, cudaMemcpyDeviceToDevice); }, 200);
  printf("N=%d K=%d memcpy %7.2f us  %6.0f GB/s (read+write)\n", N, K, us, 2 * bytes / us / 1e3);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
  return 0;
}
