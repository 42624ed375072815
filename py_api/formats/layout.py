"""The 128x4 swizzled scale layout and the grouped / stacked layouts built on it (docs/numerics.md
section 5). Every scale-layout fact of scalemm is computed here, once; containers, quantizers,
GEMM wrappers, custom-op fakes and the reference all call these functions.

Sizes are pure functions of host-known ints. Per-group positions (group bounds, sf_offsets, wgrad
column starts) are device ops on the int32 offsets tensor: they never read it on the host.

Offsets: int32 [G] cumulative row ends (torch._grouped_mm's `offs`). THE rule, shared with the
CUDA quantization kernels: each offset is clamped into [0, T] and the results are made
non-decreasing by a running max; group g owns rows [ends[g-1], ends[g]) (ends[-1] = 0). Bad
offsets give short or empty groups, never out-of-bounds accesses; rows past ends[G-1] belong to
no group.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

SF_TILE_ROWS = 128  # rows of one swizzled scale tile (4 x 32-row blocks)
SF_TILE_COLS = 4  # scale columns of one tile: 4 one-byte scales form one 32-bit word
WGRAD_ALIGN = 16  # a group's first token column in the wgrad layout: 16-byte TMA rows of e4m3
WGRAD_SCALE_BLOCK = 16  # tokens per NVFP4 scale in the wgrad layout (scales grouped along K)
_NO_ROW_LIMIT = (1 << 31) - 1  # num_rows=None: offsets clamped at 0 only (int32 range)

__all__ = ["SF_TILE_ROWS", "SF_TILE_COLS", "WGRAD_ALIGN", "round_up", "swizzled_size", "swizzled_bytes",
           "swizzle_offset", "swizzle_scales", "unswizzle_scales", "group_bounds", "row_groups", "padded_starts",
           "sf_offsets", "group_scale_block", "grouped_scale_rows", "grouped_scale_bytes", "wgrad_column_starts",
           "wgrad_token_columns", "wgrad_width", "wgrad_sf_offsets", "wgrad_group_scale_block", "wgrad_scale_cols",
           "wgrad_scale_bytes", "stacked_offsets", "stacked_scale_rows"]


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple` (ints >= 0)."""
    return -(-n // multiple) * multiple


# ---------------------------------------------------------------------------
# one swizzled matrix of scales
# ---------------------------------------------------------------------------

def swizzled_size(R: int, C: int) -> Tuple[int, int]:
    """(Rp, Cp): R scale rows rounded up to 128, C scale columns rounded up to 4."""
    return round_up(R, SF_TILE_ROWS), round_up(C, SF_TILE_COLS)


def swizzled_bytes(R: int, C: int) -> int:
    """Rp * Cp: bytes of the swizzled buffer of an R x C matrix of one-byte scales (padding zero)."""
    Rp, Cp = swizzled_size(R, C)
    return Rp * Cp


def swizzle_offset(r, c, Cp: int):
    """Byte offset of scale (r, c) in the swizzled buffer of padded width Cp:
    (r div 128)*128*Cp + (c div 4)*512 + (r mod 32)*16 + ((r div 32) mod 4)*4 + (c mod 4).
    r, c: Python ints or integer tensors (broadcast)."""
    return ((r // 128) * 128 * Cp + (c // 4) * 512 + (r % 32) * 16
            + ((r // 32) % 4) * 4 + (c % 4))


def _swizzle_index(R: int, C: int, device) -> Tuple[torch.Tensor, int, int]:
    Rp, Cp = swizzled_size(R, C)
    r = torch.arange(R, device=device, dtype=torch.int64)[:, None]
    c = torch.arange(C, device=device, dtype=torch.int64)[None, :]
    return swizzle_offset(r, c, Cp).reshape(-1), Rp, Cp


def swizzle_scales(s: torch.Tensor) -> torch.Tensor:
    """Scales [..., R, C] (a 1-byte dtype: uint8 or float8) -> [..., Rp * Cp], same dtype.

    Scale (r, c) goes to swizzle_offset(r, c, Cp); padding bytes are zero. Leading (batch /
    expert) dimensions are kept, so flattening the result gives the stacked layout (expert e's
    block at byte e * Rp * Cp).
    """
    if not isinstance(s, torch.Tensor) or s.element_size() != 1 or s.dim() < 2:
        raise TypeError("'s' must be a tensor of a 1-byte dtype with at least 2 dims [..., R, C]")
    *batch, R, C = s.shape
    index, Rp, Cp = _swizzle_index(R, C, s.device)
    raw = s.reshape(*batch, R * C).view(torch.uint8)
    buf = torch.zeros((*batch, Rp * Cp), dtype=torch.uint8, device=s.device)
    return buf.index_copy(-1, index, raw).view(s.dtype)


def unswizzle_scales(buf: torch.Tensor, R: int, C: int) -> torch.Tensor:
    """Swizzled buffer [..., Rp * Cp] (1-byte dtype) -> scales [..., R, C], same dtype."""
    if not isinstance(buf, torch.Tensor) or buf.element_size() != 1 or buf.dim() < 1:
        raise TypeError("'buf' must be a tensor of a 1-byte dtype")
    index, Rp, Cp = _swizzle_index(R, C, buf.device)
    if buf.shape[-1] != Rp * Cp:
        raise ValueError(f"'buf' last dimension must be Rp*Cp = {Rp}*{Cp} = {Rp * Cp} for "
                         f"R={R}, C={C}, got {buf.shape[-1]}")
    raw = buf.view(torch.uint8).index_select(-1, index)
    return raw.reshape(*buf.shape[:-1], R, C).view(buf.dtype)


# ---------------------------------------------------------------------------
# groups of rows given by device offsets
# ---------------------------------------------------------------------------

def group_bounds(offsets: torch.Tensor, num_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(starts, ends) int64 [G]: ends = offsets clamped into [0, num_rows] and made non-decreasing
    by a running max (the kernels' rule); starts[g] = ends[g-1] (0 for g = 0). Device op."""
    ends = torch.cummax(offsets.to(torch.int64).clamp(0, num_rows), 0).values
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    return starts, ends


def row_groups(offsets: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int64 [num_rows]: the group of each row; G for rows past the last group end. Device op."""
    _, ends = group_bounds(offsets, num_rows)
    return torch.searchsorted(ends, torch.arange(num_rows, device=offsets.device), right=True)


def padded_starts(offsets: torch.Tensor, num_rows: int, align: int) -> torch.Tensor:
    """int64 [G + 1]: sum_{j<g} ceil(m_j / align) * align for g = 0..G, m_j the group sizes of
    group_bounds (the last entry is the padded total). Device op."""
    starts, ends = group_bounds(offsets, num_rows)
    padded = (ends - starts + align - 1) // align * align
    return torch.cat([padded.new_zeros(1), torch.cumsum(padded, 0)])


def sf_offsets(offsets: torch.Tensor, num_rows: Optional[int] = None) -> torch.Tensor:
    """int32 [G]: first scale row of each group in a scale buffer grouped along M,
    sf_offsets[g] = sum_{j<g} ceil(m_j / 128) * 128: every group's scales are swizzled as one
    matrix of its own rows. num_rows: T (default: offsets only clamped at 0). Device op."""
    limit = _NO_ROW_LIMIT if num_rows is None else num_rows
    return padded_starts(offsets, limit, SF_TILE_ROWS)[:-1].to(torch.int32)


def group_scale_block(buf: torch.Tensor, first_row: int, R: int, C: int) -> torch.Tensor:
    """The Rp * Cp bytes of `buf` (a scale buffer grouped along M, 1-D) holding the swizzled
    R x C scales of the group whose first scale row is `first_row` (its sf_offsets entry). A view."""
    Rp, Cp = swizzled_size(R, C)
    return buf[first_row * Cp:(first_row + Rp) * Cp]


def grouped_scale_rows(T: int, G: int) -> int:
    """Rows of a scale buffer grouped along M: ceil(T / 128) * 128 + 128 G, a host-known bound of
    sum_g ceil(m_g / 128) * 128 (each group pads at most 127 rows)."""
    return round_up(T, SF_TILE_ROWS) + SF_TILE_ROWS * G


def grouped_scale_bytes(scale_rows: int, C: int) -> int:
    """Bytes of a scale buffer grouped along M with `scale_rows` rows of C scales: scale_rows * Cp.
    (scale_rows: grouped_scale_rows for activations, stacked_scale_rows for stacked weights.)"""
    return scale_rows * swizzled_size(0, C)[1]


# ---------------------------------------------------------------------------
# the wgrad layout: x.T [K, W] with each group's tokens at a 16-aligned column
# ---------------------------------------------------------------------------

def wgrad_column_starts(offsets: torch.Tensor, num_rows: Optional[int] = None) -> torch.Tensor:
    """int64 [G + 1]: first column p_g = sum_{j<g} ceil(m_j / 16) * 16 of each group in the wgrad
    layout, and the padded total p_G last. num_rows: T (default: offsets only clamped at 0).
    Device op, no sync."""
    return padded_starts(offsets, _NO_ROW_LIMIT if num_rows is None else num_rows, WGRAD_ALIGN)


def wgrad_token_columns(offsets: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int64 [T]: the wgrad-layout column of each row (token) of x, p_g + (r - start_g) for a row
    of group g. Rows past the last group end get columns p_G, p_G + 1, ... (< wgrad_width), which
    no group owns. Device op."""
    starts, ends = group_bounds(offsets, num_rows)
    first_row = torch.cat([starts, ends[-1:]])  # of each group, and of the rows past the last one
    group = row_groups(offsets, num_rows)
    rows = torch.arange(num_rows, device=offsets.device)
    return wgrad_column_starts(offsets, num_rows)[group] + rows - first_row[group]


def wgrad_width(T: int, G: int) -> int:
    """W = ceil((T + 15 G) / 16) * 16: the host-known width of the wgrad layout (a bound of p_G)."""
    return round_up(T + (WGRAD_ALIGN - 1) * G, WGRAD_ALIGN)


def wgrad_sf_offsets(offsets: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int32 [G]: first scale column of each group in an NVFP4 scale buffer grouped along K (the
    wgrad copy): sum_{j<g} ceil(m_j / 64) * 4, group g's ceil(m_g / 16) scale columns padded to a
    multiple of 4 and swizzled on their own at byte Rp * sf_offsets[g]. Device op."""
    tokens_per_tile = WGRAD_SCALE_BLOCK * SF_TILE_COLS
    return (padded_starts(offsets, num_rows, tokens_per_tile)[:-1] // WGRAD_SCALE_BLOCK).to(torch.int32)


def wgrad_scale_cols(T: int, G: int) -> int:
    """Scale columns of an NVFP4 buffer grouped along K: 4 * ceil((T + 63 G) / 64), a bound of
    sum_g ceil(m_g / 64) * 4 (each group's ceil(m_g / 16) columns padded to a multiple of 4)."""
    tokens_per_tile = WGRAD_SCALE_BLOCK * SF_TILE_COLS
    return SF_TILE_COLS * -(-(T + (tokens_per_tile - 1) * G) // tokens_per_tile)


def wgrad_group_scale_block(buf: torch.Tensor, first_col: int, K: int, C: int) -> torch.Tensor:
    """The Rp * Cp bytes of `buf` (an NVFP4 scale buffer grouped along K, 1-D) holding the swizzled
    K x C scales of the group whose first scale column is `first_col` (its wgrad_sf_offsets entry):
    they start at byte Rp * first_col. A view."""
    Rp, Cp = swizzled_size(K, C)
    return buf[Rp * first_col:Rp * (first_col + Cp)]


def wgrad_scale_bytes(T: int, G: int, K: int) -> int:
    """Bytes of an NVFP4 scale buffer grouped along K: Rp * wgrad_scale_cols(T, G), Rp = ceil(K/128)*128."""
    return round_up(K, SF_TILE_ROWS) * wgrad_scale_cols(T, G)


# ---------------------------------------------------------------------------
# stacked expert weights [E, N, K]: E groups of N rows
# ---------------------------------------------------------------------------

def stacked_offsets(E: int, N: int, device=None) -> torch.Tensor:
    """int32 [E]: the offsets of E groups of N rows (expert e owns rows [e N, (e + 1) N))."""
    return torch.arange(1, E + 1, dtype=torch.int32, device=device) * N


def stacked_scale_rows(E: int, N: int) -> int:
    """Rows of the batched scale buffer of stacked weights: E * ceil(N / 128) * 128 (expert e's
    Rp x Cp swizzled block at byte e * Rp * Cp, i.e. at scale row sf_offsets[e] = e * Rp)."""
    return E * round_up(N, SF_TILE_ROWS)
