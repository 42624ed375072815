"""scalemm's grouped (MoE) quantization kernels against the pure-torch reference, bit for bit.

Every comparison is on raw bytes (atol = rtol = 0): FP8 data, FP4 codes, e4m3 / e8m0 scale bytes
including the zeroed padding of the grouped layouts, the wgrad-layout padding columns, sf_offsets,
alphas, amaxes and scale_inv (a NaN equals any NaN, other floats compare by bits). Every kernel
run happens twice, on outputs pre-filled with 0xFF and with 0x00 (scalemm.quantize._poison_byte),
so an unwritten byte cannot pass.

Run on an sm_90 GPU:  python -m pytest tests/test_quantize_grouped_gpu.py -q
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
# inputs
# ---------------------------------------------------------------------------

def routing_counts(tokens, G, *, topk=2, seed=0, empty=(), ones=(), sizes=None):
    """Group sizes of a realistic skewed top-k routing: expert popularity ~ exp(1.2 * randn), each
    token picks topk distinct experts. `empty` groups are forced to 0 tokens, `ones` to 1 token
    (the difference goes to the largest group). `sizes`: explicit sizes instead."""
    if sizes is not None:
        return torch.tensor(sizes, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(G, generator=g) * 1.2
    k = min(topk, G)
    scores = logits[None, :] + torch.randn(tokens, G, generator=g) * 1.0
    choice = scores.topk(k, dim=1).indices.reshape(-1)
    counts = torch.bincount(choice, minlength=G)
    for e in empty:
        counts[e] = 0
    for o in ones:
        counts[o] = 1
    total = tokens * k
    counts[counts.argmax()] += total - counts.sum()
    assert counts.min() >= 0
    return counts


def offsets_of(counts):
    return torch.cumsum(counts, 0).to(torch.int32).cuda()


# ---------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------

def assert_grouped_fp8_equal(got, want, what="fp8g"):
    assert got.shape == want.shape and got.scaling == want.scaling and got.layout == want.layout, what
    assert got.orig_dtype == want.orig_dtype, what
    assert (got.data is None) == (want.data is None), what
    if want.data is not None:
        assert_same_bytes(got.data, want.data, f"{what}.data")
        assert_same_bytes(got.scale_inv, want.scale_inv, f"{what}.scale_inv")
    assert (got.columnwise is None) == (want.columnwise is None), f"{what}.columnwise presence"
    if want.columnwise is not None:
        assert_grouped_fp8_equal(got.columnwise, want.columnwise, f"{what}.columnwise")


def assert_grouped_nvfp4_equal(got, want, what="nvfp4g"):
    assert got.shape == want.shape and got.scaling == want.scaling and got.layout == want.layout, what
    assert got.scale_rows == want.scale_rows and got.group_rows == want.group_rows, what
    assert got.rht == want.rht, what
    assert (got.qdata is None) == (want.qdata is None), what
    if want.qdata is not None:
        for f in ("qdata", "scales", "sf_offsets", "alpha", "amax"):
            assert_same_bytes(getattr(got, f), getattr(want, f), f"{what}.{f}")
    assert (got.columnwise is None) == (want.columnwise is None), f"{what}.columnwise presence"
    if want.columnwise is not None:
        assert_grouped_nvfp4_equal(got.columnwise, want.columnwise, f"{what}.columnwise")


def run_poisoned(monkeypatch, fn):
    """fn() twice, outputs pre-filled with 0xFF and then 0x00; returns both results."""
    outs = []
    for byte in (0xFF, 0x00):
        monkeypatch.setattr(sq, "_poison_byte", byte)
        outs.append(fn())
    torch.cuda.synchronize()
    monkeypatch.setattr(sq, "_poison_byte", None)
    return outs


def check_fp8(monkeypatch, x, offsets, **kw):
    want = ref.quantize_fp8_grouped(x, offsets, **kw)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_fp8_grouped(x, offsets, **kw)):
        assert_grouped_fp8_equal(got, want)


def check_nvfp4(monkeypatch, x, offsets, **kw):
    want = ref.quantize_nvfp4_grouped(x, offsets, **kw)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_nvfp4_grouped(x, offsets, **kw)):
        assert_grouped_nvfp4_equal(got, want)
        assert_exact_rows(got, offsets)


def check_mxfp8(monkeypatch, x, offsets):
    want = ref.quantize_mxfp8_grouped(x, offsets)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_mxfp8_grouped(x, offsets)):
        assert_same_bytes(got.data, want.data, "mxfp8g.data")
        assert_same_bytes(got.scales, want.scales, "mxfp8g.scales")
        assert_same_bytes(got.sf_offsets, want.sf_offsets, "mxfp8g.sf_offsets")


# G, tokens (before top-k), K
ROUTINGS = [(1, 300, 64), (8, 1000, 4096 + 48), (64, 2048, 7168), (256, 2048, 512)]
ROW_COL = [(True, False), (True, True), (False, True)]


def _case(G, tokens, K, seed):
    counts = routing_counts(tokens, G, seed=seed, empty=(G // 2,) if G > 2 else (),
                            ones=(G - 1,) if G > 1 else ())
    T = int(counts.sum())
    return make_input(T, K, seed=seed + G), offsets_of(counts)


# ---------------------------------------------------------------------------
# FP8
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("G,tokens,K", ROUTINGS)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rowwise,columnwise", ROW_COL)
def test_fp8_grouped(monkeypatch, G, tokens, K, scaling, rowwise, columnwise):
    x, offsets = _case(G, tokens, K, seed=1)
    check_fp8(monkeypatch, x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise)


@pytest.mark.parametrize("sizes", [[1], [15], [129], [0, 1, 0, 15, 16, 17, 0, 129, 1, 1, 255, 0],
                                   [0, 0, 0, 300], [300, 0, 0, 0], [7] * 40])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_grouped_edges(monkeypatch, sizes, scaling):
    counts = torch.tensor(sizes)
    x = make_input(int(counts.sum()), 96, seed=len(sizes))
    check_fp8(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True)
    check_fp8(monkeypatch, x, offsets_of(counts), scaling=scaling)  # per token: the one-kernel rows path


# Larger and odder than ROUTINGS: one group of most of the rows, many groups per stats tile (128 rows), empty groups
# (also last), K not a multiple of the stats tile (256 columns), rows past the last group; 1500 groups: the quantize
# pass's warp search of the position table (1501 entries) takes three rounds.
@pytest.mark.parametrize("sizes,K", [([40000] + [97] * 127, 512), ([1, 2, 3, 0, 5] * 200, 272),
                                     ([3000] * 16 + [0] * 4, 2048 + 64), ([0, 1, 2, 3, 17] * 300, 160)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rowwise,columnwise", [(True, True), (False, True), (True, False)])
def test_fp8_grouped_skewed_and_many_groups(monkeypatch, sizes, K, scaling, rowwise, columnwise):
    counts = torch.tensor(sizes)
    x = make_input(int(counts.sum()) + 37, K, seed=K)
    check_fp8(monkeypatch, x, offsets_of(counts), scaling=scaling, rowwise=rowwise, columnwise=columnwise)


@pytest.mark.parametrize("sizes", [[0, 1, 0, 3, 1], [70, 0, 62], [70, 0, 63]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_token_rows_few_rows_long_k(monkeypatch, sizes, dtype):
    """Per-token rows of long rows at decode sizes: the rows kernel gives a row up to 1024 threads where the launch
    has few rows (K = 16400: 1025 blocks, two for a row's first thread), FP8 and NVFP4 (RNE and stochastic rounding);
    132 / 133 rows straddle its one-CTA-per-SM bound on a 132-SM GPU and, in two groups, take the NVFP4 launcher's
    other mapping (every scale row of the layout, GroupedScaleRows)."""
    counts = torch.tensor(sizes)
    x = make_input(int(counts.sum()), 16400, dtype, seed=len(sizes) + sum(sizes), specials=True)
    check_fp8(monkeypatch, x, offsets_of(counts), scaling="token")
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling="token")
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling="token", stochastic_rounding=True, **SR_KW)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_grouped_dtypes_specials(monkeypatch, dtype, scaling):
    counts = routing_counts(500, 8, seed=3, empty=(2,))
    x = make_input(int(counts.sum()), 320, dtype, seed=4, specials=True)
    check_fp8(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True)
    check_fp8(monkeypatch, x, offsets_of(counts), scaling=scaling)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_grouped_bad_offsets(monkeypatch, scaling):
    """Offsets are clamped into [0, T] and made non-decreasing on the device; rows past the last
    group get zero data. Same rule as the reference."""
    T = 400
    x = make_input(T, 64, seed=8)
    for offs in ([100, 50, 300, 350], [-5, 120, 10_000, 390], [0, 0, 0, 0], [10, 20, 30, 40], [T + 5] * 3):
        check_fp8(monkeypatch, x, torch.tensor(offs, dtype=torch.int32, device="cuda"), scaling=scaling,
                  columnwise=True)
        check_fp8(monkeypatch, x, torch.tensor(offs, dtype=torch.int32, device="cuda"), scaling=scaling)


def test_fp8_grouped_columnwise_is_transpose():
    """Per-group scales: the wgrad copy holds the same bytes as the rowwise copy, transposed."""
    counts = routing_counts(3000, 16, seed=5, empty=(3, 4))
    x = make_input(int(counts.sum()), 256, seed=6)
    offsets = offsets_of(counts)
    q = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True)
    W = q.columnwise.data.shape[1]
    want = scalemm.grouped.pad_groups_transposed(q.data.view(torch.uint8), offsets, W)
    assert torch.equal(q.columnwise.data.view(torch.uint8), want)


# ---------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("G,tokens,K", ROUTINGS)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rowwise,columnwise", ROW_COL)
def test_nvfp4_grouped(monkeypatch, G, tokens, K, scaling, rowwise, columnwise):
    x, offsets = _case(G, tokens, K, seed=2)
    check_nvfp4(monkeypatch, x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise)


@pytest.mark.parametrize("sizes", [[1], [15], [129], [0, 1, 0, 15, 16, 17, 0, 129, 1, 1, 255, 0],
                                   [0, 0, 0, 300], [300, 0, 0, 0], [7] * 40, [64] * 5, [65, 63, 128, 127]])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_grouped_edges(monkeypatch, sizes, scaling):
    counts = torch.tensor(sizes)
    x = make_input(int(counts.sum()), 48, seed=len(sizes))
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True)
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling)  # per token: the table + rows kernel path
    if scaling == "token":
        check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling, stochastic_rounding=True, **SR_KW)


@pytest.mark.parametrize("tokens", [500, 100])  # 100 (200 rows): with exact rows (quantize.EXACT_ROWS_MAX)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_grouped_dtypes_specials(monkeypatch, dtype, scaling, tokens):
    counts = routing_counts(tokens, 8, seed=3, empty=(5,))
    x = make_input(int(counts.sum()), 4096 + 16, dtype, seed=9, specials=True)
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True)
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling)


@pytest.mark.parametrize("T", [400, 200])  # 200: with exact rows (quantize.EXACT_ROWS_MAX)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_grouped_bad_offsets(monkeypatch, scaling, T):
    x = make_input(T, 64, seed=8)
    for offs in ([T // 4, T // 8, 3 * T // 4, 7 * T // 8], [-5, 120, 10_000, T - 10], [0, 0, 0, 0], [10, 20, 30, 40],
                 [T + 5] * 3):
        check_nvfp4(monkeypatch, x, torch.tensor(offs, dtype=torch.int32, device="cuda"), scaling=scaling,
                    columnwise=True)
        check_nvfp4(monkeypatch, x, torch.tensor(offs, dtype=torch.int32, device="cuda"), scaling=scaling)


# RHT (columnwise) and stochastic rounding (both copies); a seed past 2^32 and a non-zero offset
# exercise both halves of the Philox key and counter.
RHT_SR = [(True, False), (False, True), (True, True)]
SR_KW = dict(seed=(1 << 63) + 12345, offset=(5 << 32) + 3)


@pytest.mark.parametrize("G,tokens,K", ROUTINGS)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
@pytest.mark.parametrize("rht,sr", RHT_SR)
def test_nvfp4_grouped_rht_sr(monkeypatch, G, tokens, K, scaling, rht, sr):
    x, offsets = _case(G, tokens, K, seed=22)
    check_nvfp4(monkeypatch, x, offsets, scaling=scaling, columnwise=True, rht=rht, stochastic_rounding=sr,
                **SR_KW)
    if rht:  # columnwise only: no stats pass over the rows
        check_nvfp4(monkeypatch, x, offsets, scaling=scaling, rowwise=False, columnwise=True, rht=True,
                    stochastic_rounding=sr, **SR_KW)


@pytest.mark.parametrize("sizes", [[1], [15], [0, 1, 0, 15, 16, 17, 0, 129, 1, 1, 255, 0], [7] * 40,
                                   [65, 63, 128, 127]])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_grouped_rht_sr_edges(monkeypatch, sizes, scaling):
    counts = torch.tensor(sizes)
    x = make_input(int(counts.sum()), 80, seed=len(sizes) + 1)
    check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True, rht=True,
                stochastic_rounding=True, **SR_KW)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_nvfp4_grouped_rht_sr_dtypes_specials(monkeypatch, dtype, scaling):
    counts = routing_counts(500, 8, seed=4, empty=(2,))
    x = make_input(int(counts.sum()), 1024 + 16, dtype, seed=10, specials=True)
    for rht, sr in RHT_SR:
        check_nvfp4(monkeypatch, x, offsets_of(counts), scaling=scaling, columnwise=True, rht=rht,
                    stochastic_rounding=sr, **SR_KW)


def test_nvfp4_grouped_matches_single_tensor_per_group():
    """Each group's rows, scales and alpha are what quantize_nvfp4 gives for that group alone."""
    counts = routing_counts(2000, 8, seed=12, empty=(1,))
    x = make_input(int(counts.sum()), 512, seed=13)
    offsets = offsets_of(counts)
    q = scalemm.quantize_nvfp4_grouped(x, offsets)
    _, cp = ref.swizzled_size(1, 512 // 16)
    ends = torch.cumsum(counts, 0).tolist()
    sf = q.sf_offsets.tolist()
    for g in range(8):
        s, e = (ends[g - 1] if g else 0), ends[g]
        if e == s:
            continue
        single = scalemm.quantize_nvfp4(x[s:e].contiguous())
        assert torch.equal(q.qdata[s:e], single.qdata)
        n = single.scales.numel()
        assert torch.equal(q.scales.view(torch.uint8)[sf[g] * cp:sf[g] * cp + n], single.scales.view(torch.uint8))
        assert torch.equal(q.alpha[g], single.alpha)


def test_mxfp8_grouped(monkeypatch):
    for G, tokens, K in ((1, 300, 64), (8, 1000, 4096 + 32), (64, 2048, 7168)):
        x, offsets = _case(G, tokens, K, seed=7)
        check_mxfp8(monkeypatch, x, offsets)
    counts = torch.tensor([0, 1, 0, 15, 129, 0])
    check_mxfp8(monkeypatch, make_input(int(counts.sum()), 96, seed=3, specials=True, block=32), offsets_of(counts))


# ---------------------------------------------------------------------------
# stacked expert weights
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("E,N,K", [(1, 16, 64), (8, 200, 512), (32, 129, 256)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_stacked(monkeypatch, E, N, K, scaling):
    w = make_input(E * N, K, seed=E + N).view(E, N, K)
    want = ref.quantize_nvfp4_stacked(w, scaling=scaling)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_nvfp4_stacked(w, scaling=scaling)):
        assert_grouped_nvfp4_equal(got, want)
        assert_exact_rows(got)  # weights: none
    rp, cp = ref.swizzled_size(N, K // 16)
    for e in (0, E - 1):  # the batched layout: expert e's block at byte e * Rp * Cp
        single = scalemm.quantize_nvfp4(w[e], scaling=scaling)
        assert torch.equal(got.scales.view(E, rp * cp)[e].view(torch.uint8), single.scales.view(torch.uint8))
        assert torch.equal(got.qdata.view(E, N, K // 2)[e], single.qdata)
    want8 = ref.quantize_fp8_stacked(w, scaling=scaling)
    for got8 in run_poisoned(monkeypatch, lambda: scalemm.quantize_fp8_stacked(w, scaling=scaling)):
        assert_grouped_fp8_equal(got8, want8)
        assert got8.group_rows == N
    single8 = scalemm.quantize_fp8(w[E - 1], scaling=scaling)
    assert torch.equal(got8.data.view(E, N, K)[E - 1].view(torch.uint8), single8.data.view(torch.uint8))


@pytest.mark.parametrize("E,N,K", [(1, 16, 64), (8, 208, 512), (3, 160, 96)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_stacked_columnwise(monkeypatch, E, N, K, scaling):
    """columnwise=True: the rows copy as before and the wgrad copy of the E groups, both as the reference."""
    w = make_input(E * N, K, seed=E + N + 1).view(E, N, K)
    want = ref.quantize_nvfp4_stacked(w, scaling=scaling, columnwise=True)
    for got in run_poisoned(monkeypatch, lambda: scalemm.quantize_nvfp4_stacked(w, scaling=scaling, columnwise=True)):
        assert_grouped_nvfp4_equal(got, want)  # the wgrad copy too
        assert got.columnwise is not None
    want8 = ref.quantize_fp8_stacked(w, scaling=scaling, columnwise=True)
    for got8 in run_poisoned(monkeypatch, lambda: scalemm.quantize_fp8_stacked(w, scaling=scaling, columnwise=True)):
        assert_grouped_fp8_equal(got8, want8)
        assert got8.columnwise is not None


@pytest.mark.parametrize("E,N,K", [(1, 16, 64), (8, 208, 512), (3, 48, 80), (2, 1536, 128), (6, 1040, 2112)])
@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_fp8_stacked_pair(monkeypatch, E, N, K, scaling):
    """W and W^T from one pass (the kernel writes W^T's stacked layout [E * K, N] itself): the bytes of the
    reference's quantize_fp8_stacked of w and of its per-expert transpose. N = 48 / 208: 128-position tiles
    that straddle experts; K = 80: a partial 64-column tile; 6 x 1040 x 2112: more than a wave of one-tile CTAs, so
    per-tensor scaling takes two 64-column tiles per CTA (the last pair half past K)."""
    w = make_input(E * N, K, seed=E + N + 2).view(E, N, K)
    want = ref.quantize_fp8_stacked(w, scaling=scaling)
    want_t = ref.quantize_fp8_stacked(w.transpose(1, 2).contiguous(), scaling=scaling)
    for got, got_t in run_poisoned(monkeypatch, lambda: scalemm.quantize_fp8_stacked_pair(w, scaling=scaling)):
        assert_grouped_fp8_equal(got, want)
        assert_grouped_fp8_equal(got_t, want_t)
        assert (got.group_rows, got_t.group_rows, got_t.shape) == (N, K, (E * K, N))
        assert torch.equal(got_t.offsets.cpu(), want_t.offsets.cpu())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offsets,T", [([5, 9, 9, 20], 20), ([5, 9, 9, 14], 20), ([0], 7), ([3, 2, 1], 9),
                                       ([-4, 30], 12), ([4, -1], 12), (list(range(1, 301)), 400)])
def test_zero_rows_past_groups(dtype, offsets, T):
    """Rows from the clamped running max of the offsets on are zeroed, the rest untouched (NaN-filled before):
    exact, short, empty, decreasing, negative and out-of-range offsets, more groups than a CTA's threads."""
    from scalemm.quantize_grouped import zero_rows_past_groups
    out = torch.full((T, 24), float("nan"), dtype=dtype, device="cuda")
    offs = torch.tensor(offsets, dtype=torch.int32, device="cuda")
    want = out.cpu()
    zero_rows_past_groups(want, offs.cpu())
    assert zero_rows_past_groups(out, offs) is out
    torch.cuda.synchronize()
    end = min(max(max(offsets), 0), T)
    assert torch.equal(out.cpu()[end:], torch.zeros_like(want[end:])) and out[:end].isnan().all()
    assert torch.equal(out.cpu().isnan(), want.isnan())


# ---------------------------------------------------------------------------
# residual NVFP4
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_residual_bitexact(scaling):
    x = make_input(256, 1024, seed=17)
    channels = x.float().abs().amax(0).topk(40).indices
    with pytest.raises(ValueError, match="'channels' must be on the CPU"):  # checked on the host, never read back
        scalemm.quantize_nvfp4_residual(x, channels, scaling=scaling)
    channels = channels.cpu()
    got = scalemm.quantize_nvfp4_residual(x, channels, scaling=scaling)
    want = ref.quantize_nvfp4_residual(x.cpu(), channels, scaling=scaling)
    for f in ("qdata", "scales", "alpha", "amax"):
        assert_same_bytes(getattr(got, f), getattr(want, f), f"residual.{f}")


# ---------------------------------------------------------------------------
# CUDA graphs: no host sync, new offsets on every replay
# ---------------------------------------------------------------------------

def test_graph_capture_new_offsets():
    G, K = 16, 512
    T = 2048
    x = make_input(T, K, seed=31)
    offsets = offsets_of(routing_counts(T // 2, G, seed=0))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (JIT build) outside the capture
        scalemm.quantize_fp8_grouped(x, offsets, scaling="token", columnwise=True)
        scalemm.quantize_fp8_grouped(x, offsets, scaling="token")
        scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        scalemm.quantize_nvfp4_grouped(x, offsets, columnwise=True)
        scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token", columnwise=True, rht=True,
                                       stochastic_rounding=True, **SR_KW)
        scalemm.quantize_mxfp8_grouped(x, offsets)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        f8 = scalemm.quantize_fp8_grouped(x, offsets, scaling="token", columnwise=True)
        f8t = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True)
        f8r = scalemm.quantize_fp8_grouped(x, offsets, scaling="token")  # the rows kernel reads the offsets
        nvr = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")  # group table + rows kernel
        nv = scalemm.quantize_nvfp4_grouped(x, offsets, columnwise=True)
        nv_rs = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token", columnwise=True, rht=True,
                                               stochastic_rounding=True, **SR_KW)
        mx = scalemm.quantize_mxfp8_grouped(x, offsets)
    for seed, empty in ((1, ()), (2, (0, 5, 15)), (3, (1,))):
        offsets.copy_(offsets_of(routing_counts(T // 2, G, seed=seed, empty=empty)))
        graph.replay()
        torch.cuda.synchronize()
        assert_grouped_fp8_equal(f8, ref.quantize_fp8_grouped(x, offsets, scaling="token", columnwise=True))
        assert_grouped_fp8_equal(f8t, ref.quantize_fp8_grouped(x, offsets, columnwise=True))
        assert_grouped_fp8_equal(f8r, ref.quantize_fp8_grouped(x, offsets, scaling="token"))
        assert_grouped_nvfp4_equal(nvr, ref.quantize_nvfp4_grouped(x, offsets, scaling="token"))
        assert_grouped_nvfp4_equal(nv, ref.quantize_nvfp4_grouped(x, offsets, columnwise=True))
        assert_grouped_nvfp4_equal(nv_rs, ref.quantize_nvfp4_grouped(
            x, offsets, scaling="token", columnwise=True, rht=True, stochastic_rounding=True, **SR_KW))
        want = ref.quantize_mxfp8_grouped(x, offsets)
        assert_same_bytes(mx.scales, want.scales, "mxfp8g.scales")
        assert_same_bytes(mx.data, want.data, "mxfp8g.data")


# ---------------------------------------------------------------------------
# the quantized copies feed scalemm's grouped GEMMs directly
# ---------------------------------------------------------------------------

def _rel_err(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_wgrad_gemm_from_columnwise(scaling):
    G, N, K = 8, 256, 512
    counts = routing_counts(1500, G, seed=41, empty=(3,), ones=(6,))
    T = int(counts.sum())
    offsets = offsets_of(counts)
    dy = torch.randn(T, N, device="cuda").to(torch.bfloat16)
    x = torch.randn(T, K, device="cuda").to(torch.bfloat16)
    dyq = scalemm.quantize_fp8_grouped(dy, offsets, scaling=scaling, rowwise=False, columnwise=True)
    xq = scalemm.quantize_fp8_grouped(x, offsets, scaling=scaling, rowwise=False, columnwise=True)
    dw = scalemm.grouped_gemm_wgrad(dyq.columnwise.data, xq.columnwise.data, offsets,
                                    dyq.columnwise.scale_inv, xq.columnwise.scale_inv)
    dy_t = dyq.columnwise.dequantize()  # [N, T], exact dequant (fp32)
    x_t = xq.columnwise.dequantize()    # [K, T]
    ends = torch.cumsum(counts, 0).tolist()
    for g in range(G):
        s, e = (ends[g - 1] if g else 0), ends[g]
        want = dy_t[:, s:e].double() @ x_t[:, s:e].double().t()
        if e == s:
            assert torch.count_nonzero(dw[g]) == 0
            continue
        err = _rel_err(dw[g], want)
        assert err <= 4e-3, f"group {g} ({e - s} tokens): rel err {err:.2e}"
    # and the quantization itself is close to the bf16 product (sanity of the scales' roles)
    g = int(counts.argmax())
    s, e = (ends[g - 1] if g else 0), ends[g]
    bf = dy[s:e].double().t() @ x[s:e].double()
    assert _rel_err(dw[g], bf) < 0.08


def test_fprop_gemm_from_rowwise():
    G, N, K = 8, 256, 512
    counts = routing_counts(1500, G, seed=43, empty=(2,))
    T = int(counts.sum())
    offsets = offsets_of(counts)
    x = torch.randn(T, K, device="cuda").to(torch.bfloat16)
    w = torch.randn(G, N, K, device="cuda").to(torch.bfloat16)
    xq = scalemm.quantize_fp8_grouped(x, offsets)
    wq = scalemm.quantize_fp8_stacked(w, scaling="token")
    y = scalemm.grouped_gemm(xq.data, wq.data.view(G, N, K), offsets, xq.scale_inv, wq.scale_inv.view(G, N))
    xd = xq.dequantize()
    wd = wq.dequantize().view(G, N, K)
    ends = torch.cumsum(counts, 0).tolist()
    for g in range(G):
        s, e = (ends[g - 1] if g else 0), ends[g]
        if e > s:
            assert _rel_err(y[s:e], xd[s:e].double() @ wd[g].double().t()) <= 4e-3


# ---------------------------------------------------------------------------
# FP8 delayed scaling: a given amax, the tensor's amax out of the same pass
# ---------------------------------------------------------------------------

def _assert_amax(got, want, what):
    """amax outputs: equal, NaN where the reference has NaN (payloads unspecified)."""
    assert torch.equal(torch.isnan(got), torch.isnan(want)), what
    ok = ~torch.isnan(want)
    assert torch.equal(got[ok].cpu(), want[ok].cpu()), (what, got, want)


def _delayed_amaxes(G, seed):
    """Given amaxes per group: below, near and above the data's (saturation both ways), zero (scale 1), inf."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(G, generator=g) * 8
    a[::5] = 0.0
    a[1::7] = float("inf")
    a[2::3] *= 1e-3  # far below: most values saturate to +-448
    return a.cuda()


@pytest.mark.parametrize("G,tokens,K", ROUTINGS)
@pytest.mark.parametrize("rowwise,columnwise", ROW_COL)
def test_fp8_grouped_delayed(monkeypatch, G, tokens, K, rowwise, columnwise):
    """Bit for bit against the reference with the same given amaxes; amax_out = each group's own amax (0 for the
    empty group), from the quantize pass."""
    x, offsets = _case(G, tokens, K, seed=11)
    amax = _delayed_amaxes(G, seed=G)
    want_out = torch.empty(G, device="cuda")
    want = ref.quantize_fp8_grouped(x, offsets, rowwise=rowwise, columnwise=columnwise, amax=amax, amax_out=want_out)
    outs = []

    def run():
        out = torch.full((G,), float("nan"), device="cuda")  # poisoned: the launch zeroes it first
        outs.append(out)
        return scalemm.quantize_fp8_grouped(x, offsets, rowwise=rowwise, columnwise=columnwise, amax=amax,
                                            amax_out=out)
    for got in run_poisoned(monkeypatch, run):
        assert_grouped_fp8_equal(got, want)
    for out in outs:
        _assert_amax(out, want_out, "amax_out")


@pytest.mark.parametrize("sizes", [[1], [0, 1, 0, 15, 16, 17, 0, 129, 1, 1, 255, 0], [0, 0, 0, 300], [7] * 40])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8_grouped_delayed_edges_specials(sizes, dtype):
    """Ragged and empty groups, rows past the last group (offsets[-1] < T), NaN / Inf in x: bytes and amax_out as the
    reference's. With amax=None, amax_out receives the amaxes current scaling used."""
    counts = torch.tensor(sizes)
    T = int(counts.sum()) + 5  # 5 rows in no group: they must not reach any group's amax
    x = make_input(T, 96, dtype, seed=len(sizes), specials=True)
    x[-5:] = 1e4
    offsets = offsets_of(counts)
    G = len(sizes)
    for amax in (_delayed_amaxes(G, seed=3), None):
        want_out, out = torch.empty(G, device="cuda"), torch.empty(G, device="cuda")
        want = ref.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=want_out)
        got = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)
        assert_grouped_fp8_equal(got, want)
        _assert_amax(out, want_out, f"amax_out ({'given' if amax is not None else 'current'})")


@pytest.mark.parametrize("E,N,K", [(1, 16, 64), (8, 208, 512), (3, 48, 80)])
def test_fp8_stacked_delayed(monkeypatch, E, N, K):
    """Stacked weights and the W / W^T pair with given per-expert amaxes: the reference's bytes; amax_out per expert."""
    w = make_input(E * N, K, seed=E + N).view(E, N, K)
    amax = _delayed_amaxes(E, seed=E)
    want_out = torch.empty(E, device="cuda")
    want = ref.quantize_fp8_stacked(w, columnwise=True, amax=amax, amax_out=want_out)
    want_t = ref.quantize_fp8_stacked(w.transpose(1, 2).contiguous(), amax=amax)
    out = torch.empty(E, device="cuda")
    assert_grouped_fp8_equal(scalemm.quantize_fp8_stacked(w, columnwise=True, amax=amax, amax_out=out), want)
    _assert_amax(out, want_out, "stacked amax_out")
    out = torch.empty(E, device="cuda")
    got, got_t = scalemm.quantize_fp8_stacked_pair(w, amax=amax, amax_out=out)
    assert_grouped_fp8_equal(got, ref.quantize_fp8_stacked(w, amax=amax))
    assert_grouped_fp8_equal(got_t, want_t)
    _assert_amax(out, want_out, "pair amax_out")


def test_fp8_grouped_delayed_in_a_graph():
    """Captured with one set of offsets and amaxes, replayed with others written into the same buffers."""
    counts = routing_counts(600, 8, seed=9, empty=(1,))
    T = int(counts.sum())
    x = make_input(T, 128, seed=10)
    offsets = offsets_of(counts)
    amax = _delayed_amaxes(8, seed=1)
    out = torch.empty(8, device="cuda")
    scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)  # warm-up (kernel load)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=out)
    offsets.copy_(offsets_of(routing_counts(600, 8, seed=12, empty=(5,))))
    amax.copy_(_delayed_amaxes(8, seed=2))
    g.replay()
    want_out = torch.empty(8, device="cuda")
    want = ref.quantize_fp8_grouped(x, offsets, columnwise=True, amax=amax, amax_out=want_out)
    assert_grouped_fp8_equal(got, want)
    _assert_amax(out, want_out, "replayed amax_out")
