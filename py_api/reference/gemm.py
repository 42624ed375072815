"""GEMMs with folded scales, the reference (docs/numerics.md section 4): the dense GEMM and the
grouped (MoE) GEMMs, fprop and wgrad, whose epilogue is an epilogue tree evaluated per group."""
from __future__ import annotations

from typing import Collection, Dict, Optional

import torch

from .. import epilogues as epi
from ..formats import layout
from .numerics import _F32, _as_f32

__all__ = ["gemm_reference", "grouped_gemm_reference"]


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


def _group_inputs(tree: epi.Node, inputs: Dict[str, Optional[torch.Tensor]], g: int, rows: Optional[slice],
                  per_group: Collection[str]) -> Dict[str, Optional[torch.Tensor]]:
    """Each leaf's input as group g sees it: [G] (named in per_group) -> its g-th value; one value
    as is; a RowVector's [T] (fprop) -> the group's rows; [G, L] -> row g; [L] (shared) as is."""
    out = {}
    for leaf in tree.leaves():
        t = inputs.get(leaf.name)
        if t is not None:
            if leaf.name in per_group:
                t = t.reshape(-1)[g]
            elif t.numel() == 1:
                pass
            elif isinstance(leaf, epi.Source):  # the output itself: the group's rows, or dW_g
                t = t[g] if rows is None else t[rows]
            elif isinstance(leaf, epi.RowVector) and rows is not None:
                t = t.reshape(-1)[rows]
            elif t.dim() == 2:
                t = t[g]
        out[leaf.name] = t
    return out


def grouped_gemm_reference(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor,
                           tree: Optional[epi.Node] = None,
                           inputs: Optional[Dict[str, Optional[torch.Tensor]]] = None,
                           out_dtype: torch.dtype = torch.float32, *, per_group: Collection[str] = (),
                           wgrad: bool = False, accum_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Grouped GEMM: every group's product goes through the epilogue tree (epilogues.evaluate).

    fprop (wgrad=False): a [T, K] (rows sorted by group), b [G, N, K] (stacked nn.Linear weights);
      returns [T, N] with rows of group g = tree(a[rows of g] @ b[g]^T); rows past the last group
      end are 0.
    wgrad=True: a = dY^T [N, W], b = X^T [K, W] in the wgrad layout (group g's m_g tokens in the
      columns [p_g, p_g + m_g) of formats/layout.py); returns [G, N, K] with out[g] =
      tree(a[:, cols of g] @ b[:, cols of g]^T). An empty group, or one whose columns would run past
      W, gets the tree of a zero product (the kernel's dW_g = 0).
    offsets: int32 [G] cumulative row ends (token counts for wgrad); groups by layout.group_bounds
      (clamped into [0, T] (W for wgrad), running max).
    tree: an epilogue tree of RowVector / ColVector leaves (default: epilogues.scaled(out_dtype),
      scale_a[m] * scale_b[n] * acc + bias[n]). inputs: leaf name -> tensor or None (omitted
      nullable leaf): one value; a RowVector's [T] (fprop, per token) or [G, M] (wgrad); a
      ColVector's [N] (shared by the groups) or [G, N]; or [G] (one value per group) for the names
      in per_group.
    The product is computed in accum_dtype and rounded to fp32, then the tree is evaluated in fp32
    and cast to out_dtype (scalemm.grouped_gemm's CPU path passes fp32, as scalemm.gemm's does).
    """
    tree = epi.scaled(out_dtype) if tree is None else tree
    inputs = inputs or {}
    if wgrad:
        (N, W), K = a.shape, b.shape[0]
        starts, ends = (v.tolist() for v in layout.group_bounds(offsets, W))
        cols = layout.wgrad_column_starts(offsets, W).tolist()
        out = torch.empty(offsets.numel(), N, K, dtype=out_dtype, device=a.device)
        for g, (s, e) in enumerate(zip(starts, ends)):
            p, m = cols[g], e - s
            if m and p + m <= W:
                acc = a[:, p:p + m].to(accum_dtype) @ b[:, p:p + m].to(accum_dtype).t()
            else:
                acc = torch.zeros(N, K, dtype=accum_dtype, device=a.device)
            out[g] = epi.evaluate(tree, acc.to(_F32), _group_inputs(tree, inputs, g, None, per_group), out_dtype)
        return out
    (T, _), N = a.shape, b.shape[1]
    starts, ends = (v.tolist() for v in layout.group_bounds(offsets, T))
    out = torch.zeros(T, N, dtype=out_dtype, device=a.device)
    for g, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            acc = (a[s:e].to(accum_dtype) @ b[g].to(accum_dtype).t()).to(_F32)
            out[s:e] = epi.evaluate(tree, acc, _group_inputs(tree, inputs, g, slice(s, e), per_group), out_dtype)
    return out
