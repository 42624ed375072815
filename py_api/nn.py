"""nn.Linear-style modules on scalemm's kernels."""
from __future__ import annotations

import torch

from .formats import INPUT_DTYPES
from .gemm import gemm
from .quantize import quantize_fp8

__all__ = ["FP8Linear"]


class FP8Linear(torch.nn.Module):
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
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"FP8Linear: '{name}' must be a positive int, got {v!r}")
        if in_features % 16 or out_features % 8:
            raise ValueError(f"FP8Linear needs in_features % 16 == 0 and out_features % 8 == 0 (TMA rows), "
                             f"got {in_features}, {out_features}")
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
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        if w.dtype not in INPUT_DTYPES:
            raise TypeError(f"from_linear: the weight of Linear(in_features={linear.in_features}, out_features="
                            f"{linear.out_features}) must be bfloat16, float16 or float32, got {w.dtype} (cast the "
                            "layer first, e.g. linear.to(torch.bfloat16))")
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, device=w.device,
                  fast_accum=fast_accum)
        q = quantize_fp8(w.contiguous(), scaling="token")
        mod.weight.copy_(q.data)
        mod.weight_scale_inv.copy_(q.scale_inv)
        if linear.bias is not None:
            mod.bias = linear.bias.detach().to(w.dtype).clone()
        return mod

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
        return f"FP8Linear(in_features={self.in_features}, out_features={self.out_features})"

    def _check(self, x) -> None:
        where = self._where()
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{where}: x must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in INPUT_DTYPES:
            raise TypeError(f"{where}: x must be bfloat16, float16 or float32, got {x.dtype}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"{where}: expected x[..., {self.in_features}], got shape {tuple(x.shape)}")
        w, s = self.weight, self.weight_scale_inv
        if not isinstance(w, torch.Tensor) or w.dtype != torch.float8_e4m3fn \
                or tuple(w.shape) != (self.out_features, self.in_features):
            raise TypeError(f"{where}: weight must be float8_e4m3fn [{self.out_features}, {self.in_features}], got "
                            f"{getattr(w, 'dtype', type(w).__name__)} {tuple(getattr(w, 'shape', ()))}")
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or tuple(s.shape) != (self.out_features,):
            raise TypeError(f"{where}: weight_scale_inv must be float32 [{self.out_features}], got "
                            f"{getattr(s, 'dtype', type(s).__name__)} {tuple(getattr(s, 'shape', ()))}")
        if x.device != w.device:
            raise ValueError(f"{where}: x is on {x.device}, the layer on {w.device}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and getattr(x, "requires_grad", False):
            raise RuntimeError(f"{self._where()}: an inference module: run it under torch.no_grad() / "
                               "inference_mode()")
        self._check(x)
        lead = x.shape[:-1]
        bias = self.bias.to(x.dtype) if self.bias is not None and self.bias.dtype != x.dtype else self.bias
        try:
            xq = quantize_fp8(x.reshape(-1, self.in_features).contiguous(), scaling="token")
            y = gemm(xq.data, self.weight, xq.scale_inv, self.weight_scale_inv, bias=bias, out_dtype=x.dtype,
                     fast_accum=self.fast_accum)
        except (TypeError, ValueError) as e:  # e.g. a CUDA layout rule: say which layer
            raise type(e)(f"{self._where()}: {e}") from e
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fp8 e4m3 per-channel weights, per-token activations")
