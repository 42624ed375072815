"""scalemm.gemm: FP8 (e4m3) GEMM with per-token x per-channel scales folded in the epilogue."""
from __future__ import annotations

import ctypes
import functools
import hashlib
from collections.abc import Mapping

import torch

from . import abi
from . import epilogues as epi
from . import tuned as tuned_configs
from .arch import configs_for, gpu_info, kernel_arch, on_device
from .checks import check_aligned, check_k, check_n, check_options
from .cutlass_kernels.configs import GemmConfig, bias_free_full_kernel
from .jit import KernelSpec, build
from .formats import FP8Tensor, NVFP4Tensor

__all__ = ["gemm", "gemm_kernel_spec", "resolve_config"]

_RASTER = {"m": 0, "n": 1, "auto": 2}


def gemm_kernel_spec(config: GemmConfig, *, fast_accum: bool, out_dtype: torch.dtype,
                     epilogue: epi.Node, element: str = "e4m3") -> tuple[KernelSpec, epi.Emitted]:
    """The JIT spec of one GEMM kernel of templates/gemm_sm90.cu (used by scalemm.gemm and `python -m scalemm
    build`): FP8 (element "e4m3"), or bf16 x bf16 (element "bf16": W4A16 with the weights decoded to bf16 first,
    gemm_nvfp4; fast_accum must be False)."""
    return _spec(config, bool(fast_accum), epi.dtype_name(out_dtype), epilogue, element)


@functools.lru_cache(maxsize=None)
def _spec(config, fast_accum, out_name, tree, element="e4m3"):
    # swap-AB: the tokens' row vector straight into registers (epilogues.emit's row_registers: 1-3% of a decode call,
    # perf/results/h100/fp8_decode_clusters/README.txt item 11)
    emitted = epi.emit(tree, out_name, swap_ab=config.swap_ab, row_registers=config.swap_ab)
    digest = hashlib.sha256(emitted.evt_type.encode()).hexdigest()[:8]
    kind = "fp8_gemm" if element == "e4m3" else f"{element}_gemm"
    name = f"{kind}_{config.key()}_{'fastacc' if fast_accum else 'acc'}_{out_name}_evt{digest}"
    params = config.cpp(fast_accum=fast_accum, out_dtype=out_name, epilogue=emitted, element=element)
    return KernelSpec(name=name, template="gemm_sm90.cu", params=params), emitted


@functools.lru_cache(maxsize=None)
def _launcher(spec: KernelSpec):
    return build(spec).function("scalemm_gemm", [ctypes.POINTER(abi.GemmArgs)])


@functools.lru_cache(maxsize=None)
def _workspace_fn(spec: KernelSpec):
    return build(spec).function("scalemm_gemm_workspace", [ctypes.POINTER(abi.GemmWorkspaceArgs)])


@functools.lru_cache(maxsize=4096)
def _stream_k_workspace_bytes(spec: KernelSpec, m: int, n: int, k: int, device: int, raster: int, swizzle: int) -> int:
    """The workspace a stream-K launch of `spec` needs in the kernel's problem coordinates, as the kernel computes
    it (CUTLASS's partial sums and locks for this shape and this GPU's SM count); host only, cached per shape. Only
    stream-K kernels take a workspace; it comes from torch's caching allocator, so concurrent streams and graphs
    are safe."""
    call = abi.GemmArgs(m=m, n=n, k=k, device=device, raster=raster, swizzle=swizzle, splits=1)
    with on_device(device):
        return abi.workspace_bytes(_workspace_fn(spec), call)


def bias_leaf(has_bias: bool, fast_accum: bool, config: GemmConfig) -> bool:
    """Whether a dense FP8 call's preset epilogue has its bias leaf (a null bias when the call gives none): always
    when the call gives a bias; without one, never with fast accumulation, and with full accumulation except on the
    kernels measured faster without it (cutlass_kernels.configs.bias_free_full_kernel). Without the leaf a
    cooperative tile's epilogue skips a vector load, a barrier and an add per element (1.7% / 1.0% of a 128x128 /
    128x256 tile's time at 4096 tokens); the fast-accumulation prefill rule's picks ran 0.4-0.5% faster without it
    in four runs on an H100 (perf/NOTES.md, "What the cooperative epilogue costs"; for full accumulation "The
    full-accumulation rule refitted"). The leaf adds 0, so it changes at most the sign of a zero output."""
    return has_bias or not (fast_accum or bias_free_full_kernel(config))


def _resolve_epilogue(epilogue, out_dtype, bias: bool = True):
    """The epilogue tree of a call: an activation name (or None) selects the preset
    act(scale_a * scale_b * acc + bias), without its bias leaf when `bias` is False (bias_leaf says when); a
    tree from scalemm.epilogues is used as is."""
    if epilogue is None or isinstance(epilogue, str):
        return _preset(epilogue, out_dtype, bias)
    if isinstance(epilogue, epi.Node):
        return epilogue
    raise TypeError(f"epilogue must be None, an activation name ('relu', 'gelu', 'silu') or an "
                    f"epilogue tree (scalemm.epilogues), got {type(epilogue).__name__}")


@functools.lru_cache(maxsize=None)
def _preset(activation, out_dtype, bias: bool = True):
    return epi.scaled(out_dtype, bias=bias, activation=activation)


def _epilogue_input(leaf, t, device):
    """The tensor given for epilogue leaf `leaf` (None for an omitted nullable leaf), checked: a
    contiguous tensor of the leaf's dtype on the operands' device."""
    if t is None:
        if not getattr(leaf, "nullable", False):
            how = f"as the {leaf.name} argument" if leaf.name in _GIVEN_LEAVES else "in epilogue_inputs"
            raise ValueError(f"epilogue input {leaf.name!r} is missing: pass it {how}")
        return None
    if not isinstance(t, torch.Tensor) or t.device != device or not t.is_contiguous():
        raise ValueError(f"epilogue input {leaf.name!r} must be a contiguous tensor on {device}")
    dtype = _TORCH_DTYPES[getattr(leaf, "dtype", "f32")]
    if t.dtype != dtype:
        raise TypeError(f"epilogue input {leaf.name!r} must be {dtype}, got {t.dtype}")
    return t


_GIVEN_LEAVES = ("scale_a", "scale_b", "bias")  # leaves fed by gemm's own arguments


def _epilogue_extra(epilogue_inputs, tree, given=_GIVEN_LEAVES) -> dict:
    """epilogue_inputs checked as an argument: None or a dict naming leaves of `tree` other than
    the ones the call's own arguments feed (`given`)."""
    if epilogue_inputs is None:
        return {}
    if not isinstance(epilogue_inputs, Mapping):
        raise TypeError(f"epilogue_inputs must be a dict {{leaf name: tensor}}, got {type(epilogue_inputs).__name__}")
    names = [leaf.name for leaf in tree.leaves()]
    for key in epilogue_inputs:
        if key in given:
            raise ValueError(f"epilogue_inputs must not hold {key!r}: pass it as the {key} argument")
        if key not in names:
            raise ValueError(f"epilogue_inputs[{key!r}] is not a leaf of the epilogue tree (its leaves: "
                             f"{', '.join(names)})")
    return dict(epilogue_inputs)


def _dense_epilogue_inputs(tree, given, extra, M, N, device) -> dict:
    """{leaf name: tensor or None} for every leaf of `tree`, checked the way the kernel reads it:
    a Source [M, N]; a RowVector M values, a ColVector N, a Scalar one (a broadcast leaf may also
    be one value). Both devices run these checks, before the dispatch."""
    inputs = {}
    for leaf in tree.leaves():
        t = _epilogue_input(leaf, given[leaf.name] if leaf.name in given else extra.get(leaf.name), device)
        if t is not None:
            if isinstance(leaf, epi.Source):
                if tuple(t.shape) != (M, N):
                    raise ValueError(f"epilogue input {leaf.name!r} must be [{M}, {N}], got {tuple(t.shape)}")
            else:
                length = M if isinstance(leaf, epi.RowVector) else N if isinstance(leaf, epi.ColVector) else 1
                if not (t.numel() == length or (t.numel() == 1 and (getattr(leaf, "broadcast", False) or length == 1))):
                    raise ValueError(f"epilogue input {leaf.name!r} must hold {length} values, got {t.numel()}")
        inputs[leaf.name] = t
    return inputs


def _unwrap(x, scale, name):
    if isinstance(x, FP8Tensor):
        if scale is not None:
            raise ValueError(f"{name} is an FP8Tensor: it carries its own scale; pass scale_{name}=None")
        if x.data is None:
            raise ValueError(f"{name} is an FP8Tensor without a rowwise copy (quantized with rowwise=False): quantize "
                             f"with rowwise=True, or pass {name}.columnwise (the transpose) if that is the operand")
        return x.data, x.scale_inv
    return x, scale


def _check_scale(s, length, name, what, device):
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name} must be a float32 tensor (one value or {what}), got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {s.dtype}")
    if s.device != device:
        raise ValueError(f"{name} is on {s.device}, the operands on {device}")
    if not (s.numel() == 1 or (s.numel() == length and max(s.shape) == length)):  # (L,), (L,1), (1,L)
        raise ValueError(f"{name} must hold one value or {length} values ({what}), got shape {tuple(s.shape)}")
    if not s.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return s if s.dim() == 1 else s.reshape(-1)


def gemm(a, b, scale_a=None, scale_b=None, *, bias=None, out_dtype=torch.bfloat16, epilogue=None,
         epilogue_inputs=None, out=None, fast_accum=False, config: GemmConfig | None = None):
    """D = epilogue(scale_a[m] * scale_b[n] * (a @ b.T) + bias[n]), FP8 e4m3 inputs, fp32 accumulation.

    Args:
      a: [M, K] torch.float8_e4m3fn, row-major (contiguous), or an FP8Tensor (its scale_inv is used).
      b: [N, K] torch.float8_e4m3fn, row-major: the nn.Linear weight layout. Or an FP8Tensor.
      scale_a: float32, one value (per-tensor) or [M] (per-token): the dequantization scale of a.
      scale_b: float32, one value or [N] (per output channel).
      bias: optional [N] tensor of `out_dtype`, added after scaling.
      out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32.
      epilogue: None, an activation applied last ("relu", "gelu", "silu"), or an epilogue tree
        from scalemm.epilogues whose leaves are named scale_a, scale_b, bias or in epilogue_inputs.
      epilogue_inputs: a dict {leaf name: tensor of the leaf's dtype} for the tree's other leaves
        (a RowVector [M], a ColVector [N], a Scalar one value, a Source [M, N]); names that are
        not leaves of the tree, or that scale_a / scale_b / bias feed, are refused.
      out: optional preallocated [M, N] output of `out_dtype`.
      fast_accum: a bool: FP8 fast accumulation (no periodic promotion of the wgmma accumulators).
      config: None or a cutlass_kernels.configs.GemmConfig to override the tuned cache and the tile
        heuristic (see `resolve_config`).

    Requirements, checked before any launch and the same for CUDA and CPU tensors (CPU tensors run
    the torch reference): a and b on one device, contiguous, 16-byte aligned; K a positive
    multiple of 16; N a multiple of 16 bytes of output (N % 8 for bf16/fp16, N % 4 for fp32);
    M >= 0 and N >= 0 (an empty product gives an empty output). Scales stay on the device:
    no host synchronisation; CUDA-graph capturable. All scaling happens in fp32 on the
    accumulator; only the result is rounded to out_dtype.
    """
    if isinstance(b, NVFP4Tensor):  # NVFP4 weights: exact emulation on bf16 tensor cores (Hopper)
        from . import gemm_nvfp4
        return gemm_nvfp4.gemm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype,
                               epilogue=epilogue, epilogue_inputs=epilogue_inputs, out=out, fast_accum=fast_accum,
                               config=config)
    a, scale_a = _unwrap(a, scale_a, "a")
    b, scale_b = _unwrap(b, scale_b, "b")
    for t, n in ((a, "a"), (b, "b")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{n} must be a torch.Tensor or FP8Tensor, got {type(t).__name__}")
        if t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{n} must be torch.float8_e4m3fn, got {t.dtype} (quantize it with scalemm.quantize_fp8)")
        if t.dim() != 2:
            raise ValueError(f"{n} must be 2-D, got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{n} must be contiguous row-major ([M, K] / [N, K] with stride (K, 1))")
    device = a.device
    if b.device != device or device.type not in ("cuda", "cpu"):
        raise ValueError(f"a and b must be on the same device, CUDA or CPU (a on {a.device}, b on {b.device})")
    (M, K), (N, Kb) = a.shape, b.shape
    if K != Kb:
        raise ValueError(f"a is [M, K] = {list(a.shape)} and b is [N, K] = {list(b.shape)}: K differs")
    check_options(out_dtype, fast_accum, config)
    # the kernels' layout rules, on every device: CPU and CUDA callers get the same errors
    check_k(K)
    check_n(N, out_dtype)
    if scale_a is None or scale_b is None:
        raise ValueError("scale_a and scale_b are required (float32, one value or a vector)")
    scale_a = _check_scale(scale_a, M, "scale_a", "[M], per token", device)
    scale_b = _check_scale(scale_b, N, "scale_b", "[N], per output channel", device)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or bias.shape != (N,) or bias.device != device:
            raise ValueError(f"bias must be a [N] = [{N}] tensor of {out_dtype} on {device}, got "
                             f"{getattr(bias, 'dtype', type(bias))} {tuple(getattr(bias, 'shape', ()))}")
        bias = bias.contiguous()
    # the tree the arguments are checked against and the CPU path evaluates: a preset has a bias leaf when the call
    # gives a bias (the kernel may add a null one, bias_leaf: it changes at most the sign of a zero)
    tree = _resolve_epilogue(epilogue, out_dtype, bias=bias is not None)
    inputs = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias}
    extra = _epilogue_extra(epilogue_inputs, tree)
    if not (epilogue is None or isinstance(epilogue, str)):  # a caller's tree: every leaf checked as it reads it
        inputs = _dense_epilogue_inputs(tree, inputs, extra, M, N, device)
    # (a preset's leaves are exactly scale_a, scale_b and bias, checked above as the preset reads them; extra is
    # then empty: _epilogue_extra refuses any other name)
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dtype != out_dtype or out.shape != (M, N) \
                or out.device != device or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous [{M}, {N}] tensor of {out_dtype} on {device}")
    for t, n in ((a, "a"), (b, "b"), (out, "out")):
        if t is not None:
            check_aligned(t, n)

    if device.type == "cpu":
        acc = a.float() @ b.float().T
        res = epi.evaluate(tree, acc, inputs, out_dtype)
        return res if out is None else out.copy_(res)

    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=device)
    if M == 0 or N == 0:
        return out

    kernel_arch(device)  # the capability check (scalemm.arch), with or without config=: a dictionary read
    cfg, leaves, launch, workspace = _plan(M, N, K, bool(fast_accum), out_dtype, epilogue, config, device,
                                           bias is not None)
    launch_planned(cfg, leaves, launch, workspace, a, b, out, inputs, M, N, K, device)
    return out


def launch_planned(cfg, leaves, launch, workspace, a, b, out, inputs, M, N, K, device) -> None:
    """Launches one planned call on the current stream (arguments: _gemm_args)."""
    args, ws = _gemm_args(cfg, leaves, workspace, a, b, out, inputs, M, N, K, device)  # noqa: F841 (ws: alive)
    with on_device(device):
        launch(ctypes.byref(args))


def _gemm_args(cfg, leaves, workspace, a, b, out, inputs, M, N, K, device):
    """abi.GemmArgs for one planned call on the current stream, and the stream-K workspace it points to (None:
    none; keep it alive until the launch). `inputs`: the leaf tensors by name, already checked by gemm (its own
    argument checks for a preset's leaves, _dense_epilogue_inputs for a caller's tree); `leaves`: the kernel's leaf
    order (_plan); `workspace(m, n, k, device, raster, swizzle)`: the bytes a stream-K kernel asks for (None)."""
    args = abi.GemmArgs(k=K, device=device.index, raster=_RASTER[cfg.raster], swizzle=cfg.swizzle, splits=1,
                        stream=torch._C._cuda_getCurrentRawStream(device.index))
    for i, (leaf, length, _) in enumerate(leaves):
        t = inputs.get(leaf.name)
        if t is None:
            continue
        if length is None:  # the M x N Source operand
            args.c = t.data_ptr()
        else:  # one value -> CUTLASS scalar broadcast
            args.leaf_ptrs[i], args.leaf_is_vector[i] = t.data_ptr(), t.numel() > 1
    x, y, args.m, args.n = (b, a, N, M) if cfg.swap_ab else (a, b, M, N)  # the kernel's problem coordinates
    ws = None
    if workspace is not None:
        ws = torch.empty(workspace(args.m, args.n, K, args.device, args.raster, args.swizzle), dtype=torch.uint8,
                         device=device)
        args.workspace, args.workspace_bytes = ws.data_ptr(), ws.numel()
    args.a, args.b, args.d = x.data_ptr(), y.data_ptr(), out.data_ptr()
    return args, ws


def resolve_config(M, N, K, *, fast_accum: bool, out_dtype, device) -> GemmConfig:
    """The config scalemm.gemm runs on `device` without config=: the winner `scalemm.tune` stored
    for this GPU, shape bucket, accumulation mode and dtypes (scalemm.tuned), else the heuristic
    of the GPU's architecture (cutlass_kernels/configs/<arch>.py). NotImplementedError on a GPU
    scalemm has no kernels for."""
    configs = configs_for(device)
    tuned = tuned_configs.lookup("gemm", M, N, K, fast_accum=fast_accum, out_dtype=out_dtype, device=device)
    return tuned or configs.default_config(M, N, K, fast_accum=fast_accum, num_sms=_num_sms(device))


@functools.lru_cache(maxsize=4096)
def _plan(M, N, K, fast_accum, out_dtype, epilogue, config, device, has_bias=False):
    """Everything about a call that depends only on shapes and options: config, leaf layout, the kernel's launcher
    and, for stream-K kernels, its workspace query (else None).
    Keyed on the caller's `epilogue` (None, a name or a tree) so the common case hashes cheaply, and on whether the
    call gives a bias (a preset's bias leaf: bias_leaf).
    scalemm.tuned clears it when the tuned configs change (on_reload below)."""
    cfg = config or resolve_config(M, N, K, fast_accum=fast_accum, out_dtype=out_dtype, device=device)
    tree = _resolve_epilogue(epilogue, out_dtype, bias_leaf(has_bias, fast_accum, cfg))
    return (cfg, *kernel_plan(cfg.compiled(), tree, fast_accum=fast_accum, out_dtype=out_dtype))


def kernel_plan(config: GemmConfig, tree, *, fast_accum: bool, out_dtype, element: str = "e4m3"):
    """(leaf layout, launcher, stream-K workspace query or None) of the gemm_sm90.cu kernel of a compiled config
    and an epilogue tree (gemm_kernel_spec), what _gemm_args and launch_planned take. Not cached itself (its spec
    and launcher are; _plan caches whole calls), so a test that replaces _launcher leaves nothing behind."""
    spec, emitted = gemm_kernel_spec(config, fast_accum=fast_accum, out_dtype=out_dtype, epilogue=tree,
                                     element=element)
    if len(emitted.leaves) > abi.kMaxLeaves:
        raise ValueError(f"an epilogue tree may have at most {abi.kMaxLeaves} inputs")
    leaves = tuple((leaf, None if isinstance(leaf, epi.Source) else "M" if isinstance(leaf, epi.RowVector)
                    else "N" if isinstance(leaf, epi.ColVector) else "1", _TORCH_DTYPES[getattr(leaf, "dtype", "f32")])
                   for leaf in emitted.leaves)
    workspace = functools.partial(_stream_k_workspace_bytes, spec) if config.stream_k else None
    return leaves, _launcher(spec), workspace


tuned_configs.on_reload(_plan.cache_clear)

_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def _num_sms(device: torch.device) -> int:
    return gpu_info(device).num_sms
