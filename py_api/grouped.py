"""scalemm.grouped_gemm: FP8 grouped (MoE) GEMM driven by device-side offsets.

CUDA tensors run the CUTLASS SM90 ptr-array kernels (cutlass_kernels/include/scalemm/sm90/
grouped_gemm.cuh); CPU tensors run scalemm.reference.grouped_gemm_reference, which evaluates
the same epilogue tree per group on the fp32 product, as scalemm.gemm's CPU path does. Arguments
are validated once, before the dispatch: both devices raise the same errors."""
from __future__ import annotations

import ctypes
import functools
import hashlib

import torch

from . import abi
from . import epilogues as epi
from . import reference
from . import tuned as tuned_configs
from .arch import configs_for, on_device
from .cutlass_kernels.configs import GemmConfig
from .formats import GroupedFP8Tensor, GroupedNVFP4Tensor, layout
from .formats.base import check_host_offsets, check_offsets
from .checks import check_aligned, check_k, check_n, check_options, grouped_activation_offsets
from .gemm import (_epilogue_extra, _epilogue_input, _resolve_epilogue, _unwrap)
from .jit import KernelSpec, build

__all__ = ["grouped_gemm", "grouped_gemm_wgrad", "grouped_gemm_kernel_spec", "wgrad_column_starts",
           "pad_groups_transposed", "resolve_grouped_config"]

# Each epilogue leaf gets a leaf mode (abi.GroupedLeafMode: abi.kLeafNull, kLeafPerRow, ...), read from
# scalemm/abi.h at each use: the kernels' setup turns it into one pointer per group.


def _vector_modes() -> tuple[int, ...]:
    """The leaf modes that read a vector; the others read one value, so their leaf must broadcast."""
    return abi.kLeafPerRow, abi.kLeafPerGroupVec, abi.kLeafShared


def grouped_gemm_kernel_spec(config: GemmConfig, *, fast_accum: bool, out_dtype, epilogue: epi.Node,
                             wgrad: bool = False):
    return _spec(config, bool(fast_accum), epi.dtype_name(out_dtype), epilogue, bool(wgrad))


@functools.lru_cache(maxsize=None)
def _spec(config, fast_accum, out_name, tree, wgrad):
    if wgrad and config.swap_ab:
        raise ValueError("the wgrad grouped GEMM has no swap-AB form")
    emitted = epi.emit(tree, out_name, swap_ab=config.swap_ab, grouped=True)
    digest = hashlib.sha256(emitted.evt_type.encode()).hexdigest()[:8]
    kind = "wgrad" if wgrad else "grouped"
    name = f"fp8_{kind}_{config.key()}_{'fastacc' if fast_accum else 'acc'}_{out_name}_evt{digest}"
    params = config.cpp(fast_accum=fast_accum, out_dtype=out_name, epilogue=emitted, grouped=True, wgrad=wgrad)
    return KernelSpec(name=name, template="grouped_gemm_sm90.cu", params=params), emitted


@functools.lru_cache(maxsize=None)
def _launcher(spec: KernelSpec):
    return build(spec).function("scalemm_grouped_gemm", [ctypes.POINTER(abi.GroupedGemmArgs)])


def _workspace_bytes(G: int, zeros: int = 0) -> int:
    # setup arrays (problem shapes, 3 pointer + 3 stride arrays, 8 leaf pointer arrays), wgrad's `zeros` bytes of
    # zero buffer + CUTLASS's own (per-SM TMA descriptors, scheduler): generous and cheap from the caching allocator.
    return G * 512 + zeros + (2 << 20)


def _scale_a_mode(s, T, G, per):
    if s.numel() == 1:
        return abi.kLeafOne
    if per == "token" or (per is None and s.numel() == T and T != G):
        if s.numel() != T:
            raise ValueError(f"scale_a per token must hold T = {T} values, got {s.numel()}")
        return abi.kLeafPerRow
    if per == "group" or (per is None and s.numel() == G and T != G):
        if s.numel() != G:
            raise ValueError(f"scale_a per group must hold G = {G} values, got {s.numel()}")
        return abi.kLeafPerGroup
    if per is None and s.numel() == T == G:
        raise ValueError(f"scale_a has {T} values and T == G == {T}: say scale_a_per='token' or 'group'")
    raise ValueError(f"scale_a must be [T] = [{T}] (per token), [G] = [{G}] (per group) or one value; "
                     f"got shape {tuple(s.shape)}")


def _scale_b_mode(s, G, N, per=None):
    """The leaf mode of scale_b: [G, N] per expert channel, [G] or [G, 1] per expert, [N] or [1, N]
    shared by the experts (per channel), or one value. When G == N a 1-D scale_b is ambiguous: `per`
    ("channel" | "group") says which, as scale_a_per does for scale_a."""
    if per not in (None, "channel", "group"):
        raise ValueError(f"scale_b_per must be None, 'channel' or 'group', got {per!r}")
    if s.numel() == 1:
        return abi.kLeafOne
    shape = tuple(s.shape)
    if shape == (G, N):
        return abi.kLeafPerGroupVec
    for two_d, mode, what, other in (((G, 1), abi.kLeafPerGroup, "[G, 1] (per expert)", "channel"),
                                     ((1, N), abi.kLeafShared, "[1, N] (per channel)", "group")):
        if shape == two_d:
            if per == other:
                raise ValueError(f"scale_b is {what} but scale_b_per={per!r}")
            return mode
    if s.dim() == 1:
        n = s.numel()
        if per is None and n == G == N:
            raise ValueError(f"scale_b has {n} values and G == N == {n}: say scale_b_per='channel' or 'group' "
                             "(or pass the shape [1, N] or [G, 1])")
        if per == "group" or (per is None and n == G):
            if n != G:
                raise ValueError(f"scale_b per group must hold G = {G} values, got {n}")
            return abi.kLeafPerGroup
        if per == "channel" or (per is None and n == N):
            if n != N:
                raise ValueError(f"scale_b per channel must hold N = {N} values, got {n}")
            return abi.kLeafShared
    raise ValueError(f"scale_b must be [G, N] = [{G}, {N}] (per expert channel), [G] or [G, 1] (per expert), [N] or "
                     f"[1, N] (shared) or one value; got shape {tuple(s.shape)}")


def _unwrap_grouped(a, b, offsets, scale_a, scale_b, scale_a_per, scale_b_per):
    """Accept the grouped containers: activations from quantize_fp8_grouped ("rows" layout) and
    stacked expert weights from quantize_fp8_stacked (group_rows = N)."""
    if isinstance(a, GroupedFP8Tensor):
        if a.layout != "rows" or a.data is None:
            raise ValueError("a: grouped_gemm takes the rowwise ('rows' layout) copy of a GroupedFP8Tensor")
        if scale_a is not None:
            raise ValueError("a is a GroupedFP8Tensor: it carries its own scale; pass scale_a=None")
        offsets = grouped_activation_offsets(a, offsets)
        scale_a, scale_a_per = a.scale_inv, ("token" if a.scaling == "token" else "group")
        a = a.data
    if isinstance(b, GroupedFP8Tensor):
        if b.group_rows is None or b.data is None:
            raise ValueError("b: a GroupedFP8Tensor weight must come from quantize_fp8_stacked (equal-size groups)")
        if scale_b is not None or scale_b_per is not None:
            raise ValueError("b is a GroupedFP8Tensor: it carries its own scale; pass scale_b=None, scale_b_per=None")
        E, N = b.offsets.numel(), b.group_rows
        scale_b = b.scale_inv.view(E, N) if b.scaling == "token" else b.scale_inv.view(E, 1)  # unambiguous if E == N
        b = b.data.view(E, N, b.shape[1])
    return a, b, offsets, scale_a, scale_b, scale_a_per


def _epilogue_leaves(tree, given, extra, rows, G, N, device, out=None):
    """(tensor, leaf mode, group stride) of every leaf of `tree`, by name, checked before any launch.

    given: the scale_a / scale_b / bias entries, their modes already chosen from their shapes.
    extra: epilogue_inputs; another RowVector leaf is per row ([rows]), another ColVector leaf shared
    ([N]) or per expert ([G, N]). The grouped emitter takes RowVector / ColVector leaves only, and a
    Source leaf where `out` is given: the output itself (grouped_gemm_wgrad(accumulate=True)).
    """
    leaves = tree.leaves()
    if len(leaves) > abi.kMaxLeaves:
        raise ValueError(f"an epilogue tree may have at most {abi.kMaxLeaves} inputs")
    inputs = {}
    for leaf in leaves:
        if isinstance(leaf, epi.Source) and out is not None:
            inputs[leaf.name] = (out, abi.kLeafNull, 0)  # the reference reads it; the kernel reads D
            continue
        if not isinstance(leaf, (epi.RowVector, epi.ColVector)):
            raise ValueError(f"grouped GEMM epilogues take RowVector/ColVector leaves only, got "
                             f"{type(leaf).__name__} {leaf.describe()!r}")
        if leaf.name in given:
            t, mode, stride = given[leaf.name]
            t = _epilogue_input(leaf, t, device)
        else:
            t = _epilogue_input(leaf, extra.get(leaf.name), device)
            if t is None:
                mode, stride = abi.kLeafNull, 0
            elif isinstance(leaf, epi.RowVector):
                if t.numel() != rows or t.dim() != 1:
                    raise ValueError(f"epilogue input {leaf.name!r} (a RowVector) must be [{rows}], one value per "
                                     f"row, got shape {tuple(t.shape)}")
                mode, stride = abi.kLeafPerRow, 0
            elif tuple(t.shape) == (G, N):
                mode, stride = abi.kLeafPerGroupVec, N
            elif tuple(t.shape) == (N,):
                mode, stride = abi.kLeafShared, N
            else:
                raise ValueError(f"epilogue input {leaf.name!r} (a ColVector) must be [N] = [{N}] (shared) or "
                                 f"[G, N] = [{G}, {N}] (per expert), got shape {tuple(t.shape)}")
        if t is not None and mode not in _vector_modes() and not leaf.broadcast:
            raise ValueError(f"epilogue input {leaf.name!r} holds one value (per group or in all) but its leaf "
                             f"reads a vector: declare it with broadcast=True")
        inputs[leaf.name] = (t, mode, stride)
    return inputs


def grouped_gemm(a, b, offsets, scale_a=None, scale_b=None, *, bias=None, out_dtype=torch.bfloat16,
                 epilogue=None, epilogue_inputs=None, out=None, fast_accum=False, scale_a_per: str | None = None,
                 scale_b_per: str | None = None, config: GemmConfig | None = None):
    """out[rows of g] = epilogue(scale_a * scale_b[g] * (a[rows of g] @ b[g].T) + bias[g]) for every group g.

    Args:
      a: [T, K] float8_e4m3fn, rows sorted by group, or an FP8Tensor, or a GroupedFP8Tensor from
        scalemm.quantize_fp8_grouped (its scales and offsets are used; pass offsets=None).
      b: [G, N, K] float8_e4m3fn: stacked expert weights in nn.Linear layout, or a
        GroupedFP8Tensor from scalemm.quantize_fp8_stacked (its scales are used).
      offsets: int32 [G] on the device: cumulative row ends (torch._grouped_mm's `offs`);
        group g owns rows offsets[g-1] .. offsets[g]-1 (offsets[-1] = 0). Empty groups are fine.
      scale_a: fp32 [T] (per token), [G] (per group) or one value. When T == G say which with
        scale_a_per="token" | "group".
      scale_b: fp32 [G, N] (per expert output channel), [G] or [G, 1] (per expert), [N] or [1, N] (per
        channel, shared by the experts) or one value. When G == N say which a 1-D one is with
        scale_b_per="channel" | "group" (or use the 2-D shapes).
      bias: optional [G, N] or [N] tensor of out_dtype.
      epilogue: None, an activation applied last ("relu", "gelu", "silu"), or an epilogue tree from
        scalemm.epilogues (resolved as scalemm.gemm does) of RowVector / ColVector leaves. Leaves named
        scale_a, scale_b and bias take those arguments; any other leaf comes from epilogue_inputs:
        a RowVector one value per token ([T]), a ColVector [N] (shared) or [G, N] (per expert).
      epilogue_inputs: {leaf name: tensor of the leaf's dtype} for the tree's other leaves.
      out: optional [T, N] output. Rows outside every group (past offsets[-1]) are not written.
      fast_accum: a bool; config: None or a GemmConfig.
      Layout rules (as scalemm.gemm's): K a positive multiple of 16, N % 8 (bf16/fp16 out) or N % 4
      (fp32), contiguous 16-byte aligned operands; T, N or G = 0 give an empty (unwritten) output.
      CPU tensors run scalemm.reference.grouped_gemm_reference (the tree evaluated per group on the
      fp32 product); the checks are the same on both devices (CPU offsets are also read and checked).

    CUDA offsets are never read on the host: the call is CUDA-graph capturable and replays see
    new offsets. They cannot be validated without a host sync either: on the device each offset
    is clamped into [0, T] and a group whose end precedes its start is empty, so bad offsets
    never cause out-of-bounds accesses (overlapping groups leave the overlapped rows
    unspecified); offsets must be non-decreasing with offsets[-1] <= T (rows past it are not
    written). CPU offsets are read (no sync) and bad ones raise a ValueError.
    """
    if isinstance(b, GroupedNVFP4Tensor):  # NVFP4 expert weights: exact emulation on bf16 tensor cores
        from . import gemm_nvfp4
        return gemm_nvfp4.grouped_gemm(a, b, offsets, scale_a=scale_a, scale_b=scale_b, scale_a_per=scale_a_per,
                                       scale_b_per=scale_b_per, bias=bias, out_dtype=out_dtype, epilogue=epilogue,
                                       epilogue_inputs=epilogue_inputs, out=out, fast_accum=fast_accum, config=config)
    return fp8_grouped_gemm(a, b, offsets, scale_a, scale_b, bias=bias, out_dtype=out_dtype, epilogue=epilogue,
                            epilogue_inputs=epilogue_inputs, out=out, fast_accum=fast_accum, scale_a_per=scale_a_per,
                            scale_b_per=scale_b_per, config=config)


def fp8_grouped_gemm(a, b, offsets, scale_a=None, scale_b=None, *, bias=None, out_dtype=torch.bfloat16,
                     epilogue=None, epilogue_inputs=None, out=None, fast_accum=False, scale_a_per=None,
                     scale_b_per=None, config=None, zero_rows_past_groups: bool = False):
    """grouped_gemm's FP8 form (its arguments); zero_rows_past_groups=True also sets out's rows past the last group
    to zero, in the kernel's own setup launch (scalemm.training's grouped fprop / dgrad outputs)."""
    if not isinstance(zero_rows_past_groups, bool):
        raise TypeError(f"zero_rows_past_groups must be a bool, got {type(zero_rows_past_groups).__name__}")
    a, b, offsets, scale_a, scale_b, scale_a_per = _unwrap_grouped(a, b, offsets, scale_a, scale_b, scale_a_per,
                                                                   scale_b_per)
    a, scale_a = _unwrap(a, scale_a, "a")
    for t, n, nd in ((a, "a", 2), (b, "b", 3)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{n} must be a float8_e4m3fn tensor, got {getattr(t, 'dtype', type(t))}")
        if t.dim() != nd:
            raise ValueError(f"{n} must be {nd}-D ({'[T, K]' if nd == 2 else '[G, N, K]'}), got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{n} must be contiguous")
    (T, K), (G, N, Kb) = a.shape, b.shape
    if K != Kb:
        raise ValueError(f"a is [T, K] = {list(a.shape)}, b is [G, N, K] = {list(b.shape)}: K differs")
    device = a.device
    if b.device != device or device.type not in ("cuda", "cpu"):
        raise ValueError(f"a and b must be on the same device, CUDA or CPU (a on {a.device}, b on {b.device})")
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.shape != (G,) \
            or offsets.device != device or not offsets.is_contiguous():
        raise ValueError(f"offsets must be a contiguous int32 tensor of shape [G] = [{G}] on {device}, got "
                         f"{getattr(offsets, 'dtype', type(offsets))} {tuple(getattr(offsets, 'shape', ()))}")
    check_host_offsets(offsets, T, f"T = {T} (the rows of 'a')")
    check_options(out_dtype, fast_accum, config)
    # the kernels' layout rules, on every device: CPU and CUDA callers get the same errors
    check_k(K)
    check_n(N, out_dtype)
    if scale_a is None or scale_b is None:
        raise ValueError("scale_a and scale_b are required (float32)")
    for s, n in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.device != device or not s.is_contiguous():
            raise TypeError(f"{n} must be a contiguous float32 tensor on {device}")
    if scale_a_per not in (None, "token", "group"):
        raise ValueError(f"scale_a_per must be None, 'token' or 'group', got {scale_a_per!r}")
    modes = {"scale_a": _scale_a_mode(scale_a, T, G, scale_a_per), "scale_b": _scale_b_mode(scale_b, G, N, scale_b_per)}
    if modes["scale_b"] in (abi.kLeafPerGroup, abi.kLeafShared):  # [G, 1] / [1, N]: the same memory as [G] / [N]
        scale_b = scale_b.reshape(-1)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or bias.device != device \
                or tuple(bias.shape) not in ((G, N), (N,)) or not bias.is_contiguous():
            raise ValueError(f"bias must be a contiguous [G, N] or [N] tensor of {out_dtype} on {device}")
        modes["bias"] = abi.kLeafPerGroupVec if bias.dim() == 2 else abi.kLeafShared
    else:
        modes["bias"] = abi.kLeafNull
    tree = _resolve_epilogue(epilogue, out_dtype)
    given = {"scale_a": (scale_a, modes["scale_a"], 1 if modes["scale_a"] != abi.kLeafPerRow else 0),
             "scale_b": (scale_b, modes["scale_b"], N), "bias": (bias, modes["bias"], N)}
    inputs = _epilogue_leaves(tree, given, _epilogue_extra(epilogue_inputs, tree), T, G, N, device)
    if out is None:
        out = torch.empty((T, N), dtype=out_dtype, device=device)
    elif not isinstance(out, torch.Tensor) or out.dtype != out_dtype or out.shape != (T, N) \
            or out.device != device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{T}, {N}] tensor of {out_dtype} on {device}")
    for t, n in ((a, "a"), (b, "b"), (out, "out")):
        check_aligned(t, n)
    if T == 0 or N == 0:
        return out
    if G == 0:
        return out.zero_() if zero_rows_past_groups else out

    if device.type == "cpu":
        res = _reference(a, b, offsets, tree, inputs, out_dtype, wgrad=False)
        last = int(layout.group_bounds(offsets, T)[1][-1])  # rows past the last group are not written
        out[:last] = res[:last]
        if zero_rows_past_groups:
            out[last:] = 0
        return out
    configs_for(device)  # the capability check, with or without config=
    leaves, launch = _plan(T, G, N, K, bool(fast_accum), out_dtype, epilogue, config, device)
    _launch(leaves, launch, False, a, b, out, offsets, G, T, N, K, inputs, device,
            zero_rows_past_groups=zero_rows_past_groups)
    return out


@functools.lru_cache(maxsize=4096)
def _plan(T, G, N, K, fast_accum, out_dtype, epilogue, config, device):
    """The kernel of a grouped_gemm call (its leaf order and launcher): everything that depends only on shapes and
    options, so a call does not redo the heuristic and the spec lookup (~15 us of host time on the CPU machine).
    Keyed on the caller's `epilogue` (None, a name or a tree); scalemm.tuned clears it when the tuned configs
    change (below)."""
    cfg = config or resolve_grouped_config(T, G, N, K, fast_accum=fast_accum, out_dtype=out_dtype, device=device)
    return _kernel(cfg, fast_accum, out_dtype, _resolve_epilogue(epilogue, out_dtype))


tuned_configs.on_reload(_plan.cache_clear)


def _kernel(cfg, fast_accum, out_dtype, tree, wgrad=False):
    """(the kernel's leaves in argument order, its launcher) for a config and an epilogue tree."""
    spec, emitted = grouped_gemm_kernel_spec(cfg, fast_accum=fast_accum, out_dtype=out_dtype, epilogue=tree,
                                             wgrad=wgrad)
    return emitted.leaves, _launcher(spec)


def resolve_grouped_config(T, G, N, K, *, fast_accum: bool, out_dtype, device) -> GemmConfig:
    """The config scalemm.grouped_gemm runs on `device` without config=: the winner `scalemm.tune(grouped=...)`
    stored for this GPU, G, rows-per-group bucket, N, K, accumulation mode and dtypes (a memoized lookup),
    else the heuristic of the GPU's architecture. NotImplementedError on a GPU scalemm has no kernels for."""
    configs = configs_for(device)
    tuned = tuned_configs.lookup_grouped(T, G, N, K, fast_accum=fast_accum, out_dtype=out_dtype, device=device)
    return tuned or configs.default_grouped_config(T, G, N, K, fast_accum=fast_accum)


def _reference(a, b, offsets, tree, inputs, out_dtype, wgrad):
    """The CPU path: the reference on the fp32 product (as scalemm.gemm's CPU path), with each leaf's
    input read the way its mode tells the kernel to."""
    per_group = {name for name, (_, mode, _) in inputs.items() if mode == abi.kLeafPerGroup}
    return reference.grouped_gemm_reference(a, b, offsets, tree, {n: t for n, (t, _, _) in inputs.items()},
                                            out_dtype, per_group=per_group, wgrad=wgrad, accum_dtype=torch.float32)


def _launch(leaves, launch, wgrad, a, b, out, offsets, G, T, N, K, inputs, device, zero_rows_past_groups=False):
    """Fills abi.GroupedGemmArgs (T: the rows of a; for wgrad W, the columns of dy_t / x_t) and launches the
    kernel of `leaves` / `launch` (_kernel). wgrad's zero buffer for empty groups comes from the workspace (the
    kernel's setup launch clears it)."""
    ws = torch.empty(_workspace_bytes(G, 16 * max(N, K) if wgrad else 0), dtype=torch.uint8, device=device)
    args = abi.GroupedGemmArgs(
        a=a.data_ptr(), b=b.data_ptr(), d=out.data_ptr(), offsets=offsets.data_ptr(), groups=G, tokens=T, n=N, k=K,
        zeros=None, zero_rows_past_groups=int(zero_rows_past_groups), leaf_count=len(leaves), workspace=ws.data_ptr(),
        workspace_bytes=ws.numel(), device=device.index, stream=torch._C._cuda_getCurrentRawStream(device.index))
    for i, leaf in enumerate(leaves):
        t, args.leaf_mode[i], args.leaf_group_stride[i] = inputs[leaf.name]
        t = None if isinstance(leaf, epi.Source) else t  # the kernel reads a Source from D itself
        args.leaf_base[i] = t.data_ptr() if t is not None else None
        args.leaf_elem_bytes[i] = t.element_size() if t is not None else 0
    with on_device(device):
        launch(ctypes.byref(args))


@functools.lru_cache(maxsize=None)
def _wgrad_tree(out_name: str, accumulate: bool):
    """scale_dy[n] * scale_x[k] * acc (the preset; its bias leaf stays null), + out[n, k] when accumulating."""
    tree = _resolve_epilogue(None, out_name)
    return epi.accumulating(tree, out_name) if accumulate else tree


wgrad_column_starts = layout.wgrad_column_starts  # p_g of the wgrad layout: int64 [G + 1] (device op)


def pad_groups_transposed(x: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """x [T, C] (rows sorted by group) -> x^T laid out for grouped_gemm_wgrad: [C, width] of x's dtype,
    group g's rows as columns starting at the 16-aligned p_g (wgrad_column_starts), zeros everywhere else.

    x: a 2-D tensor of any dtype of 1, 2, 4 or 8 bytes (the values are moved as raw bits), T >= 0.
    offsets: int32 [G] on x's device, cumulative row ends; offsets[-1] < T is fine (rows past the
      last group end belong to no group and appear in no column).
    width: an int >= T + 15 * G (the layout's worst case, known without reading the offsets);
      grouped_gemm_wgrad also needs a multiple of 16 (layout.wgrad_width(T, G) is both).
    CPU offsets are checked (non-decreasing, in [0, T]). CUDA offsets are never read on the host
    (device ops, no sync, CUDA-graph capturable), so they cannot be checked: there the groups follow
    formats/layout.py's rule (each offset clamped into [0, T], then a running max), which keeps every
    access in bounds whatever the offsets hold; bad offsets give an unspecified layout, never a
    fault or a device-side assert.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"'x' must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"'x' must be 2-D [T, C] (rows sorted by group), got shape {tuple(x.shape)}")
    if x.element_size() not in _SAME_WIDTH_INT:
        raise TypeError(f"'x' must have an element size of 1, 2, 4 or 8 bytes, got {x.dtype}")
    G = check_offsets(offsets, x)
    T = x.shape[0]
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"'width' must be an int, got {type(width).__name__}")
    if width < T + (layout.WGRAD_ALIGN - 1) * G:
        raise ValueError(f"'width' must be >= T + 15 G = {T} + 15 * {G} = {T + 15 * G}, got {width} "
                         f"(layout.wgrad_width(T, G) = {layout.wgrad_width(T, G)} also suits grouped_gemm_wgrad)")
    check_host_offsets(offsets, T, f"T = {T} (the rows of 'x')")
    return _pad_groups_transposed_device(x, offsets, width)


def _pad_groups_transposed_device(x, offsets, width):
    """pad_groups_transposed without the host checks: device ops only. In bounds for any offsets when
    width >= T + 15 G: with the clamped, non-decreasing group bounds every column index is below
    p_G + (T - end_{G-1}) <= sum_g (m_g + 15) + T - sum_g m_g <= T + 15 G (rows past the last group
    take the columns from p_G on); the columns are distinct, so the scatter writes each at most once."""
    T, C = x.shape
    col = layout.wgrad_token_columns(offsets, T)
    in_group = layout.row_groups(offsets, T) < offsets.numel()
    # moved as integers of the same width (float8 has no multiply kernels): zero bits are 0 in every dtype
    bits = _SAME_WIDTH_INT[x.element_size()]
    out = torch.zeros(C, width, dtype=bits, device=x.device)
    out[:, col] = x.view(bits).T * in_group
    return out.view(x.dtype)


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def grouped_gemm_wgrad(dy_t, x_t, offsets=None, scale_dy=None, scale_x=None, *, out_dtype=torch.bfloat16,
                       out=None, accumulate: bool = False, fast_accum=False, config: GemmConfig | None = None):
    """Weight gradient of a grouped linear layer: out[g] = scale_dy[g] * scale_x[g] * (dY_g^T X_g), or with
    accumulate=True out[g] += that (gradient accumulation into an existing dW such as a parameter's .grad:
    the epilogue reads out's tile, adds it to the scaled product in fp32 and rounds once; experts without
    tokens keep their out[g]).

    The groups lie along the reduction (token) dimension, so both operands come transposed and
    K-major, as FP8 tensor cores need (the quantizers' columnwise copies):
      dy_t: [N, W] float8_e4m3fn, dY^T; group g's m_g tokens in columns [p_g, p_g + m_g) with
            p_g = sum_{j<g} ceil(m_j / 16) * 16 (16-byte aligned starts, formats/layout.py); W >= p_G,
            a positive multiple of 16.
            `pad_groups_transposed` builds this layout from dY; `wgrad_column_starts` gives p_g.
      x_t:  [K, W] float8_e4m3fn, X^T in the same layout.
      offsets: int32 [G] cumulative token counts (as for grouped_gemm), on the device.
      scale_dy: fp32 [G] (per group) or [G, N] (per output row of dW: the columnwise scales of dY).
      scale_x:  fp32 [G] or [G, K]. K % 8 (bf16/fp16 out) or K % 4 (fp32): the rows of dW_g.
    Or pass the GroupedFP8Tensors from scalemm.quantize_fp8_grouped(..., columnwise=True) as dy_t
    and x_t (their wgrad-layout copies, scales and offsets are used).
    Returns [G, N, K] of out_dtype (out itself where given; accumulate=True needs it). Experts with no
    tokens get dW_g = 0. CUDA offsets are not read on the host: a group whose columns would run past W
    (inconsistent offsets) is treated as empty rather than read out of bounds. CPU offsets are checked (non-decreasing from 0, their
    padded columns within W).
    CPU tensors run scalemm.reference.grouped_gemm_reference(..., wgrad=True); the checks are the
    same on both devices.
    """
    containers = []
    for t, n in ((dy_t, "dy_t"), (x_t, "x_t")):  # GroupedFP8Tensor copies in the wgrad layout
        if isinstance(t, GroupedFP8Tensor):
            c = t.columnwise if t.layout == "rows" else t
            if c is None or c.data is None:
                raise ValueError(f"{n}: quantize with columnwise=True to get the wgrad-layout copy")
            containers.append(c)
    if containers:
        if len(containers) != 2 or scale_dy is not None or scale_x is not None:
            raise ValueError("pass both dy_t and x_t as GroupedFP8Tensors (with scale_dy = scale_x = None), "
                             "or both as tensors with their scales")
        (cd, cx) = containers
        offsets = cd.offsets if offsets is None else offsets
        dy_t, x_t, scale_dy, scale_x = cd.data, cx.data, cd.scale_inv, cx.scale_inv
    for t, n in ((dy_t, "dy_t"), (x_t, "x_t")):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{n} must be a float8_e4m3fn tensor, got {getattr(t, 'dtype', type(t))}")
        if t.dim() != 2 or not t.is_contiguous():
            raise ValueError(f"{n} must be a contiguous 2-D tensor ([N, W] / [K, W]), got shape {tuple(t.shape)}")
    (N, W), (K, Wx) = dy_t.shape, x_t.shape
    if W != Wx:
        raise ValueError(f"dy_t is [N, W] = {list(dy_t.shape)} and x_t is [K, W] = {list(x_t.shape)}: W differs")
    device = dy_t.device
    if x_t.device != device or device.type not in ("cuda", "cpu"):
        raise ValueError(f"dy_t and x_t must be on the same device, CUDA or CPU (got {dy_t.device}, {x_t.device})")
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1 \
            or offsets.device != device or not offsets.is_contiguous():
        raise ValueError(f"offsets must be a contiguous 1-D int32 tensor on {device}")
    G = offsets.numel()
    if W % 16 or (W == 0 and G):
        raise ValueError(f"the padded token width W = {W} must be a positive multiple of 16 (16-byte TMA rows)")
    check_host_offsets(offsets)
    if device.type == "cpu" and G:
        used = int(layout.wgrad_column_starts(offsets)[-1])
        if used > W:
            raise ValueError(f"'offsets' put the groups in {used} wgrad columns (16-aligned starts), more than "
                             f"W = {W}: they do not match dy_t / x_t")
    check_options(out_dtype, fast_accum, config)
    check_n(K, out_dtype, "K")  # the rows of dW_g
    given = {"bias": (None, abi.kLeafNull, 0)}
    for s, name, length, leaf in ((scale_dy, "scale_dy", N, "scale_a"), (scale_x, "scale_x", K, "scale_b")):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.device != device or not s.is_contiguous():
            raise TypeError(f"{name} must be a contiguous float32 tensor on {device}")
        if s.dim() == 2 and tuple(s.shape) == (G, length):
            given[leaf] = (s, abi.kLeafPerGroupVec, length)
        elif s.numel() == G and s.dim() <= 1:
            given[leaf] = (s, abi.kLeafPerGroup, 1)
        else:
            raise ValueError(f"{name} must be [G] = [{G}] or [G, {length}], got shape {tuple(s.shape)}")
    if not isinstance(accumulate, bool):
        raise TypeError(f"accumulate must be a bool, got {type(accumulate).__name__}")
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True adds into out: pass out (the [G, N, K] dW to add to)")
        out = torch.empty((G, N, K), dtype=out_dtype, device=device)
    elif not isinstance(out, torch.Tensor) or out.dtype != out_dtype or out.shape != (G, N, K) \
            or out.device != device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{G}, {N}, {K}] tensor of {out_dtype} on {device}")
    tree = _wgrad_tree(epi.dtype_name(out_dtype), accumulate)
    inputs = _epilogue_leaves(tree, given, {}, N, G, K, device, out=out if accumulate else None)
    for t, n in ((dy_t, "dy_t"), (x_t, "x_t"), (out, "out")):
        check_aligned(t, n)
    if G == 0 or N == 0 or K == 0:
        return out
    if device.type == "cpu":
        return out.copy_(_reference(dy_t, x_t, offsets, tree, inputs, out_dtype, wgrad=True))
    configs = configs_for(device)  # the capability check; the heuristic of the GPU's architecture
    cfg = config or configs.default_wgrad_config(N, K, fast_accum=fast_accum)
    leaves, launch = _kernel(cfg, fast_accum, out_dtype, tree, wgrad=True)
    _launch(leaves, launch, True, dy_t, x_t, out, offsets, G, W, N, K, inputs, device)
    return out
