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
constexpr int kUnroll = 4;  // 16-byte vectors per thread: four loads of each input in flight before any math
// CTAs per SM the kernels are compiled for: 2 (<= 128 registers; the bf16 backward takes 124, and at 3 both bf16
// kernels spill). Two CTAs keep 64 KB (forward) / 96 KB (backward) of loads in flight per SM, more than HBM needs.
constexpr int kMinBlocks = 2;

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

// One element's forward and backward, in torch's formulas (fp32; expf is CUDA's accurate exp, never __expf).
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ void silu_mul_backward(float g, float u, float d, float& dg, float& du) {
  const float s = 1.0f / (1.0f + expf(-g));
  du = d * (g * s);
  dg = d * u * (s * (1.0f + g * (1.0f - s)));
}

// Rows of I elements; the kernels walk 16-byte vectors (VEC: I % Vec<T>::kN == 0 and 16-byte aligned tensors) or
// single elements (any I), n of them in all, and find each one's row and column by one division.
struct Params {
  const void* h;     // [rows, 2I]
  const void* dout;  // [rows, I] (backward)
  void* out;         // forward: [rows, I]; backward: dh [rows, 2I]
  int64_t rows, inner;
};

template <typename T, bool VEC>
struct Walk {
  static constexpr int kN = VEC ? Vec<T>::kN : 1;
  int64_t per_row, n;
  __device__ explicit Walk(const Params& p) : per_row(p.inner / kN), n(p.rows * (p.inner / kN)) {}
  // element offsets of vector v in a [rows, I] tensor and in h's gate half ([rows, 2I]; up is + I further)
  __device__ __forceinline__ void at(int64_t v, int64_t inner, int64_t& in_out, int64_t& in_h) const {
    // a 32-bit division where n fits (uniform branch; a 64-bit one is a call of ~70 instructions)
    const int64_t r = n <= 0xffffffffLL ? int64_t(uint32_t(v) / uint32_t(per_row)) : v / per_row;
    const int64_t c = (v - r * per_row) * kN;
    in_out = r * inner + c;
    in_h = r * 2 * inner + c;
  }
};

template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads, kMinBlocks) forward_kernel(const Params p) {
  using W = Walk<T, VEC>;
  const W walk(p);
  const T* h = static_cast<const T*>(p.h);
  T* out = static_cast<T*>(p.out);
  const int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  if constexpr (VEC) {
    Vec<T> g[kUnroll], u[kUnroll];
    int64_t o[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < walk.n) {
        int64_t ih;
        walk.at(v, p.inner, o[j], ih);
        g[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih));
        u[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih + p.inner));
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < walk.n) {
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
      if (v < walk.n) {
        int64_t o, ih;
        walk.at(v, p.inner, o, ih);
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
  const W walk(p);
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
      if (v < walk.n) {
        int64_t o;
        walk.at(v, p.inner, o, ih[j]);
        g[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih[j]));
        u[j].w = __ldg(reinterpret_cast<const uint4*>(h + ih[j] + p.inner));
        d[j].w = __ldg(reinterpret_cast<const uint4*>(dout + o));
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t v = base + int64_t(j) * kThreads;
      if (v < walk.n) {
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
      if (v < walk.n) {
        int64_t o, ih;
        walk.at(v, p.inner, o, ih);
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
int launch(const Params& p, bool backward, bool vec, cudaStream_t stream) {
  const int64_t n = p.rows * (vec ? p.inner / Vec<T>::kN : p.inner);
  if (n == 0) return 0;
  const int64_t per_block = int64_t(kThreads) * kUnroll;
  const int64_t blocks = (n + per_block - 1) / per_block;
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
