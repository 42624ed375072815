"""scalemm: CUTLASS low-precision GEMMs (FP8, NVFP4, MXFP8) and the quantization kernels that feed them.

Public names: quantize_nvfp4, quantize_fp8, quantize_mxfp8 (-> NVFP4Tensor, FP8Tensor,
MXFP8Tensor); their grouped (MoE, device offsets), stacked-expert and residual forms; gemm,
grouped_gemm, grouped_gemm_wgrad; swiglu (the MLP / MoE activation, one pass each way); scalemm.nn
(FP8Linear for inference; Linear, GroupedLinear and convert for training, on the recipes of scalemm.recipes:
docs/training.md). scalemm.reference is the pure-torch spec of every op, scalemm.formats the formats (containers,
scale layouts), scalemm.epilogues the EVT tree builder, scalemm.cutlass_kernels the configs (one module per GPU
architecture), scalemm.arch which GPUs have kernels, scalemm.tune / scalemm.tuning per-shape tuning with a
persistent cache.
"""
__version__ = "0.1.0"

from . import nn, recipes, reference
from .formats import (FP8, MXFP8, NVFP4, FP8Tensor, GroupedFP8Tensor, GroupedMXFP8, GroupedNVFP4Tensor, MXFP8Tensor,
                      NVFP4Tensor)
from .activation import swiglu
from .gemm import gemm
from .grouped import grouped_gemm, grouped_gemm_wgrad
from .quantize import quantize_fp8, quantize_mxfp8, quantize_nvfp4
from .quantize_grouped import (prepare_residual_weight, quantize_fp8_grouped, quantize_fp8_stacked,
                               quantize_fp8_stacked_pair, quantize_mxfp8_grouped, quantize_nvfp4_grouped,
                               quantize_nvfp4_residual, quantize_nvfp4_stacked)
from .tuning import tune

__all__ = ["quantize_nvfp4", "quantize_fp8", "quantize_mxfp8", "quantize_fp8_grouped", "quantize_nvfp4_grouped",
           "quantize_mxfp8_grouped", "quantize_fp8_stacked", "quantize_fp8_stacked_pair", "quantize_nvfp4_stacked",
           "quantize_nvfp4_residual", "prepare_residual_weight", "swiglu", "gemm", "grouped_gemm", "grouped_gemm_wgrad",
           "tune",
           "NVFP4Tensor", "FP8Tensor", "MXFP8Tensor", "GroupedFP8Tensor", "GroupedNVFP4Tensor", "GroupedMXFP8",
           "NVFP4", "MXFP8", "FP8", "reference", "nn", "recipes", "__version__"]
