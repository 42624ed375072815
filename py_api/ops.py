"""scalemm's ops as torch.library custom ops, so torch.compile can trace through them.

The public functions (scalemm.gemm, grouped_gemm, the quantizers) launch kernels through ctypes,
which dynamo cannot trace. The ops below wrap them with tensor-only signatures and fake
(meta) implementations that give output shapes without running anything, so a compiled
graph treats each as one opaque node (and CUDA graphs, e.g. mode="reduce-overhead", capture
the launches: they never synchronise with the host).

    y = torch.ops.scalemm.gemm(a, b, scale_a, scale_b, bias, torch.bfloat16, fast_accum)

Containers do not cross the op boundary: the quantize ops return the rowwise copy's tensors
(quantize_fp8: (data, scale_inv); quantize_nvfp4: (qdata, scales, alpha, amax); ...). Options
that are not tensor-only (columnwise copies, RHT, stochastic rounding with a 64-bit seed) stay
with the public functions.
"""
from __future__ import annotations

from typing import Optional

import torch

from .formats.base import Shapes
from .formats.fp8 import fp8_shapes, grouped_fp8_shapes
from .formats.mxfp8 import mxfp8_shapes
from .formats.nvfp4 import grouped_nvfp4_shapes, nvfp4_shapes
from .gemm import gemm as _gemm
from .grouped import grouped_gemm as _grouped_gemm
from .quantize import quantize_fp8 as _quantize_fp8
from .quantize import quantize_mxfp8 as _quantize_mxfp8
from .quantize import quantize_nvfp4 as _quantize_nvfp4
from .quantize_grouped import quantize_fp8_grouped as _quantize_fp8_grouped
from .quantize_grouped import quantize_nvfp4_grouped as _quantize_nvfp4_grouped

__all__ = ["gemm", "grouped_gemm", "quantize_fp8", "quantize_nvfp4", "quantize_mxfp8", "quantize_fp8_grouped",
           "quantize_nvfp4_grouped"]


def _fake(x: torch.Tensor, shapes: Shapes, fields) -> tuple:
    """Fake tensors (on x's device) for `fields` of a format module's shapes: the CUDA path allocates
    its outputs from the same shapes."""
    return tuple(x.new_empty(shapes[f][0], dtype=shapes[f][1]) for f in fields)


def _rows(x: torch.Tensor) -> tuple[int, int]:
    return x.reshape(-1, x.shape[-1]).shape


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
                 fast_accum: bool, scale_a_per: Optional[str], scale_b_per: Optional[str] = None) -> torch.Tensor:
    """scalemm.grouped_gemm as a custom op (rows past offsets[-1] are unspecified, as there)."""
    return _grouped_gemm(a, b, offsets, scale_a, scale_b, bias=bias, out_dtype=out_dtype,
                         fast_accum=fast_accum, scale_a_per=scale_a_per, scale_b_per=scale_b_per)


@grouped_gemm.register_fake
def _(a, b, offsets, scale_a, scale_b, bias, out_dtype, fast_accum, scale_a_per, scale_b_per=None):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@torch.library.custom_op("scalemm::quantize_fp8", mutates_args=())
def quantize_fp8(x: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """scalemm.quantize_fp8 (rowwise copy) as a custom op: (data e4m3 [M, K], scale_inv fp32)."""
    q = _quantize_fp8(x, scaling=scaling)
    return q.data, q.scale_inv


@quantize_fp8.register_fake
def _(x, scaling):
    return _fake(x, fp8_shapes(*_rows(x), scaling), ("data", "scale_inv"))


@torch.library.custom_op("scalemm::quantize_nvfp4", mutates_args=())
def quantize_nvfp4(x: torch.Tensor, scaling: str, amax: Optional[torch.Tensor]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scalemm.quantize_nvfp4 (rowwise copy, RNE) as a custom op: (qdata uint8 [M, K/2], scales
    float8_e4m3fn swizzled [Rp*Cp], alpha fp32, amax fp32; 0-d for "tensor", [M] for "token")."""
    q = _quantize_nvfp4(x, scaling=scaling, amax=amax)
    return q.qdata, q.scales, q.alpha, q.amax.clone() if amax is not None else q.amax


@quantize_nvfp4.register_fake
def _(x, scaling, amax):
    return _fake(x, nvfp4_shapes(*_rows(x), scaling), ("qdata", "scales", "alpha", "amax"))


@torch.library.custom_op("scalemm::quantize_mxfp8", mutates_args=())
def quantize_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scalemm.quantize_mxfp8 (rowwise copy) as a custom op: (data e4m3 [M, K], scales uint8 e8m0
    swizzled [Rp*Cp])."""
    q = _quantize_mxfp8(x)
    return q.data, q.scales


@quantize_mxfp8.register_fake
def _(x):
    return _fake(x, mxfp8_shapes(*_rows(x)), ("data", "scales"))


@torch.library.custom_op("scalemm::quantize_fp8_grouped", mutates_args=())
def quantize_fp8_grouped(x: torch.Tensor, offsets: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """scalemm.quantize_fp8_grouped (rowwise copy) as a custom op: (data e4m3 [T, K], scale_inv
    fp32 [G] or [T])."""
    q = _quantize_fp8_grouped(x, offsets, scaling=scaling)
    return q.data, q.scale_inv


@quantize_fp8_grouped.register_fake
def _(x, offsets, scaling):
    T, K = x.shape
    return _fake(x, grouped_fp8_shapes(T, K, offsets.shape[0], scaling), ("data", "scale_inv"))


@torch.library.custom_op("scalemm::quantize_nvfp4_grouped", mutates_args=())
def quantize_nvfp4_grouped(x: torch.Tensor, offsets: torch.Tensor, scaling: str
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scalemm.quantize_nvfp4_grouped (rowwise copy, RNE) as a custom op: (qdata uint8 [T, K/2],
    scales float8_e4m3fn [grouped_scale_rows(T, G) * Cp], sf_offsets int32 [G], alpha, amax fp32
    [G] or [T])."""
    q = _quantize_nvfp4_grouped(x, offsets, scaling=scaling)
    return q.qdata, q.scales, q.sf_offsets, q.alpha, q.amax


@quantize_nvfp4_grouped.register_fake
def _(x, offsets, scaling):
    T, K = x.shape
    return _fake(x, grouped_nvfp4_shapes(T, K, offsets.shape[0], scaling),
                 ("qdata", "scales", "sf_offsets", "alpha", "amax"))
