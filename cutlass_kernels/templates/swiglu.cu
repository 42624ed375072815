// SwiGLU forward and backward for one dtype ({{IN_T}}): extern "C" launchers over scalemm/swiglu.cuh, each taking
// abi.h's SwigluArgs. Each returns 0 or a cudaError_t; none allocates or synchronises.
#include "scalemm/abi.h"
#include "scalemm/swiglu.cuh"

using InT = {{IN_T}};
namespace sw = scalemm::swiglu;

static int run(scalemm::SwigluArgs const* a, bool backward) {
  sw::Params p{};
  p.h = a->h;
  p.dout = a->dout;
  p.out = a->out;
  p.rows = a->rows;
  p.inner = a->inner;
  return sw::launch<InT>(p, backward, a->vec != 0, static_cast<cudaStream_t>(a->stream));
}

extern "C" int scalemm_swiglu_forward(scalemm::SwigluArgs const* a) { return run(a, false); }
extern "C" int scalemm_swiglu_backward(scalemm::SwigluArgs const* a) { return run(a, true); }
