"""scalemm's CUDA quantizers against the pure-torch reference, bit for bit.

Every comparison is on raw bytes (atol = rtol = 0): FP4 codes, e4m3 / e8m0 scale bytes
including the zeroed padding, alphas, amaxes, FP8 data and scale_inv (a NaN equals any NaN,
other floats compare by bits). Every kernel run happens twice, on outputs pre-filled with
0xFF and with 0x00 (scalemm.quantize._poison_byte), so an unwritten byte cannot pass.

Run on an sm_90 GPU:  python -m pytest tests/test_quantize_gpu.py -q
"""
import pytest
import torch

import scalemm
import scalemm.quantize as sq
from scalemm import reference as ref
from quantcheck import _bytes, assert_exact_rows, assert_same_bytes, make_input  # noqa: F401

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # the conftest skips too; this keeps collection cheap
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# ---------------------------------------------------------------------------
# comparisons (inputs: quantcheck.make_input)
# ---------------------------------------------------------------------------

def assert_nvfp4_equal(got, want, what="nvfp4"):
    assert got.shape == want.shape and got.scaling == want.scaling and got.rht == want.rht, what
    assert got.orig_dtype == want.orig_dtype, what
    assert (got.qdata is None) == (want.qdata is None), what
    if want.qdata is not None:
        assert_same_bytes(got.qdata, want.qdata, f"{what}.qdata")
        assert_same_bytes(got.scales, want.scales, f"{what}.scales")
        assert_same_bytes(got.alpha, want.alpha, f"{what}.alpha")
        assert_same_bytes(got.amax, want.amax, f"{what}.amax")
    assert (got.columnwise is None) == (want.columnwise is None), f"{what}.columnwise presence"
    if want.columnwise is not None:
        assert_nvfp4_equal(got.columnwise, want.columnwise, f"{what}.columnwise")


def assert_fp8_equal(got, want, what="fp8"):
    assert got.scaling == want.scaling and got.shape == want.shape, what
    assert (got.data is None) == (want.data is None), what
    if want.data is not None:
        assert_same_bytes(got.data, want.data, f"{what}.data")
        assert_same_bytes(got.scale_inv, want.scale_inv, f"{what}.scale_inv")
    assert (got.columnwise is None) == (want.columnwise is None), f"{what}.columnwise presence"
    if want.columnwise is not None:
        assert_fp8_equal(got.columnwise, want.columnwise, f"{what}.columnwise")


def assert_mxfp8_equal(got, want, what="mxfp8"):
    assert got.shape == want.shape, what
    assert (got.data is None) == (want.data is None), what
    if want.data is not None:
        assert_same_bytes(got.data, want.data, f"{what}.data")
        assert_same_bytes(got.scales, want.scales, f"{what}.scales")
    assert (got.columnwise is None) == (want.columnwise is None), f"{what}.columnwise presence"
    if want.columnwise is not None:
        assert_mxfp8_equal(got.columnwise, want.columnwise, f"{what}.columnwise")


def run_poisoned(monkeypatch, fn):
    """fn() twice, outputs pre-filled with 0xFF and then 0x00; returns both results."""
    outs = []
    for byte in (0xFF, 0x00):
        monkeypatch.setattr(sq, "_poison_byte", byte)
        outs.append(fn())
    torch.cuda.synchronize()
    monkeypatch.setattr(sq, "_poison_byte", None)
    return outs


# ---------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------

ROW_SHAPES = [(m, k) for m in (1, 7, 128, 129, 8191) for k in (16, 32, 48, 4096, 7168)]
COL_SHAPES = [(m, k) for m in (16, 128, 144, 4096) for k in (16, 48, 4096, 7168)]


def check_nvfp4(monkeypatch, x, **kw):
    want = ref.quantize_nvfp4(x, **kw)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_nvfp4(x, **kw)):
        assert_nvfp4_equal(got, want)
        assert_exact_rows(got)


@pytest.mark.parametrize("M,K", ROW_SHAPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_rowwise(monkeypatch, M, K, scaling):
    x = make_input(M, K, seed=M * 7 + K)
    check_nvfp4(monkeypatch, x, scaling=scaling)


def encode_sweep(dtype):
    """Blocks whose 15 other values sweep every bf16 magnitude up to the block max (both signs),
    plus (fp32) the neighbours of each e2m1 grid point and midpoint; block maxima 6 (mult 1),
    6.375 (the e4m3 scale rounds down: |y| up to 6.375 on the clamp-free path), 7 and a large one."""
    mags = torch.arange(0, 0x40E0, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    if dtype == torch.float32:
        pts = torch.tensor([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 6.5])
        near = torch.cat([pts, torch.nextafter(pts, torch.zeros(())), torch.nextafter(pts, torch.full((), 9.0))])
        mags = torch.cat([mags, near])
    vals = torch.cat([mags, -mags])
    blocks = []
    big = 6e4 if dtype == torch.float16 else 1e30
    for bm in (6.0, 6.375, 7.0, big):
        v = vals[vals.abs() <= bm] if bm < big else vals * (big / 7)
        v = torch.cat([v, v[: (-v.numel()) % 15]]).view(-1, 15)
        blocks.append(torch.cat([torch.full((v.shape[0], 1), bm), v], dim=1))
    x = torch.cat(blocks).reshape(-1)
    x = torch.cat([x, x[: (-x.numel()) % (16 * 64)]]).view(-1, 64)  # 4 blocks per row
    x = torch.cat([x, x[: (-x.shape[0]) % 16]])
    return x.to(dtype).cuda()


@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_encode_sweep(monkeypatch, dtype):
    """Every bf16 magnitude and the fp32 neighbours of the e2m1 midpoints through both encode
    paths (clamp-free for blocks with fl(bm * mult) < 7, clamped otherwise), rowwise and
    columnwise, with S_enc = 1 (amax 2688) and with a small given amax (saturated scales)."""
    x = encode_sweep(dtype)
    for amax in (2688.0, 1.0):
        check_nvfp4(monkeypatch, x, amax=torch.tensor(amax, device="cuda"), columnwise=True)
    check_nvfp4(monkeypatch, x, scaling="token", columnwise=True)


@pytest.mark.parametrize("M,K", [(1, 16), (129, 48), (8191, 7168), (128, 4096)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_given_amax(monkeypatch, M, K, scaling):
    x = make_input(M, K, seed=3)
    amax = x.float().abs().amax() if scaling == "tensor" else x.float().abs().amax(dim=1)
    amax = (amax * 1.75).contiguous()  # not the true amax: must be used as is
    check_nvfp4(monkeypatch, x, scaling=scaling, amax=amax)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_dtypes(monkeypatch, dtype, scaling):
    x = make_input(256, 4096 + 48, dtype, seed=11)
    check_nvfp4(monkeypatch, x, scaling=scaling, columnwise=True)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_specials(monkeypatch, scaling):
    x = make_input(272, 4096, seed=5, specials=True)
    check_nvfp4(monkeypatch, x, scaling=scaling, rowwise=True, columnwise=True)
    check_nvfp4(monkeypatch, x, scaling=scaling, rowwise=True, columnwise=True, rht=True)
    if scaling == "tensor":  # a finite given amax: Inf/NaN blocks alone go degenerate
        amax = torch.tensor(1e6, device="cuda")
        check_nvfp4(monkeypatch, x, scaling=scaling, amax=amax, columnwise=True)


@pytest.mark.parametrize("M", [sq.EXACT_ROWS_MIN - 1, sq.EXACT_ROWS_MIN, sq.EXACT_ROWS_MAX, sq.EXACT_ROWS_MAX + 1])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_exact_rows_bound(monkeypatch, M, scaling):
    """From EXACT_ROWS_MIN to EXACT_ROWS_MAX rows the rowwise copy carries its exact bf16 rows (check_nvfp4: the
    decode pass's bytes, NaN / Inf blocks included), outside none; with the columnwise copy and stochastic rounding."""
    x = make_input(M, 4096 + 48, seed=M, specials=True)
    check_nvfp4(monkeypatch, x, scaling=scaling)
    check_nvfp4(monkeypatch, x, scaling=scaling, columnwise=M % 16 == 0, stochastic_rounding=True, seed=7, offset=3)


def test_nvfp4_exact_rows_follow_in_place_changes():
    """The exact rows are used only while the copy they were made from is unchanged: an in-place change of the
    codes or scales, or another tensor put in their place, drops them."""
    from scalemm.formats.nvfp4 import exact_rows
    x = make_input(64, 1024, seed=3)
    for change in ("codes", "scales", "replace"):
        q = sq.quantize_nvfp4(x, scaling="token")
        assert exact_rows(q) is not None
        if change == "codes":
            q.qdata[0, 0] ^= 0x11
        elif change == "scales":
            q.scales.view(torch.uint8)[0] += 1
        else:
            q.qdata = q.qdata.clone()
        assert exact_rows(q) is None, change
    assert exact_rows(sq.quantize_nvfp4(x).to("cuda")) is None  # to(): a new container, no exact rows


def test_nvfp4_all_zero(monkeypatch):
    x = torch.zeros(144, 96, dtype=torch.bfloat16, device="cuda")
    check_nvfp4(monkeypatch, x, columnwise=True)
    check_nvfp4(monkeypatch, x, scaling="token", columnwise=True, rht=True)


@pytest.mark.parametrize("M,K", COL_SHAPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rowwise", [True, False])
def test_nvfp4_columnwise(monkeypatch, M, K, scaling, rowwise):
    x = make_input(M, K, seed=M + K)
    check_nvfp4(monkeypatch, x, scaling=scaling, rowwise=rowwise, columnwise=True)


@pytest.mark.parametrize("M,K", [(16, 16), (144, 48), (4096, 7168)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rowwise", [True, False])
def test_nvfp4_rht(monkeypatch, M, K, scaling, rowwise):
    x = make_input(M, K, seed=M * 3 + K)
    check_nvfp4(monkeypatch, x, scaling=scaling, rowwise=rowwise, columnwise=True, rht=True)


def test_nvfp4_many_tile_rows(monkeypatch):
    """More than 65535 tile rows of 128 (the launcher splits the grid's y dimension): the rows of
    the second launch are quantized like the first's."""
    M = 65535 * 128 + 208  # a multiple of 16 (columnwise copy)
    x = make_input(M, 16, seed=5)
    check_nvfp4(monkeypatch, x, columnwise=True)


def test_nvfp4_given_amax_columnwise(monkeypatch):
    x = make_input(256, 512, seed=9)
    amax = x.float().abs().amax() * 0.5  # smaller than the data: saturation paths
    check_nvfp4(monkeypatch, x, amax=amax, columnwise=True)
    check_nvfp4(monkeypatch, x, amax=amax, rowwise=False, columnwise=True)
    check_nvfp4(monkeypatch, x, amax=amax, columnwise=True, rht=True)  # rht: col amax computed


def test_nvfp4_leading_dims(monkeypatch):
    x = make_input(4 * 48, 256, seed=2).view(4, 48, 256)
    got = sq.quantize_nvfp4(x, columnwise=True)
    want = ref.quantize_nvfp4(x.reshape(-1, 256), columnwise=True)
    assert_nvfp4_equal(got, want)


def test_nvfp4_matches_cpu_reference(monkeypatch):
    """The reference gives the same bytes on CPU and CUDA, and so does the kernel."""
    x = make_input(272, 4096 + 16, seed=21, specials=True)
    for kw in (dict(scaling="tensor", columnwise=True), dict(scaling="token", columnwise=True, rht=True),
               dict(stochastic_rounding=True, seed=7, offset=3, columnwise=True)):
        want = ref.quantize_nvfp4(x.cpu(), **kw)
        assert_nvfp4_equal(sq.quantize_nvfp4(x, **kw).to("cpu"), want)


# --- stochastic rounding -----------------------------------------------------

@pytest.mark.parametrize("M,K", [(7, 48), (144, 4096), (4096, 7168)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_sr_bitexact(monkeypatch, M, K, scaling):
    x = make_input(M, K, seed=M + 2 * K)
    col = M % 16 == 0
    check_nvfp4(monkeypatch, x, scaling=scaling, columnwise=col, stochastic_rounding=True,
                seed=0x1234_5678_9ABC_DEF0, offset=(1 << 40) + 5)
    if col:
        check_nvfp4(monkeypatch, x, scaling=scaling, columnwise=True, rht=True,
                    stochastic_rounding=True, seed=42, offset=0)


def test_nvfp4_sr_reproducible():
    x = make_input(256, 1024, seed=1)
    a = sq.quantize_nvfp4(x, columnwise=True, stochastic_rounding=True, seed=5, offset=9)
    b = sq.quantize_nvfp4(x, columnwise=True, stochastic_rounding=True, seed=5, offset=9)
    c = sq.quantize_nvfp4(x, columnwise=True, stochastic_rounding=True, seed=5, offset=10)
    assert_nvfp4_equal(a, b)
    assert not torch.equal(a.qdata, c.qdata)
    assert not torch.equal(a.columnwise.qdata, c.columnwise.qdata)
    # seed=None: drawn from the CUDA generator, repeatable under manual_seed, fresh per call
    torch.cuda.manual_seed(123)
    d = sq.quantize_nvfp4(x, stochastic_rounding=True)
    e = sq.quantize_nvfp4(x, stochastic_rounding=True)
    torch.cuda.manual_seed(123)
    f = sq.quantize_nvfp4(x, stochastic_rounding=True)
    assert torch.equal(d.qdata, f.qdata)
    assert not torch.equal(d.qdata, e.qdata)
    gen = torch.Generator(device="cpu").manual_seed(4)
    g1 = sq.quantize_nvfp4(x, stochastic_rounding=True, generator=gen)
    gen.manual_seed(4)
    g2 = sq.quantize_nvfp4(x, stochastic_rounding=True, generator=gen)
    assert torch.equal(g1.qdata, g2.qdata)


def test_nvfp4_sr_unbiased():
    """The mean of SR dequantizations converges to x; RNE keeps its rounding error."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand(64, 512, generator=g, device="cuda") * 2 - 1) * 3.0
    x[:, :16] = 3.0  # a full-scale element in every block row keeps the scales fixed
    amax = torch.tensor(3.0, device="cuda")
    n = 256
    acc = torch.zeros_like(x)
    for off in range(n):
        t = sq.quantize_nvfp4(x, amax=amax, stochastic_rounding=True, seed=77, offset=off)
        acc += ref.dequantize_nvfp4(t)
    sr_err = (acc / n - x).abs().mean().item()
    rne_err = (ref.dequantize_nvfp4(sq.quantize_nvfp4(x, amax=amax)) - x).abs().mean().item()
    bias = (acc / n - x).mean().item()
    assert sr_err < 0.2 * rne_err, (sr_err, rne_err)
    assert abs(bias) < 0.02 * rne_err + 1e-3, bias


# ---------------------------------------------------------------------------
# FP8 and MXFP8
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("M,K", [(1, 16), (7, 48), (129, 4096), (8191, 7168), (144, 7168), (4096, 48)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8(monkeypatch, M, K, scaling, dtype):
    x = make_input(M, K, dtype, seed=M + K)
    col = M % 16 == 0
    want = ref.quantize_fp8(x, scaling=scaling, columnwise=col)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_fp8(x, scaling=scaling, columnwise=col)):
        assert_fp8_equal(got, want)
    if col:
        want = ref.quantize_fp8(x, scaling=scaling, rowwise=False, columnwise=True)
        for got in run_poisoned(monkeypatch, lambda: sq.quantize_fp8(x, scaling=scaling, rowwise=False,
                                                                     columnwise=True)):
            assert_fp8_equal(got, want)


# --- the rowwise copy with per-token scaling: one kernel (quantize_rows_kernel) -------

def _rows_alone_and_with_columns(quantize, x, **kw):
    """The rowwise copy quantized alone (per-token rows: the one-kernel path) and next to the columnwise copy (the
    amax pass, then the tile kernel)."""
    return quantize(x, scaling="token", **kw), quantize(x, scaling="token", columnwise=True, **kw)


@pytest.mark.parametrize("M,K,specials", [(16, 28688, False), (272, 1024, True), (4096, 48, False),
                                          (128, 4112, True), (16, 16, False), (16, 16400, True)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_token_rows_kernel_matches_the_two_pass_path(monkeypatch, M, K, specials, dtype):
    """Bit for bit: the one-kernel rowwise copy and the rowwise copy of the stats + tile kernels, FP8 and NVFP4
    (with and without stochastic rounding), long rows (several blocks per thread), Inf / NaN, every input dtype;
    outputs poisoned. And both against the reference."""
    x = make_input(M, K, dtype, seed=M + 3 * K, specials=specials)
    for alone, both in run_poisoned(monkeypatch, lambda: _rows_alone_and_with_columns(sq.quantize_fp8, x)):
        assert both.columnwise is not None and alone.columnwise is None
        assert_fp8_equal(alone, ref.quantize_fp8(x, scaling="token"))
        assert_same_bytes(alone.data, both.data, "fp8 data")
        assert_same_bytes(alone.scale_inv, both.scale_inv, "fp8 scale_inv")
    for sr in (dict(), dict(stochastic_rounding=True, seed=99, offset=7)):
        pair = run_poisoned(monkeypatch, lambda: _rows_alone_and_with_columns(sq.quantize_nvfp4, x, **sr))
        for alone, both in pair:
            assert_nvfp4_equal(alone, ref.quantize_nvfp4(x, scaling="token", **sr))
            for f in ("qdata", "scales", "alpha", "amax"):
                assert_same_bytes(getattr(alone, f), getattr(both, f), f"nvfp4 {f} {sr}")


@pytest.mark.parametrize("M", [1, 7, 128, 129, 132, 133, 257])
@pytest.mark.parametrize("dtype", DTYPES)
def test_token_rows_few_rows_long_k(monkeypatch, M, dtype):
    """Per-token rows of long rows at decode sizes, where the rows kernel gives a row up to 1024 threads (K = 16400:
    1025 blocks, two for a row's first thread), FP8 and NVFP4 (RNE and stochastic rounding) against the reference;
    the row counts straddle its one-wave bounds on a 132-SM GPU (dense NVFP4 counts the padding scale rows)."""
    x = make_input(M, 16400, dtype, seed=M + 11, specials=True)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_fp8(x, scaling="token")):
        assert_fp8_equal(got, ref.quantize_fp8(x, scaling="token"))
    check_nvfp4(monkeypatch, x, scaling="token")
    check_nvfp4(monkeypatch, x, scaling="token", stochastic_rounding=True, seed=5, offset=3)


def test_fp8_token_rows_specials(monkeypatch):
    x = make_input(7, 1024, seed=9, specials=True)
    want = ref.quantize_fp8(x, scaling="token")
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_fp8(x, scaling="token")):
        assert_fp8_equal(got, want)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_specials(monkeypatch, scaling):
    x = make_input(272, 1024, seed=8, specials=True)
    want = ref.quantize_fp8(x, scaling=scaling, columnwise=True)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_fp8(x, scaling=scaling, columnwise=True)):
        assert_fp8_equal(got, want)


@pytest.mark.parametrize("M,K", [(1, 32), (7, 96), (129, 4096), (8191, 7168), (32, 32), (160, 7168),
                                 (4096, 4096)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp8(monkeypatch, M, K, dtype):
    x = make_input(M, K, dtype, seed=M * 5 + K, block=32)
    col = M % 32 == 0
    want = ref.quantize_mxfp8(x, columnwise=col)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_mxfp8(x, columnwise=col)):
        assert_mxfp8_equal(got, want)
    if col:
        want = ref.quantize_mxfp8(x, rowwise=False, columnwise=True)
        for got in run_poisoned(monkeypatch, lambda: sq.quantize_mxfp8(x, rowwise=False, columnwise=True)):
            assert_mxfp8_equal(got, want)


def test_mxfp8_specials(monkeypatch):
    x = make_input(256, 1024, seed=4, specials=True, block=32)
    want = ref.quantize_mxfp8(x, columnwise=True)
    for got in run_poisoned(monkeypatch, lambda: sq.quantize_mxfp8(x, columnwise=True)):
        assert_mxfp8_equal(got, want)


# ---------------------------------------------------------------------------
# CUDA graphs: no host sync, no allocation inside the launches
# ---------------------------------------------------------------------------

def test_graph_capture():
    x = make_input(256, 2048, seed=12)
    kws = [dict(columnwise=True), dict(scaling="token", columnwise=True, rht=True),
           dict(stochastic_rounding=True, seed=3, offset=1)]
    for kw in kws:  # warm-up: JIT build and load outside the capture
        sq.quantize_nvfp4(x, **kw)
    sq.quantize_fp8(x, scaling="token", columnwise=True)
    sq.quantize_mxfp8(x, columnwise=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [sq.quantize_nvfp4(x, **kw) for kw in kws]
        fp8 = sq.quantize_fp8(x, scaling="token", columnwise=True)
        mx = sq.quantize_mxfp8(x, columnwise=True)
    x.copy_(make_input(256, 2048, seed=13))
    graph.replay()
    torch.cuda.synchronize()
    for kw, got in zip(kws, outs):
        assert_nvfp4_equal(got, ref.quantize_nvfp4(x, **kw))
    assert_fp8_equal(fp8, ref.quantize_fp8(x, scaling="token", columnwise=True))
    assert_mxfp8_equal(mx, ref.quantize_mxfp8(x, columnwise=True))


def test_sr_inside_a_graph_draws_fresh_bits_every_replay():
    """seed=None inside a capture: the seed is drawn on the device by the graph itself, so replays differ
    and their mean converges to x (the same criterion as test_nvfp4_sr_unbiased); grouped too."""
    g = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.rand(64, 512, generator=g, device="cuda") * 2 - 1) * 3.0
    x[:, :16] = 3.0
    amax = torch.tensor(3.0, device="cuda")
    offsets = torch.tensor([20, 20, 64], dtype=torch.int32, device="cuda")
    sq.quantize_nvfp4(x, amax=amax, stochastic_rounding=True)  # build and load outside the capture
    scalemm.quantize_nvfp4_grouped(x.bfloat16(), offsets, stochastic_rounding=True)
    xb = x.bfloat16()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = sq.quantize_nvfp4(x, amax=amax, stochastic_rounding=True)
        tg = scalemm.quantize_nvfp4_grouped(xb, offsets, stochastic_rounding=True)
    n, acc, seen, seen_g = 128, torch.zeros_like(x), [], []
    for i in range(n):
        graph.replay()
        acc += ref.dequantize_nvfp4(t)
        if i < 3:
            seen.append(t.qdata.clone())
            seen_g.append(tg.qdata.clone())
    torch.cuda.synchronize()
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])
    assert not torch.equal(seen_g[0], seen_g[1])
    sr_err = (acc / n - x).abs().mean().item()
    rne_err = (ref.dequantize_nvfp4(sq.quantize_nvfp4(x, amax=amax)) - x).abs().mean().item()
    assert sr_err < 0.25 * rne_err, (sr_err, rne_err)


def test_misaligned_x_rejected():
    base = torch.randn(64 * 64 + 8, device="cuda", dtype=torch.bfloat16)
    x = base[1:64 * 64 + 1].view(64, 64)  # contiguous, but 2 bytes past an aligned address
    with pytest.raises(ValueError, match="16-byte aligned"):
        sq.quantize_nvfp4(x)


# --- FP8 delayed scaling: a given amax, the tensor's amax out of the same pass ---------

@pytest.mark.parametrize("M,K", [(1, 16), (7, 48), (129, 4096), (8192, 7168), (4096, 48)])
@pytest.mark.parametrize("given", [0.0, 1e-3, 2.5, 1e30, float("inf")])
@pytest.mark.parametrize("specials", [False, True])
def test_fp8_delayed(monkeypatch, M, K, given, specials):
    """A given amax (values beyond it saturate; 0 / Inf give scale 1): the reference's bytes for the rowwise, both and
    the columnwise copies; amax_out = max|x| (NaN with a NaN in x) from the same pass, over a poisoned buffer."""
    x = make_input(M, K, seed=M + K, specials=specials)
    amax = torch.tensor(given, device="cuda")
    want_out = torch.empty((), device="cuda")
    copies = [(True, False)] + ([(True, True), (False, True)] if M % 16 == 0 else [])
    for rowwise, columnwise in copies:
        kw = dict(rowwise=rowwise, columnwise=columnwise, amax=amax)
        want = ref.quantize_fp8(x, amax_out=want_out, **kw)
        outs = []

        def run():
            outs.append(torch.full((), float("nan"), device="cuda"))
            return sq.quantize_fp8(x, amax_out=outs[-1], **kw)
        for got in run_poisoned(monkeypatch, run):
            assert_fp8_equal(got, want)
        for out in outs:
            assert torch.isnan(out).item() == torch.isnan(want_out).item()
            assert torch.isnan(want_out).item() or torch.equal(out, want_out), (out, want_out)


def test_fp8_amax_out_with_current_scaling():
    """amax=None: amax_out receives the amax current scaling used; the bytes are current scaling's."""
    x = make_input(256, 512, seed=4)
    out = torch.empty((), device="cuda")
    got = sq.quantize_fp8(x, columnwise=True, amax_out=out)
    assert_fp8_equal(got, ref.quantize_fp8(x, columnwise=True))
    assert torch.equal(out, x.float().abs().amax())


# --- FP8 delayed scaling's history step: one kernel against the reference's torch ops ---------

def _history_case(H, G, seed):
    """A history [H] (G None) or [H, G] of amaxes with zeros, Infs and NaNs in it, and a new amax row."""
    gen = torch.Generator().manual_seed(seed)
    cols = () if G is None else (G,)
    h = torch.rand((H,) + cols, generator=gen) * 100
    a = torch.rand(cols, generator=gen) * 100
    flat = h.view(-1)
    n = flat.numel()
    for i, v in enumerate((0.0, float("inf"), float("nan"), 1e-30)):
        flat[(seed * 7919 + i * 104729) % n] = v
    if G is not None and G > 2:
        a[1], a[2] = float("nan"), float("inf")
    h[-1] = float("nan") if H > 1 else h[-1]  # the oldest row leaves: a NaN there must not survive the step
    return h.cuda(), a.cuda()


@pytest.mark.parametrize("H", [1, 2, 17, 1024, 1025, 3000])
@pytest.mark.parametrize("G", [None, 1, 7, 8, 9, 128, 300])
def test_advance_amax_history_matches_reference(H, G):
    """Three steps of the kernel against scalemm.reference's torch ops, bit for bit (a NaN equals any NaN): the
    history rolled in place, next_amax its max over rows, used the previous next_amax (with and without used)."""
    h, a = _history_case(H, G, seed=H * 31 + (G or 0))
    n = torch.full(a.shape, 3.0, device="cuda")
    h_ref, n_ref = h.clone(), n.clone()
    for step in range(3):
        used = torch.full(a.shape, -1.0, device="cuda") if step != 1 else None
        used_ref = torch.full(a.shape, -1.0, device="cuda") if step != 1 else None
        a_step = a * (step + 1)
        sq.advance_amax_history(h, a_step, n, used)
        ref.advance_amax_history(h_ref, a_step, n_ref, used_ref)
        assert_same_bytes(h, h_ref, f"history step {step}")
        assert_same_bytes(n, n_ref, f"next_amax step {step}")
        if used is not None:
            assert_same_bytes(used, used_ref, f"used step {step}")


def test_advance_amax_history_in_a_graph():
    """Captured once, replayed four times: four steps, as the reference takes them."""
    h, a = _history_case(1024, 128, seed=5)
    n, used = torch.zeros(128, device="cuda"), torch.zeros(128, device="cuda")
    h_ref, n_ref = h.clone(), n.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        sq.advance_amax_history(h, a, n, used)  # warm-up (builds the kernel library); also a step
    torch.cuda.current_stream().wait_stream(s)
    ref.advance_amax_history(h_ref, a, n_ref)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sq.advance_amax_history(h, a, n, used)
    for _ in range(4):
        g.replay()
        used_ref = n_ref.clone()
        ref.advance_amax_history(h_ref, a, n_ref)
    torch.cuda.synchronize()
    assert_same_bytes(h, h_ref, "history")
    assert_same_bytes(n, n_ref, "next_amax")
    assert_same_bytes(used, used_ref, "used")
