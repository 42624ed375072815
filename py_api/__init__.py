"""scalemm: CUTLASS low-precision GEMMs (FP8, NVFP4, MXFP8) and the quantization kernels that feed them.

Public names: quantize_nvfp4, quantize_fp8, quantize_mxfp8 (-> NVFP4Tensor, FP8Tensor,
MXFP8Tensor), gemm, grouped_gemm; scalemm.reference is the pure-torch spec of every op,
scalemm.epilogues the EVT tree builder, scalemm.cutlass_kernels the kernel configs.
"""
__version__ = "0.1.0"

from . import reference
from .formats import FP8, MXFP8, NVFP4
from .gemm import gemm
from .grouped import grouped_gemm, grouped_gemm_wgrad
from .quantize import quantize_fp8, quantize_mxfp8, quantize_nvfp4
from .tensors import FP8Tensor, MXFP8Tensor, NVFP4Tensor

__all__ = ["quantize_nvfp4", "quantize_fp8", "quantize_mxfp8", "gemm", "grouped_gemm", "grouped_gemm_wgrad",
           "NVFP4Tensor", "FP8Tensor", "MXFP8Tensor", "NVFP4", "MXFP8", "FP8", "reference", "__version__"]
