"""scalemm: CUTLASS low-precision GEMMs (FP8, NVFP4, MXFP8) and the quantization kernels that feed them."""
__version__ = "0.1.0"

from .gemm import gemm

__all__ = ["gemm", "__version__"]
