"""scalemm's ops as torch.library custom ops, so torch.compile can trace through them.

The public functions (scalemm.gemm, grouped_gemm, quantize_fp8) launch kernels through ctypes,
which dynamo cannot trace. The ops below wrap them with tensor-only signatures and fake
(meta) implementations that give output shapes without running anything, so a compiled
graph treats each as one opaque node (and CUDA graphs, e.g. mode="reduce-overhead", capture
the launches: they never synchronise with the host).

    y = torch.ops.scalemm.gemm(a, b, scale_a, scale_b, bias, torch.bfloat16, fast_accum)

Containers do not cross the op boundary: quantize_fp8 returns (data, scale_inv).
"""
from __future__ import annotations

from typing import Optional

import torch

from .gemm import gemm as _gemm
from .grouped import grouped_gemm as _grouped_gemm
from .quantize import quantize_fp8 as _quantize_fp8

__all__ = ["gemm", "grouped_gemm", "quantize_fp8"]


@torch.library.custom_op("scalemm::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
         bias: Optional[torch.Tensor], out_dtype: torch.dtype, fast_accum: bool) -> torch.Tensor:
    """scalemm.gemm as a custom op (same arguments, same checks)."""
    return _gemm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, fast_accum=fast_accum)


@gemm.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, fast_accum):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("scalemm::grouped_gemm", mutates_args=())
def grouped_gemm(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor, scale_a: torch.Tensor,
                 scale_b: torch.Tensor, bias: Optional[torch.Tensor], out_dtype: torch.dtype,
                 fast_accum: bool, scale_a_per: Optional[str]) -> torch.Tensor:
    """scalemm.grouped_gemm as a custom op (rows past offsets[-1] are unspecified, as there)."""
    return _grouped_gemm(a, b, offsets, scale_a, scale_b, bias=bias, out_dtype=out_dtype,
                         fast_accum=fast_accum, scale_a_per=scale_a_per)


@grouped_gemm.register_fake
def _(a, b, offsets, scale_a, scale_b, bias, out_dtype, fast_accum, scale_a_per):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@torch.library.custom_op("scalemm::quantize_fp8", mutates_args=())
def quantize_fp8(x: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """scalemm.quantize_fp8 (rowwise copy) as a custom op: (data e4m3 [M, K], scale_inv fp32)."""
    q = _quantize_fp8(x, scaling=scaling)
    return q.data, q.scale_inv


@quantize_fp8.register_fake
def _(x, scaling):
    M, K = x.reshape(-1, x.shape[-1]).shape
    scale_shape = (M,) if scaling == "token" else ()
    return (x.new_empty((M, K), dtype=torch.float8_e4m3fn), x.new_empty(scale_shape, dtype=torch.float32))
