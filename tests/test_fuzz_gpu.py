"""Random problems from the whole class of inputs, on the GPU, against the exact references.

The other GPU tests pin real-model shapes and every kernel's edges; these draw the shapes a user may bring and
let the heuristics pick the kernels: tokens from 1 to 8192 (decode, mid, prefill), N and K half from real
models' layer sizes and half any allowed multiple (N of 8, K of 16), ragged routings with empty experts,
decode-sized expert batches, per-tensor and per-row scales, bias or none, both accumulation modes, W4A16 and
W4A4. Each case is drawn from its seed (random.Random), so a failure names a reproducible case.

Checks, beyond the other tests' relative Frobenius error of the whole output:
- every output written (poisoned with NaN first);
- each row and each column within 4x the whole output's tolerance (a wrong tile, row scale or column scale
  cannot hide in the average), and rows whose exact result is zero exactly zero.

The first GEMM test to run prebuilds, in parallel, every kernel the GEMM cases will launch (a dry run of each
case records the kernels it would build), so a cold JIT cache costs one parallel build instead of one compile per
case. The quantizer cases (their kernels are few and quick to build) check every byte against scalemm.reference.
"""
import functools
import os
import random

import pytest
import torch

import scalemm
from test_gemm_gpu import _quant_rows
from test_grouped_gemm_gpu import _reference as _fp8_grouped_reference
from test_nvfp4_gemm_gpu import _exact, _exact_grouped, _offsets, _wide

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn
BF16, F32 = torch.bfloat16, torch.float32
TOL = {BF16: 4e-3, F32: 1e-5}  # tests/test_gemm_gpu.py / test_nvfp4_gemm_gpu.py's whole-output tolerances

# Layer sizes of real models (Llama-3 8B/70B/405B, Mistral, Qwen3, DeepSeek-V3, gpt-oss, Gemma-3, Mixtral)
MODEL_DIMS = [576, 768, 1024, 1536, 2048, 2560, 2880, 3072, 4096, 5120, 5376, 6144, 7168, 8192, 11008, 12288,
              13824, 14336, 18432]
CASES = int(os.environ.get("SCALEMM_FUZZ_CASES", "16"))  # per kind; more for a longer search
FIRST = int(os.environ.get("SCALEMM_FUZZ_FIRST", "0"))  # the first seed: other cases than an earlier search's
SEEDS = range(FIRST, FIRST + CASES)
MAX_WORK = 1 << 35  # M * N * K per case (the fp64 reference stays ~1 ms)


def _dim(r, multiple, hi):
    if r.random() < 0.5:
        return r.choice([d for d in MODEL_DIMS if d <= hi])
    return multiple * r.randint(1, hi // multiple)


def _tokens(r):
    lo, hi = r.choice([(1, 16), (17, 64), (65, 1023), (1024, 8192)])
    return r.randint(lo, hi)


def _dense_shape(r, k_multiple):
    while True:
        M, N, K = _tokens(r), _dim(r, 8, 18432), _dim(r, k_multiple, 18432)
        if M * N * K <= MAX_WORK:
            return M, N, K


def _routing(r, T, G):
    """T rows over G experts: skewed, a quarter of the experts (at least one where G > 1) empty."""
    w = [r.random() ** 3 for _ in range(G)]
    for e in r.sample(range(G), max(1 if G > 1 else 0, G // 4)):
        w[e] = 0.0
    total = sum(w)
    sizes = [int(x / total * T) for x in w]
    sizes[max(range(G), key=lambda e: w[e])] += T - sum(sizes)
    return sizes


def _grouped_shape(r):
    """G experts, T routed rows (decode: up to 4 per expert on average; else up to 8192), N, K."""
    while True:
        G = r.choice([1, 2, 8, 16, 60, 128, 160])
        T = r.randint(1, 4 * G) if r.random() < 0.3 else r.randint(1, 8192)
        N, K = _dim(r, 8, 8192), _dim(r, 16, 8192)
        if G * N * K <= 1 << 30 and T * N * K <= MAX_WORK:
            return G, T, N, K, _routing(r, T, G)


def _errors(out, exact):
    """Relative error of the whole output and the worst row and column (each against its own norm, or the mean
    one where cancellation left it smaller: accumulation errors are absolute, so a near-zero short row is no
    evidence of a wrong one)."""
    d = out.double() - exact
    errs = [(d.norm() / exact.norm()).item() if exact.norm() > 0 else d.norm().item()]
    for dim in (1, 0):
        ref_norm, err = exact.norm(dim=dim), d.norm(dim=dim)
        nz = ref_norm > 0
        scale = torch.maximum(ref_norm, ref_norm[nz].square().mean().sqrt()) if nz.any() else ref_norm
        errs.append((err[nz] / scale[nz]).max().item() if nz.any() else 0.0)
    return errs


def _check(out, exact, tol, valid_rows=None, peer=None):
    """NaN-free, whole-output, per-row and per-column relative error, exact zeros. `peer`: cuBLASLt's output on
    the same operands in FP8 fast accumulation, whose accumulator keeps fewer bits than fp32 (the error grows with
    K): then each error may also reach twice cuBLASLt's (QuACK's rule, as tests/test_gemm_gpu.py's fp32 outputs)."""
    out = out if valid_rows is None else out[:valid_rows]
    assert not out.isnan().any(), "outputs left unwritten"
    ours = _errors(out, exact)
    theirs = _errors(peer, exact) if peer is not None else [0.0] * 3
    for what, e, p, t in zip(("the whole output", "a row", "a column"), ours, theirs, (tol, 4 * tol, 4 * tol)):
        assert e <= max(t, 2 * p), f"{what} has relative error {e:.3g} > {t} (cuBLASLt's: {p:.3g})"
    zero_rows = exact.norm(dim=1) == 0
    assert (out[zero_rows] == 0).all(), "a row whose exact result is zero is not zero"


# ---------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------

def fp8_dense(seed):
    r = random.Random(seed)
    M, N, K = _dense_shape(r, 16)
    per_tensor, fast, with_bias = r.random() < 0.3, r.random() < 0.5, r.random() < 0.5
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g) * torch.rand(M, 1, device="cuda", generator=g).mul(4).exp2()
    a[1::13] = 0  # rows of zeros: exactly the bias (or zero) out
    b = torch.randn(N, K, device="cuda", generator=g) * 0.1
    (a8, sa), (b8, sb) = _quant_rows(a, per_tensor), _quant_rows(b, per_tensor)
    bias = torch.randn(N, device="cuda", generator=g).to(BF16) if with_bias else None
    out = torch.full((M, N), float("nan"), dtype=BF16, device="cuda")
    scalemm.gemm(a8, b8, sa, sb, bias=bias, out=out, fast_accum=fast)
    exact = (sa.double().reshape(-1, 1) * sb.double().reshape(1, -1)) * (a8.double() @ b8.double().T)
    peer = None
    if fast:  # cuBLASLt wants N % 16 (b padded with zero rows) and takes no bias with some scalings (added here)
        pad = -N % 16
        b8p = torch.cat([b8, torch.zeros(pad, K, device="cuda").to(E4M3)])
        sbp = sb if per_tensor else torch.cat([sb, torch.ones(pad, device="cuda")])
        shape_a, shape_b = ((), ()) if per_tensor else ((M, 1), (1, N + pad))
        peer = torch._scaled_mm(a8, b8p.T, scale_a=sa.reshape(shape_a), scale_b=sbp.reshape(shape_b),
                                out_dtype=BF16, use_fast_accum=True)[:, :N].double()
        peer = peer if bias is None else peer + bias.double()
    if bias is not None:
        exact = exact + bias.double()
    return out, exact, TOL[BF16], None, peer


def nvfp4_dense(seed):
    r = random.Random(seed)
    M, N, K = _dense_shape(r, 16)
    w4a4, out_dtype = r.random() < 0.4, r.choice([BF16, F32])
    w = scalemm.quantize_nvfp4(_wide((N, K), seed).to(BF16), scaling=r.choice(["tensor", "token"]))
    x = _wide((M, K), seed + 1).to(BF16)
    a = scalemm.quantize_nvfp4(x, scaling=r.choice(["tensor", "token"])) if w4a4 else x
    bias = torch.randn(N, device="cuda").to(out_dtype) if r.random() < 0.3 else None
    out = torch.full((M, N), float("nan"), dtype=out_dtype, device="cuda")
    scalemm.gemm(a, w, bias=bias, out_dtype=out_dtype, out=out)
    return out, _exact(a, w, bias), TOL[out_dtype], None, None


def fp8_grouped(seed):
    r = random.Random(seed)
    G, T, N, K, sizes = _grouped_shape(r)
    fast, with_bias = r.random() < 0.5, r.random() < 0.5
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(T, K, device="cuda", generator=g) * 8).to(E4M3)
    a[2::17] = 0
    b = (torch.randn(G, N, K, device="cuda", generator=g) * 8).to(E4M3)
    sa = torch.rand(T, device="cuda", generator=g) + 0.5
    sb = torch.rand(G, N, device="cuda", generator=g) + 0.5
    offs = _offsets(sizes)
    bias = torch.randn(G, N, device="cuda", generator=g).to(BF16) if with_bias else None
    out = torch.full((T, N), float("nan"), dtype=BF16, device="cuda")
    scalemm.grouped_gemm(a, b, offs, sa, sb, bias=bias, out=out, fast_accum=fast, scale_a_per="token")  # T may be G
    return out, _fp8_grouped_reference(a, b, offs, sa, sb, bias), TOL[BF16], None, None


def nvfp4_grouped(seed):
    r = random.Random(seed)
    G, T, N, K, sizes = _grouped_shape(r)
    w4a4 = r.random() < 0.4
    w = scalemm.quantize_nvfp4_stacked(_wide((G * N, K), seed).reshape(G, N, K).to(BF16),
                                       scaling=r.choice(["tensor", "token"]))
    offsets = _offsets(sizes)
    x = _wide((T + 3, K), seed + 1).to(BF16)  # 3 rows past the last group: never written
    a = scalemm.quantize_nvfp4_grouped(x[:T], offsets, scaling=r.choice(["tensor", "token"])) if w4a4 else x
    bias = torch.randn(G, N, device="cuda") if r.random() < 0.3 else None
    out = torch.full((a.shape[0], N), float("nan"), dtype=F32, device="cuda")
    scalemm.grouped_gemm(a, w, None if w4a4 else offsets, bias=bias, out_dtype=F32, out=out)
    assert out[T:].isnan().all(), "rows past the last group were written"
    return out, _exact_grouped(a if w4a4 else x[:T], w, sizes, N, bias), TOL[F32], T, None


KINDS = {"fp8_dense": fp8_dense, "nvfp4_dense": nvfp4_dense, "fp8_grouped": fp8_grouped,
         "nvfp4_grouped": nvfp4_grouped}
# SCALEMM_FUZZ_KINDS=nvfp4_dense,nvfp4_grouped: only those GEMM kinds (their kernels alone are prebuilt)
_only = [k for k in os.environ.get("SCALEMM_FUZZ_KINDS", "").split(",") if k]
if set(_only) - set(KINDS):
    raise ValueError(f"SCALEMM_FUZZ_KINDS names {sorted(set(_only) - set(KINDS))}: the kinds are {sorted(KINDS)}")
if _only:
    KINDS = {k: KINDS[k] for k in _only}


# The quantizers, bit for bit against scalemm.reference on the same input (every output byte, padding included;
# outputs poisoned with 0xFF and 0x00 in turn): the quantization GPU tests' comparisons on random problems. Inputs
# span many binades with zero, subnormal-scale and underflowing blocks, and sometimes +-Inf / NaN.

def _quant_input(r, M, K, seed, block=16):
    from quantcheck import make_input
    return make_input(M, K, r.choice([BF16, torch.float16, F32]), seed=seed, specials=r.random() < 0.2, block=block)


def _copies(r, m_multiple, M):
    """(rowwise, columnwise): the columnwise copy needs M % m_multiple == 0."""
    if M % m_multiple:
        return True, False
    return r.choice([(True, False), (True, True), (False, True)])


def _nvfp4_options(r, columnwise):
    rht = columnwise and r.random() < 0.3
    sr = dict(stochastic_rounding=True, seed=r.getrandbits(63), offset=r.getrandbits(40)) if r.random() < 0.3 else {}
    return dict(rht=rht, **sr)


def _amax_options(r, G=None):
    """Delayed scaling (a given amax: below, near or above the data's, 0 or Inf) or current scaling."""
    if r.random() < 0.7:
        return {}
    vals = [r.choice([0.0, float("inf"), 1e-3 * r.random(), 8 * r.random(), 1e6 * r.random()]) for _ in range(G or 1)]
    return {"amax": torch.tensor(vals if G else vals[0], device="cuda")}


def q_nvfp4(r, seed, monkeypatch):
    from test_quantize_gpu import check_nvfp4
    M, K = _tokens(r), 16 * r.randint(1, 512)
    M = M - M % 16 if M >= 16 and r.random() < 0.5 else M
    rowwise, columnwise = _copies(r, 16, M)
    check_nvfp4(monkeypatch, _quant_input(r, M, K, seed), scaling=r.choice(["tensor", "token"]), rowwise=rowwise,
                columnwise=columnwise, **_nvfp4_options(r, columnwise))


def q_fp8(r, seed, monkeypatch):
    from test_quantize_gpu import assert_fp8_equal, run_poisoned
    M, K = _tokens(r), 16 * r.randint(1, 512)
    M = M - M % 16 if M >= 16 and r.random() < 0.5 else M
    rowwise, columnwise = _copies(r, 16, M)
    x, scaling = _quant_input(r, M, K, seed), r.choice(["tensor", "token"])
    kw = dict(scaling=scaling, rowwise=rowwise, columnwise=columnwise, **(_amax_options(r) if scaling == "tensor"
                                                                           else {}))
    want = scalemm.reference.quantize_fp8(x, **kw)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_fp8(x, **kw)):
        assert_fp8_equal(got, want)


def q_mxfp8(r, seed, monkeypatch):
    from test_quantize_gpu import assert_mxfp8_equal, run_poisoned
    M, K = _tokens(r), 32 * r.randint(1, 256)
    M = M - M % 32 if M >= 32 and r.random() < 0.5 else M
    rowwise, columnwise = _copies(r, 32, M)
    x = _quant_input(r, M, K, seed, block=32)
    want = scalemm.reference.quantize_mxfp8(x, rowwise=rowwise, columnwise=columnwise)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_mxfp8(x, rowwise=rowwise, columnwise=columnwise)):
        assert_mxfp8_equal(got, want)


def _grouped_quant_problem(r, seed):
    G = r.choice([1, 2, 8, 16, 60, 128, 160])
    T = r.randint(1, 4 * G) if r.random() < 0.3 else r.randint(1, 8192)
    K = 16 * r.randint(1, 512)
    sizes = _routing(r, T, G)
    past = r.choice([0, 0, 0, 5])  # rows of x past the last group (no group's rows)
    return _quant_input(r, T + past, K, seed), _offsets(sizes), G


def q_nvfp4_grouped(r, seed, monkeypatch):
    from test_quantize_grouped_gpu import check_nvfp4 as check
    x, offsets, _ = _grouped_quant_problem(r, seed)
    rowwise, columnwise = r.choice([(True, False), (True, True), (False, True)])
    check(monkeypatch, x, offsets, scaling=r.choice(["tensor", "token"]), rowwise=rowwise, columnwise=columnwise,
          **_nvfp4_options(r, columnwise))


def q_fp8_grouped(r, seed, monkeypatch):
    from test_quantize_grouped_gpu import check_fp8 as check
    x, offsets, G = _grouped_quant_problem(r, seed)
    rowwise, columnwise = r.choice([(True, False), (True, True), (False, True)])
    scaling = r.choice(["tensor", "token"])
    check(monkeypatch, x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise,
          **(_amax_options(r, G) if scaling == "tensor" else {}))


QUANT_KINDS = {"nvfp4": q_nvfp4, "fp8": q_fp8, "mxfp8": q_mxfp8, "nvfp4_grouped": q_nvfp4_grouped,
               "fp8_grouped": q_fp8_grouped}


# ---------------------------------------------------------------------------------------
# one parallel build of every kernel the cases launch
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prebuilt():
    """Every kernel the GEMM cases launch, built in parallel first (jit.prebuild_calls: a dry run of each case
    records the kernels not yet cached)."""
    from scalemm import jit
    try:
        failed = jit.prebuild_calls([functools.partial(fn, seed) for fn in KINDS.values() for seed in SEEDS])
    finally:
        torch.cuda.synchronize()
    assert not failed, f"kernels failed to build: {failed}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_random_problem_matches_exact_reference(kind, seed, prebuilt):
    out, exact, tol, rows, peer = KINDS[kind](seed)
    _check(out, exact, tol, rows, peer)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(QUANT_KINDS))
def test_random_quantization_matches_reference(kind, seed, monkeypatch):
    QUANT_KINDS[kind](random.Random(seed), seed, monkeypatch)
