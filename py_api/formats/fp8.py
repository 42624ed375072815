"""FP8 e4m3 with current scaling (docs/numerics.md section 7): FP8Tensor, GroupedFP8Tensor, the
shapes of their tensors and their dequantization.

One fp32 scale per tensor, per row or per group: data = e4m3(fl(x * scale)), scale_inv = 1/scale.
"""
from __future__ import annotations

from typing import Tuple

import torch

from . import FP8, layout
from .base import (Shapes, _Container, check_all_or_none, check_columnwise, check_dequantize_dtype, check_device,
                   check_fields, check_grouped_columnwise, check_grouped_meta, check_orig_dtype, check_scaling, move)

__all__ = ["FP8Tensor", "GroupedFP8Tensor", "fp8_shapes", "grouped_fp8_shapes", "dequantize_fp8",
           "dequantize_fp8_grouped"]

_F32 = torch.float32


def fp8_shapes(rows: int, cols: int, scaling: str) -> Shapes:
    """The tensors of one FP8 copy of a rows x cols matrix: data e4m3 [rows, cols] and scale_inv
    fp32, 0-d ("tensor") or [rows] ("token")."""
    return {"data": (FP8.data_shape(rows, cols), FP8.data_dtype),
            "scale_inv": ((() if scaling == "tensor" else (rows,)), _F32)}


def grouped_fp8_shapes(T: int, K: int, G: int, scaling: str, layout_: str = "rows") -> Shapes:
    """The tensors of one grouped FP8 copy of x [T, K] in G groups. "rows": data [T, K], scale_inv
    [G] ("tensor") or [T] ("token"). "wgrad": data [K, W] (W = wgrad_width(T, G)), scale_inv [G]
    or [G, K] (per column of x within each group)."""
    if layout_ == "rows":
        data, token = FP8.data_shape(T, K), (T,)
    else:
        data, token = FP8.data_shape(K, layout.wgrad_width(T, G)), (G, K)
    return {"data": (data, FP8.data_dtype), "scale_inv": ((G,) if scaling == "tensor" else token, _F32)}


class FP8Tensor(_Container):
    """FP8 e4m3 with one fp32 scale per tensor or per row ("current scaling").

    Fields:
      data: float8_e4m3fn [M, K] = e4m3(fl(x * scale)).
      scale_inv: fp32 decode scale (1 / scale); 0-d for "tensor", [M] for "token".
      scaling: "tensor" or "token".
      orig_dtype: dtype of the quantized tensor.
      columnwise: None or an FP8Tensor of x.T (shape (K, M)), same scaling.
    data and scale_inv are both tensors or both None (columnwise-only container).
    """

    __slots__ = ("data", "scale_inv", "scaling", "orig_dtype", "columnwise")

    def __init__(self, data, scale_inv, scaling, orig_dtype, columnwise=None):
        cls = "FP8Tensor"
        check_scaling(scaling, cls)
        check_orig_dtype(cls, orig_dtype)
        rowwise = check_all_or_none(cls, [("data", data), ("scale_inv", scale_inv)])
        shape = None
        if rowwise:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"{cls}: 'data' must be a torch.Tensor, got {type(data).__name__}")
            if data.dim() != 2:
                raise ValueError(f"{cls}: 'data' must be 2-D [M, K], got shape {tuple(data.shape)}")
            shape = tuple(data.shape)
            check_fields(cls, fp8_shapes(*shape, scaling), {"data": data, "scale_inv": scale_inv})
        check_columnwise(cls, FP8Tensor, columnwise, shape, rowwise, data.device if rowwise else None)
        if columnwise is not None and columnwise.scaling != scaling:
            raise ValueError(f"{cls}: 'columnwise' must have scaling={scaling!r}, "
                             f"got {columnwise.scaling!r}")
        self.data, self.scale_inv = data, scale_inv
        self.scaling, self.orig_dtype, self.columnwise = scaling, orig_dtype, columnwise

    @property
    def shape(self) -> Tuple[int, int]:
        if self.data is not None:
            return tuple(self.data.shape)
        k, m = self.columnwise.shape
        return (m, k)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: fl(data * scale_inv) (rowwise copy only)."""
        return dequantize_fp8(self, dtype)

    def to(self, device) -> "FP8Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        device = check_device("FP8Tensor", device)
        return FP8Tensor(move(self.data, device), move(self.scale_inv, device), self.scaling,
                         self.orig_dtype,
                         None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"FP8Tensor(shape={self.shape}, scaling={self.scaling!r}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None})")


# Grouped containers: groups of rows of x [T, K] given by device offsets (formats/layout.py for the
# offsets rule). "rows": the rowwise copy [T, K]; group g owns rows [ends[g-1], ends[g]).
# "wgrad": the columnwise copy laid out for scalemm.grouped_gemm_wgrad: [K, W], group g's m_g
# tokens in columns [p_g, p_g + m_g) (layout.wgrad_column_starts), every other column zero.
# Rows past the last group end belong to no group (zero data).

class GroupedFP8Tensor(_Container):
    """Grouped FP8 e4m3 (per group or per token current scaling) of x [T, K] in G groups.

    Fields:
      data: float8_e4m3fn; layout "rows": [T, K]; layout "wgrad": [K, W] (see the layout notes
        above; padding columns are zero).
      scale_inv: fp32 decode scales; scaling "tensor": [G] (one per group); "token": [T] (rows:
        per row) or [G, K] (wgrad: per column of x within each group).
      offsets: int32 [G] device tensor, the cumulative row ends the copy was made with.
      shape: (T, K) of x (for both layouts). scaling, orig_dtype as FP8Tensor.
      layout: "rows" or "wgrad".
      columnwise: None or the "wgrad"-layout GroupedFP8Tensor of the same x.
      group_rows: None, or N when every group has exactly N rows (stacked expert weights: view
        data as [E, N, K] and a "token" scale_inv as [E, N]).
    data and scale_inv are both tensors or both None (columnwise-only container).

    Example (MoE layer, fprop and wgrad):
      xq = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True)
      y = scalemm.grouped_gemm(xq.data, w_fp8, offsets, xq.scale_inv, w_scale)
      dW = scalemm.grouped_gemm_wgrad(dyq.columnwise.data, xq.columnwise.data, offsets,
                                      dyq.columnwise.scale_inv, xq.columnwise.scale_inv)
    """

    __slots__ = ("data", "scale_inv", "offsets", "shape", "scaling", "orig_dtype", "layout", "columnwise",
                 "group_rows")

    def __init__(self, data, scale_inv, offsets, shape, scaling, orig_dtype, layout="rows", columnwise=None,
                 group_rows=None):
        cls = "GroupedFP8Tensor"
        shape = check_grouped_meta(cls, offsets, shape, layout, group_rows)
        check_scaling(scaling, cls)
        check_orig_dtype(cls, orig_dtype)
        T, K = shape
        G = offsets.numel()
        rowwise = check_all_or_none(cls, [("data", data), ("scale_inv", scale_inv)])
        if rowwise:
            shapes = {**grouped_fp8_shapes(T, K, G, scaling, layout), "offsets": ((G,), torch.int32)}
            check_fields(cls, shapes, {"data": data, "scale_inv": scale_inv, "offsets": offsets})
        check_grouped_columnwise(cls, GroupedFP8Tensor, columnwise, layout, rowwise, shape, scaling, offsets,
                                 data.device if rowwise else None)
        self.data, self.scale_inv, self.offsets, self.shape = data, scale_inv, offsets, shape
        self.scaling, self.orig_dtype, self.layout = scaling, orig_dtype, layout
        self.columnwise, self.group_rows = columnwise, group_rows

    @property
    def num_groups(self) -> int:
        return self.offsets.numel()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """"rows": [T, K]; "wgrad": [K, T] (x.T without the padding columns). Syncs the host."""
        return dequantize_fp8_grouped(self, dtype)

    def to(self, device) -> "GroupedFP8Tensor":
        """A copy with every tensor (offsets and the columnwise copy included) moved to `device`."""
        device = check_device("GroupedFP8Tensor", device)
        return GroupedFP8Tensor(move(self.data, device), move(self.scale_inv, device), self.offsets.to(device),
                                self.shape, self.scaling, self.orig_dtype, self.layout,
                                None if self.columnwise is None else self.columnwise.to(device), self.group_rows)

    def __repr__(self) -> str:
        return (f"GroupedFP8Tensor(shape={self.shape}, groups={self.num_groups}, layout={self.layout!r}, "
                f"scaling={self.scaling!r}, device={self.device}, orig_dtype={self.orig_dtype}, "
                f"rowwise={self.has_rowwise}, columnwise={self.columnwise is not None})")


def dequantize_fp8(t: FP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: fl(data * scale_inv)."""
    if not isinstance(t, FP8Tensor):
        raise TypeError(f"'t' must be an FP8Tensor, got {type(t).__name__}")
    check_dequantize_dtype(dtype)
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise to get x.T")
    scale_inv = t.scale_inv if t.scale_inv.dim() == 0 else t.scale_inv[:, None]
    return (t.data.to(_F32) * scale_inv).to(dtype)


def dequantize_fp8_grouped(t: GroupedFP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """"rows" layout: [T, K] = data * scale_inv of the row's group (or row); "wgrad" layout:
    [K, T] (x.T, the padding columns dropped). Rows past the last group decode as 0."""
    if not isinstance(t, GroupedFP8Tensor):
        raise TypeError(f"'t' must be a GroupedFP8Tensor, got {type(t).__name__}")
    check_dequantize_dtype(dtype)
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise")
    T, K = t.shape
    G = t.offsets.numel()
    if t.layout == "rows":
        if t.scaling == "token":
            sinv = t.scale_inv
        else:  # rows past the last group (group G) decode as 0
            sinv = torch.cat([t.scale_inv, torch.zeros(1, dtype=_F32, device=t.data.device)])
            sinv = sinv[layout.row_groups(t.offsets, T)]
        return (t.data.to(_F32) * sinv[:, None]).to(dtype)
    starts, ends = (v.tolist() for v in layout.group_bounds(t.offsets, T))
    p16 = layout.wgrad_column_starts(t.offsets, T).tolist()
    out = torch.zeros(K, T, dtype=_F32, device=t.data.device)
    for g in range(G):
        m = ends[g] - starts[g]
        if m:
            sinv = t.scale_inv[g] if t.scaling == "tensor" else t.scale_inv[g][:, None]
            out[:, starts[g]:ends[g]] = t.data[:, p16[g]:p16[g] + m].to(_F32) * sinv
    return out.to(dtype)
