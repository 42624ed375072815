"""Inputs that sit against unmapped memory, so that a kernel reading one byte outside them faults.

torch's caching allocator carves tensors out of large segments, so a read a few bytes past a tensor
usually lands in another tensor and goes unnoticed, by the tests and by compute-sanitizer (which sees
the segments, not the tensors). `guarded(t, side)` copies `t` into its own mapping made with CUDA's
virtual memory API: the copy ends at the mapping's last byte (side="tail") or starts at its first
(side="head"), and the pages on both sides of the mapping are reserved but never mapped. Any read
past the end (or before the start) is then an illegal address (CUDA error 700).

That error poisons the CUDA context, so the checks run in a child process:
`python tests/guarded_reads.py [stepped|lean|wgmma|resident]` (SkinnyConfig.mainloop) runs the skinny kernel on every case
the loop takes (`takes`: "resident" holds one token tile) with all its
inputs guarded, on both sides, and compares each output with the same kernel's output on ordinary
tensors (bit for bit: the kernel is deterministic). It prints one line per case and exits 0 only
if every case ran and matched (the wgmma loop reads W's prepared copy, which scalemm makes itself, and NVFP4
activations through the bf16 decode pass: for it the guards cover W's scales, the tokens and that pass's reads).
tests/test_nvfp4_gemm_gpu.py::test_skinny_reads_stay_inside_inputs
runs it. The mappings are never freed: the process is short-lived.
"""
from __future__ import annotations

import sys

import torch

_MAPPINGS = []  # (reserved address, holder) kept alive until the process exits


def _check(result):
    """A cuda.bindings call's (error, *values) -> its value(s); raises on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return values[0] if len(values) == 1 else values


class _Bytes:
    """`nbytes` device bytes at `ptr`, for torch.as_tensor (__cuda_array_interface__)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def _mapped_at_edge(nbytes: int, side: str, device: int) -> int:
    """The address of `nbytes` bytes that end (tail) or start (head) at the edge of a mapping whose
    neighbouring pages are reserved and unmapped."""
    from cuda.bindings import driver as cu
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    gran = int(_check(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
    size = max(1, -(-nbytes // gran)) * gran
    va = int(_check(cu.cuMemAddressReserve(size + 2 * gran, gran, 0, 0)))
    handle = _check(cu.cuMemCreate(size, prop, 0))
    base = va + gran  # [va, base) and [base + size, base + size + gran) stay unmapped
    _check(cu.cuMemMap(base, size, 0, handle, 0))
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    _check(cu.cuMemSetAccess(base, size, [access], 1))
    _MAPPINGS.append((va, handle))
    # the guard is real: the byte after the mapping and the byte before it belong to no allocation
    for outside in (base - 1, base + size):
        err = cu.cuMemGetAddressRange(outside)[0]
        if int(err) == 0:
            raise RuntimeError(f"address {outside:#x} next to a guarded mapping is mapped")
    return base + size - nbytes if side == "tail" else base


def guarded(t: torch.Tensor, side: str) -> torch.Tensor:
    """A contiguous copy of CUDA tensor `t` against unmapped memory on `side` ("tail" or "head")."""
    t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    ptr = _mapped_at_edge(nbytes, side, t.device.index)
    raw = torch.as_tensor(_Bytes(ptr, nbytes), device=t.device)
    assert raw.data_ptr() == ptr
    raw.copy_(t.view(-1).view(torch.uint8))
    return raw.view(t.dtype).view(t.shape)


def guarded_nvfp4(q, side: str, copy=guarded):
    """An NVFP4Tensor / GroupedNVFP4Tensor whose tensors are all copy(t, side) (guarded copies)."""
    from scalemm.formats import GroupedNVFP4Tensor, NVFP4Tensor
    g = lambda t: None if t is None else copy(t, side)  # noqa: E731
    if isinstance(q, GroupedNVFP4Tensor):
        return GroupedNVFP4Tensor(g(q.qdata), g(q.scales), g(q.sf_offsets), g(q.alpha), g(q.amax), g(q.offsets),
                                  q.shape, q.scaling, q.orig_dtype, q.layout, q.scale_rows, None, q.group_rows)
    assert isinstance(q, NVFP4Tensor)
    return NVFP4Tensor(g(q.qdata), g(q.scales), g(q.alpha), g(q.amax), q.shape, q.scaling, q.orig_dtype)


# (tokens, N, K, splits, W4A4): K a multiple of the 128-element chunk and not; N past the 64-row
# tile; splits that leave each CTA fewer chunks than the register ring holds (3)
DENSE_CASES = [(1, 4096, 4096, 0, False), (1, 1024, 4096, 8, False), (8, 1000, 2080, 0, False),
               (9, 72, 96, 0, False), (16, 128, 1024, 8, False), (5, 64, 256, 2, False),
               (1, 4096, 4096, 0, True), (8, 1000, 2080, 3, True), (16, 128, 1024, 8, True), (3, 72, 96, 0, True)]
# (rows per group, N, K, token tiles, W4A4)
GROUPED_CASES = [((1, 0, 2, 9), 136, 2080, 1, False), ((3, 0, 1), 64, 1024, 1, True), ((17, 0, 5), 72, 256, 2, True)]


def _inputs(M, N, K, x4, seed, device):
    import scalemm
    g = torch.Generator(device=device).manual_seed(seed)
    w = scalemm.quantize_nvfp4(torch.randn(N, K, device=device, generator=g).to(torch.bfloat16), scaling="token")
    x = torch.randn(M, K, device=device, generator=g).to(torch.bfloat16)
    return w, (scalemm.quantize_nvfp4(x, scaling="token") if x4 else x)


def _plain_copy(t: torch.Tensor, side: str) -> torch.Tensor:
    return t.clone()


def takes(loop: str, tiles: int) -> bool:
    """Whether main loop `loop` runs kernels of `tiles` token tiles."""
    from scalemm.cutlass_kernels.configs import SkinnyConfig
    try:
        SkinnyConfig(tiles, mainloop=loop)
    except ValueError:
        return False
    return True


def cases(loop: str) -> int:
    """The cases run(loop) runs (each on both sides)."""
    from scalemm.cutlass_kernels.configs import skinny_config_for_tokens
    return (sum(takes(loop, skinny_config_for_tokens(c[0]).token_tiles) for c in DENSE_CASES)
            + sum(takes(loop, c[3]) for c in GROUPED_CASES))


def run(loop: str, device: str = "cuda") -> int:
    """device="cpu": the same calls on the reference with plain copies (checks this script, not a kernel)."""
    import scalemm
    from scalemm.cutlass_kernels.configs import SkinnyConfig, skinny_config_for_tokens
    copy = guarded if device == "cuda" else _plain_copy
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    failures = 0
    for i, (M, N, K, splits, x4) in enumerate(DENSE_CASES):
        if not takes(loop, skinny_config_for_tokens(M).token_tiles):
            continue
        w, x = _inputs(M, N, K, x4, i, device)
        cfg = SkinnyConfig(skinny_config_for_tokens(M).token_tiles, splits, loop)
        want = scalemm.gemm(x, w, out_dtype=torch.float32, config=cfg)
        for side in ("tail", "head"):
            gx = guarded_nvfp4(x, side, copy) if x4 else copy(x, side)
            got = scalemm.gemm(gx, guarded_nvfp4(w, side, copy), out_dtype=torch.float32, config=cfg)
            sync()  # an illegal address raises here and ends the process
            ok = torch.equal(got, want)
            failures += not ok
            print(f"dense M={M} N={N} K={K} splits={splits} {'W4A4' if x4 else 'W4A16'} {side}: "
                  f"{'ok' if ok else 'MISMATCH'}", flush=True)
    for i, (sizes, N, K, tiles, x4) in enumerate(GROUPED_CASES):
        if not takes(loop, tiles):
            continue
        G, T = len(sizes), sum(sizes)
        offsets = torch.tensor(sizes, device=device, dtype=torch.int32).cumsum(0).to(torch.int32)
        gen = torch.Generator(device=device).manual_seed(100 + i)
        w = scalemm.quantize_nvfp4_stacked(torch.randn(G, N, K, device=device, generator=gen).to(torch.bfloat16),
                                           scaling="token")
        x = torch.randn(T, K, device=device, generator=gen).to(torch.bfloat16)
        if x4:
            x = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
        cfg = SkinnyConfig(tiles, 0, loop)
        # W4A4: the activations' container carries the offsets (pass None)
        want = scalemm.grouped_gemm(x, w, None if x4 else offsets, out_dtype=torch.float32, config=cfg)
        for side in ("tail", "head"):
            gx = guarded_nvfp4(x, side, copy) if x4 else copy(x, side)
            gw = guarded_nvfp4(w, side, copy)
            got = scalemm.grouped_gemm(gx, gw, None if x4 else copy(offsets, side), out_dtype=torch.float32,
                                       config=cfg)
            sync()
            ok = torch.equal(got, want)
            failures += not ok
            print(f"grouped sizes={sizes} N={N} K={K} tiles={tiles} {'W4A4' if x4 else 'W4A16'} {side}: "
                  f"{'ok' if ok else 'MISMATCH'}", flush=True)
    print(f"{failures} mismatches", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    sys.exit(run(sys.argv[1] if len(sys.argv) > 1 else "stepped"))
