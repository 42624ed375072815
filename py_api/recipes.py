"""Training recipes: how scalemm.nn.Linear and scalemm.nn.GroupedLinear quantize the operands of
their three GEMMs, and in which accumulation mode each GEMM runs.

A linear layer y = x W^T + b runs three GEMMs per step (scalemm.gemm(a [M, K], b [N, K]) computes
a @ b^T, both operands K-major):

  fprop  y  = x  W^T :  gemm(x rowwise [M, K],    W rowwise [N, K])
  dgrad  dx = dy W   :  gemm(dy rowwise [M, N],   W columnwise = W^T [K, N])
  wgrad  dW = dy^T x :  gemm(dy columnwise = dy^T [N, M],  x columnwise = x^T [K, M])

Each operand is quantized once, by one quantizer call that makes both copies a layer needs (the
columnwise copy is the transpose quantized along the other dimension). A recipe says, per role
("input" x, "weight" W, "grad" dy), the format and scaling of those copies, and per GEMM its
options (`GemmOptions`). Recipes are small frozen dataclasses: hashable, comparable, and turned
into a string key for the custom ops (`key()` / `from_key()`).

  FP8Tensorwise  e4m3 with current scaling, one scale per tensor for x, W and dy.
  FP8Rowwise     e4m3 with current scaling: x per token, W per output channel, dy per token; their
                 columnwise copies per column (channel).
  FP8DelayedScaling  e4m3, one scale per tensor from the layer's amax history of that operand
                 (one pass per quantization instead of two).
  NVFP4          e2m1 codes, e4m3 scales per 16 elements, fp32 global scale: x per tensor (or per
                 token), W per output channel, dy per tensor (or per token) with stochastic rounding;
                 RHT on the wgrad copies of x and dy.
  Accumulation: FP8 fprop fast, dgrad and wgrad full by default; NVFP4 always fp32 (exact emulation).

NVFP4 follows TransformerEngine's NVFP4 recipe where scalemm has the pieces: 1 x 16 blocks,
RHT (16-point random Hadamard transform) on both wgrad operands (the columnwise copies of x and
dy; it cancels in dy^T x), stochastic rounding on the gradient (both of its copies), round to
nearest elsewhere. Differences from TE: TE quantizes weights in 16 x 16 2-D blocks (scalemm has
1 x 16 only) with a per-tensor global scale (scalemm's default here is per channel). On Hopper
the NVFP4 GEMMs are an exact emulation on bf16 tensor cores with fp32 accumulation
(docs/numerics.md section 4), so there is no fast-accumulation mode: `fast_accum` must stay off.

Grouped layers (MoE) read the same recipe: "tensor" scaling means one scale per expert group
(activations, gradients) or per expert (stacked weights); "token" per row / per expert channel.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from .formats import SCALINGS

__all__ = ["GemmOptions", "Recipe", "FP8Tensorwise", "FP8Rowwise", "FP8DelayedScaling", "NVFP4", "ROLES", "GEMMS", "from_key", "check_recipe"]

ROLES = ("input", "weight", "grad")  # x, W, dy
GEMMS = ("fprop", "dgrad", "wgrad")


@dataclass(frozen=True)
class GemmOptions:
    """Options of one of the three GEMMs. fast_accum: FP8 fast accumulation (wgmma accumulators
    never promoted; scalemm.gemm's `fast_accum`)."""
    fast_accum: bool = False

    def __post_init__(self):
        if not isinstance(self.fast_accum, bool):
            raise TypeError(f"GemmOptions: 'fast_accum' must be a bool, got {type(self.fast_accum).__name__}")


FAST = GemmOptions(fast_accum=True)
FULL = GemmOptions(fast_accum=False)


class Recipe:
    """What every recipe answers (the layers and the custom ops ask only these):

    format: "fp8" or "nvfp4".
    scaling(role): "tensor" or "token" for role in ROLES.
    rht(role): whether the role's columnwise (wgrad) copy goes through the RHT.
    stochastic_rounding(role): whether the role's copies use stochastic rounding.
    gemm(name): the GemmOptions of "fprop", "dgrad" or "wgrad".
    key() / from_key(key): a string that identifies the recipe (custom-op arguments are strings).
    """
    format: ClassVar[str]

    def scaling(self, role: str) -> str:
        raise NotImplementedError

    def rht(self, role: str) -> bool:
        _check_role(role)
        return False

    def stochastic_rounding(self, role: str) -> bool:
        _check_role(role)
        return False

    def amax_history(self) -> int:
        """Delayed scaling's history length (FP8DelayedScaling), 0 for current scaling."""
        return 0

    def gemm(self, name: str) -> GemmOptions:
        if name not in GEMMS:
            raise ValueError(f"gemm must be one of {GEMMS}, got {name!r}")
        return getattr(self, name)

    def key(self) -> str:
        return _key(self)

    def describe(self) -> str:
        """One line: scaling per role, RHT / SR, accumulation per GEMM."""
        roles = ", ".join(f"{r} {self.scaling(r)}" + (" +RHT(wgrad)" if self.rht(r) else "")
                          + (" +SR" if self.stochastic_rounding(r) else "") for r in ROLES)
        accum = ", ".join(f"{g} {'fast' if self.gemm(g).fast_accum else 'full'}" for g in GEMMS)
        return f"{type(self).__name__}: {self.format}; {roles}; accumulation {accum}"


def _check_role(role):
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")


def _check_gemm_fields(recipe, allow_fast: bool):
    for g in GEMMS:
        opt = getattr(recipe, g)
        if not isinstance(opt, GemmOptions):
            raise TypeError(f"{type(recipe).__name__}: '{g}' must be a GemmOptions, got {type(opt).__name__}")
        if opt.fast_accum and not allow_fast:
            raise ValueError(f"{type(recipe).__name__}: '{g}' has fast_accum=True, but NVFP4 GEMMs on Hopper run on "
                             "bf16 tensor cores with fp32 accumulation: there is no fast-accumulation mode")


@dataclass(frozen=True)
class _FP8Recipe(Recipe):
    """What the FP8 recipes share: e4m3 current scaling, fprop with fast accumulation, dgrad and
    wgrad with full (promoted) accumulation by default; a subclass names its scaling."""
    format: ClassVar[str] = "fp8"
    _scaling: ClassVar[str]
    fprop: GemmOptions = FAST
    dgrad: GemmOptions = FULL
    wgrad: GemmOptions = FULL

    def __post_init__(self):
        _check_gemm_fields(self, allow_fast=True)

    def scaling(self, role: str) -> str:
        _check_role(role)
        return self._scaling


@dataclass(frozen=True)
class FP8Tensorwise(_FP8Recipe):
    """FP8 e4m3 with current scaling, one scale per tensor for x, W and dy (per expert group / per
    expert in grouped layers). fprop with fast accumulation, dgrad and wgrad with full (promoted)
    accumulation by default."""
    _scaling: ClassVar[str] = "tensor"


@dataclass(frozen=True)
class FP8Rowwise(_FP8Recipe):
    """FP8 e4m3 with current scaling along the GEMMs' outer dimensions: x per token, W per output
    channel, dy per token; their columnwise copies per column (channel), so every GEMM has one
    scale per output row and one per output column, folded into its epilogue. Accumulation as
    FP8Tensorwise."""
    _scaling: ClassVar[str] = "token"


@dataclass(frozen=True)
class FP8DelayedScaling(_FP8Recipe):
    """FP8 e4m3 with delayed scaling (TransformerEngine's DelayedScaling, amax_compute_algo "max"):
    one scale per tensor for x, W and dy (per expert group / per expert in grouped layers), taken
    from the largest amax of the last `amax_history_len` quantizations of that operand in that
    layer instead of the tensor's own. So each quantization is one pass over the tensor (current
    scaling reads it twice: the amax, then the copies), which also records the tensor's amax in the
    history. Values beyond the history's amax saturate to +-448. A layer's first quantization of
    each operand uses current scaling (it seeds the history); an expert group whose history holds
    only zeros (no tokens yet) is quantized with scale 1, as in TE. Accumulation as FP8Tensorwise.
    The histories are non-persistent buffers of the layer (not in its state dict). Under activation
    checkpointing the recomputed forward repeats its first quantization (same amax, nothing
    recorded). Not under torch.compile (the first-call seeding is host state)."""
    _scaling: ClassVar[str] = "tensor"
    amax_history_len: int = 1024

    def __post_init__(self):
        super().__post_init__()
        n = self.amax_history_len
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"FP8DelayedScaling: 'amax_history_len' must be a positive int, got {n!r}")

    def amax_history(self) -> int:
        return self.amax_history_len


@dataclass(frozen=True)
class NVFP4(Recipe):
    """NVFP4 (TransformerEngine-style, see the module notes).

    activation_scaling: global scale of x per "tensor" (default) or per "token".
    weight_scaling: of W per "token" (= per output channel, default) or per "tensor".
    grad_scaling: of dy per "tensor" (default) or per "token".
    wgrad_rht: RHT on the wgrad operands (columnwise copies of x and dy). Default True.
    grad_stochastic_rounding: stochastic rounding of dy's codes (both copies). Default True.
      Bits come from torch's generator of dy's device (docs/numerics.md section 9): seeded by
      torch.manual_seed, fresh each call. Not CUDA-graph safe (the seed is read on the host).
    fprop / dgrad / wgrad: GemmOptions with fast_accum=False (the only mode; see the notes).
    """
    format: ClassVar[str] = "nvfp4"
    activation_scaling: str = "tensor"
    weight_scaling: str = "token"
    grad_scaling: str = "tensor"
    wgrad_rht: bool = True
    grad_stochastic_rounding: bool = True
    fprop: GemmOptions = FULL
    dgrad: GemmOptions = FULL
    wgrad: GemmOptions = FULL

    def __post_init__(self):
        for name in ("activation_scaling", "weight_scaling", "grad_scaling"):
            if getattr(self, name) not in SCALINGS:
                raise ValueError(f"NVFP4: '{name}' must be one of {SCALINGS}, got {getattr(self, name)!r}")
        for name in ("wgrad_rht", "grad_stochastic_rounding"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"NVFP4: '{name}' must be a bool, got {type(getattr(self, name)).__name__}")
        _check_gemm_fields(self, allow_fast=False)

    def scaling(self, role: str) -> str:
        _check_role(role)
        return {"input": self.activation_scaling, "weight": self.weight_scaling, "grad": self.grad_scaling}[role]

    def rht(self, role: str) -> bool:
        _check_role(role)
        return self.wgrad_rht and role in ("input", "grad")

    def stochastic_rounding(self, role: str) -> bool:
        _check_role(role)
        return self.grad_stochastic_rounding and role == "grad"


_RECIPES = {cls.__name__: cls for cls in (FP8Tensorwise, FP8Rowwise, FP8DelayedScaling, NVFP4)}


def check_recipe(recipe, where: str = "recipe") -> Recipe:
    if not isinstance(recipe, Recipe):
        raise TypeError(f"'{where}' must be a scalemm.recipes recipe ({', '.join(_RECIPES)}), got "
                        f"{type(recipe).__name__}")
    return recipe


@functools.lru_cache(maxsize=None)
def _key(recipe: Recipe) -> str:
    return json.dumps({"recipe": type(recipe).__name__, **asdict(recipe)}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def from_key(key: str) -> Recipe:
    """The recipe whose key() is `key`."""
    try:
        d = json.loads(key)
        cls = _RECIPES[d.pop("recipe")]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"not a recipe key: {key!r}") from None
    kwargs = {}
    for f in fields(cls):
        if f.name in d:
            v = d.pop(f.name)
            kwargs[f.name] = GemmOptions(**v) if f.name in GEMMS else v
    if d:
        raise ValueError(f"recipe key {key!r} has unknown fields {sorted(d)}")
    return cls(**kwargs)
