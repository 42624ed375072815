"""Shared helpers of the quantization GPU tests: adversarial inputs and byte-exact comparison
(NaN floats compare equal to NaN)."""
import torch


def _bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def assert_same_bytes(got, want, what):
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    got, want = got.to(want.device), want
    if got.dtype == torch.float32:
        same = (got.view(torch.int32) == want.view(torch.int32)) | (torch.isnan(got) & torch.isnan(want))
        bad = (~same).reshape(-1).nonzero().flatten()
        if bad.numel():
            i = bad[:8].tolist()
            raise AssertionError(f"{what}: {bad.numel()} of {same.numel()} floats differ; first at "
                                 f"{i}: got {got.reshape(-1)[i].tolist()} want {want.reshape(-1)[i].tolist()}")
        return
    a, b = _bytes(got), _bytes(want)
    bad = (a != b).nonzero().flatten()
    if bad.numel():
        i = bad[:8].tolist()
        raise AssertionError(f"{what}: {bad.numel()} of {a.numel()} bytes differ; first at {i}: "
                             f"got {[hex(v) for v in a[i].tolist()]} want {[hex(v) for v in b[i].tolist()]}")


def make_input(M, K, dtype=torch.bfloat16, *, seed=0, specials=False, block=16):
    """Wide dynamic range (randn * exp(4 randn)), ~4% zero blocks, ~4% blocks scaled by 1e-4
    (subnormal e4m3 scales), ~2% blocks by 1e-12 (scales underflow to 0); optional +-Inf/NaN."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=g, device="cuda") * torch.exp(
        torch.randn(M, K, generator=g, device="cuda") * 4)
    if dtype == torch.float16:
        x = x.clamp(-60000, 60000) * 1e-3  # keep inside fp16, still ~1e7 range
    xb = x.view(M, K // block, block)
    u = torch.rand(M, K // block, generator=g, device="cuda")
    xb[u < 0.04] = 0
    xb[(u >= 0.04) & (u < 0.08)] *= 1e-4
    xb[(u >= 0.08) & (u < 0.10)] *= 1e-12
    if specials:
        flat = x.view(-1)
        n = flat.numel()
        idx = torch.randint(0, n, (max(3, n // 5000),), generator=g, device="cuda")
        vals = torch.tensor([float("inf"), float("-inf"), float("nan")], device="cuda")
        flat[idx] = vals[torch.arange(idx.numel(), device="cuda") % 3]
    return x.to(dtype)


# ---------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------


def assert_exact_rows(got, offsets=None, what="exact rows"):
    """A CUDA NVFP4 rowwise copy of activations with quantize.EXACT_ROWS_MIN (grouped: EXACT_ROWS_MIN_GROUPED) to
    EXACT_ROWS_MAX rows carries its exact bf16 rows (formats.nvfp4.exact_rows), byte for byte what the W4A4 GEMMs'
    decode pass makes of the same copy; other copies (fewer or more rows, columnwise only, stacked weights) carry
    none. offsets: a grouped copy's."""
    import scalemm.quantize as sq
    from scalemm.formats.nvfp4 import exact_rows
    from scalemm.gemm_nvfp4 import dequantize_rows_bf16
    rows = exact_rows(got)
    want = (got.qdata is not None and sq.exact_rows_wanted(got.shape[0], grouped=offsets is not None)
            and getattr(got, "group_rows", None) is None and getattr(got, "layout", "rows") == "rows")
    assert (rows is not None) == want, f"{what}: present {rows is not None}, expected {want}"
    if rows is not None:
        assert_same_bytes(rows, dequantize_rows_bf16(got, offsets=offsets), what)
