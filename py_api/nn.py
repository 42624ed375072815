"""nn.Linear-style modules on scalemm's kernels.

FP8Linear, NVFP4Linear: inference only (frozen FP8 / NVFP4 weights). Linear, GroupedLinear and convert(): training
(autograd through scalemm's quantizers and GEMMs, high-precision master weights), following a
recipe of scalemm.recipes; docs/training.md describes them.
"""
from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from . import ops  # noqa: F401  registers torch.ops.scalemm.train_*
from . import training
from .formats import INPUT_DTYPES, NVFP4_GLOBAL_MAX, SCALINGS, NVFP4Tensor, layout
from .formats.base import version
from .formats.nvfp4 import nvfp4_shapes
from .gemm import gemm
from .quantize import advance_amax_history, quantize_fp8, quantize_nvfp4
from .recipes import ROLES, FP8Rowwise, Recipe, check_recipe, from_key

__all__ = ["FP8Linear", "NVFP4Linear", "Linear", "GroupedLinear", "convert", "convert_for_inference", "ConvertReport", "linear_eligibility"]

log = logging.getLogger("scalemm")


class _FrozenQuantized(torch.nn.Module):
    """The inference modules' rule for model casts: the quantized buffers (_QUANTIZED) keep their dtype and
    bits and follow only device moves; every other buffer (the bias) goes through the cast."""

    _QUANTIZED: tuple = ()

    def _apply(self, fn, recurse=True):
        """nn.Module applies `fn` to every buffer for .to(), .half(), .cuda(), ... The quantized
        buffers take only its device: where fn would change their dtype (a model cast, seen on an
        empty probe of the same dtype and device, so no converted copy is made), they are moved
        unchanged instead. The bias goes through fn like any float buffer."""
        kept = {name: self._buffers[name] for name in self._QUANTIZED}
        for name in kept:
            self._buffers[name] = None  # skipped by the generic pass
        try:
            super()._apply(fn, recurse)
        finally:
            self._buffers.update(kept)
        for name, t in kept.items():
            if t is not None:
                probe = fn(t.new_empty(0))
                self._buffers[name] = fn(t) if probe.dtype == t.dtype else t.to(device=probe.device)
        return self

    def _where(self) -> str:
        return f"{type(self).__name__}(in_features={self.in_features}, out_features={self.out_features})"

    @staticmethod
    def _linear_weight(linear) -> torch.Tensor:
        """from_linear's argument check: an nn.Linear whose weight the quantizers read; its weight, detached."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        if w.dtype not in INPUT_DTYPES:
            raise TypeError(f"from_linear: the weight of Linear(in_features={linear.in_features}, out_features="
                            f"{linear.out_features}) must be bfloat16, float16 or float32, got {w.dtype} (cast the "
                            "layer first, e.g. linear.to(torch.bfloat16))")
        return w


def _check_sizes(where, in_features, out_features):
    for name, v in (("in_features", in_features), ("out_features", out_features)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{where}: '{name}' must be a positive int, got {v!r}")


def _inference_ineligibility(in_features: int, out_features: int) -> Optional[str]:
    """None when the inference modules can take these features, else why not: in_features a multiple of 16 (the
    formats' blocks and 16-byte FP8 rows), out_features a multiple of 8 (16-byte output rows)."""
    if in_features % 16 or out_features % 8:
        return f"needs in_features % 16 == 0 and out_features % 8 == 0 (TMA rows), got {in_features}, {out_features}"
    return None


def _check_inference_features(where, in_features, out_features):
    _check_sizes(where, in_features, out_features)
    reason = _inference_ineligibility(in_features, out_features)
    if reason:
        raise ValueError(f"{where} {reason}")


def _check_nvfp4_options(where, mode, weight_scaling):
    if mode not in NVFP4Linear.MODES:
        raise ValueError(f"{where}: 'mode' must be one of {NVFP4Linear.MODES}, got {mode!r}")
    if weight_scaling not in SCALINGS:
        raise ValueError(f"{where}: 'weight_scaling' must be 'token' (per output channel) or 'tensor', "
                         f"got {weight_scaling!r}")


def _check_x(where, x, features, dtypes, device) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{where}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        names = [str(d).replace("torch.", "") for d in dtypes]
        raise TypeError(f"{where}: x must be {', '.join(names[:-1])} or {names[-1]}, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] != features:
        raise ValueError(f"{where}: expected x[..., {features}], got shape {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"{where}: x is on {x.device}, the layer on {device}")


def _no_grad(where, x) -> None:
    if torch.is_grad_enabled() and getattr(x, "requires_grad", False):
        raise RuntimeError(f"{where}: an inference module: run it under torch.no_grad() / inference_mode()")


class FP8Linear(_FrozenQuantized):
    """An inference drop-in for nn.Linear: FP8 e4m3 weights with one scale per output channel,
    activations quantized per token on the fly, one scalemm.gemm with the scales and the bias
    folded into its epilogue.

    y = x @ W^T + b computed as  scale_x[m] * scale_w[n] * (q(x) @ q(W)^T) + b[n]  in fp32,
    rounded once to x's dtype (bf16/fp16/fp32). Inference only: no gradients flow through it
    (quantization is not differentiable here); calling it with grad enabled on an input that
    requires grad raises.

    Buffers: weight float8_e4m3fn [out, in], weight_scale_inv fp32 [out], bias [out] or None.
    Model casts (model.to(dtype), .half(), .bfloat16(), .float()) leave weight and
    weight_scale_inv as they are (casting them would lose the scales' bits and break the GEMM)
    and cast the bias, which follows the model's dtype; device moves move all three. The bias is
    cast to x's dtype in forward when the two differ.

    Under torch.compile it calls scalemm.ops' custom ops (quantize_fp8, gemm): fullgraph works.

    NaN and Inf (docs/nan_inf.md): each row of x is quantized with its own scale. A NaN in a row
    makes that row of y all NaN. An Inf in a row does not reach y: the row is quantized with
    scale 1 (the Inf saturates to +-448, small values lose precision or underflow), so that row
    of y is finite and wrong. Other rows are unaffected. Check torch.isfinite(x) first where
    this matters.
    """

    _QUANTIZED = ("weight", "weight_scale_inv")  # buffers whose dtype the format fixes

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, device=None,
                 fast_accum: bool = True):
        super().__init__()
        _check_inference_features("FP8Linear", in_features, out_features)
        for name, v in (("bias", bias), ("fast_accum", fast_accum)):
            if not isinstance(v, bool):
                raise TypeError(f"FP8Linear: '{name}' must be a bool, got {type(v).__name__}")
        self.in_features, self.out_features, self.fast_accum = in_features, out_features, fast_accum
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device))
        self.register_buffer("weight_scale_inv", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.bfloat16, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, fast_accum: bool = True) -> "FP8Linear":
        """Quantize an nn.Linear's weight (bf16/fp16/fp32) per output channel (scalemm.quantize_fp8,
        "token" scaling over the weight's rows); keep its bias in the weight's dtype."""
        w = cls._linear_weight(linear)
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, device=w.device,
                  fast_accum=fast_accum)
        q = quantize_fp8(w.contiguous(), scaling="token")
        mod.weight.copy_(q.data)
        mod.weight_scale_inv.copy_(q.scale_inv)
        if linear.bias is not None:
            mod.bias = linear.bias.detach().to(w.dtype).clone()
        return mod

    def _check(self, x, w, s) -> None:
        where = self._where()
        if not isinstance(w, torch.Tensor) or w.dtype != torch.float8_e4m3fn \
                or tuple(w.shape) != (self.out_features, self.in_features):
            raise TypeError(f"{where}: weight must be float8_e4m3fn [{self.out_features}, {self.in_features}], got "
                            f"{getattr(w, 'dtype', type(w).__name__)} {tuple(getattr(w, 'shape', ()))}")
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or tuple(s.shape) != (self.out_features,):
            raise TypeError(f"{where}: weight_scale_inv must be float32 [{self.out_features}], got "
                            f"{getattr(s, 'dtype', type(s).__name__)} {tuple(getattr(s, 'shape', ()))}")
        _check_x(where, x, self.in_features, INPUT_DTYPES, w.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _no_grad(self._where(), x)
        buffers = self._buffers  # one dict read each (nn.Module's attribute lookup of a buffer costs more)
        w, s, bias = buffers["weight"], buffers["weight_scale_inv"], buffers["bias"]
        self._check(x, w, s)
        if bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        x2 = (x if x.dim() == 2 else x.reshape(-1, self.in_features)).contiguous()
        if torch.compiler.is_compiling():  # the same calls as custom ops (scalemm.ops), which dynamo traces
            data, scale_inv = torch.ops.scalemm.quantize_fp8(x2, "token")
            y = torch.ops.scalemm.gemm(data, w, scale_inv, s, bias, x.dtype, self.fast_accum)
            return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)
        try:
            xq = quantize_fp8(x2, scaling="token")
            y = gemm(xq.data, w, xq.scale_inv, s, bias=bias, out_dtype=x.dtype, fast_accum=self.fast_accum)
        except (TypeError, ValueError) as e:  # e.g. a CUDA layout rule: say which layer
            raise type(e)(f"{self._where()}: {e}") from e
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fp8 e4m3 per-channel weights, per-token activations")


class NVFP4Linear(_FrozenQuantized):
    """An inference drop-in for nn.Linear with NVFP4 weights: e2m1 codes, one e4m3 scale per 16 inputs
    (128x4 swizzled as scalemm's quantizers write them) and an fp32 global scale alpha per output channel
    (weight_scaling="token", the default) or per tensor. One scalemm.gemm per call, the alphas and the bias
    folded into its epilogue in fp32 (docs/numerics.md: exact dequantization, fp32 accumulation).

    mode="w4a16" (default): x (bf16 or fp16) is the GEMM's other operand as it is:
        y = alpha_w[n] * (x @ dequant(W)^T) + b[n].
    mode="w4a4": x (bf16, fp16 or fp32) is quantized to NVFP4 per token on the fly (scalemm.quantize_nvfp4,
        scaling="token"): y = alpha_x[m] * alpha_w[n] * (dequant(q(x)) @ dequant(W)^T) + b[n].
    y has x's dtype. On Hopper the kernels decode the weights exactly into bf16 (fp16 for fp16 activations)
    tensor-core operands; at decode (up to 64 tokens, more on small layers) a streaming kernel reads them as
    they are stored. CPU tensors run scalemm's reference (same numerics). Inference only: calling it with grad enabled on an
    input that requires grad raises.

    Buffers: weight uint8 [out, in / 2] (two codes per byte, even input in the low nibble), weight_scales
    float8_e4m3fn [Rp * Cp] (swizzled), weight_alpha and weight_amax fp32 [out] ("token") or 0-d ("tensor"),
    bias [out] or None. Model casts leave the quantized buffers as they are and cast the bias (FP8Linear's
    rule); the bias is cast to x's dtype in forward when the two differ.

    Under torch.compile it calls scalemm.ops' custom ops (quantize_nvfp4, gemm_nvfp4): fullgraph works.
    Build it with from_linear (quantizes an nn.Linear's weight), from_quantized (an NVFP4Tensor from
    scalemm.quantize_nvfp4) or from_blocks (codes, unswizzled [out, in / 16] block scales and a global scale,
    the way NVFP4 checkpoints usually store them).
    """

    _QUANTIZED = ("weight", "weight_scales", "weight_alpha", "weight_amax")
    MODES = ("w4a16", "w4a4")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, device=None,
                 mode: str = "w4a16", weight_scaling: str = "token"):
        super().__init__()
        _check_inference_features("NVFP4Linear", in_features, out_features)
        if not isinstance(bias, bool):
            raise TypeError(f"NVFP4Linear: 'bias' must be a bool, got {type(bias).__name__}")
        _check_nvfp4_options("NVFP4Linear", mode, weight_scaling)
        self.in_features, self.out_features, self.mode, self.weight_scaling = in_features, out_features, mode, \
            weight_scaling
        shapes = nvfp4_shapes(out_features, in_features, weight_scaling)
        # ordinary tensors even under torch.inference_mode: an in-place change (load_state_dict) must bump their
        # version counter, which the GEMM's prepared copy of the codes is keyed on (an inference tensor has none)
        with torch.inference_mode(False):
            for name, field_ in (("weight", "qdata"), ("weight_scales", "scales"), ("weight_alpha", "alpha"),
                                 ("weight_amax", "amax")):
                shape, dtype = shapes[field_]
                self.register_buffer(name, torch.zeros(shape, dtype=dtype, device=device))
            self.weight_alpha.fill_(1.0)
            self.register_buffer("bias", torch.zeros(out_features, dtype=torch.bfloat16, device=device) if bias else None)
        self._container = (None, None)  # (key, NVFP4Tensor) over the buffers: see _weight

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, mode: str = "w4a16",
                    weight_scaling: str = "token") -> "NVFP4Linear":
        """Quantize an nn.Linear's weight (bf16/fp16/fp32) with scalemm.quantize_nvfp4 (alpha per output
        channel, or per tensor); keep its bias in the weight's dtype."""
        w = cls._linear_weight(linear)
        _check_inference_features("NVFP4Linear", linear.in_features, linear.out_features)
        q = quantize_nvfp4(w.contiguous(), scaling=weight_scaling)
        return cls.from_quantized(q, None if linear.bias is None else linear.bias.detach().to(w.dtype), mode=mode)

    @classmethod
    def from_quantized(cls, weight: NVFP4Tensor, bias: Optional[torch.Tensor] = None, *,
                       mode: str = "w4a16") -> "NVFP4Linear":
        """A layer over an NVFP4Tensor [out, in] with a rowwise copy (scalemm.quantize_nvfp4 of the weight,
        no RHT); its tensors are copied. bias: None or [out] (bf16, fp16 or fp32), on the weight's device."""
        if not isinstance(weight, NVFP4Tensor) or weight.qdata is None or weight.rht:
            raise TypeError("from_quantized: 'weight' must be an NVFP4Tensor with a rowwise copy and no RHT "
                            f"(scalemm.quantize_nvfp4(w)), got {weight!r}")
        out_features, in_features = weight.shape
        device = weight.qdata.device
        if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype not in INPUT_DTYPES
                                 or tuple(bias.shape) != (out_features,) or bias.device != device):
            raise ValueError(f"from_quantized: 'bias' must be None or a [{out_features}] bfloat16, float16 or "
                             f"float32 tensor on {device}, got {getattr(bias, 'dtype', type(bias).__name__)} "
                             f"{tuple(getattr(bias, 'shape', ()))}")
        mod = cls(in_features, out_features, bias is not None, device=device, mode=mode,
                  weight_scaling=weight.scaling)
        with torch.inference_mode(False):  # ordinary tensors (__init__ says why)
            for name, t in (("weight", weight.qdata), ("weight_scales", weight.scales), ("weight_alpha", weight.alpha),
                            ("weight_amax", weight.amax)):
                mod._buffers[name].copy_(t)
            if bias is not None:
                mod.bias = bias.detach().clone()
        return mod

    @classmethod
    def from_blocks(cls, codes: torch.Tensor, block_scales: torch.Tensor, alpha: torch.Tensor,
                    bias: Optional[torch.Tensor] = None, *, mode: str = "w4a16") -> "NVFP4Linear":
        """A layer from NVFP4 weights in plain (unswizzled) form: codes uint8 [out, in / 2] (element 2i in the
        low nibble of byte i), block_scales float8_e4m3fn [out, in / 16] (row-major: the scale of inputs
        16j .. 16j + 15 of row n at [n, j]) and alpha fp32, 0-d or [out]: weight = value(code) x block scale x
        alpha. The scales are swizzled here (scalemm.formats.layout.swizzle_scales); weight_amax is set to
        alpha x 6 x 448 (NVFP4_GLOBAL_MAX), the amax the quantizer would have derived alpha from."""
        if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8 or codes.dim() != 2:
            raise TypeError(f"from_blocks: 'codes' must be a uint8 [out, in / 2] tensor, got "
                            f"{getattr(codes, 'dtype', type(codes).__name__)} {tuple(getattr(codes, 'shape', ()))}")
        out_features, in_features = codes.shape[0], 2 * codes.shape[1]
        if (not isinstance(block_scales, torch.Tensor) or block_scales.dtype != torch.float8_e4m3fn
                or tuple(block_scales.shape) != (out_features, in_features // 16)):
            raise TypeError(f"from_blocks: 'block_scales' must be a float8_e4m3fn [{out_features}, "
                            f"{in_features // 16}] tensor, got {getattr(block_scales, 'dtype', type(block_scales).__name__)}"
                            f" {tuple(getattr(block_scales, 'shape', ()))}")
        if (not isinstance(alpha, torch.Tensor) or alpha.dtype != torch.float32
                or tuple(alpha.shape) not in ((), (out_features,))):
            raise TypeError(f"from_blocks: 'alpha' must be a float32 0-d or [{out_features}] tensor, got "
                            f"{getattr(alpha, 'dtype', type(alpha).__name__)} {tuple(getattr(alpha, 'shape', ()))}")
        _check_inference_features("NVFP4Linear", in_features, out_features)
        scaling = "tensor" if alpha.dim() == 0 else "token"
        weight = NVFP4Tensor(codes.contiguous(), layout.swizzle_scales(block_scales.contiguous()), alpha.contiguous(),
                             alpha * NVFP4_GLOBAL_MAX, (out_features, in_features), scaling, torch.bfloat16)
        return cls.from_quantized(weight, bias, mode=mode)

    def _weight(self, buffers) -> NVFP4Tensor:
        """The weight buffers as an NVFP4Tensor, kept between calls while the buffers are the same tensor objects (the
        container holds them, so in-place changes such as load_state_dict show through; a device move or a buffer
        replaced by hand builds it again)."""
        ts = tuple(buffers[name] for name in self._QUANTIZED)
        key = tuple(id(t) for t in ts)
        if self._container[0] != key:
            try:
                w = NVFP4Tensor(*ts, (self.out_features, self.in_features), self.weight_scaling, torch.bfloat16)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{self._where()}: its weight buffers do not form an NVFP4 weight: {e}") from e
            self._container = (key, w)
        return self._container[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        where = self._where()
        _no_grad(where, x)
        buffers = self._buffers
        bias, w4a4 = buffers["bias"], self.mode == "w4a4"
        if not w4a4 and getattr(x, "dtype", None) == torch.float32:
            raise TypeError(f"{where}: x must be bfloat16 or float16 with mode='w4a16' (its activations go to bf16/fp16 "
                            "tensor cores as they are), got torch.float32: cast the model (model.to(torch.bfloat16)) "
                            "or use mode='w4a4'")
        _check_x(where, x, self.in_features, INPUT_DTYPES if w4a4 else INPUT_DTYPES[:2], buffers["weight"].device)
        if bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        x2 = (x if x.dim() == 2 else x.reshape(-1, self.in_features)).contiguous()
        if torch.compiler.is_compiling():  # the same calls as custom ops (scalemm.ops), which dynamo traces
            a = torch.ops.scalemm.quantize_nvfp4(x2, "token", None)[:3] if w4a4 else (x2, None, None)
            y = torch.ops.scalemm.gemm_nvfp4(*a, buffers["weight"], buffers["weight_scales"], buffers["weight_alpha"],
                                             bias, x.dtype)
            return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)
        w = self._weight(buffers)
        try:
            a = quantize_nvfp4(x2, scaling="token") if w4a4 else x2
            y = gemm(a, w, bias=bias, out_dtype=x.dtype)
        except (TypeError, ValueError) as e:  # e.g. a CUDA layout rule: say which layer
            raise type(e)(f"{where}: {e}") from e
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mode={self.mode}, nvfp4 weights (alpha per {'channel' if self.weight_scaling == 'token' else 'tensor'})"
                + (", per-token nvfp4 activations" if self.mode == "w4a4" else ""))


# ---------------------------------------------------------------------------
# training: Linear, GroupedLinear, convert
# ---------------------------------------------------------------------------

def linear_eligibility(in_features: int, out_features: int) -> Optional[str]:
    """None when a layer of these features can run all three GEMMs of a training step (any recipe),
    else the reason it cannot. The rules are scalemm.gemm's own (scalemm.checks: check_k / check_n): fprop
    reduces over in_features and dgrad over out_features, each a positive multiple of 16 (16-byte
    rows of e4m3, NVFP4 blocks of 16); the output rows (out_features for fprop, in_features for dgrad
    and wgrad) then meet the 16-byte rule of every output dtype."""
    from .checks import check_k
    for value, name, why in ((in_features, "in_features", "fprop reduces over it"),
                             (out_features, "out_features", "dgrad reduces over it")):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name} must be an int, got {type(value).__name__}"
        try:
            check_k(value, name)
        except ValueError as e:
            return f"{e}; {why}"
    return None


def _check_features(cls_name, in_features, out_features, recipe):
    _check_sizes(cls_name, in_features, out_features)
    if recipe is not None:
        check_recipe(recipe)
        reason = linear_eligibility(in_features, out_features)
        if reason:
            raise ValueError(f"{cls_name}(in_features={in_features}, out_features={out_features}) cannot run the "
                             f"scalemm GEMMs: {reason} (use recipe=None or nn.Linear for this layer)")


def _check_input(where, x, features, weight):
    _check_x(where, x, features, INPUT_DTYPES, weight.device)
    if weight.dtype not in INPUT_DTYPES:
        raise TypeError(f"{where}: the weight must be bfloat16, float16 or float32 (the master copy the quantizers "
                        f"read), got {weight.dtype}")


def _autocast(x):
    """x in the autocast dtype of its device when autocast is on there (as nn.Linear's matmul would be)."""
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        dtype = torch.get_autocast_dtype(dev)
        if dtype in INPUT_DTYPES and x.dtype != dtype:
            return x.to(dtype)
    return x


class _WeightCache:
    """The quantized copies of one weight, kept until the weight changes: a new tensor, a new
    data_ptr, or a new _version (every in-place update bumps it: optimizer steps, load_state_dict,
    copy_). So within an optimizer step (gradient accumulation, activation-checkpoint recompute)
    the weight is quantized once. Not kept under inference_mode (inference tensors cannot be
    saved for backward later) nor while torch.compile traces (the graph quantizes every call)."""
    __slots__ = ("ref", "stamp", "extra", "tensors")

    def __init__(self):
        self.ref = self.stamp = self.extra = self.tensors = None

    def get(self, w, key, extra: bool, make: Callable[[bool], list]) -> list:
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            return make(extra)
        stamp = (w.data_ptr(), version(w), w.dtype, w.device, key)
        if self.ref is not None and self.ref() is w and self.stamp == stamp and (self.extra or not extra):
            return self.tensors
        tensors = make(extra)
        self.ref, self.stamp, self.extra, self.tensors = weakref.ref(w), stamp, extra, tensors
        return tensors

    def clear(self):
        self.ref = self.stamp = self.extra = self.tensors = None


class _RecipeLayer:
    """What Linear and GroupedLinear share: the recipe property and the weight cache's reset."""
    _GROUPED = False

    @property
    def recipe(self) -> Optional[Recipe]:
        """The recipe (scalemm.recipes), or None for the high-precision layer. Assignable."""
        return self._recipe

    @recipe.setter
    def recipe(self, recipe: Optional[Recipe]) -> None:
        _check_features(type(self).__name__, self.in_features, self.out_features, recipe)
        # plain attributes for forward: torch.compile reads them as constants
        self._recipe, self._key = recipe, None if recipe is None else recipe.key()
        self._n = None if recipe is None else training.field_count(recipe, grouped=self._GROUPED)
        if hasattr(self, "_wcache"):
            self._wcache.clear()
        for role in ROLES:  # FP8DelayedScaling's histories belong to the recipe they were kept for
            self._buffers.pop(f"amax_history_{role}", None)
        self._amax_next = {}  # role -> (its history, the history's version, the amax its next quantization takes)
        self._amax_used = {}  # role -> the amax its last quantization scaled from (a device tensor); keys: seeded roles

    @property
    def _amax_seeded(self) -> set:
        """The roles whose history is seeded: those with a forward amax kept (_delayed_quantize sets both at once)."""
        return set(self._amax_used)

    @property
    def _delayed(self):
        """self under FP8DelayedScaling (the amax histories' owner, passed to the autograd Functions), else None."""
        return self if self._recipe is not None and self._recipe.amax_history() else None

    def _amax_history(self, role: str) -> tuple:
        """(history, next amax) of `role` under FP8DelayedScaling. The history is the non-persistent buffer
        amax_history_<role>, fp32 [H] (Linear) or [H, num_experts] (GroupedLinear), made (zeros, not seeded) on the
        weight's device when it is missing or elsewhere (a layer built on the meta device). The next amax (0-d or
        [num_experts]) is the history's max over its rows, which advance_amax_history keeps in step with it; it is
        taken again from the history when the history changed otherwise (a new buffer, or one edited in place:
        into the same tensor then, which a captured CUDA graph reads; see refresh_amax_histories)."""
        name = f"amax_history_{role}"
        shape = (self._recipe.amax_history(),) + ((self.num_experts,) if self._GROUPED else ())
        h = self._buffers.get(name)
        if h is None or tuple(h.shape) != shape or h.device != self.weight.device:
            h = torch.zeros(shape, dtype=torch.float32, device=self.weight.device)
            self.register_buffer(name, h, persistent=False)
            self._amax_used.pop(role, None)  # not seeded
        kept = self._amax_next.get(role)
        if kept is not None and kept[0] is h and kept[1] != version(h):  # edited: in place, as a graph reads it
            kept[2].copy_(h.amax(0))
            kept = self._amax_next[role] = (h, version(h), kept[2])
        elif kept is None or kept[0] is not h:
            kept = self._amax_next[role] = (h, version(h), h.amax(0))
        return h, kept[2]

    def refresh_amax_histories(self) -> None:
        """FP8DelayedScaling: take each operand's next amax again from its history now (in place). An eager call
        notices a history edited in place by itself; a captured CUDA graph does not, so call this after editing a
        history between replays. Other recipes: nothing to do."""
        if self._delayed is None:
            return
        for role in ROLES:
            if f"amax_history_{role}" in self._buffers:
                self._amax_history(role)

    def _delayed_quantize(self, role: str, call):
        """call(amax, amax_out) for `role` under FP8DelayedScaling: the quantizer scales from `amax`, the max of this
        layer's amax history of the role (None before the role's first quantization: current scaling seeds the
        history), and writes the tensor's amax into amax_out, which then goes on top of the history
        (scalemm.quantize.advance_amax_history: one kernel that also keeps the next amax). A forward quantization
        run inside a backward pass (activation checkpointing's recompute) gets the amax the forward's own
        quantization used and no amax_out: the same copies again, and the history does not move twice."""
        if torch.compiler.is_compiling():
            raise RuntimeError(f"scalemm.nn.{self._where()}: FP8DelayedScaling does not run under torch.compile (its "
                               "histories are seeded on the first call, which is host state); use FP8Tensorwise there")
        if role != "grad" and role in self._amax_used and _in_backward():
            return call(self._amax_used[role], None)
        h, next_amax = self._amax_history(role)
        seeded = role in self._amax_used
        cur = torch.empty_like(next_amax)
        out = call(next_amax if seeded else None, cur)
        used = torch.empty_like(next_amax) if seeded else None
        advance_amax_history(h, cur, next_amax, used)
        self._amax_next[role] = (h, version(h), next_amax)  # the CPU step's copy_ bumped the version
        self._amax_used[role] = used if seeded else cur  # seeding: the amax current scaling took
        return out

    def _apply(self, fn, recurse=True):
        self._wcache.clear()  # a device move or cast makes new weights
        return super()._apply(fn, recurse)

    def __getstate__(self):
        state = dict(super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__)
        state["_wcache"] = _WeightCache()  # cached copies are derived data (and hold a weakref)
        return state


def _needs(x, weight):
    """(dx needed, dW needed) for this forward: what the quantizers must prepare for backward.
    Decided here, where grad mode is visible (inside Function.forward it is always off)."""
    grad = torch.is_grad_enabled()
    return grad and x.requires_grad, grad and weight.requires_grad


def _check_prepared(where, needed, prepared):
    for want, have, what in zip(needed, prepared, ("x", "the weight")):
        if want and not have:
            raise RuntimeError(f"scalemm.nn.{where}: backward asks for the gradient of {what}, but the forward ran "
                               f"without grad mode or with {what} not requiring grad, so its operands were not "
                               "prepared; run the forward with grad enabled")


def _in_backward() -> bool:
    """Whether this runs inside the autograd engine's backward pass (where activation checkpointing recomputes a
    forward). Private torch API (as _will_engine_execute_node below); False where it is missing."""
    graph_task = getattr(torch._C, "_current_graph_task_id", None)
    return graph_task is not None and graph_task() != -1


def _train_quantize(delayed, x2, key, role, rowwise, columnwise) -> list:
    """The flat copies of x2 [M, K] for `role`: the custom op, or under FP8DelayedScaling (delayed: the layer) the
    quantizer with the layer's amax history of the role."""
    if delayed is None:
        return torch.ops.scalemm.train_quantize(x2, key, role, rowwise, columnwise)
    return training.flatten(delayed._delayed_quantize(role, lambda amax, out: training.quantize(
        x2, from_key(key), role, rowwise=rowwise, columnwise=columnwise, amax=amax, amax_out=out)))


def _train_quantize_grouped(delayed, x, offsets, key, role, rowwise, columnwise) -> list:
    """_train_quantize's grouped form (x [T, K] sorted by expert)."""
    if delayed is None:
        return torch.ops.scalemm.train_quantize_grouped(x, offsets, key, role, rowwise, columnwise)
    return training.flatten(delayed._delayed_quantize(role, lambda amax, out: training.quantize_grouped(
        x, offsets, from_key(key), role, rowwise=rowwise, columnwise=columnwise, amax=amax, amax_out=out)),
        grouped=True)


class _LinearFn(torch.autograd.Function):
    """y = x W^T + b with the recipe's quantized GEMMs. Inputs: x2 [M, K], the master weight and
    bias (for their gradients), the recipe key and its tensors per copy (training.field_count),
    whether dx and dW are needed (need_dx: wq holds W's columnwise copy too), and wq (W's flattened
    copies). Saves only what backward reads: x's columnwise copy (wgrad) and W's columnwise copy
    (dgrad); autograd frees them after backward."""

    @staticmethod
    def forward(ctx, x2, weight, bias, key, n, need_dx, need_dw, fusing, delayed, *wq):
        M = x2.shape[0]
        # the columnwise copy needs M % 16: pad with zero rows (they change no amax and add 0 to dW)
        Mp = layout.round_up(M, training.TOKEN_ALIGN) if need_dw else M
        xp = torch.nn.functional.pad(x2, (0, 0, 0, Mp - M)) if Mp != M else x2.contiguous()
        x_row, x_col = training.split(_train_quantize(delayed, xp, key, "input", True, need_dw), n, True, need_dw)
        w_row, w_col = training.split(wq, n, True, need_dx)
        b = None if bias is None else bias.to(x2.dtype)
        y = torch.ops.scalemm.train_gemm("fprop", x_row, w_row, b, key, x2.dtype)
        ctx.save_for_backward(*(x_col or []), *(w_col if need_dx else []))
        ctx.key, ctx.n, ctx.M, ctx.Mp, ctx.n_wq, ctx.prepared = key, n, M, Mp, len(wq), (need_dx, need_dw)
        ctx.dtypes = (x2.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.fusing, ctx.delayed = fusing, delayed
        return y[:M] if Mp != M else y

    @staticmethod
    def backward(ctx, dy):
        need_dx, need_dw, need_db = ctx.needs_input_grad[:3]
        _check_prepared("Linear", (need_dx, need_dw), ctx.prepared)
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        saved = list(ctx.saved_tensors)
        n, (has_w_col, has_x_col) = ctx.n, ctx.prepared  # what forward saved: x's copy first
        x_col = saved[:n] if has_x_col else None
        w_col = saved[n * has_x_col:] if has_w_col else None
        dy = dy.contiguous()
        dx = dw = db = None
        if need_db:
            db = dy.sum(0, dtype=torch.float32).to(b_dtype)
        if need_dx or need_dw:
            M, Mp = ctx.M, ctx.Mp
            dyp = torch.nn.functional.pad(dy, (0, 0, 0, Mp - M)) if Mp != M else dy
            d_row, d_col = training.split(_train_quantize(ctx.delayed, dyp, ctx.key, "grad", need_dx, need_dw), n,
                                          need_dx, need_dw)
            if need_dx:
                dx = torch.ops.scalemm.train_gemm("dgrad", d_row, w_col, None, ctx.key, x_dtype)
                dx = dx[:M] if Mp != M else dx
            if need_dw:
                into = _fused_grad(ctx.fusing, w_dtype)
                if into is not None:  # dW added to weight.grad by the wgrad's epilogue; autograd gets no dW
                    training.gemm("wgrad", d_col, x_col, from_key(ctx.key), out_dtype=w_dtype, accumulate_into=into)
                else:
                    dw = torch.ops.scalemm.train_gemm("wgrad", d_col, x_col, None, ctx.key, w_dtype)
        return (dx, dw, db, None, None, None, None, None, None) + (None,) * ctx.n_wq


class Linear(_RecipeLayer, torch.nn.Linear):
    """nn.Linear trained through scalemm's low-precision GEMMs.

    weight [out_features, in_features] and bias [out_features] are ordinary high-precision
    Parameters (the master copy; the state dict is nn.Linear's). forward(x[..., in_features])
    runs, per the recipe (scalemm.recipes; default FP8Rowwise()):
      fprop: x and W quantized (one quantizer call each, which also makes the columnwise copy that
        backward needs), one scalemm.gemm with the scales and the bias in its epilogue;
      backward: dy quantized once (both copies), dgrad dx = dy W and wgrad dW = dy^T x, one
        scalemm.gemm each; db = sum of dy in fp32.
    y and dx have x's dtype (under autocast, x is first cast to the autocast dtype), dW and db the
    parameters' dtypes. W's quantized copies are cached until the weight changes (its _version or
    data_ptr: once per optimizer step); cache_weight=False quantizes it on every call. A token
    count M that is not a multiple of 16 is padded with zero rows for the columnwise copies (a copy
    of x and dy). recipe=None runs plain torch.nn.functional.linear (a high-precision layer with
    the same parameters). fuse_wgrad_accumulation=True (FP8): in a backward that accumulates into an
    existing weight.grad (gradient-accumulation micro-steps), the wgrad GEMM adds dW into it in its
    epilogue and autograd gets no dW (docs/training.md, "Gradient accumulation").

    CPU tensors run scalemm's reference path (the same quantizers and GEMM numerics in torch),
    CUDA tensors the Hopper kernels. Works under torch.compile (every quantize / GEMM is a custom
    op of scalemm.ops with a fake; the weight is then quantized on every call) and activation
    checkpointing (the recompute reuses the cached weight copies). in_features and out_features
    must be multiples of 16 (linear_eligibility says why); scalemm.nn.convert skips layers that
    are not.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 recipe: Optional[Recipe] = FP8Rowwise(), cache_weight: bool = True,
                 fuse_wgrad_accumulation: bool = False):
        _check_features("Linear", in_features, out_features, recipe)
        for name, v in (("cache_weight", cache_weight), ("fuse_wgrad_accumulation", fuse_wgrad_accumulation)):
            if not isinstance(v, bool):
                raise TypeError(f"Linear: '{name}' must be a bool, got {type(v).__name__}")
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe, self.cache_weight = recipe, cache_weight
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self._wcache = _WeightCache()

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: Optional[Recipe] = FP8Rowwise(), *,
                    cache_weight: bool = True, fuse_wgrad_accumulation: bool = False) -> "Linear":
        """A Linear that shares `linear`'s Parameters (the same objects: an optimizer built on them
        keeps working) and training mode."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, device="meta",
                  dtype=linear.weight.dtype, recipe=recipe, cache_weight=cache_weight,
                  fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        mod.weight = linear.weight
        mod.bias = linear.bias
        mod.train(linear.training)
        return mod

    def _where(self) -> str:
        return f"Linear(in_features={self.in_features}, out_features={self.out_features})"

    def _weight_copies(self, columnwise: bool) -> list:
        key = self._key
        w = self.weight

        def make(col):
            return list(_train_quantize(self._delayed, w.detach(), key, "weight", True, col))
        if not self.cache_weight:
            return make(columnwise)
        tensors = self._wcache.get(w, key, columnwise, make)
        return tensors if columnwise else tensors[:self._n]  # the cache may also hold the columnwise copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recipe is None:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        _check_input(self._where(), x, self.in_features, self.weight)
        x = _autocast(x)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        need_dx, need_dw = _needs(x, self.weight)
        wq = self._weight_copies(columnwise=need_dx)
        y = _LinearFn.apply(x2, self.weight, self.bias, self._key, self._n, need_dx, need_dw, _fusing(self, need_dw),
                            self._delayed, *wq)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe!r}"


class _GroupedLinearFn(torch.autograd.Function):
    """The grouped form of _LinearFn: x [T, K] sorted by expert, offsets int32 [E], weight [E, N, K];
    wq holds W's stacked copy and, when need_dx, the stacked copy of W^T (dgrad)."""

    @staticmethod
    def forward(ctx, x, offsets, weight, bias, key, n, need_dx, need_dw, fusing, delayed, *wq):
        T = x.shape[0]
        x = x.contiguous()
        xq = _train_quantize_grouped(delayed, x, offsets, key, "input", True, need_dw)
        x_row, x_col = training.split(xq, n, True, need_dw)
        w_s, w_t = training.split(wq, n, True, need_dx)
        b = None if bias is None else bias.to(x.dtype)
        y = torch.ops.scalemm.train_grouped_gemm("fprop", x_row, w_s, offsets, b, key, x.dtype, T)
        ctx.save_for_backward(offsets, *(x_col or []), *(w_t if need_dx else []))
        ctx.key, ctx.n, ctx.T, ctx.n_wq, ctx.prepared = key, n, T, len(wq), (need_dx, need_dw)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.fusing, ctx.delayed = fusing, delayed
        return y

    @staticmethod
    def backward(ctx, dy):
        need_dx, need_dw, need_db = ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        _check_prepared("GroupedLinear", (need_dx, need_dw), ctx.prepared)
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        offsets, *saved = ctx.saved_tensors
        n, (has_w_t, has_x_col) = ctx.n, ctx.prepared  # what forward saved: x's copy first
        x_col = saved[:n] if has_x_col else None
        w_t = saved[n * has_x_col:] if has_w_t else None
        dy = dy.contiguous()
        T = ctx.T
        dx = dw = db = None
        if need_db:
            db = _group_sums(dy, offsets).to(b_dtype)
        if need_dx or need_dw:
            dq = _train_quantize_grouped(ctx.delayed, dy, offsets, ctx.key, "grad", need_dx, need_dw)
            d_row, d_col = training.split(dq, n, need_dx, need_dw)
            if need_dx:
                dx = torch.ops.scalemm.train_grouped_gemm("dgrad", d_row, w_t, offsets, None, ctx.key, x_dtype, T)
            if need_dw:
                into = _fused_grad(ctx.fusing, w_dtype)
                if into is not None:  # dW added to weight.grad by the wgrad's epilogue; autograd gets no dW
                    training.grouped_gemm("wgrad", d_col, x_col, offsets, from_key(ctx.key), T=T,
                                          out_dtype=w_dtype, accumulate_into=into)
                else:
                    dw = torch.ops.scalemm.train_grouped_gemm("wgrad", d_col, x_col, offsets, None, ctx.key, w_dtype, T)
        return (dx, None, dw, db, None, None, None, None, None, None) + (None,) * ctx.n_wq


def _fusing(layer, need_dw):
    """What backward needs to add dW into weight.grad itself (fuse_wgrad_accumulation): the layer and the
    weight's gradient-accumulation node, or None."""
    if not (need_dw and layer.fuse_wgrad_accumulation) or torch.compiler.is_compiling():
        return None
    return layer, torch.autograd.graph.get_gradient_edge(layer.weight).node


def _fused_grad(fusing, w_dtype):
    """weight.grad where a Linear's / GroupedLinear's wgrad may add into it in place, else None: the layer's
    fuse_wgrad_accumulation (`fusing` from _fusing), an FP8 recipe, a .grad already there (contiguous, the weight's
    dtype and shape), not while torch.compile traces, and a backward that accumulates into .grad (tensor.backward /
    torch.autograd.backward with the weight among its inputs; torch.autograd.grad wants dW returned)."""
    if fusing is None:
        return None
    layer, node = fusing
    if layer.recipe is None or layer.recipe.format != "fp8" or torch.compiler.is_compiling():
        return None
    w = layer.weight
    g = w.grad
    if g is None or g.dtype != w_dtype or g.shape != w.shape or not g.is_contiguous() or g.device != w.device:
        return None
    try:  # the engine runs the weight's AccumulateGrad only when this backward accumulates into .grad
        if node is None or not torch._C._will_engine_execute_node(node):
            return None
    except RuntimeError:  # raised inside torch.autograd.grad
        return None
    return g


def _group_sums(dy, offsets):
    """[E, N] fp32: the sum of dy's rows per expert group (rows past offsets[-1] in none). Device ops."""
    E = offsets.numel()
    groups = layout.row_groups(offsets, dy.shape[0])
    out = torch.zeros(E + 1, dy.shape[1], dtype=torch.float32, device=dy.device)
    return out.index_add_(0, groups, dy.to(torch.float32))[:E]


def _rows_in_groups(offsets, T):
    """bool [T, 1]: rows that belong to an expert group (rows past offsets[-1] do not)."""
    return (layout.row_groups(offsets, T) < offsets.numel())[:, None]


class _GroupedMMFn(torch.autograd.Function):
    """recipe=None: the high-precision grouped layer on torch._grouped_mm (x's dtype; fp32
    accumulation), with its three products written out (torch's own _grouped_mm backward does not
    run on CPU tensors): y = x_g W_g^T, dx = dy_g W_g, dW_g = dy_g^T x_g (2-D x 2-D form)."""

    @staticmethod
    def forward(ctx, x, offsets, weight, bias):
        w = weight.to(x.dtype)
        x = x.contiguous()
        y = torch._grouped_mm(x, w.transpose(1, 2), offs=offsets)
        if bias is not None:
            y = y + bias.to(x.dtype)[layout.row_groups(offsets, x.shape[0]).clamp(max=offsets.numel() - 1)]
        ctx.save_for_backward(x, offsets, w)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return torch.where(_rows_in_groups(offsets, x.shape[0]), y, 0)

    @staticmethod
    def backward(ctx, dy):
        x, offsets, w = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        need_dx, need_dw, need_db = ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        dy = torch.where(_rows_in_groups(offsets, x.shape[0]), dy.to(x.dtype), 0).contiguous()
        dx = dw = db = None
        if need_dx:
            dx = torch.where(_rows_in_groups(offsets, x.shape[0]), torch._grouped_mm(dy, w, offs=offsets), 0)
        if need_dw:
            starts, ends = layout.group_bounds(offsets, x.shape[0])
            dw = torch._grouped_mm(dy.t(), x, offs=offsets)
            dw = torch.where((ends > starts)[:, None, None], dw, 0).to(w_dtype)
        if need_db:
            db = _group_sums(dy, offsets).to(b_dtype)
        return dx, None, dw, db


class GroupedLinear(_RecipeLayer, torch.nn.Module):
    _GROUPED = True

    """MoE experts: num_experts linear layers applied to tokens sorted by expert.

    weight [num_experts, out_features, in_features] (each expert in nn.Linear layout) and optional
    bias [num_experts, out_features]: high-precision Parameters. forward(x [T, in_features],
    offsets) -> [T, out_features], offsets int32 [num_experts] on x's device: cumulative row ends
    (torch._grouped_mm's `offs`; expert e owns rows offsets[e-1] .. offsets[e]-1). Rows past
    offsets[-1] belong to no expert: their output and gradient are 0. Offsets are never read on
    the host (no sync; on CPU they are checked). Per the recipe:
      fprop: scalemm.grouped_gemm on x quantized per group (one call, which also makes the
        wgrad-layout copy) and the stacked quantized weight;
      dgrad: scalemm.grouped_gemm of dy against the stacked quantized W^T (a second pass over W:
        the stacked quantizers make no columnwise copy);
      wgrad: scalemm.grouped_gemm_wgrad on the wgrad copies of dy and x (experts without tokens get
        dW = 0). NVFP4: there is no NVFP4 grouped wgrad kernel; the NVFP4 wgrad copies are decoded
        exactly to bf16 and multiplied with torch._grouped_mm (scalemm.training's notes).
    Weight copies are cached as Linear's, and fuse_wgrad_accumulation works as Linear's. recipe=None: bf16/fp32
    torch._grouped_mm (the baseline). in_features and out_features must be multiples of 16.
    """

    def __init__(self, num_experts: int, in_features: int, out_features: int, bias: bool = False, *,
                 recipe: Optional[Recipe] = FP8Rowwise(), device=None, dtype=None, cache_weight: bool = True,
                 fuse_wgrad_accumulation: bool = False):
        super().__init__()
        if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts <= 0:
            raise ValueError(f"GroupedLinear: 'num_experts' must be a positive int, got {num_experts!r}")
        _check_features("GroupedLinear", in_features, out_features, recipe)
        for name, v in (("bias", bias), ("cache_weight", cache_weight), ("fuse_wgrad_accumulation", fuse_wgrad_accumulation)):
            if not isinstance(v, bool):
                raise TypeError(f"GroupedLinear: '{name}' must be a bool, got {type(v).__name__}")
        self.num_experts, self.in_features, self.out_features = num_experts, in_features, out_features
        self.recipe, self.cache_weight = recipe, cache_weight
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        kw = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(num_experts, out_features, in_features, **kw))
        self.bias = torch.nn.Parameter(torch.empty(num_experts, out_features, **kw)) if bias else None
        self._wcache = _WeightCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Each expert as nn.Linear initialises itself: U(-1/sqrt(in_features), 1/sqrt(in_features))."""
        bound = 1 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def _where(self) -> str:
        return (f"GroupedLinear(num_experts={self.num_experts}, in_features={self.in_features}, "
                f"out_features={self.out_features})")

    def _weight_copies(self, transposed: bool) -> list:
        key = self._key
        w = self.weight

        def make(t):
            wd = w.detach()
            if self._delayed is not None:  # FP8DelayedScaling: the weight's amax history [H, num_experts]
                recipe = self._recipe
                if t:
                    return self._delayed_quantize("weight", lambda amax, out: [
                        f for q in training.quantize_stacked_pair(wd, recipe, amax=amax, amax_out=out)
                        for f in training.flatten(q, grouped=True)])
                return training.flatten(self._delayed_quantize("weight", lambda amax, out: training.quantize_stacked(
                    wd, recipe, amax=amax, amax_out=out)), grouped=True)
            if t:  # both copies, from one pass over w where the recipe allows (training.quantize_stacked_pair)
                return list(torch.ops.scalemm.train_quantize_stacked_pair(wd, key))
            return list(torch.ops.scalemm.train_quantize_stacked(wd, key, False))
        if not self.cache_weight:
            return make(transposed)
        tensors = self._wcache.get(w, key, transposed, make)
        return tensors if transposed else tensors[:self._n]  # the cache may also hold the W^T copy

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        where = self._where()
        _check_input(where, x, self.in_features, self.weight)
        if x.dim() != 2:
            raise ValueError(f"{where}: x must be 2-D [T, {self.in_features}] (tokens sorted by expert), got shape "
                             f"{tuple(x.shape)}")
        if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 \
                or tuple(offsets.shape) != (self.num_experts,) or offsets.device != x.device:
            got = f"{getattr(offsets, 'dtype', type(offsets).__name__)} {tuple(getattr(offsets, 'shape', ()))}"
            raise ValueError(f"{where}: offsets must be an int32 tensor [{self.num_experts}] on {x.device} "
                             f"(cumulative row ends per expert), got {got}")
        offsets = offsets.contiguous()
        x = _autocast(x)
        if self.recipe is None:
            return _GroupedMMFn.apply(x, offsets, self.weight, self.bias)
        need_dx, need_dw = _needs(x, self.weight)
        wq = self._weight_copies(transposed=need_dx)
        return _GroupedLinearFn.apply(x, offsets, self.weight, self.bias, self._key, self._n, need_dx, need_dw,
                                      _fusing(self, need_dw), self._delayed, *wq)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, recipe={self.recipe!r}")


@dataclass
class ConvertReport:
    """What convert() / convert_for_inference() did: the converted modules' names, and the skipped nn.Linear
    modules with why."""
    converted: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    by: str = "convert"

    def __str__(self) -> str:
        lines = [f"scalemm.nn.{self.by}: {len(self.converted)} converted, {len(self.skipped)} skipped"]
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _swap_linears(where: str, model: torch.nn.Module, filter, eligible: Callable[[torch.nn.Linear], Optional[str]],
                  make: Callable[[torch.nn.Linear], torch.nn.Module], skip_type, single: str) -> ConvertReport:
    """convert's and convert_for_inference's walk: every exact nn.Linear submodule of `model` that filter(name,
    module) keeps and eligible(module) passes (None, else the reason) is replaced by make(module), in place; one
    shared by several parents once. Modules of skip_type (already converted) are left alone. single: what converts
    one nn.Linear (said when `model` is one)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{where}: 'model' must be an nn.Module, got {type(model).__name__}")
    if filter is not None and not callable(filter):
        raise TypeError(f"{where}: 'filter' must be callable(name, module) -> bool or None, got "
                        f"{type(filter).__name__}")
    if type(model) is torch.nn.Linear:
        raise TypeError(f"{where} swaps a model's submodules in place and cannot replace the model itself: "
                        f"use {single}")
    report = ConvertReport(by=where)
    done: dict[int, torch.nn.Module] = {}  # a Linear shared by several parents is converted once
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):  # every name: named_children skips repeats
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if not isinstance(child, torch.nn.Linear) or isinstance(child, skip_type):
                continue
            if id(child) in done:
                setattr(parent, child_name, done[id(child)])
                report.converted.append(name)
                continue
            reason = None
            if type(child) is not torch.nn.Linear:
                reason = f"{type(child).__name__} is a subclass of nn.Linear (its forward may differ)"
            elif filter is not None and not filter(name, child):
                reason = "excluded by the filter"
            elif child.weight.dtype not in INPUT_DTYPES:
                reason = f"weight dtype {child.weight.dtype} (the quantizers read bf16, fp16 or fp32)"
            else:
                reason = eligible(child)
            if reason:
                report.skipped[name] = reason
                continue
            done[id(child)] = make(child)
            setattr(parent, child_name, done[id(child)])
            report.converted.append(name)
    log.info("%s", report)
    return report


def convert(model: torch.nn.Module, recipe: Recipe, filter: Optional[Callable[[str, torch.nn.Module], bool]] = None,
            *, fuse_wgrad_accumulation: bool = False) -> ConvertReport:
    """Swap the eligible nn.Linear submodules of `model` for scalemm.nn.Linear, in place.

    A swapped layer shares the original's Parameters (same objects: an optimizer already built on
    them keeps working, the state dict is unchanged). Eligible: an exact torch.nn.Linear (not a
    subclass, whose forward may differ; not an already converted Linear), weight bf16/fp16/fp32,
    in_features and out_features multiples of 16 (linear_eligibility), and filter(name, module)
    true when a filter is given. Returns a ConvertReport (converted names, skipped names with the
    reason) and logs it on the "scalemm" logger. The root module itself is never swapped: pass
    its parent, or use Linear.from_linear. Forward hooks on a swapped module are not carried over.
    fuse_wgrad_accumulation: given to every swapped Linear (gradient accumulation: Linear's docstring).
    """
    check_recipe(recipe)
    if not isinstance(fuse_wgrad_accumulation, bool):
        raise TypeError(f"convert: 'fuse_wgrad_accumulation' must be a bool, got {type(fuse_wgrad_accumulation).__name__}")
    return _swap_linears("convert", model, filter, lambda m: linear_eligibility(m.in_features, m.out_features),
                         lambda m: Linear.from_linear(m, recipe, fuse_wgrad_accumulation=fuse_wgrad_accumulation),
                         Linear, "scalemm.nn.Linear.from_linear(model, recipe)")


INFERENCE_FORMATS = ("nvfp4", "fp8")


def convert_for_inference(model: torch.nn.Module, format: str = "nvfp4",
                          filter: Optional[Callable[[str, torch.nn.Module], bool]] = None, *, mode: str = "w4a16",
                          weight_scaling: str = "token") -> ConvertReport:
    """Swap the eligible nn.Linear submodules of `model` for inference layers with quantized weights, in place:
    NVFP4Linear.from_linear(m, mode=mode, weight_scaling=weight_scaling) for format="nvfp4", FP8Linear.from_linear(m)
    for "fp8" (mode and weight_scaling are NVFP4's). The nn.Linear's weight is quantized and dropped (the new
    module's buffers are its state). Eligible as for convert, with the inference layers' rule (in_features % 16 ==
    0, out_features % 8 == 0). Returns a ConvertReport, also logged on the "scalemm" logger. Run the model under
    torch.no_grad() / inference_mode() afterwards; NVFP4 mode="w4a16" layers take bf16/fp16 activations (cast an fp32
    model first, or take mode="w4a4")."""
    if format not in INFERENCE_FORMATS:
        raise ValueError(f"convert_for_inference: 'format' must be one of {INFERENCE_FORMATS}, got {format!r}")
    if format == "nvfp4":
        _check_nvfp4_options("convert_for_inference", mode, weight_scaling)
        cls, make = NVFP4Linear, lambda m: NVFP4Linear.from_linear(m, mode=mode, weight_scaling=weight_scaling)
    else:
        cls, make = FP8Linear, FP8Linear.from_linear
    return _swap_linears("convert_for_inference", model, filter,
                         lambda m: _inference_ineligibility(m.in_features, m.out_features), make,
                         (FP8Linear, NVFP4Linear), f"scalemm.nn.{cls.__name__}.from_linear(model)")
