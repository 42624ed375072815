"""GEMMs with folded scales, the reference (docs/numerics.md section 4)."""
from __future__ import annotations

from typing import Optional

import torch

from .numerics import _F32, _as_f32

__all__ = ["gemm_reference"]


def _check_alpha(alpha, name: str, n: int, device) -> Optional[torch.Tensor]:
    if alpha is None:
        return None
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(float(alpha), dtype=_F32, device=device)
    if tuple(alpha.shape) not in ((), (n,)):
        raise ValueError(f"'{name}' must be a scalar or have shape ({n},), "
                         f"got {tuple(alpha.shape)}")
    return _as_f32(alpha, name).to(device)


def gemm_reference(a_deq: torch.Tensor, b_deq: torch.Tensor,
                   alpha_row: Optional[torch.Tensor] = None,
                   alpha_col: Optional[torch.Tensor] = None,
                   bias: Optional[torch.Tensor] = None,
                   out_dtype: torch.dtype = torch.float32, *,
                   accum_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """D [M, N] = cast_out(alpha_row[i] * alpha_col[j] * (A @ B^T)[i, j] + bias[j]).

    a_deq: [M, K], b_deq: [N, K] (nn.Linear weight layout): the block-dequantized
      operands WITHOUT their global scales (dequantize_nvfp4(t, apply_alpha=False), FP8
      data as fp32), or fully dequantized operands with the alphas left None.
    alpha_row: None, scalar or [M] (S_dec / scale_inv of A); alpha_col: None, scalar or
      [N] (of B, per output channel). bias: None or [N].
    The product is computed in accum_dtype (fp64 by default: the exact-dequant reference)
    and rounded to fp32; the epilogue is fp32: fl(fl(alpha_row * alpha_col) * acc), then
    + bias in fp32, and only the final result is cast to out_dtype.
    """
    for name, t in (("a_deq", a_deq), ("b_deq", b_deq)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"'{name}' must be a 2-D tensor")
    M, K = a_deq.shape
    N, Kb = b_deq.shape
    if K != Kb:
        raise ValueError(f"'a_deq' [M, K] and 'b_deq' [N, K] disagree on K: {K} vs {Kb}")
    device = a_deq.device
    acc = (a_deq.to(accum_dtype) @ b_deq.to(accum_dtype).t()).to(_F32)
    alpha_row = _check_alpha(alpha_row, "alpha_row", M, device)
    alpha_col = _check_alpha(alpha_col, "alpha_col", N, device)
    if alpha_row is not None or alpha_col is not None:
        ar = torch.ones((), dtype=_F32, device=device) if alpha_row is None else alpha_row
        ac = torch.ones((), dtype=_F32, device=device) if alpha_col is None else alpha_col
        ar = ar[:, None] if ar.dim() == 1 else ar
        acc = (ar * ac) * acc
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (N,):
            raise ValueError(f"'bias' must be a tensor of shape ({N},)")
        acc = acc + bias.to(_F32)
    return acc.to(out_dtype)
