"""nn.Linear-style modules on scalemm's kernels."""
from __future__ import annotations

import torch

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
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, device=None,
                 fast_accum: bool = True):
        super().__init__()
        if in_features % 16 or out_features % 8:
            raise ValueError(f"FP8Linear needs in_features % 16 == 0 and out_features % 8 == 0 (TMA rows), "
                             f"got {in_features}, {out_features}")
        self.in_features, self.out_features, self.fast_accum = in_features, out_features, fast_accum
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device))
        self.register_buffer("weight_scale_inv", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.bfloat16, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, fast_accum: bool = True) -> "FP8Linear":
        """Quantize an nn.Linear's weight per output channel (scalemm.quantize_fp8, "token" scaling
        over the weight's rows); keep its bias in the weight's dtype."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, device=w.device,
                  fast_accum=fast_accum)
        q = quantize_fp8(w.contiguous(), scaling="token")
        mod.weight.copy_(q.data)
        mod.weight_scale_inv.copy_(q.scale_inv)
        if linear.bias is not None:
            mod.bias = linear.bias.detach().to(w.dtype if w.dtype in (torch.bfloat16, torch.float16, torch.float32)
                                               else torch.bfloat16).clone()
        return mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise RuntimeError("FP8Linear is an inference module: run it under torch.no_grad() / inference_mode()")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected x[..., {self.in_features}], got shape {tuple(x.shape)}")
        lead = x.shape[:-1]
        xq = quantize_fp8(x.reshape(-1, self.in_features).contiguous(), scaling="token")
        bias = self.bias.to(x.dtype) if self.bias is not None and self.bias.dtype != x.dtype else self.bias
        y = gemm(xq.data, self.weight, xq.scale_inv, self.weight_scale_inv, bias=bias, out_dtype=x.dtype,
                 fast_accum=self.fast_accum)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, fp8 e4m3 per-channel weights, per-token activations")
