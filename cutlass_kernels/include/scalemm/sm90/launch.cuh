// Host-side helpers every SM90 CUTLASS launcher shares: status codes, the device's SM count,
// tile-scheduler knobs, and can_implement -> workspace -> initialize -> run.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

#include "scalemm/abi.h"

namespace scalemm::sm90 {

inline int status_code(cutlass::Status s) {
  return s == cutlass::Status::kSuccess ? 0 : kCutlassStatusBase + static_cast<int>(s);
}

// Multiprocessor count per device, queried once (cudaDeviceGetAttribute is cheap but not free).
inline int sm_count(int device) {
  static int cached[64] = {0};
  if (device < 0 || device >= 64) return 0;
  if (cached[device] == 0) cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
  return cached[device];
}

inline cutlass::KernelHardwareInfo hardware_info(int device) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = sm_count(device);
  return hw;
}

// raster: 0 along M, 1 along N, 2 CUTLASS's heuristic; splits: stream-K only (1 = heuristic).
template <class Kernel, bool kStreamK, class Arguments>
inline void set_scheduler_options(Arguments& args, int64_t raster, int64_t swizzle, int64_t splits) {
  using RasterOrder = typename Kernel::TileScheduler::RasterOrderOptions;
  args.scheduler.raster_order = raster == 0 ? RasterOrder::AlongM : raster == 1 ? RasterOrder::AlongN
                                                                                 : RasterOrder::Heuristic;
  args.scheduler.max_swizzle_size = int(swizzle);
  if constexpr (kStreamK) args.scheduler.splits = int(splits);
}

// Ptr-array (grouped) kernels keep one TMA descriptor per SM and operand in CUTLASS's workspace and
// write each slot with tensormap.cp_fenceproxy before any TMA reads it, so its old contents never
// matter. But that copy lowers to per-lane ATOMG.EXCH (32 lanes x 4 bytes a 128-byte slot), whose
// discarded old value compute-sanitizer's initcheck reports as an uninitialised read whenever the
// allocation was never written (thousands of benign reports that would hide a real one). With
// SCALEMM_ZERO_WORKSPACE=1 in the environment (scripts/device_run.sh's sanitize stage sets it) the
// grouped setup kernels zero that workspace first; otherwise they skip it, so the GEMMs' hot path
// pays nothing for a sanitizer's sake. `workspace_bytes_to_zero(n)`: n when asked for, else 0.
inline int64_t workspace_bytes_to_zero(int64_t bytes) {
  static bool const on = [] {
    char const* v = std::getenv("SCALEMM_ZERO_WORKSPACE");
    return v != nullptr && v[0] == '1';
  }();
  return on ? bytes : 0;
}

template <class Gemm>
inline int launch(typename Gemm::Arguments const& args, void* workspace, int64_t workspace_bytes,
                  cudaStream_t stream) {
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return kCannotImplement;
  if (static_cast<int64_t>(Gemm::get_workspace_size(args)) > workspace_bytes) return kWorkspaceTooSmall;
  int rc = status_code(gemm.initialize(args, workspace, stream));
  if (rc) return rc;
  rc = status_code(gemm.run(stream));
  if (rc) return rc;
  return static_cast<int>(cudaGetLastError());
}

}  // namespace scalemm::sm90
