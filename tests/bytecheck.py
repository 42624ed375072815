"""Byte-exact comparison for kernel-vs-reference tests (NaN floats compare equal to NaN)."""
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
