"""scalemm.quantize_* argument validation and the CPU path (no GPU needed).

Validation runs before the CPU/CUDA dispatch, so these errors are the ones a CUDA caller
gets too, before any kernel is built or launched.
"""
import pytest
import torch

import scalemm.quantize as sq
from scalemm import reference as ref


def x_(M=32, K=64, dtype=torch.bfloat16):
    return (torch.randn(M, K) * 3).to(dtype)


# ---------------------------------------------------------------------------
# x
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [sq.quantize_nvfp4, sq.quantize_fp8, sq.quantize_mxfp8])
def test_x_type_dtype_shape(fn):
    with pytest.raises(TypeError, match="'x' must be a torch.Tensor"):
        fn([[1.0] * 32])
    with pytest.raises(TypeError, match="'x' must be bfloat16, float16 or float32"):
        fn(torch.zeros(32, 64, dtype=torch.float64))
    with pytest.raises(TypeError, match="'x' must be bfloat16"):
        fn(torch.zeros(32, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="at least 2 dims"):
        fn(torch.zeros(64))
    with pytest.raises(ValueError, match="must be contiguous"):
        fn(x_(64, 64).t())
    with pytest.raises(ValueError, match=r"'x' last dim K must be >= 1"):  # M = 0 is fine (test_empty_x_*)
        fn(torch.zeros(32, 0, dtype=torch.bfloat16))


def test_k_and_m_multiples():
    with pytest.raises(ValueError, match=r"K \(last dim\) must be a multiple of 16, got 40"):
        sq.quantize_nvfp4(x_(32, 40))
    with pytest.raises(ValueError, match=r"M \(rows, for the columnwise copy\) must be a multiple of 16"):
        sq.quantize_nvfp4(x_(24, 64), columnwise=True)
    with pytest.raises(ValueError, match="multiple of 32, got 48"):
        sq.quantize_mxfp8(x_(32, 48))
    with pytest.raises(ValueError, match="multiple of 32"):
        sq.quantize_mxfp8(x_(48, 64), columnwise=True)
    with pytest.raises(ValueError, match="multiple of 16, got 24"):
        sq.quantize_fp8(x_(32, 24))
    with pytest.raises(ValueError, match="multiple of 16"):
        sq.quantize_fp8(x_(24, 32), columnwise=True)


def test_copies_and_flags():
    for fn in (sq.quantize_nvfp4, sq.quantize_fp8, sq.quantize_mxfp8):
        with pytest.raises(ValueError, match="at least one of 'rowwise' and 'columnwise'"):
            fn(x_(), rowwise=False)
        with pytest.raises(TypeError, match="'columnwise' must be a bool"):
            fn(x_(), columnwise=1)
    with pytest.raises(ValueError, match="'scaling' must be one of"):
        sq.quantize_nvfp4(x_(), scaling="row")
    with pytest.raises(ValueError, match="'scaling' must be one of"):
        sq.quantize_fp8(x_(), scaling="channel")
    with pytest.raises(ValueError, match="'rht' applies only to the columnwise copy"):
        sq.quantize_nvfp4(x_(), rht=True)
    with pytest.raises(TypeError, match="'rht' must be a bool"):
        sq.quantize_nvfp4(x_(), columnwise=True, rht="yes")


# ---------------------------------------------------------------------------
# amax
# ---------------------------------------------------------------------------

def test_amax_validation():
    x = x_(32, 64)
    with pytest.raises(TypeError, match="'amax' must be a torch.Tensor or None"):
        sq.quantize_nvfp4(x, amax=3.0)
    with pytest.raises(TypeError, match="'amax' must be float32"):
        sq.quantize_nvfp4(x, amax=torch.tensor(3.0, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"'amax' must have shape \(\) for scaling='tensor'"):
        sq.quantize_nvfp4(x, amax=torch.ones(32))
    with pytest.raises(ValueError, match=r"'amax' must have shape \(32,\) for scaling='token'"):
        sq.quantize_nvfp4(x, scaling="token", amax=torch.ones(()))
    with pytest.raises(ValueError, match="'amax' must be contiguous"):
        sq.quantize_nvfp4(x, scaling="token", amax=torch.ones(64)[::2])
    with pytest.raises(ValueError, match="no copy uses it"):
        sq.quantize_nvfp4(x, rowwise=False, columnwise=True, rht=True, amax=torch.ones(()))
    with pytest.raises(ValueError, match="no copy uses it"):
        sq.quantize_nvfp4(x, scaling="token", rowwise=False, columnwise=True, amax=torch.ones(32))
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="'amax' is on"):
            sq.quantize_nvfp4(x, amax=torch.ones((), device="cuda"))


def test_amax_shape_uses_flattened_rows():
    x = x_(4 * 16, 64).view(4, 16, 64)
    t = sq.quantize_nvfp4(x, scaling="token", amax=torch.full((64,), 4.0))
    assert t.shape == (64, 64) and t.alpha.shape == (64,)


# ---------------------------------------------------------------------------
# stochastic rounding seeds
# ---------------------------------------------------------------------------

def test_seed_offset_validation():
    x = x_()
    with pytest.raises(TypeError, match="'seed' must be an int"):
        sq.quantize_nvfp4(x, stochastic_rounding=True, seed=1.5)
    with pytest.raises(ValueError, match=r"'seed' must be in \[0, 2\^64\)"):
        sq.quantize_nvfp4(x, stochastic_rounding=True, seed=-1)
    with pytest.raises(ValueError, match=r"'offset' must be in \[0, 2\^64\)"):
        sq.quantize_nvfp4(x, stochastic_rounding=True, seed=1, offset=1 << 64)
    with pytest.raises(TypeError, match="'generator' must be a torch.Generator"):
        sq.quantize_nvfp4(x, stochastic_rounding=True, generator=3)
    with pytest.raises(TypeError, match="'stochastic_rounding' must be a bool"):
        sq.quantize_nvfp4(x, stochastic_rounding=None)


def test_seed_inside_graph_capture_comes_from_the_device(monkeypatch):
    """Under CUDA-graph capture the host cannot read the CUDA generator (torch refuses get_offset): where the
    kernels run, the seed is an int64 pair drawn on the device by torch.randint (captured: every replay draws
    anew), which the struct passes as seed_device; where they do not, a clear error before anything runs. An
    explicit seed is used as is."""
    from scalemm import quantize as q
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    cuda = torch.device("cuda", 0)
    with pytest.raises(RuntimeError, match="pass seed= and offset= inside the capture"):
        q._sr_args(True, None, 0, None, cuda)
    drawn = []

    def randint(low, high, size, *, device, dtype, generator):
        drawn.append((low, high, size, device, dtype, generator))
        return torch.zeros(size, dtype=dtype)  # stands in for the device tensor
    monkeypatch.setattr(torch, "randint", randint)
    seed, offset = q._sr_args(True, None, 5, None, cuda, device_seed=True)
    assert isinstance(seed, torch.Tensor) and offset == 5
    assert drawn == [(0, 1 << 62, (2,), cuda, torch.int64, None)]
    assert q._seed_fields(seed) == {"seed": 0, "seed_device": seed.data_ptr()}
    assert q._seed_fields(7) == {"seed": 7, "seed_device": None}
    assert q._sr_args(True, 7, 3, None, cuda) == (7, 3)
    assert q._sr_args(False, None, 0, None, cuda, device_seed=True) == (0, 0)  # no SR: no seed needed


def test_seed_from_generator_is_deterministic():
    x = x_(32, 256)
    g = torch.Generator().manual_seed(11)
    a = sq.quantize_nvfp4(x, stochastic_rounding=True, generator=g)
    b = sq.quantize_nvfp4(x, stochastic_rounding=True, generator=g)  # generator advanced
    g.manual_seed(11)
    c = sq.quantize_nvfp4(x, stochastic_rounding=True, generator=g)
    assert torch.equal(a.qdata, c.qdata)
    assert not torch.equal(a.qdata, b.qdata)
    torch.manual_seed(5)
    d = sq.quantize_nvfp4(x, stochastic_rounding=True)
    torch.manual_seed(5)
    e = sq.quantize_nvfp4(x, stochastic_rounding=True)
    assert torch.equal(d.qdata, e.qdata)


# ---------------------------------------------------------------------------
# the CPU path is the reference
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_path_is_reference(dtype):
    x = x_(32, 64, dtype)
    t = sq.quantize_nvfp4(x, scaling="token", columnwise=True, rht=True)
    r = ref.quantize_nvfp4(x, scaling="token", columnwise=True, rht=True)
    assert torch.equal(t.qdata, r.qdata) and torch.equal(t.columnwise.qdata, r.columnwise.qdata)
    assert torch.equal(t.scales.view(torch.uint8), r.scales.view(torch.uint8))
    s = sq.quantize_nvfp4(x, stochastic_rounding=True, seed=3, offset=4)
    assert torch.equal(s.qdata, ref.quantize_nvfp4(x, stochastic_rounding=True, seed=3, offset=4).qdata)
    f = sq.quantize_fp8(x, scaling="token", columnwise=True)
    assert torch.equal(f.data.view(torch.uint8), ref.quantize_fp8(x, scaling="token").data.view(torch.uint8))
    m = sq.quantize_mxfp8(x, columnwise=True)
    assert torch.equal(m.scales, ref.quantize_mxfp8(x).scales)
    assert m.columnwise.shape == (64, 32)


def test_leading_dims_flattened():
    x = x_(2 * 3 * 16, 64).view(2, 3, 16, 64)
    t = sq.quantize_nvfp4(x, columnwise=True)
    assert t.shape == (96, 64) and t.columnwise.shape == (64, 96)
    assert torch.equal(t.qdata, ref.quantize_nvfp4(x.reshape(96, 64)).qdata)


# ---------------------------------------------------------------------------
# an empty x (M = 0): well-formed empty containers, no kernel
# ---------------------------------------------------------------------------

def _assert_tensor(t, shape, dtype, fill=None):
    assert t.dtype == dtype and tuple(t.shape) == tuple(shape), (t.dtype, tuple(t.shape), dtype, shape)
    if fill is not None:
        assert torch.equal(t.float(), torch.full(shape, float(fill)))


@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rht", [False, True])
def test_empty_x_nvfp4(scaling, rht):
    x = torch.zeros(2, 0, 64, dtype=torch.bfloat16)  # leading dims flatten to M = 0
    q = sq.quantize_nvfp4(x, scaling=scaling, columnwise=True, rht=rht)
    g, gc = ((), ()) if scaling == "tensor" else ((0,), (64,))
    assert q.shape == (0, 64) and q.columnwise.shape == (64, 0) and q.columnwise.rht == rht
    _assert_tensor(q.qdata, (0, 32), torch.uint8)
    _assert_tensor(q.scales, (0,), torch.float8_e4m3fn)  # Rp = 0 scale rows
    _assert_tensor(q.alpha, g, torch.float32, 1.0)  # amax 0: S_enc = S_dec = 1
    _assert_tensor(q.amax, g, torch.float32, 0.0)
    _assert_tensor(q.columnwise.qdata, (64, 0), torch.uint8)
    _assert_tensor(q.columnwise.scales, (0,), torch.float8_e4m3fn)  # 128 rows x Cp = 0 columns
    _assert_tensor(q.columnwise.alpha, gc, torch.float32, 1.0)
    _assert_tensor(q.columnwise.amax, gc, torch.float32, 0.0)
    assert q.dequantize().shape == (0, 64) and q.columnwise.dequantize().shape == (64, 0)
    sr = sq.quantize_nvfp4(x, scaling=scaling, stochastic_rounding=True, seed=1)
    assert sr.qdata.shape == (0, 32)
    r = ref.quantize_nvfp4(x.reshape(0, 64), scaling=scaling, columnwise=True, rht=rht)
    assert torch.equal(r.alpha, q.alpha) and torch.equal(r.columnwise.amax, q.columnwise.amax)


def test_empty_x_nvfp4_given_amax():
    x = torch.zeros(0, 32, dtype=torch.float32)
    amax = torch.tensor(10.0)
    q = sq.quantize_nvfp4(x, amax=amax, columnwise=True)  # used as is, by both copies
    s_dec = ref.nvfp4_global_scale(amax)[1]
    assert torch.equal(q.amax, amax) and torch.equal(q.alpha, s_dec) and torch.equal(q.columnwise.alpha, s_dec)
    t = sq.quantize_nvfp4(x, scaling="token", amax=torch.zeros(0))
    _assert_tensor(t.alpha, (0,), torch.float32)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_empty_x_fp8(scaling):
    q = sq.quantize_fp8(torch.zeros(0, 48, dtype=torch.float16), scaling=scaling, columnwise=True)
    g, gc = ((), ()) if scaling == "tensor" else ((0,), (48,))
    assert q.shape == (0, 48) and q.columnwise.shape == (48, 0)
    _assert_tensor(q.data, (0, 48), torch.float8_e4m3fn)
    _assert_tensor(q.scale_inv, g, torch.float32, 1.0)  # amax 0: scale 1
    _assert_tensor(q.columnwise.data, (48, 0), torch.float8_e4m3fn)
    _assert_tensor(q.columnwise.scale_inv, gc, torch.float32, 1.0)
    assert q.dequantize().shape == (0, 48)


def test_empty_x_mxfp8():
    q = sq.quantize_mxfp8(torch.zeros(0, 64, dtype=torch.bfloat16), columnwise=True)
    assert q.shape == (0, 64) and q.columnwise.shape == (64, 0)
    _assert_tensor(q.data, (0, 64), torch.float8_e4m3fn)
    _assert_tensor(q.scales, (0,), torch.uint8)
    _assert_tensor(q.columnwise.data, (64, 0), torch.float8_e4m3fn)
    _assert_tensor(q.columnwise.scales, (0,), torch.uint8)
    assert q.dequantize().shape == (0, 64) and q.columnwise.dequantize().shape == (64, 0)


def test_empty_x_gemm():
    """M = 0 flows on: the quantized empty x times a weight is an empty output."""
    w = sq.quantize_fp8(torch.randn(32, 64), scaling="token")
    xq = sq.quantize_fp8(torch.zeros(0, 64), scaling="token")
    import scalemm
    y = scalemm.gemm(xq, w)
    assert y.shape == (0, 32) and y.dtype == torch.bfloat16


# ---------------------------------------------------------------------------
# FP8 delayed scaling's history step (advance_amax_history)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1,), (3,), (4, 5)])
def test_advance_amax_history_steps(shape):
    """Three steps: the history holds the amaxes newest first (zeros below), next_amax its max over rows (NaN as
    soon as a NaN enters, until it leaves), used the previous next_amax."""
    H, cols = shape[0], shape[1:]
    history = torch.zeros(shape)
    next_amax = torch.full(cols, 7.0)
    seen = []
    for step, a in enumerate((torch.full(cols, 2.0), torch.full(cols, float("nan")), torch.full(cols, 1.0))):
        if cols:
            a[0] = 5.0  # a column that never sees the NaN
        before = next_amax.clone()
        used = torch.empty(cols)
        sq.advance_amax_history(history, a, next_amax, used)
        seen.insert(0, a)
        want = torch.stack((seen + [torch.zeros(cols)] * H)[:H])
        assert torch.equal(history.nan_to_num(-1), want.nan_to_num(-1)), step
        assert torch.equal(used.nan_to_num(-1), before.nan_to_num(-1))
        assert torch.equal(next_amax.nan_to_num(-1), want.amax(0).nan_to_num(-1)), step


def test_advance_amax_history_rejects_bad_input():
    h, a, n = torch.zeros(4, 3), torch.zeros(3), torch.zeros(3)
    cases = [
        (dict(history=torch.zeros(4, 3, dtype=torch.float16)), ValueError, "'history' must be float32"),
        (dict(history=torch.zeros(0, 3)), ValueError, "H >= 1"),
        (dict(history=torch.zeros(3, 4).t()), ValueError, "'history' must be contiguous"),
        (dict(amax=torch.zeros(4)), ValueError, r"'amax' must be float32 of shape \(3,\)"),
        (dict(next_amax=torch.zeros(3, dtype=torch.float64)), ValueError, "'next_amax' must be float32"),
        (dict(used=torch.zeros(())), ValueError, "'used' must be float32"),
        (dict(amax=[0.0, 0.0, 0.0]), TypeError, "'amax' must be a torch.Tensor"),
        (dict(next_amax=h[0]), ValueError, "'history' and 'next_amax' must not overlap"),
        (dict(used=n), ValueError, "'next_amax' and 'used' must not overlap"),
    ]
    for kw, err, match in cases:
        args = dict(history=h, amax=a, next_amax=n)
        args.update(kw)
        with pytest.raises(err, match=match):
            sq.advance_amax_history(**args)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="'amax' is on cuda"):
            sq.advance_amax_history(h, a.cuda(), n)
