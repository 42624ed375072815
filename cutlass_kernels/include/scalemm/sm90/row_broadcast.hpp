/*
 * scalemm: a row-vector broadcast for the SM90 epilogue (EVT) that loads each thread's columns straight from global
 * memory into registers, as CUTLASS's Sm90ColBroadcast does for column vectors. The dense FP8 GEMM's swap-AB kernels
 * (few tokens on the tile's N side) take it for their row vectors (the tokens' scale_a, one value per tile column):
 * CUTLASS 4.2's Sm90RowBroadcast copies the tile's slice gmem -> smem in the consumer's begin() (after the main loop),
 * syncs the consumer threads, then copies smem -> registers, and with one tile per CTA (decode) that round trip is
 * exposed; this node needs one load and no sync (perf/results/h100/fp8_decode_clusters/README.txt, items 9-11).
 * Wide rows (the unswapped 64x128 tile's 128 weight columns) lost with it there, so those keep CUTLASS's node.
 *
 * Derived from CUTLASS's Sm90ColBroadcast (cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp,
 * BSD-3-Clause, Copyright (c) 2023 - 2025 NVIDIA CORPORATION & AFFILIATES) with the roles of M and N exchanged.
 */
#pragma once

#include "scalemm/sm90/gemm.cuh"
#include "cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp"

// In CUTLASS's namespace so that the body reads as the original it derives from (its unqualified names resolve the
// same way); the name is scalemm's.
namespace cutlass::epilogue::fusion {

template<
  int Stages,
  class CtaTileShapeMNK,
  class ElementInput_,
  class ElementCompute = cute::remove_pointer_t<ElementInput_>,
  class StrideMNL_ = Stride<_0,_1,_0>,
  int Alignment = 128 / sizeof_bits_v<cute::remove_pointer_t<ElementInput_>>,
  bool EnableNullptr = true // Fallback scalar broadcast for nullptr params
>
struct ScalemmRowBroadcastToRegisters {
  using StrideMNL = StrideMNL_;
  // Get base element input type.
  using ElementInput = cute::remove_pointer_t<ElementInput_>;
  // Check if input is an array of pointers.
  static constexpr bool IsArrayOfPointers = is_same_v<ElementInput*, ElementInput_>;
  using PtrRowType = cute::conditional_t<IsArrayOfPointers, ElementInput const* const*, ElementInput const*>;

  static_assert(Stages == 0, "no smem pipelining: the row slice goes straight to registers");

  static constexpr bool IsDynamicBroadcast = is_same_v<remove_cvref_t<decltype(get<1>(StrideMNL{}))>, bool>; // Row vector or scalar broadcast
  static_assert(is_static_v<decltype(take<0,2>(StrideMNL{}))> || IsDynamicBroadcast); // batch stride can be dynamic or static
  static_assert(take<0,2>(StrideMNL{}) == Stride<_0,_1>{} || IsDynamicBroadcast);

  // Each thread loads the columns of its accumulator fragment straight from gmem (stride-0 rows filtered out)
  struct SharedStorage { };

  struct Arguments {
    PtrRowType ptr_row = nullptr;
    ElementInput null_default = ElementInput(0);
    StrideMNL dRow = {};
  };

  struct Params {
    PtrRowType ptr_row = nullptr;
    ElementCompute null_default = ElementCompute(0);
    StrideMNL dRow = {};
  };

  template <class ProblemShape>
  static constexpr Params
  to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    return {args.ptr_row, ElementCompute(args.null_default), args.dRow};
  }

  template <class ProblemShape>
  static bool
  can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    return true;
  }

  template <class ProblemShape>
  static size_t
  get_workspace_size(ProblemShape const& problem_shape, Arguments const& args) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status
  initialize_workspace(ProblemShape const& problem_shape, Arguments const& args, void* workspace, cudaStream_t stream,
    CudaHostAdapter* cuda_adapter = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_DEVICE bool
  is_producer_load_needed() const {
    return false;
  }

  CUTLASS_DEVICE bool
  is_C_load_needed() const {
    return false;
  }

  CUTLASS_DEVICE bool
  is_zero() const {
    return is_zero_;
  }

  CUTLASS_HOST_DEVICE
  ScalemmRowBroadcastToRegisters() { }

  CUTLASS_HOST_DEVICE
  ScalemmRowBroadcastToRegisters(Params const& params, SharedStorage const& shared_storage)
      : params(params), is_zero_(false) {
    auto const& [stride_M, stride_N, stride_L] = params.dRow;
    // Nullptr default
    if (EnableNullptr && params.ptr_row == nullptr) {
      is_zero_ = params.null_default == ElementCompute(0);
    }
    // Dynamic non-batched scalar broadcast
    else if (IsDynamicBroadcast && stride_N == bool(0) && stride_L == repeat_like(stride_L, 0)) {
       if constexpr (!IsArrayOfPointers) {
         is_zero_ = params.ptr_row[0] == ElementInput(0);
       }
    }
  }

  Params params;
  bool is_zero_;

  template <class... Args>
  CUTLASS_DEVICE auto
  get_producer_load_callbacks(ProducerLoadArgs<Args...> const& args) {
    return EmptyProducerLoadCallbacks{};
  }

  template<class GTensor, class RTensor, class CTensor, class ThrResidue>
  struct ConsumerStoreCallbacks : EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE
    ConsumerStoreCallbacks(GTensor tCgRow_, RTensor tCrRow_, CTensor tCcRow_, ThrResidue residue_tCcRow_, Params const& params_)
      : tCgRow(tCgRow_),
        tCrRow(tCrRow_),
        tCcRow(tCcRow_),
        residue_tCcRow(residue_tCcRow_),
        params(params_) {
      if (EnableNullptr && params.ptr_row == nullptr) {
        fill(tCrRow, params.null_default);
      }
    }

    GTensor tCgRow;                                                                    // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    RTensor tCrRow;                                                                    // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    CTensor tCcRow;                                                                    // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    ThrResidue residue_tCcRow;
    Params const& params;

    CUTLASS_DEVICE void
    begin() {
      if (EnableNullptr && params.ptr_row == nullptr) {
        return;
      }

      // Filter so we don't issue redundant copies over stride-0 modes
      // (only works if 0-strides are in same location, which is by construction)
      Tensor tCgRow_flt = filter_zeros(tCgRow);
      Tensor tCrRow_flt = make_tensor_like<ElementInput>(filter_zeros(tCrRow));
      Tensor tCcRow_flt = filter_zeros(tCcRow, tCgRow.stride());

      constexpr auto MCL = decltype(max_common_layout(tCgRow_flt, tCrRow_flt)){};
      constexpr int V = cute::min(Alignment, size(MCL));
      if constexpr (V > 1) {
        using VecType = uint_bit_t<V * sizeof_bits_v<ElementInput>>;
        Tensor tCgRow_vec = recast<VecType>(coalesce(tCgRow_flt));
        Tensor tCrRow_vec = recast<VecType>(coalesce(tCrRow_flt));
        Tensor tCcRow_vec = tensor<1>(zipped_divide(tCcRow_flt, MCL.compose(Int<V>{})));
        Tensor tCpRow_vec = cute::lazy::transform(tCcRow_vec, [&](auto const& c){ return elem_less(c, residue_tCcRow); });
        copy_if(tCpRow_vec, tCgRow_vec, tCrRow_vec);
      }
      else {
        Tensor tCpRow_flt = cute::lazy::transform(tCcRow_flt, [&](auto const& c){ return elem_less(c, residue_tCcRow); });
        copy_if(tCpRow_flt, tCgRow_flt, tCrRow_flt);
      }

      constexpr int FrgSize = size(tCrRow_flt);
      using FrgInput = Array<ElementInput, FrgSize>;
      using FrgCompute = Array<ElementCompute, FrgSize>;
      using ConvertInput = NumericArrayConverter<ElementCompute, ElementInput, FrgSize>;

      Tensor tCrRow_input_frg = recast<FrgInput>(coalesce(tCrRow_flt));
      Tensor tCrRow_compute_frg = recast<FrgCompute>(filter(tCrRow));
      ConvertInput convert_input{};

      tCrRow_compute_frg(_0{}) = convert_input(tCrRow_input_frg(_0{}));
    }

    template <typename ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE Array<ElementCompute, FragmentSize>
    visit(Array<ElementAccumulator, FragmentSize> const& frg_acc, int epi_v, int epi_m, int epi_n) {
      Array<ElementCompute, FragmentSize> frg_row;
      Tensor tCrRow_mn = tCrRow(_,_,_,epi_m,epi_n);

      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        frg_row[i] = tCrRow_mn(epi_v * FragmentSize + i);
      }

      return frg_row;
    }

  };

  template <
    bool ReferenceSrc, // do register tensors reference the src or dst layout of the tiled copy
    class... Args
  >
  CUTLASS_DEVICE auto
  get_consumer_store_callbacks(ConsumerStoreArgs<Args...> const& args) {

    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    auto layout_N = [&] () CUTLASS_LAMBDA_FUNC_INLINE {
      auto shape_N = get<1>(args.problem_shape_mnkl);
      if constexpr (IsDynamicBroadcast) {
        auto stride_N = repeat_like(shape_N, int(0));
        if (get<1>(params.dRow) == bool(1)) {
          stride_N = transform_leaf(compact_major<LayoutLeft>(shape_N),
            [] (auto const& stride) { return static_cast<int>(stride); }
          );
        }
        return make_layout(shape_N, stride_N);
      }
      else {
        return make_layout(shape_N);
      }
    }();

    auto layout_M = make_layout(M, repeat_like(M, _0{}));
    auto layout_L = make_layout(L, get<2>(params.dRow));
    ElementInput const* ptr_row = nullptr;
    if constexpr(IsArrayOfPointers) {
      if (!(EnableNullptr && params.ptr_row == nullptr)) {
        ptr_row = params.ptr_row[l];
      }
    } else {
      ptr_row = params.ptr_row;
    }
    Tensor mRow = make_tensor(make_gmem_ptr(ptr_row), make_layout(layout_M,layout_N,layout_L));
    Tensor tCgRow = sm90_partition_for_epilogue<ReferenceSrc>(                         // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
      mRow, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy, args.thread_idx);

    Tensor mRow_static = make_tensor(make_gmem_ptr(ptr_row), make_layout(layout_M,make_layout(N),layout_L));
    Tensor tCgRow_static = sm90_partition_for_epilogue<ReferenceSrc>(                  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
      mRow_static, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy, args.thread_idx);
    Tensor tCrRow = make_tensor_like<ElementCompute>(tCgRow_static);                   // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)

    return ConsumerStoreCallbacks(tCgRow, tCrRow, args.tCcD, args.residue_tCcD, params);
  }
};

}  // namespace cutlass::epilogue::fusion
