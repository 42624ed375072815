"""scalemm's ops as torch.library custom ops, so torch.compile can trace through them.

The public functions (scalemm.gemm, grouped_gemm, the quantizers) launch kernels through ctypes,
which dynamo cannot trace. The ops below wrap them with tensor-only signatures and fake
(meta) implementations that give output shapes without running anything, so a compiled
graph treats each as one opaque node (and CUDA graphs, e.g. mode="reduce-overhead", capture
the launches: they never synchronise with the host).

    y = torch.ops.scalemm.gemm(a, b, scale_a, scale_b, bias, torch.bfloat16, fast_accum)
    y = torch.ops.scalemm.gemm_nvfp4(x, None, None, w_qdata, w_scales, w_alpha, bias, torch.bfloat16)

Containers do not cross the op boundary: the quantize ops return the rowwise copy's tensors
(quantize_fp8: (data, scale_inv); quantize_nvfp4: (qdata, scales, alpha, amax); ...). Options
that are not tensor-only (columnwise copies, RHT, stochastic rounding with a 64-bit seed) stay
with the public functions.

The train_* ops are what scalemm.nn.Linear / GroupedLinear run (scalemm.training): a quantized
operand with both copies crosses them as a flat list of tensors (scalemm.training.flatten) and a
recipe as its string key (scalemm.recipes.Recipe.key), so the columnwise copies, RHT and
stochastic rounding are available there; the Python-side containers are rebuilt inside.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import activation as _activation
from .formats import NVFP4_GLOBAL_MAX, NVFP4Tensor
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

__all__ = ["gemm", "gemm_nvfp4", "grouped_gemm", "quantize_fp8", "quantize_nvfp4", "quantize_mxfp8", "quantize_fp8_grouped",
           "train_quantize", "train_gemm", "train_quantize_grouped", "train_quantize_stacked", "train_grouped_gemm",
           "quantize_nvfp4_grouped", "swiglu", "swiglu_backward"]


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


@torch.library.custom_op("scalemm::gemm_nvfp4", mutates_args=())
def gemm_nvfp4(a: torch.Tensor, a_scales: Optional[torch.Tensor], a_alpha: Optional[torch.Tensor], b: torch.Tensor,
               b_scales: torch.Tensor, b_alpha: torch.Tensor, bias: Optional[torch.Tensor],
               out_dtype: torch.dtype) -> torch.Tensor:
    """scalemm.gemm with an NVFP4 weight as a custom op: b, b_scales, b_alpha the weight's rowwise copy (uint8 codes
    [N, K/2], swizzled e4m3 scales, alpha 0-d or [N]); a bf16/fp16 [M, K] (W4A16: a_scales and a_alpha None) or
    the activations' NVFP4 codes uint8 [M, K/2] with their scales and alpha (0-d or [M]; W4A4), e.g. from
    torch.ops.scalemm.quantize_nvfp4."""
    if (a_scales is None) != (a_alpha is None):
        raise ValueError("gemm_nvfp4: a_scales and a_alpha go together (NVFP4 activations) or are both None (W4A16)")
    return _gemm(_nvfp4_operand(a, a_scales, a_alpha, "a") if a_scales is not None else a,
                 _nvfp4_operand(b, b_scales, b_alpha, "b"), bias=bias, out_dtype=out_dtype)


@gemm_nvfp4.register_fake
def _(a, a_scales, a_alpha, b, b_scales, b_alpha, bias, out_dtype):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def _nvfp4_operand(qdata, scales, alpha, name) -> NVFP4Tensor:
    """An NVFP4Tensor of a rowwise copy's tensors (its amax, which no GEMM reads, derived from alpha)."""
    if alpha is None or qdata.dtype != torch.uint8 or qdata.dim() != 2:
        raise ValueError(f"gemm_nvfp4: '{name}' must be NVFP4 codes uint8 [rows, K/2] with its scales and alpha")
    return NVFP4Tensor(qdata, scales, alpha, alpha * NVFP4_GLOBAL_MAX, (qdata.shape[0], 2 * qdata.shape[1]),
                       "tensor" if alpha.dim() == 0 else "token", torch.bfloat16)


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


# ---------------------------------------------------------------------------
# training (scalemm.nn.Linear / GroupedLinear): quantized operands as flat tensor lists
# (scalemm.training.flatten), recipes as their string keys (scalemm.recipes.Recipe.key)
# ---------------------------------------------------------------------------

def _distinct(tensors) -> list:
    """Custom-op outputs may not alias each other: a tensor sharing storage with an earlier one (e.g.
    the amax both NVFP4 copies share, or two slices of one table) is returned as a copy."""
    seen, out = set(), []
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if t.numel() and ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out.append(t)
    return out


def _recipe(key: str):
    from .recipes import from_key
    return from_key(key)


@torch.library.custom_op("scalemm::train_quantize", mutates_args=())
def train_quantize(x: torch.Tensor, recipe: str, role: str, rowwise: bool, columnwise: bool) -> list[torch.Tensor]:
    """scalemm.training.quantize of x [M, K] for `role` ("input", "weight", "grad") under the recipe
    with this key: the fields of the rowwise copy, then of the columnwise copy (x^T)."""
    from . import training
    return _distinct(training.flatten(training.quantize(x, _recipe(recipe), role, rowwise=rowwise,
                                                        columnwise=columnwise)))


@train_quantize.register_fake
def _(x, recipe, role, rowwise, columnwise):
    from . import training
    M, K = x.shape
    return [x.new_empty(s, dtype=d) for s, d in training.copy_shapes(_recipe(recipe), role, M, K, rowwise, columnwise)]


@torch.library.custom_op("scalemm::train_gemm", mutates_args=())
def train_gemm(which: str, a: list[torch.Tensor], b: list[torch.Tensor], bias: Optional[torch.Tensor], recipe: str,
               out_dtype: torch.dtype) -> torch.Tensor:
    """scalemm.training.gemm: "fprop", "dgrad" or "wgrad" on one flattened copy of each operand."""
    from . import training
    return training.gemm(which, a, b, _recipe(recipe), bias=bias, out_dtype=out_dtype)


@train_gemm.register_fake
def _(which, a, b, bias, recipe, out_dtype):
    return a[0].new_empty((a[0].shape[0], b[0].shape[0]), dtype=out_dtype)


@torch.library.custom_op("scalemm::train_quantize_grouped", mutates_args=())
def train_quantize_grouped(x: torch.Tensor, offsets: torch.Tensor, recipe: str, role: str, rowwise: bool,
                           columnwise: bool) -> list[torch.Tensor]:
    """scalemm.training.quantize_grouped: the rows copy's fields, then the wgrad copy's."""
    from . import training
    q = training.quantize_grouped(x, offsets, _recipe(recipe), role, rowwise=rowwise, columnwise=columnwise)
    return _distinct(training.flatten(q, grouped=True))


@train_quantize_grouped.register_fake
def _(x, offsets, recipe, role, rowwise, columnwise):
    from . import training
    T, K = x.shape
    shapes = training.grouped_copy_shapes(_recipe(recipe), role, T, K, offsets.shape[0], rowwise, columnwise)
    return [x.new_empty(s, dtype=d) for s, d in shapes]


@torch.library.custom_op("scalemm::train_quantize_stacked", mutates_args=())
def train_quantize_stacked(w: torch.Tensor, recipe: str, transposed: bool) -> list[torch.Tensor]:
    """scalemm.training.quantize_stacked: stacked expert weights [E, N, K] (or their transposes)."""
    from . import training
    return _distinct(training.flatten(training.quantize_stacked(w, _recipe(recipe), transposed=transposed),
                                      grouped=True))


@train_quantize_stacked.register_fake
def _(w, recipe, transposed):
    from . import training
    E, N, K = w.shape
    if transposed:
        N, K = K, N
    return [w.new_empty(s, dtype=d) for s, d in training.stacked_shapes(_recipe(recipe), E, N, K)]


@torch.library.custom_op("scalemm::train_quantize_stacked_pair", mutates_args=())
def train_quantize_stacked_pair(w: torch.Tensor, recipe: str) -> list[torch.Tensor]:
    """scalemm.training.quantize_stacked_pair: the W [E, N, K] and W^T copies, w read once where it can be."""
    from . import training
    wq, wt = training.quantize_stacked_pair(w, _recipe(recipe))
    return _distinct(training.flatten(wq, grouped=True) + training.flatten(wt, grouped=True))


@train_quantize_stacked_pair.register_fake
def _(w, recipe):
    from . import training
    E, N, K = w.shape
    r = _recipe(recipe)
    return [w.new_empty(s, dtype=d) for s, d in training.stacked_shapes(r, E, N, K) + training.stacked_shapes(r, E, K, N)]


@torch.library.custom_op("scalemm::train_grouped_gemm", mutates_args=())
def train_grouped_gemm(which: str, a: list[torch.Tensor], b: list[torch.Tensor], offsets: torch.Tensor,
                       bias: Optional[torch.Tensor], recipe: str, out_dtype: torch.dtype, T: int) -> torch.Tensor:
    """scalemm.training.grouped_gemm: "fprop" [T, N], "dgrad" [T, K] or "wgrad" [E, N, K]."""
    from . import training
    return training.grouped_gemm(which, a, b, offsets, _recipe(recipe), T=T, bias=bias, out_dtype=out_dtype)


@train_grouped_gemm.register_fake
def _(which, a, b, offsets, bias, recipe, out_dtype, T):
    G = offsets.shape[0]
    if which == "wgrad":
        return a[0].new_empty((G, a[0].shape[0], b[0].shape[0]), dtype=out_dtype)
    return a[0].new_empty((T, b[0].shape[0] // G), dtype=out_dtype)


@torch.library.custom_op("scalemm::swiglu", mutates_args=())
def swiglu(h: torch.Tensor) -> torch.Tensor:
    """scalemm.activation.swiglu_forward: silu(gate) * up of h = [gate | up]; differentiable (swiglu_backward)."""
    return _activation.swiglu_forward(h)


@swiglu.register_fake
def _(h):
    return h.new_empty((*h.shape[:-1], h.shape[-1] // 2))


@torch.library.custom_op("scalemm::swiglu_backward", mutates_args=())
def swiglu_backward(h: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """scalemm.activation.swiglu_backward: dh = [dgate | dup] for the gradient dout of swiglu(h)."""
    return _activation.swiglu_backward(h, dout)


@swiglu_backward.register_fake
def _(h, dout):
    return torch.empty_like(h, memory_format=torch.contiguous_format)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _swiglu_grad(ctx, dout):
    (h,) = ctx.saved_tensors
    return torch.ops.scalemm.swiglu_backward(h, dout)


swiglu.register_autograd(_swiglu_grad, setup_context=_swiglu_setup)
