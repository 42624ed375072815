// SwiGLU, the activation between an MLP's (or MoE expert's) gate_up and down projections, forward and backward
// each as one memory-bound pass (scalemm.swiglu; reference: py_api/reference/activation.py, docs/training.md):
//   h [rows, 2I] = [gate | up] (torch's h.chunk(2, dim=-1)), out [rows, I] = silu(gate) * up,
//   dh = [dgate | dup] from dout [rows, I]: dup = dout * silu(gate), dgate = dout * up * s * (1 + gate * (1 - s)),
// with s = 1 / (1 + exp(-gate)) and silu(gate) = gate / (1 + exp(-gate)) (torch's formulas, so special values behave
// as torch's silu / silu_backward), everything in fp32 and each output rounded once to the tensors' dtype.
// torch's eager `F.silu(gate) * up` takes three passes forward (silu's read of a strided half of h, its write, the
// product) and four backward (two products, silu_backward, the cat of both halves), and rounds silu's output to the
// tensor dtype before the product.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace scalemm::swiglu {

constexpr int kThreads = 256;
// 16-byte vectors per thread and the CTAs per SM the kernels are compiled for: one vector and no bound (28-40
// registers, eight CTAs of 256 threads per SM) ran 1.52x (forward) / 1.25x (backward) faster than four vectors at
// two CTAs per SM on the expert block's h [65536, 1536] on an H200, at a copy's rate (perf/swiglu_bench.py
// --variants, the macros below; perf/results/h200/swiglu/).
#ifndef SCALEMM_SWIGLU_UNROLL
#define SCALEMM_SWIGLU_UNROLL 1
#endif
#ifndef SCALEMM_SWIGLU_MIN_BLOCKS
#define SCALEMM_SWIGLU_MIN_BLOCKS 1
#endif
constexpr int kUnroll = SCALEMM_SWIGLU_UNROLL;
constexpr int kMinBlocks = SCALEMM_SWIGLU_MIN_BLOCKS;

// Elements of one 16-byte vector, and their conversion to / from fp32 (RNE).
template <typename T>
struct Vec {
  static constexpr int kN = 16 / sizeof(T);
  uint4 w;
  __device__ __forceinline__ float get(int i) const {
    const T* e = reinterpret_cast<const T*>(&w);
    if constexpr (sizeof(T) == 4) return e[i];
    else if constexpr (sizeof(T) == 2 && std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(e[i]);
    else return __half2float(e[i]);
  }
  __device__ __forceinline__ void set(int i, float v) {
    T* e = reinterpret_cast<T*>(&w);
    if constexpr (sizeof(T) == 4) e[i] = v;
    else if constexpr (std::is_same<T, __nv_bfloat16>::value) e[i] = __float2bfloat16_rn(v);
    else e[i] = __float2half_rn(v);
  }
};

// One element's forward and backward, in torch's formulas (fp32; expf is CUDA's accurate exp, never __expf). The
// divisions are __fdividef (reciprocal then product, 2 ulp): IEEE division took a large share of the forward pass's
// issue slots. __fdividef returns 0 for denominators past 2^126, so below gate = -80 (rare: a divergent branch
// costs nothing) they are IEEE divisions, as torch's: tiny values, and 1 + exp(-gate) = inf past gate = -88.7 gives
// silu = -0 (times an infinite up: NaN, as torch).
constexpr float kLargeNegative = -80.0f;

__device__ __forceinline__ float sigmoid(float g) {
  const float den = 1.0f + expf(-g);
  return g < kLargeNegative ? __fdiv_rn(1.0f, den) : __fdividef(1.0f, den);
}

__device__ __forceinline__ float silu(float g) {
  const float den = 1.0f + expf(-g);
  return g < kLargeNegative ? __fdiv_rn(g, den) : __fdividef(g, den);
}

__device__ __forceinline__ void silu_mul_backward(float g, float u, float d, float& dg, float& du) {
  const float s = sigmoid(g);
  du = d * (g * s);
  dg = d * u * (s * (1.0f + g * (1.0f - s)));
}

// Rows of I elements; the kernels walk 16-byte vectors (VEC: I % Vec<T>::kN == 0 and 16-byte aligned tensors) or
// single elements (any I), n of them in all, and find each one's row by a division by the vectors per row: a
// multiply-high by a magic number (Granlund-Montgomery, exact for every 32-bit dividend) where n < 2^32, else a
// 64-bit division.
struct Params {
  const void* h;     // [rows, 2I]
  const void* dout;  // [rows, I] (backward)
  void* out;         // forward: [rows, I]; backward: dh [rows, 2I]
  int64_t rows, inner;
  int64_t per_row, n;  // vectors (elements) per row and in all
  uint32_t magic, shift;  // v / per_row = (umulhi(v, magic) + v) >> shift, for v < 2^32
};

// magic and shift for per_row >= 1: shift = ceil(log2(per_row)), magic = floor(2^32 (2^shift - d) / d) + 1
inline void set_divisor(Params& p, int64_t per_row) {
  p.per_row = per_row;
  uint32_t shift = 0;
  while ((int64_t(1) << shift) < per_row) ++shift;
  p.shift = shift;
  p.magic = per_row < (int64_t(1) << 32)
                ? uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(per_row)) / uint64_t(per_row) + 1)
                : 0u;
}

template <typename T, bool VEC>
struct Walk {
  static constexpr int kN = VEC ? Vec<T>::kN : 1;
  // element offsets of vector v in a [rows, I] tensor and in h's gate half ([rows, 2I]; up is + I further)
  __device__ __forceinline__ static void at(const Params& p, int64_t v, int64_t& in_out, int64_t& in_h) {
    int64_t r;
    if (p.n <= 0xffffffffLL) {
      const uint32_t v32 = uint32_t(v);
      r = int64_t((uint64_t(__umulhi(v32, p.magic)) + v32) >> p.shift);
    } else {
      r = v / p.per_row;
    }
    const int64_t c = (v - r * p.per_row) * kN;
    in_out = r * p.inner + c;
    in_h = r * 2 * p.inner + c;
  }
};

template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads, kMinBlocks) forward_kernel(const Params p) {
  using W = Walk<T, VEC>;
  const T* h = static_cast<const T*>(p.h);
  T* out = static_cast<T*>(p.out);
  const int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  if constexpr (VEC) {
    Vec<T> g[kUnroll], u[kUnroll];
    int64_t o[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        int64_t ih;
        W::at(p, v, o[j], ih);
        g[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih));
        u[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih + p.inner));
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        Vec<T> y;
#pragma unroll
        for (int i = 0; i < W::kN; ++i) y.set(i, silu(g[j].get(i)) * u[j].get(i));
        *reinterpret_cast<uint4*>(out + o[j]) = y.w;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        int64_t o, ih;
        W::at(p, v, o, ih);
        Vec<T> y;
        y.set(0, silu(float(h[ih])) * float(h[ih + p.inner]));
        out[o] = reinterpret_cast<const T*>(&y.w)[0];
      }
    }
  }
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads, kMinBlocks) backward_kernel(const Params p) {
  using W = Walk<T, VEC>;
  const T* h = static_cast<const T*>(p.h);
  const T* dout = static_cast<const T*>(p.dout);
  T* dh = static_cast<T*>(p.out);
  const int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  if constexpr (VEC) {
    Vec<T> g[kUnroll], u[kUnroll], d[kUnroll];
    int64_t ih[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        int64_t o;
        W::at(p, v, o, ih[j]);
        g[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih[j]));
        u[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih[j] + p.inner));
        d[j].w = __ldg(reinterpret_cast<const uint4*>(dout + o));
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        Vec<T> dg, du;
#pragma unroll
        for (int i = 0; i < W::kN; ++i) {
          float a, b;
          silu_mul_backward(g[j].get(i), u[j].get(i), d[j].get(i), a, b);
          dg.set(i, a);
          du.set(i, b);
        }
        *reinterpret_cast<uint4*>(dh + ih[j]) = dg.w;
        *reinterpret_cast<uint4*>(dh + ih[j] + p.inner) = du.w;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < p.n) {
        int64_t o, ih;
        W::at(p, v, o, ih);
        float a, b;
        silu_mul_backward(float(h[ih]), float(h[ih + p.inner]), float(dout[o]), a, b);
        Vec<T> y;
        y.set(0, a);
        y.set(1, b);
        dh[ih] = reinterpret_cast<const T*>(&y.w)[0];
        dh[ih + p.inner] = reinterpret_cast<const T*>(&y.w)[1];
      }
    }
  }
}

// One launch; 0 or a cudaError_t. VEC when I is a multiple of a vector and every pointer 16-byte aligned (the
// caller's check: it knows the tensors).
template <typename T>
int launch(Params p, bool backward, bool vec, cudaStream_t stream) {
  const int64_t per_row = vec ? p.inner / Vec<T>::kN : p.inner;
  p.n = p.rows * per_row;
  if (p.n == 0) return 0;
  set_divisor(p, per_row);
  const int64_t per_block = int64_t(kThreads) * kUnroll;
  const int64_t blocks = (p.n + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  if (backward) {
    if (vec) backward_kernel<T, true><<<grid, kThreads, 0, stream>>>(p);
    else backward_kernel<T, false><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (vec) forward_kernel<T, true><<<grid, kThreads, 0, stream>>>(p);
    else forward_kernel<T, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::swiglu
