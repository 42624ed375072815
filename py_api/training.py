"""The quantized operands and the three GEMMs of a training step, per recipe (scalemm.recipes).

scalemm.nn.Linear and scalemm.nn.GroupedLinear call these through the custom ops of scalemm.ops
(train_quantize, train_gemm, train_quantize_grouped, train_quantize_stacked, train_grouped_gemm),
so a compiled graph holds each as one opaque node. Containers do not cross an op boundary: a
quantized operand travels as the flat list of its copies' tensors (`flatten`), the rowwise copy's
fields first, then the columnwise copy's, and is rebuilt from the recipe and the role on the
other side (`unflatten`). The fields of one copy, in order, are FIELDS / GROUPED_FIELDS.

Which copy each GEMM reads (gemm(a, b) = a @ b^T, both K-major):

  dense    fprop  gemm(x row [M, K],   W row [N, K])            y  [M, N]
           dgrad  gemm(dy row [M, N],  W col = W^T [K, N])      dx [M, K]
           wgrad  gemm(dy col [N, M],  x col = x^T [K, M])      dW [N, K]
  grouped  fprop  grouped_gemm(x rows [T, K],  W stacked [E, N, K])          y  [T, N]
           dgrad  grouped_gemm(dy rows [T, N], W^T stacked [E, K, N])        dx [T, K]
           wgrad  grouped_gemm_wgrad(dy wgrad [N, W'], x wgrad [K, W'])      dW [E, N, K]

NVFP4 with RHT: the wgrad copies of x and dy are RHT-transformed along the tokens (the reduction
dimension of wgrad); since the same orthogonal transform is applied to both, the product of the
transformed operands is dy^T x (docs/numerics.md section 8). scalemm.gemm refuses an RHT copy as
an operand (alone it is not x^T), so the wgrad pair is passed as plain NVFP4 tensors of the
transformed data: legitimate only as a pair, which is the only way this module uses them.

NVFP4 grouped wgrad: scalemm has no NVFP4 grouped wgrad kernel. GroupedLinear's NVFP4 wgrad
quantizes dy and x to NVFP4 wgrad copies exactly as the recipe says (RHT, SR), decodes their
codes x block scales exactly to bf16 on the device (no host sync; on CUDA one kernel pass each,
gemm_nvfp4.decode_wgrad_blocks_bf16) and multiplies them with torch._grouped_mm (bf16 in, fp32
accumulation, bf16 out), then applies both global scales in fp32 (gemm_nvfp4.scale_grouped_wgrad).
Its one deviation from an NVFP4 GEMM: the accumulator is rounded to bf16 before the global
scales are applied (relative error <= 2^-9 on top of the fp32 result's).
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from . import epilogues as _epi
from .formats import FP8Tensor, GroupedFP8Tensor, GroupedNVFP4Tensor, NVFP4Tensor, layout
from .formats.fp8 import fp8_shapes, grouped_fp8_shapes
from .formats.nvfp4 import e2m1_decode, grouped_nvfp4_shapes, nvfp4_shapes, unpack_fp4
from .gemm import gemm as _gemm
from .gemm_nvfp4 import decode_wgrad_blocks_bf16, scale_grouped_wgrad
from .grouped import fp8_grouped_gemm as _fp8_grouped_gemm
from .grouped import grouped_gemm as _grouped_gemm
from .grouped import grouped_gemm_wgrad as _grouped_gemm_wgrad
from .quantize import quantize_fp8, quantize_nvfp4
from .quantize_grouped import (quantize_fp8_grouped, quantize_fp8_stacked, quantize_fp8_stacked_pair,
                               quantize_nvfp4_grouped, quantize_nvfp4_stacked, zero_rows_past_groups)
from .recipes import Recipe

__all__ = ["FIELDS", "GROUPED_FIELDS", "GEMM_OPERANDS", "GROUPED_GEMM_OPERANDS", "TOKEN_ALIGN", "field_count", "split",
           "flatten", "quantize", "copy_shapes", "unflatten", "gemm", "quantize_grouped", "quantize_stacked",
           "grouped_copy_shapes", "stacked_shapes", "grouped_unflatten", "grouped_gemm", "decode_wgrad_bf16",
           "step_gemms", "step_kernel_specs"]

FIELDS = {"fp8": ("data", "scale_inv"), "nvfp4": ("qdata", "scales", "alpha", "amax")}
GROUPED_FIELDS = {"fp8": ("data", "scale_inv"), "nvfp4": ("qdata", "scales", "sf_offsets", "alpha", "amax")}
GEMM_OPERANDS = {"fprop": (("input", "row"), ("weight", "row")),
                 "dgrad": (("grad", "row"), ("weight", "col")),
                 "wgrad": (("grad", "col"), ("input", "col"))}
GROUPED_GEMM_OPERANDS = {"fprop": (("input", "row"), ("weight", "stacked")),
                         "dgrad": (("grad", "row"), ("weight", "stacked_t")),
                         "wgrad": (("grad", "col"), ("input", "col"))}
# Rows (tokens) of a dense operand with a columnwise copy: the quantizers need M % 16 == 0 there
# (16-byte rows of x^T; NVFP4 blocks of 16 along M). Linear pads the tokens with zero rows to it.
TOKEN_ALIGN = 16
# orig_dtype of rebuilt containers: metadata that no GEMM reads (the containers require one).
_META_DTYPE = torch.float32


def field_count(recipe: Recipe, grouped: bool = False) -> int:
    """Tensors per copy in a flattened operand of this recipe (FIELDS / GROUPED_FIELDS)."""
    return len((GROUPED_FIELDS if grouped else FIELDS)[recipe.format])


def split(tensors, n: int, rowwise: bool, columnwise: bool):
    """(row fields or None, col fields or None) of a flattened operand with the given copies, n
    tensors per copy (field_count). Plain slicing: callable while torch.compile traces."""
    tensors = list(tensors)
    if len(tensors) != n * (rowwise + columnwise):
        raise ValueError(f"a flattened operand with rowwise={rowwise}, columnwise={columnwise} has "
                         f"{n * (rowwise + columnwise)} tensors, got {len(tensors)}")
    row = tensors[:n] if rowwise else None
    col = tensors[n * rowwise:] if columnwise else None
    return row, col


def flatten(q, grouped: bool = False) -> list:
    """The tensors of q's copies: the rowwise copy's fields (if present), then the columnwise copy's."""
    fmt = "fp8" if isinstance(q, (FP8Tensor, GroupedFP8Tensor)) else "nvfp4"
    names = (GROUPED_FIELDS if grouped else FIELDS)[fmt]
    out = []
    if q.has_rowwise:
        out += [getattr(q, f) for f in names]
    if q.columnwise is not None:
        out += [getattr(q.columnwise, f) for f in names]
    return out


# ---------------------------------------------------------------------------
# dense operands (scalemm.nn.Linear)
# ---------------------------------------------------------------------------

def quantize(x2: torch.Tensor, recipe: Recipe, role: str, *, rowwise: bool = True, columnwise: bool = False,
             amax: Optional[torch.Tensor] = None, amax_out: Optional[torch.Tensor] = None):
    """x2 [M, K] quantized as `role` says (scaling, RHT on the columnwise copy, stochastic rounding):
    one quantizer call for both copies. amax / amax_out (FP8DelayedScaling, 0-d fp32): the amax to
    scale from (None: current scaling) and the buffer that receives x2's amax (quantize_fp8's)."""
    scaling = recipe.scaling(role)
    if recipe.format == "fp8":
        return quantize_fp8(x2, scaling=scaling, rowwise=rowwise, columnwise=columnwise, amax=amax, amax_out=amax_out)
    return quantize_nvfp4(x2, scaling=scaling, rowwise=rowwise, columnwise=columnwise,
                          rht=columnwise and recipe.rht(role), stochastic_rounding=recipe.stochastic_rounding(role))


def copy_shapes(recipe: Recipe, role: str, M: int, K: int, rowwise: bool, columnwise: bool) -> list:
    """[(shape, dtype)] of flatten(quantize(x [M, K], ...)): what the custom ops' fakes allocate."""
    shapes = fp8_shapes if recipe.format == "fp8" else nvfp4_shapes
    names = FIELDS[recipe.format]
    scaling = recipe.scaling(role)
    out = []
    for present, (r, c) in ((rowwise, (M, K)), (columnwise, (K, M))):
        if present:
            s = shapes(r, c, scaling)
            out += [s[f] for f in names]
    return out


def unflatten(tensors, recipe: Recipe, role: str, copy: str):
    """One copy (copy "row" or "col") as a container with that copy as its rowwise data: the
    columnwise copy of x [M, K] becomes a container of x^T [K, M]. An RHT copy is labelled plain
    (see the module notes: only the wgrad pair is ever multiplied)."""
    tensors = list(tensors)
    scaling = recipe.scaling(role)
    if recipe.format == "fp8":
        data, scale_inv = tensors
        return FP8Tensor(data, scale_inv, scaling, _META_DTYPE)
    qdata, scales, alpha, amax = tensors
    return NVFP4Tensor(qdata, scales, alpha, amax, (qdata.shape[0], qdata.shape[1] * 2), scaling, _META_DTYPE)


def gemm(which: str, a_tensors, b_tensors, recipe: Recipe, *, bias: Optional[torch.Tensor] = None,
         out_dtype: torch.dtype = torch.bfloat16, accumulate_into: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One of the three GEMMs ("fprop", "dgrad", "wgrad") on the flattened copies it reads
    (GEMM_OPERANDS), with the recipe's options for it. One scalemm.gemm call, scales in the epilogue.
    FP8 wgrad with accumulate_into (a contiguous [N, K] tensor of out_dtype): accumulate_into += dW in the
    GEMM's epilogue (epilogues.accumulating), returned."""
    if accumulate_into is not None and (which != "wgrad" or recipe.format != "fp8" or bias is not None):
        raise ValueError("accumulate_into is for the FP8 wgrad (no bias)")
    (ra, ca), (rb, cb) = GEMM_OPERANDS[which]
    a = unflatten(a_tensors, recipe, ra, ca)
    b = unflatten(b_tensors, recipe, rb, cb)
    if a.shape[1] == 0:  # wgrad of no tokens: an empty sum (scalemm.gemm needs K >= 16)
        if accumulate_into is not None:
            return accumulate_into
        out = torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype, device=a_tensors[0].device)
        return out if bias is None else out + bias.to(out_dtype)
    fast = recipe.gemm(which).fast_accum
    if accumulate_into is not None:
        return _gemm(a, b, out_dtype=out_dtype, fast_accum=fast, epilogue=accumulating_wgrad_tree(out_dtype),
                     epilogue_inputs={_epi.ACCUMULATOR: accumulate_into}, out=accumulate_into)
    return _gemm(a, b, bias=bias, out_dtype=out_dtype, fast_accum=fast)


@functools.lru_cache(maxsize=None)
def accumulating_wgrad_tree(out_dtype: torch.dtype):
    """The dense wgrad's epilogue when it adds into weight.grad: (scale_a * scale_b * acc + bias) + out, the bias
    leaf null, as the grouped wgrad's (grouped._wgrad_tree). The null add keeps the compiler from fusing the
    product and the add of out into one FMA, so the kernel rounds as the reference does: the product to fp32,
    then the sum once to out's dtype (without it, the H100 kernel differed from the reference in the last bit)."""
    return _epi.accumulating(_epi.scaled(out_dtype), out_dtype)


# ---------------------------------------------------------------------------
# grouped operands (scalemm.nn.GroupedLinear)
# ---------------------------------------------------------------------------

def quantize_grouped(x: torch.Tensor, offsets: torch.Tensor, recipe: Recipe, role: str, *, rowwise: bool = True,
                     columnwise: bool = False, amax: Optional[torch.Tensor] = None,
                     amax_out: Optional[torch.Tensor] = None):
    """x [T, K] (rows sorted by expert) quantized per group: the rows copy and the wgrad copy
    (columnwise, in the wgrad layout) from one quantizer call. amax / amax_out [G]: as `quantize`, per group."""
    scaling = recipe.scaling(role)
    if recipe.format == "fp8":
        return quantize_fp8_grouped(x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise, amax=amax,
                                    amax_out=amax_out)
    return quantize_nvfp4_grouped(x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise,
                                  rht=columnwise and recipe.rht(role),
                                  stochastic_rounding=recipe.stochastic_rounding(role))


def quantize_stacked(w: torch.Tensor, recipe: Recipe, *, transposed: bool = False,
                     amax: Optional[torch.Tensor] = None, amax_out: Optional[torch.Tensor] = None):
    """Stacked expert weights w [E, N, K] (transposed=False: the fprop operand) or w^T [E, K, N]
    (transposed=True: the dgrad operand; scalemm's stacked quantizers have no columnwise copy, so
    this is a second pass over w). amax / amax_out [E]: as `quantize`, per expert."""
    if transposed:
        w = w.transpose(1, 2).contiguous()
    scaling = recipe.scaling("weight")
    if recipe.format == "fp8":
        return quantize_fp8_stacked(w, scaling=scaling, amax=amax, amax_out=amax_out)
    return quantize_nvfp4_stacked(w, scaling=scaling)


def _experts_to_rows(u8: torch.Tensor, E: int) -> torch.Tensor:
    """Bytes [K, E * n] (expert e's n columns at e * n, rows contiguous) -> [E * K, n] (expert e's K
    rows together). Moved as 8-byte words where the layout allows (n, the row stride and the start
    multiples of 8): torch's copy of a permuted uint8 view moves one byte per element (the expert
    layer's two weight copies took ~1.4 ms per training step that way on an H100). NVFP4 only: the FP8
    quantizer writes W^T's layout itself (quantize_fp8_stacked_pair)."""
    K = u8.shape[0]
    wide = u8.shape[1] % (8 * E) == 0 and u8.stride(0) % 8 == 0 and u8.data_ptr() % 8 == 0
    v = u8.view(torch.int64) if wide else u8
    return v.unflatten(1, (E, -1)).permute(1, 0, 2).reshape(E * K, -1).view(torch.uint8)


def quantize_stacked_pair(w: torch.Tensor, recipe: Recipe, *, amax: Optional[torch.Tensor] = None,
                          amax_out: Optional[torch.Tensor] = None) -> tuple:
    """(quantize_stacked(w), quantize_stacked(w, transposed=True)), the same bytes, from one quantizer
    pass over w (the dgrad copy W^T used to cost a bf16 transpose and a second pass): the stacked
    quantizer's columnwise copy holds, per (expert, input channel), scales over that expert's N
    values, exactly W^T's per-row blocks and scales. FP8: quantize_fp8_stacked_pair, whose kernel
    writes that copy in W^T's stacked layout. NVFP4: its [K, E*N] wgrad-layout data (expert e at
    columns e*N: with N % 16 == 0 no group padding) transposed per expert is W^T, and its per-expert
    scale blocks are W^T's batched ones (section 5's layout; the buffer is longer). N % 16 != 0 (which
    W^T cannot take anyway): the two passes, for their error."""
    E, N, K = w.shape
    if N % 16:
        return (quantize_stacked(w, recipe, amax=amax, amax_out=amax_out),
                quantize_stacked(w, recipe, transposed=True, amax=amax if amax is not None else amax_out))
    scaling = recipe.scaling("weight")
    if recipe.format == "fp8":  # the kernel writes W^T's layout itself (amax / amax_out [E]: see `quantize`)
        return quantize_fp8_stacked_pair(w, scaling=scaling, amax=amax, amax_out=amax_out)
    q = quantize_nvfp4_stacked(w, scaling=scaling, columnwise=True)
    col, q.columnwise = q.columnwise, None
    offsets_t = layout.stacked_offsets(E, K, w.device)
    qdata = _experts_to_rows(col.qdata[:, :E * N // 2], E)
    scale_rows = layout.stacked_scale_rows(E, K)
    scales = col.scales[:layout.grouped_scale_bytes(scale_rows, N // 16)].clone()  # the leading E blocks
    sf_offsets = (torch.arange(E, device=w.device, dtype=torch.int32) * layout.round_up(K, layout.SF_TILE_ROWS))
    wt = GroupedNVFP4Tensor(qdata, scales, sf_offsets, col.alpha.reshape(-1), col.amax.reshape(-1), offsets_t,
                            (E * K, N), scaling, w.dtype, scale_rows=scale_rows, group_rows=K)
    return q, wt


def grouped_copy_shapes(recipe: Recipe, role: str, T: int, K: int, G: int, rowwise: bool, columnwise: bool) -> list:
    """[(shape, dtype)] of flatten(quantize_grouped(x [T, K], G groups, ...), grouped=True)."""
    shapes = grouped_fp8_shapes if recipe.format == "fp8" else grouped_nvfp4_shapes
    names = GROUPED_FIELDS[recipe.format]
    out = []
    for present, lay in ((rowwise, "rows"), (columnwise, "wgrad")):
        if present:
            s = shapes(T, K, G, recipe.scaling(role), lay)
            out += [s[f] for f in names]
    return out


def stacked_shapes(recipe: Recipe, E: int, N: int, K: int) -> list:
    """[(shape, dtype)] of flatten(quantize_stacked(w [E, N, K])) (for w^T pass N and K swapped)."""
    scaling = recipe.scaling("weight")
    if recipe.format == "fp8":
        s = grouped_fp8_shapes(E * N, K, E, scaling, "rows")
    else:
        s = grouped_nvfp4_shapes(E * N, K, E, scaling, "rows", layout.stacked_scale_rows(E, N))
    return [s[f] for f in GROUPED_FIELDS[recipe.format]]


_STACKED_OFFSETS: dict = {}


def _stacked_offsets(E: int, N: int, device: torch.device) -> torch.Tensor:
    """layout.stacked_offsets(E, N, device), made once per (E, N, device) outside a CUDA-graph capture and kept (the
    rebuilt stacked weights' own offsets: two small kernels per grouped GEMM otherwise). Never handed to a user or
    written. Inside a capture a missing one is made in the capture, as before: the graph's memory pool would own a
    kept one."""
    key = (E, N, device)
    t = _STACKED_OFFSETS.get(key)
    if t is None:
        t = layout.stacked_offsets(E, N, device)
        if device.type != "cuda":
            _STACKED_OFFSETS[key] = t
        else:
            with torch.cuda.device(device):  # the capture that matters is the one on the offsets' device
                if not torch.cuda.is_current_stream_capturing():
                    _STACKED_OFFSETS[key] = t
    return t


def grouped_unflatten(tensors, recipe: Recipe, role: str, copy: str, offsets: torch.Tensor, T: int):
    """One grouped copy as a container: copy "row" (rows layout [T, K]), "col" (the wgrad layout of
    x [T, K]) or "stacked" / "stacked_t" (stacked weights [E, N, K] / [E, K, N], E = len(offsets),
    whose own offsets are the stacked ones)."""
    tensors = list(tensors)
    scaling = recipe.scaling(role)
    fp8 = recipe.format == "fp8"
    G = offsets.numel()
    if copy in ("stacked", "stacked_t"):
        rows = tensors[0].shape[0]
        K = tensors[0].shape[1] * (1 if fp8 else 2)
        N = rows // G
        own = _stacked_offsets(G, N, offsets.device)
        if fp8:
            return GroupedFP8Tensor(*tensors, own, (rows, K), scaling, _META_DTYPE, group_rows=N)
        return GroupedNVFP4Tensor(*tensors, own, (rows, K), scaling, _META_DTYPE,
                                  scale_rows=layout.stacked_scale_rows(G, N), group_rows=N)
    if copy == "row":
        K = tensors[0].shape[1] * (1 if fp8 else 2)
        if fp8:
            return GroupedFP8Tensor(*tensors, offsets, (T, K), scaling, _META_DTYPE)
        return GroupedNVFP4Tensor(*tensors, offsets, (T, K), scaling, _META_DTYPE)
    K = tensors[0].shape[0]
    if fp8:
        return GroupedFP8Tensor(*tensors, offsets, (T, K), scaling, _META_DTYPE, layout="wgrad")
    return GroupedNVFP4Tensor(*tensors, offsets, (T, K), scaling, _META_DTYPE, layout="wgrad", rht=recipe.rht(role))


def grouped_gemm(which: str, a_tensors, b_tensors, offsets: torch.Tensor, recipe: Recipe, *, T: int,
                 bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
                 accumulate_into: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One of the three grouped GEMMs on the flattened copies it reads (GROUPED_GEMM_OPERANDS).
    T: the tokens (rows of x). fprop / dgrad: [T, N] / [T, K], rows past offsets[-1] zero;
    wgrad: [E, N, K], experts without tokens zero; or, FP8 with accumulate_into (a contiguous [E, N, K]
    tensor of out_dtype), accumulate_into += dW in the wgrad's epilogue (grouped_gemm_wgrad(accumulate=True)),
    returned."""
    if accumulate_into is not None and (which != "wgrad" or recipe.format != "fp8"):
        raise ValueError("accumulate_into is for the FP8 grouped wgrad")
    (ra, ca), (rb, cb) = GROUPED_GEMM_OPERANDS[which]
    a = grouped_unflatten(a_tensors, recipe, ra, ca, offsets, T)
    b = grouped_unflatten(b_tensors, recipe, rb, cb, offsets, T)
    fast = recipe.gemm(which).fast_accum
    if which != "wgrad":
        out = torch.empty((T, b.group_rows), dtype=out_dtype, device=offsets.device)
        if recipe.format == "fp8":  # the rows the GEMM does not write, zeroed in its own setup launch
            return _fp8_grouped_gemm(a, b, None, bias=bias, out_dtype=out_dtype, out=out, fast_accum=fast,
                                     zero_rows_past_groups=True)
        _grouped_gemm(a, b, None, bias=bias, out_dtype=out_dtype, out=out, fast_accum=fast)
        return zero_rows_past_groups(out, offsets)  # the rows the GEMM does not write
    if recipe.format == "fp8":
        return _grouped_gemm_wgrad(a, b, out_dtype=out_dtype, fast_accum=fast, out=accumulate_into,
                                   accumulate=accumulate_into is not None)
    return _nvfp4_grouped_wgrad(a, b, offsets, T, out_dtype)


def decode_wgrad_bf16(t: GroupedNVFP4Tensor) -> torch.Tensor:
    """The [K, W] wgrad-layout data of an NVFP4 wgrad copy as bf16 value(code) x block scale,
    without the global scales: exact (docs/numerics.md section 4), every group's padding columns
    included (what a wgrad GEMM sums over). Device ops only: the offsets are never read on the host.
    Equals dequantize_nvfp4_grouped(t, padded=True, apply_alpha=False), which reads them."""
    if not isinstance(t, GroupedNVFP4Tensor) or t.layout != "wgrad" or t.qdata is None:
        raise ValueError("'t' must be a GroupedNVFP4Tensor in the 'wgrad' layout")
    T, K = t.shape
    W = t.qdata.shape[1] * 2
    dev = t.qdata.device
    offsets = t.offsets
    G = offsets.numel()
    bs = layout.WGRAD_SCALE_BLOCK
    starts, ends = layout.group_bounds(offsets, T)
    p = layout.wgrad_column_starts(offsets, T)  # [G + 1]
    sf = layout.wgrad_sf_offsets(offsets, T).to(torch.int64)
    cp = (ends - starts + 4 * bs - 1) // (4 * bs) * layout.SF_TILE_COLS  # Cp_g = ceil(m_g / 64) * 4
    col = torch.arange(0, W, bs, device=dev)  # first column of each block
    g = torch.searchsorted(p[1:], col, right=True)  # the group whose padded columns hold the block
    owned = g < G
    g = g.clamp(max=G - 1)
    local = (col - p[g]) // bs
    Rp = layout.round_up(K, layout.SF_TILE_ROWS)
    # per block: where its group's scale matrix starts (-1: columns past every group), its column there, its width
    base, cp_b = torch.where(owned, Rp * sf[g], -1), cp[g]
    if dev.type == "cuda":  # one pass of the nvfp4_dequant library's wgrad_to_bf16 (the same bits as below)
        return decode_wgrad_blocks_bf16(t.qdata, t.scales.view(torch.uint8), base, local, cp_b)
    k = torch.arange(K, device=dev)[:, None]
    idx = base[None, :] + layout.swizzle_offset(k, local[None, :], cp_b[None, :])
    idx = torch.where(owned[None, :], idx, 0)
    scales = t.scales.view(torch.uint8).reshape(-1)[idx.reshape(-1)].view(torch.float8_e4m3fn).to(torch.bfloat16)
    scales = torch.where(owned[None, :], scales.reshape(K, -1), 0.0)
    # a byte -> its two values (low nibble first) by table, then x block scale in bf16: the product
    # of a code's value and an e4m3 scale is exact in bf16 (docs/numerics.md section 4), so this is
    # the exact decode in three passes over the codes instead of an fp32 computation per bit field
    values = _byte_pairs_bf16(dev)[t.qdata.to(torch.int32)].reshape(K, W // bs, bs) * scales[..., None]
    return values.reshape(K, W)


@functools.lru_cache(maxsize=None)
def _byte_pairs_bf16(device: torch.device) -> torch.Tensor:
    """bf16 [256, 2]: the values of the two E2M1 codes of a packed byte (low nibble first)."""
    codes = unpack_fp4(torch.arange(256, dtype=torch.uint8)[:, None])
    return e2m1_decode(codes).to(torch.bfloat16).to(device)


def _nvfp4_grouped_wgrad(dy: GroupedNVFP4Tensor, x: GroupedNVFP4Tensor, offsets, T, out_dtype):
    """dW_g = alpha_dy alpha_x (dy_g^T x_g) from the NVFP4 wgrad copies (see the module notes)."""
    a = decode_wgrad_bf16(dy)  # [N, W]
    b = decode_wgrad_bf16(x)  # [K, W]
    G = offsets.numel()
    ends = layout.wgrad_column_starts(offsets, T)[1:].to(torch.int32)  # padded column ends
    acc = torch._grouped_mm(a, b.t(), offs=ends)  # [G, N, K]
    starts, stops = layout.group_bounds(offsets, T)
    if acc.is_cuda:  # one pass (scalemm/nvfp4_dequant.cuh's wgrad_scale), the same bits as below
        out = scale_grouped_wgrad(acc, dy.alpha, x.alpha, stops > starts, out_dtype)
        return out.reshape(G, a.shape[0], b.shape[0])
    has_rows = (stops > starts)[:, None, None]
    ar = dy.alpha[:, None, None] if dy.alpha.dim() == 1 else dy.alpha[:, :, None]
    ac = x.alpha[:, None, None] if x.alpha.dim() == 1 else x.alpha[:, None, :]
    out = torch.empty(acc.shape, dtype=out_dtype, device=acc.device)
    torch.mul(acc, ar * ac, out=out)  # fl(alpha_dy * alpha_x) * acc in fp32, rounded once to out_dtype
    return out.masked_fill_(~has_rows, 0.0).reshape(G, a.shape[0], b.shape[0])


# ---------------------------------------------------------------------------
# which kernels a training step runs (for `python -m scalemm build --set train`)
# ---------------------------------------------------------------------------

def step_gemms(M: int, N: int, K: int, *, experts: Optional[int] = None, pad_tokens: bool = True) -> list:
    """The three GEMMs of one training step of a layer with M tokens, N out and K in features (experts:
    a grouped layer of that many experts), as (which, m, n, k) of gemm(a [m, k], b [n, k]); for a
    grouped layer fprop / dgrad give (T, n, k) per expert and wgrad (n, k, T). Dense layers pad the
    tokens to a multiple of 16 when they make columnwise copies (pad_tokens: dW is needed)."""
    if experts is not None:
        return [("fprop", M, N, K), ("dgrad", M, K, N), ("wgrad", N, K, M)]
    Mp = layout.round_up(M, TOKEN_ALIGN) if pad_tokens else M
    return [("fprop", Mp, N, K), ("dgrad", Mp, K, N), ("wgrad", N, K, Mp)]


def step_kernel_specs(recipe: Recipe, M: int, N: int, K: int, *, x_dtype=torch.bfloat16, w_dtype=torch.float32,
                      experts: Optional[int] = None, num_sms: int = 132) -> list:
    """The JIT specs of the GEMM kernels step_gemms launches under `recipe`, chosen by the same
    default heuristics scalemm.gemm / grouped_gemm use without a config (prebuilding is best effort:
    a kernel missed here is compiled on first use). Quantization kernels are not included."""
    from . import epilogues as epi
    from .cutlass_kernels.configs import default_config, default_grouped_config, default_wgrad_config
    from .gemm import _preset, bias_leaf, gemm_kernel_spec
    from .gemm_nvfp4 import (default_nvfp4_config, default_nvfp4_grouped_config, dequant_kernel_spec,
                             nvfp4_gemm_kernel_spec, nvfp4_grouped_kernel_spec)
    from .grouped import _wgrad_tree, grouped_gemm_kernel_spec
    specs = []
    for which, m, n, k in step_gemms(M, N, K, experts=experts):
        out = w_dtype if which == "wgrad" else x_dtype
        fast = recipe.gemm(which).fast_accum
        if recipe.format == "fp8":
            if experts is None:
                cfg = default_config(m, n, k, fast_accum=fast, num_sms=num_sms).compiled()
                # no bias (dgrad, wgrad and bias-free layers); a layer's biased fprop compiles on first use
                specs.append(gemm_kernel_spec(cfg, fast_accum=fast, out_dtype=out,
                                              epilogue=_preset(None, out, bias_leaf(False, fast, cfg)))[0])
                if which == "wgrad" and recipe.format == "fp8":  # adding into weight.grad (fuse_wgrad_accumulation)
                    specs.append(gemm_kernel_spec(cfg, fast_accum=fast, out_dtype=out,
                                                  epilogue=accumulating_wgrad_tree(out))[0])
            elif which == "wgrad":  # dW, and dW added into weight.grad (GroupedLinear(fuse_wgrad_accumulation=True))
                specs += [grouped_gemm_kernel_spec(default_wgrad_config(m, n, fast_accum=fast), fast_accum=fast,
                                                   out_dtype=out, epilogue=_wgrad_tree(epi.dtype_name(out), acc),
                                                   wgrad=True)[0] for acc in (False, True)]
            else:
                cfg = default_grouped_config(m, experts, n, k, fast_accum=fast)
                specs.append(grouped_gemm_kernel_spec(cfg, fast_accum=fast, out_dtype=out,
                                                      epilogue=_preset(None, out))[0])
        elif experts is None:
            cfg = default_nvfp4_config(m, n, k, num_sms=num_sms).compiled()
            specs.append(nvfp4_gemm_kernel_spec(cfg, act_dtype=torch.bfloat16, out_dtype=out,
                                                epilogue=epi.scaled(out, bias=True))[0])
        elif which != "wgrad":  # the NVFP4 grouped wgrad runs on torch._grouped_mm
            cfg = default_nvfp4_grouped_config(m, experts, n, k).compiled()
            specs.append(nvfp4_grouped_kernel_spec(cfg, act_dtype=torch.bfloat16, out_dtype=out,
                                                   epilogue=epi.scaled(out, bias=True))[0])
    if recipe.format == "nvfp4":
        specs.append(dequant_kernel_spec())
    return specs
