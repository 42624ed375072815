"""Epilogue trees: write `alpha_row * alpha_col * acc + bias` and get a CUTLASS Sm90EVT.

A tree is built from leaves and compute nodes with ordinary Python operators:

    from scalemm.epilogues import Acc, RowVector, ColVector, relu
    tree = relu(RowVector("scale_a") * ColVector("scale_b") * Acc() + ColVector("bias", "bf16"))

Leaves (roles follow shapes):
  Acc()                    the fp32 accumulator
  Scalar(name)             one fp32 value read from a device pointer
  RowVector(name, dtype)   length M, one value per output row (per token)
  ColVector(name, dtype)   length N, one value per output column (per channel)
  ...(broadcast=True)      a vector that may also be given as one value (0-d/1-element tensor):
                           CUTLASS's dynamic broadcast (a bool stride picked at run time)
  ...(nullable=True)       may be omitted (None): reads as 0 (CUTLASS's nullptr default)
  Source(dtype)            a full M x N tensor (CUTLASS's C operand, loaded by TMA)
Compute: * + (fp32), relu, gelu (erf), silu, identity. The root is cast to the output type.

The same tree
  - emits C++ (`emit`): the `Sm90EVT<...>` type and an expression building its Arguments
    from `ptrs[i]` (the i-th leaf's device pointer) and `vec[i]` (1 if the i-th broadcast
    leaf is a real vector, 0 if one value);
  - evaluates in torch (`evaluate`): its own reference, in the same fp32 order.

With `swap_ab=True` the GEMM computes D^T = B A^T (small-M problems put N on the wide tile
side); rows and columns of the tree swap roles in the emitted C++, nothing else changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# dtype names <-> C++ types. Torch dtypes are accepted wherever a name is.
CPP_TYPES = {"f32": "float", "bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t"}
_ALIASES = {"float32": "f32", "float": "f32", "bfloat16": "bf16", "float16": "f16", "half": "f16"}


def dtype_name(dtype) -> str:
    name = str(dtype).replace("torch.", "")
    name = _ALIASES.get(name, name)
    if name not in CPP_TYPES:
        raise TypeError(f"epilogue operands must be float32, bfloat16 or float16, got {dtype}")
    return name


class Node:
    children: tuple = ()

    def __mul__(self, other): return Compute("multiply", (self, _node(other)))
    def __rmul__(self, other): return Compute("multiply", (_node(other), self))
    def __add__(self, other): return Compute("add", (self, _node(other)))
    def __radd__(self, other): return Compute("add", (_node(other), self))

    def leaves(self) -> tuple["Leaf", ...]:
        """Leaves that take a pointer, in argument order (depth first, left to right, deduplicated).
        Computed once per node (nodes are immutable) and kept on it: every GEMM call reads them."""
        cached = self.__dict__.get("_leaves")
        if cached is None:
            out: list[Leaf] = []
            def walk(n):
                if isinstance(n, Leaf) and n.takes_pointer and n not in out:
                    out.append(n)
                for c in n.children:
                    walk(c)
            walk(self)
            cached = tuple(out)
            object.__setattr__(self, "_leaves", cached)  # not a dataclass field: eq / hash ignore it
        return cached

    def __str__(self) -> str:
        return self.describe()


def _node(x) -> Node:
    if isinstance(x, Node):
        return x
    raise TypeError(f"epilogue trees combine Nodes, got {type(x).__name__}: use Scalar(name) for constants")


@dataclass(frozen=True, eq=True)
class Leaf(Node):
    takes_pointer = True


@dataclass(frozen=True)
class Acc(Leaf):
    takes_pointer = False
    def describe(self): return "acc"


@dataclass(frozen=True)
class Scalar(Leaf):
    name: str
    def describe(self): return self.name


@dataclass(frozen=True)
class RowVector(Leaf):
    name: str
    dtype: str = "f32"
    broadcast: bool = False
    nullable: bool = False
    def __post_init__(self): object.__setattr__(self, "dtype", dtype_name(self.dtype))
    def describe(self): return f"{self.name}[m]"


@dataclass(frozen=True)
class ColVector(Leaf):
    name: str
    dtype: str = "f32"
    broadcast: bool = False
    nullable: bool = False
    def __post_init__(self): object.__setattr__(self, "dtype", dtype_name(self.dtype))
    def describe(self): return f"{self.name}[n]"


@dataclass(frozen=True)
class Source(Leaf):
    dtype: str = "bf16"
    name: str = "c"
    def __post_init__(self): object.__setattr__(self, "dtype", dtype_name(self.dtype))
    def describe(self): return f"{self.name}[m,n]"


# name -> (C++ compute functor template, arity)
OPS = {
    "multiply": ("cutlass::multiplies", 2),
    "add": ("cutlass::plus", 2),
    "relu": ("cutlass::epilogue::thread::ReLu", 1),
    "gelu": ("cutlass::epilogue::thread::GELU", 1),
    "silu": ("cutlass::epilogue::thread::SiLu", 1),
    "identity": ("cutlass::epilogue::thread::Identity", 1),
}


@dataclass(frozen=True)
class Compute(Node):
    op: str
    children: tuple = field(default=())

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"unknown epilogue op {self.op!r}; known: {sorted(OPS)}")
        if len(self.children) != OPS[self.op][1]:
            raise ValueError(f"{self.op} takes {OPS[self.op][1]} operand(s), got {len(self.children)}")

    def describe(self):
        if self.op == "multiply":
            return f"{self.children[0].describe()} * {self.children[1].describe()}"
        if self.op == "add":
            return f"({self.children[0].describe()} + {self.children[1].describe()})"
        return f"{self.op}({self.children[0].describe()})"


def relu(x: Node) -> Compute: return Compute("relu", (x,))
def gelu(x: Node) -> Compute: return Compute("gelu", (x,))
def silu(x: Node) -> Compute: return Compute("silu", (x,))


ACTIVATIONS = {None: lambda x: x, "none": lambda x: x, "relu": relu, "gelu": gelu, "silu": silu}


def scaled(out_dtype="bf16", *, bias: bool = True, activation: str | None = None) -> Node:
    """The preset behind scalemm.gemm: act(scale_a[m] * scale_b[n] * acc + bias[n]).

    scale_a / scale_b are fp32 vectors or single values (dynamic broadcast); bias has the
    output dtype and may be omitted at run time (nullable)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(k for k in ACTIVATIONS if k)}, got {activation!r}")
    tree = RowVector("scale_a", "f32", broadcast=True) * ColVector("scale_b", "f32", broadcast=True) * Acc()
    if bias:
        tree = tree + ColVector("bias", dtype_name(out_dtype), nullable=True)
    return ACTIVATIONS[activation](tree)


ACCUMULATOR = "accumulator"  # the Source leaf of accumulating(): the output's own previous value


def accumulating(tree: Node, out_dtype) -> Node:
    """tree + out: a GEMM with this epilogue adds its result into its output (gradient accumulation: the
    Source leaf named ACCUMULATOR reads out itself, in fp32, and the sum is rounded once). Where `tree` ends in
    a multiply, the kernel may fuse it with this add into one FMA (one rounding fewer than evaluate()'s); the
    training layers pass scaled(out_dtype) with its null bias leaf, which keeps the reference's rounding."""
    return tree + Source(out_dtype, name=ACCUMULATOR)


# ---------------------------------------------------------------------------------------
# C++ emission
# ---------------------------------------------------------------------------------------

ROW_REGISTERS_NODE = "cutlass::epilogue::fusion::ScalemmRowBroadcastToRegisters"
ROW_REGISTERS_INCLUDE = '#include "scalemm/sm90/row_broadcast.hpp"\n'


@dataclass
class Emitted:
    evt_type: str        # a C++ type, referencing `TileShape`
    args_expr: str       # a braced initializer, referencing `ptrs` and `vec`
    leaves: tuple        # pointer-taking leaves, in `ptrs` order
    source_dtype: str | None  # dtype of the C operand if the tree reads one

    @property
    def includes(self) -> str:
        """The scalemm headers the EVT type needs beyond the kernel template's (the source's first lines)."""
        return ROW_REGISTERS_INCLUDE if ROW_REGISTERS_NODE in self.evt_type else ""


def emit(tree: Node, out_dtype, *, swap_ab: bool = False, grouped: bool = False,
         row_registers: bool = False) -> Emitted:
    """C++ for `tree` whose root is cast to `out_dtype`.

    row_registers=True loads the row vectors (one value per tile column) straight into registers
    (cutlass_kernels/include/scalemm/sm90/row_broadcast.hpp) instead of through shared memory: the dense FP8
    GEMM's swap-AB kernels, whose rows are a few tokens wide (not with grouped=True).

    grouped=True emits the ptr-array form for grouped GEMMs: each vector leaf's `ptrs[i]` is a
    device array of per-group pointers (CUTLASS indexes it by group); a Source leaf there reads the
    output itself (the GEMM accumulates into out)."""
    out_cpp = CPP_TYPES[dtype_name(out_dtype)]
    if not isinstance(tree, Compute):
        tree = Compute("identity", (tree,))
    leaves = tree.leaves()
    sources = {l.dtype for l in leaves if isinstance(l, Source)}
    if len(sources) > 1 or sum(isinstance(l, Source) for l in leaves) > 1:
        raise ValueError("an epilogue tree can read at most one full M x N Source tensor")
    if grouped and any(isinstance(l, Scalar) for l in leaves):
        raise ValueError("grouped GEMM epilogues take RowVector/ColVector leaves only (a per-group value is "
                         "a vector leaf given one value per group)")
    if grouped and row_registers:
        raise ValueError("row_registers is for dense GEMMs (the grouped kernels keep CUTLASS's row broadcast)")
    if grouped and sources and sources != {dtype_name(out_dtype)}:
        raise ValueError("a grouped GEMM's Source leaf is its own output (accumulation into out): its dtype "
                         f"must be the output's, {dtype_name(out_dtype)}")

    def vec(leaf, along_m: bool):
        i = leaves.index(leaf)
        t = CPP_TYPES[leaf.dtype]
        elem, ptr_t = (f"{t}*", f"{t} const* const*") if grouped else (t, f"{t} const*")
        if along_m != swap_ab:  # one value per tile row: CUTLASS "column broadcast"
            stride = "cute::Stride<bool, cute::_0, int64_t>" if leaf.broadcast else "cute::Stride<cute::_1, cute::_0, int64_t>"
            node = f"cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, {elem}, float, {stride}>"
            dyn = "{vec[%d] != 0, cute::_0{}, int64_t(0)}" % i if leaf.broadcast else "{cute::_1{}, cute::_0{}, int64_t(0)}"
        else:                   # one value per tile column: CUTLASS "row broadcast"
            stride = "cute::Stride<cute::_0, bool, int64_t>" if leaf.broadcast else "cute::Stride<cute::_0, cute::_1, int64_t>"
            node = (f"{ROW_REGISTERS_NODE}<0, TileShape, {elem}, float, {stride}, 1>" if row_registers else
                    f"cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, {elem}, float, {stride}>")
            dyn = "{cute::_0{}, vec[%d] != 0, int64_t(0)}" % i if leaf.broadcast else "{cute::_0{}, cute::_1{}, int64_t(0)}"
        return node, "{static_cast<%s>(ptrs[%d]), %s(0), %s}" % (ptr_t, i, t, dyn)

    def go(n: Node, is_root: bool):
        if isinstance(n, Acc):
            return "cutlass::epilogue::fusion::Sm90AccFetch", "{}"
        if isinstance(n, Source):
            return "cutlass::epilogue::fusion::Sm90SrcFetch<%s>" % CPP_TYPES[n.dtype], "{}"
        if isinstance(n, Scalar):
            i = leaves.index(n)
            return ("cutlass::epilogue::fusion::Sm90ScalarBroadcast<float>",
                    "{{1.0f}, {static_cast<float const*>(ptrs[%d])}, {}}" % i)
        if isinstance(n, RowVector):
            return vec(n, True)
        if isinstance(n, ColVector):
            return vec(n, False)
        assert isinstance(n, Compute)
        kids = [go(c, False) for c in n.children]
        elem = out_cpp if is_root else "float"
        op = (f"cutlass::epilogue::fusion::Sm90Compute<{OPS[n.op][0]}, {elem}, float, "
              "cutlass::FloatRoundStyle::round_to_nearest>")
        typ = f"cutlass::epilogue::fusion::Sm90EVT<{op}, {', '.join(k[0] for k in kids)}>"
        args = "{" + ", ".join(k[1] for k in kids) + ", {}}"
        return typ, args

    typ, args = go(tree, True)
    return Emitted(typ, args, leaves, next(iter(sources)) if sources else None)


# ---------------------------------------------------------------------------------------
# torch evaluation (the epilogue's own reference)
# ---------------------------------------------------------------------------------------

def evaluate(tree: Node, acc, inputs: dict, out_dtype):
    """Evaluate `tree` on an fp32 accumulator [M, N] in fp32, in the emitted order, then cast.

    `inputs` maps leaf names to tensors: vectors of length M / N (or one value where the
    leaf allows broadcast), None for an omitted nullable leaf, the M x N tensor for Source."""
    import torch
    import torch.nn.functional as F

    M, N = acc.shape
    f32 = torch.float32

    def go(n):
        if isinstance(n, Acc):
            return acc.to(f32)
        if isinstance(n, (RowVector, ColVector, Scalar, Source)):
            t = inputs.get(n.name)
            if t is None:
                if getattr(n, "nullable", False):
                    return torch.zeros((), dtype=f32, device=acc.device)
                raise ValueError(f"epilogue input {n.name!r} is missing")
            t = t.to(device=acc.device, dtype=f32)
            if isinstance(n, Source) or isinstance(n, Scalar) or t.numel() == 1:
                return t.reshape(M, N) if isinstance(n, Source) else t.reshape(())
            return t.reshape(M, 1) if isinstance(n, RowVector) else t.reshape(1, N)
        a = [go(c) for c in n.children]
        if n.op == "multiply":
            return a[0] * a[1]
        if n.op == "add":
            return a[0] + a[1]
        if n.op == "relu":
            return torch.clamp_min(a[0], 0.0)
        if n.op == "gelu":
            return F.gelu(a[0])
        if n.op == "silu":
            return F.silu(a[0])
        return a[0]

    return go(tree).expand(M, N).to(out_dtype)
