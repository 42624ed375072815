// FP8 delayed scaling's amax history step (scalemm/amax_history.cuh): its extern "C" launcher.
#include "scalemm/abi.h"
#include "scalemm/amax_history.cuh"

extern "C" int scalemm_advance_amax_history(scalemm::AmaxHistoryArgs const* a) {
  return scalemm::delayed::launch_advance(static_cast<float*>(a->history), a->rows, a->cols,
                                          static_cast<const float*>(a->amax), static_cast<float*>(a->next_amax),
                                          static_cast<float*>(a->used), static_cast<cudaStream_t>(a->stream));
}
