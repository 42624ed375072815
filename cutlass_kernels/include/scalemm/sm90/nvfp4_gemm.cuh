// scalemm: SM90 NVFP4-weight GEMM (exact emulation on bf16 tensor cores) with an EVT epilogue.
//
// D [tokens, N] = Evt(X [tokens, K] @ dequant(W [N, K])^T), computed as D^T = W X^T so the
// weights are the register-sourced wgmma operand (scalemm/sm90/nvfp4_mainloop.hpp): the kernel's
// problem is (M, N, K) = (N_w, tokens, K) and its column-major D^T is our row-major D. ElementB is
// the activations' type: bf16/fp16 (W4A16), or Nvfp4Activations (W4A4, decoded in the mainloop).
// TokensOnA (W4A4 on many tokens): computed unswapped, D = X W^T, with the NVFP4 activations as the
// register-sourced operand (in their own code order) and the weights' exact bf16 decode as B; the
// kernel's problem is (tokens, N_w, K), its D row-major, and Nvfp4GemmArgs' weight / weight_scales /
// n are the activations' codes / scales / rows, x / tokens the bf16 weights / their rows.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/util/packed_stride.hpp"

#include "scalemm/abi.h"
#include "scalemm/sm90/launch.cuh"
#include "scalemm/sm90/nvfp4_mainloop.hpp"

namespace scalemm::sm90 {

template <class ElementB, class ElementD, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule, class Evt, class TileScheduler = void, bool TokensOnA = false>
struct Nvfp4Gemm {
  // D^T [N_w, tokens] column-major == D row-major; tokens on A: D itself
  using LayoutD = cute::conditional_t<TokensOnA, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, EpilogueSchedule, Evt>::CollectiveOp;

  static constexpr int kStages = nvfp4_stages<TileShape, ElementB>(
      int(sizeof(typename CollectiveEpilogue::SharedStorage)) + 1024);
  static_assert(kStages >= 2, "tile too large for two pipeline stages");

  using CollectiveMainloop = Nvfp4Mainloop<TileShape, ClusterShape, KernelSchedule, ElementB, kStages, TokensOnA>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr bool kStreamK = cute::is_same_v<TileScheduler, cutlass::gemm::StreamKScheduler>;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  using StrideC = typename Gemm::GemmKernel::StrideC;

  static typename Gemm::Arguments arguments(Nvfp4GemmArgs const& a, typename Evt::Arguments const& evt_args) {
    int const M = int(a.n), N = int(a.tokens), K = int(a.k);
    typename CollectiveMainloop::Arguments mainloop;
    mainloop.weight = static_cast<uint8_t const*>(a.weight);
    mainloop.x = a.x;
    mainloop.x_scales = static_cast<uint8_t const*>(a.x_scales);
    mainloop.scales = static_cast<uint8_t const*>(a.weight_scales);
    mainloop.n = M;
    mainloop.k = K;
    mainloop.x_rows = N;
    mainloop.k_pad = a.k_pad;
    mainloop.scale_atoms_per_row_tile = a.scale_cols / 4;
    mainloop.scale_batch_bytes = (int64_t(M) + kScaleAtomRows - 1) / kScaleAtomRows * kScaleAtomRows * a.scale_cols;
    auto stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, 1));
    auto stride_c = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, 1));
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, 1},
                                  mainloop,
                                  {evt_args, nullptr, stride_c, static_cast<ElementD*>(a.d), stride_d},
                                  hardware_info(int(a.device))};
    set_scheduler_options<Kernel, kStreamK>(args, a.raster, a.swizzle, a.splits);
    return args;
  }

  // The workspace this call needs (stream-K's partial sums and locks; 0 without stream-K), as CUTLASS sizes it
  // for this problem and GPU: host only.
  static int workspace_bytes(Nvfp4GemmArgs const& a, typename Evt::Arguments const& evt_args, int64_t* bytes) {
    *bytes = static_cast<int64_t>(Gemm::get_workspace_size(arguments(a, evt_args)));
    return 0;
  }

  static int run(Nvfp4GemmArgs const& a, typename Evt::Arguments const& evt_args) {
    cudaError_t err = cudaSetDevice(int(a.device));  // our static cudart tracks its own device
    if (err != cudaSuccess) return static_cast<int>(err);
    return launch<Gemm>(arguments(a, evt_args), a.workspace, a.workspace_bytes, static_cast<cudaStream_t>(a.stream));
  }
};

}  // namespace scalemm::sm90
