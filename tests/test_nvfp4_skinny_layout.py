"""The skinny NVFP4 kernel's data layout, checked on the CPU by a lane-level model of the kernel.

scalemm/sm90/nvfp4_skinny.cuh decides, for every lane, which bytes of the weight codes and of the
swizzled scales it loads, how it pairs codes into bf16x2 registers (prmt.b32 + e2m1x2_tiny),
which token elements it loads, and where those registers sit in mma.sync m16n8k16's fragments; the
CTAs of a cluster then add their partials in a fixed order. The model below repeats those steps,
line for line, with the fragment layouts of mma.sync m16n8k16 taken from CUTLASS's CuTe traits
(A 16x16, B 16x8, C 16x8), and must reproduce the exact-dequant GEMM. A wrong offset, selector, pairing or fragment
slot gives O(1) errors here. (The GPU tests in test_nvfp4_gemm_gpu.py run the kernel itself.)
"""
import math
import struct

import pytest
import torch

import scalemm
from scalemm import reference as ref

CHUNK_K, WARPS, N8_PER_WARP = 128, 4, 2  # nvfp4_skinny.cuh: kChunkK, kWarps, kN8PerWarp
TILE_N = WARPS * N8_PER_WARP * 8
DECODE_UNSCALE = 256.0                   # 2^kDecodeShift


def _u32(b: bytes) -> int:
    return int.from_bytes(b, "little")


def _prmt(x: int, y: int, sel: int) -> int:
    """PTX prmt.b32, default mode (sm90::prmt, inline asm): result byte n = source byte (selector
    nibble n) & 7 of {x bytes 0-3, y bytes 4-7}, or, when the nibble's bit 3 is set, that byte's bit 7
    replicated. Not CUDA's __byte_perm, which reads only bits 2:0 of each nibble: the kernel's first
    GPU run failed because it called __byte_perm with this model's semantics (perf/NOTES.md)."""
    src = x.to_bytes(4, "little") + y.to_bytes(4, "little")
    out = []
    for n in range(4):
        nib = (sel >> (4 * n)) & 0xF
        b = src[nib & 7]
        out.append((0xFF if b & 0x80 else 0) if nib & 8 else b)
    return _u32(bytes(out))


def _bf16(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


_E4M3 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double().tolist()


def _e2m1x2_tiny_clean(x: int) -> tuple[float, float]:
    """nvfp4_numerics.cuh e2m1x2_tiny_clean<bf16> (x has bits only in [3:0] and [19:16]): (low, high)."""
    assert x & ~0x000F000F == 0
    r = ((x * 0x1040) & 0xFFFFFFFF) & 0x81C081C0
    return _bf16(r & 0xFFFF), _bf16(r >> 16)


def _scale_pair(byte: int) -> float:
    """e4m3x4_to_scale_pairs<bf16>: s * 2^(126 - kDecodeShift), as a bf16 value."""
    return _E4M3[byte] * 2.0 ** 118


def _decode_pair(word: int, byte: int, scale: float) -> tuple[float, float]:
    """decode_pair: CodeWord's even/odd nibble words, one PRMT (zero bytes by sign replication), the
    clean decode, x the scale pair; the values of elements 2 byte, 2 byte + 1 of the word."""
    even, odd = word & 0x0F0F0F0F, (word >> 4) & 0x0F0F0F0F
    sel = byte | ((8 | byte) << 4) | ((4 + byte) << 8) | ((8 | byte) << 12)
    lo, hi = _e2m1x2_tiny_clean(_prmt(even, odd, sel))
    out = (lo * scale, hi * scale)
    for v in out:  # the kernel's bf16 multiply is exact: the product must be a bf16 value
        assert v == 0 or math.isnan(v) or _bf16(struct.unpack("<I", struct.pack("<f", v))[0] >> 16) == v
    return out


def _cute(thread_shape, thread_stride, value_shape, value_stride, t, v):
    """A CuTe (thread, value) -> index layout, evaluated: thread t and value v split colexicographically."""
    idx = 0
    for extent, stride in zip(thread_shape, thread_stride):
        idx, t = idx + (t % extent) * stride, t // extent
    for extent, stride in zip(value_shape, value_stride):
        idx, v = idx + (v % extent) * stride, v // extent
    return idx


# mma.sync m16n8k16 fragments, copied from CUTLASS (cute/atom/mma_traits_sm80.hpp,
# MMA_Traits<SM80_16x8x16_F16F16F16F16_TN>): A (M16 x K16), B (N8 x K16), C (M16 x N8), column-major
def _a_coord(t, v):
    i = _cute((4, 8), (32, 1), (2, 2, 2), (16, 8, 128), t, v)
    return i % 16, i // 16  # (m, k)


def _b_coord(t, v):
    i = _cute((4, 8), (16, 1), (2, 2), (8, 64), t, v)
    return i % 8, i // 8  # (n, k)


def _c_coord(t, v):
    i = _cute((4, 8), (32, 1), (2, 2), (16, 8), t, v)
    return i % 16, i // 16  # (m, n)


def _mma(acc, a_regs, b_regs):
    """mma.sync.m16n8k16 (fp32 += bf16 x bf16) over a warp: a_regs[lane] = 4 registers of 2 values,
    b_regs[lane] = 2 registers of 2 values, acc[lane] = 4 values; register r holds values 2r, 2r + 1."""
    A = torch.zeros(16, 16, dtype=torch.float64)
    B = torch.zeros(16, 8, dtype=torch.float64)
    for lane in range(32):
        for r, pair in enumerate(a_regs[lane]):
            for h in range(2):
                A[_a_coord(lane, 2 * r + h)] = pair[h]
        for r, pair in enumerate(b_regs[lane]):
            for h in range(2):
                n, k = _b_coord(lane, 2 * r + h)
                B[k, n] = pair[h]
    C = A @ B
    for lane in range(32):
        for v in range(4):
            acc[lane][v] += C[_c_coord(lane, v)].item()


def _groups(offsets, T):
    """(group, first, last) as the kernel computes them (a running max of the clamped offsets: the
    library's rule, scalemm.formats.layout.group_bounds); dense: one group of all rows."""
    if offsets is None:
        return [(0, 0, T)]
    out = []
    for g, end in enumerate(offsets.tolist()):
        first = max([0] + [min(max(o, 0), T) for o in offsets.tolist()[:g]])  # the CTA's parallel max
        out.append((g, first, max(first, min(max(end, 0), T))))
    return out


def _stage_tokens(x4, xs, xcodes, xscales, K, cp, block, count, scale_row0, c_begin, c_stop, pitch):
    """stage_tokens (kLoopResident): the CTA's units (one lane quad's 32 elements of one token and chunk, unit u ->
    token u / per_token, chunk c_begin + (u % per_token) / 4, quad u % 4) copied (W4A16) or decoded (W4A4) into the
    staged rows, token t's element e of chunk c_begin + i at t * pitch + i * 128 + e."""
    per_token = 4 * max(c_stop - c_begin, 0)
    staged = [float("nan")] * (count * pitch)
    for u in range(count * per_token):
        t, c, qq = u // per_token, c_begin + (u % per_token) // 4, u % 4
        dst = t * pitch + (c - c_begin) * CHUNK_K + 32 * qq
        if x4:
            start = (block + t) * (K // 2) + (c * CHUNK_K) // 2 + 16 * qq
            r = scale_row0 + t
            off = ((r // 128) * 128 * cp + (qq // 2) * 512 + 2 * (qq & 1) + (r % 128 % 32) * 16
                   + (r % 128 // 32) * 4 + c * 1024)
            for j in range(4):
                pairs = [_decode_pair(_u32(bytes(xcodes[start + 4 * j:start + 4 * j + 4])), i,
                                      _scale_pair(xscales[off + j // 2])) for i in range(4)]
                staged[dst + 8 * j:dst + 8 * j + 8] = [v for pr in pairs for v in pr]
        else:
            e0 = (block + t) * K + c * CHUNK_K + 32 * qq
            staged[dst:dst + 32] = xs[e0:e0 + 32].tolist()
    return staged


def skinny_model(x, w, token_tiles: int, splits: int, offsets=None, lean=False, resident=False) -> torch.Tensor:
    """The kernel's arithmetic, lane by lane: fp64 [T, N] = x @ dequant(w)^T * alpha_a * alpha_b (no
    bias) per group; x bf16 [T, K] (W4A16) or NVFP4 (W4A4: kX4, decoded by the lanes like the weights);
    dense (offsets None: w [N, K], T <= 8 * token_tiles) or grouped (w stacked experts, offsets [G]).
    lean: the kernel's main loops (kLoopStepped and kLoopLean: the same loads, addressed two ways),
    whose chunks wholly inside K load without predicates, rows past N reading row N - 1 and tokens
    past the block its last token; the last, partial chunk through the checked loads. lean=False: every
    load checked (the removed predicated loop; the partial chunk's loads throughout). resident (kLoopResident, with
    lean, one token tile): each CTA first stages its block's tokens over its whole chunks (_stage_tokens), and the
    unpredicated chunks read their B operand from there, row min(g, count - 1)."""
    assert not resident or (lean and token_tiles == 1)
    x4 = not isinstance(x, torch.Tensor)
    T, K = x.shape
    grouped = offsets is not None
    N = w.group_rows if grouped else w.shape[0]
    assert grouped or T <= 8 * token_tiles
    codes = w.qdata.contiguous().view(-1).tolist()
    scales = w.scales.contiguous().view(torch.uint8).view(-1).tolist()
    if x4:
        xcodes = x.qdata.contiguous().view(-1).tolist()
        xscales = x.scales.contiguous().view(torch.uint8).view(-1).tolist()
        sf_off = x.sf_offsets.tolist() if grouped else [0]
    else:
        xs = x.double().reshape(-1)
    cp = -(-(K // 16) // 4) * 4
    scale_group_bytes = -(-N // 128) * 128 * cp
    chunks = -(-K // CHUNK_K)
    per_split = -(-chunks // splits)
    splits = -(-chunks // per_split)
    tokens = 8 * token_tiles
    unscale = DECODE_UNSCALE ** (2 if x4 else 1)
    alpha_a = x.alpha.double().reshape(-1) if x4 else torch.ones(1, dtype=torch.float64)
    alpha_b = w.alpha.double().reshape(-1)
    # the leaf modes _gemm_skinny passes (abi.h GroupedLeafMode): per row / per group / one value
    mode_a = ("row" if x.scaling == "token" else "group" if grouped else "one") if x4 else "one"
    mode_b = "one" if (alpha_b.numel() == 1 and not grouped) else "vec" if w.scaling == "token" else "group"
    out = torch.full((T, N), float("nan"), dtype=torch.float64)
    for grp, first, last in _groups(offsets, T):
        for block in range(first, last, tokens):
            count = min(tokens, last - block)
            scale_row0 = (sf_off[grp] if x4 else 0) + (block - first)
            for tile in range(-(-N // TILE_N)):
                n0 = tile * TILE_N
                partial = [torch.zeros(TILE_N, tokens, dtype=torch.float64) for _ in range(splits)]
                for split in range(splits):
                    c_begin = min(split * per_split, chunks)
                    c_end = min(c_begin + per_split, chunks)
                    pitch = per_split * CHUNK_K + 8  # resident_pitch
                    staged = (_stage_tokens(x4, None if x4 else xs, xcodes if x4 else None, xscales if x4 else None,
                                            K, cp, block, count, scale_row0, c_begin, min(c_end, K // CHUNK_K), pitch)
                              if resident else None)
                    for warp in range(WARPS):
                        acc = [[[0.0] * 4 for _ in range(32)] for _ in range(token_tiles)]
                        for c in range(c_begin, c_end):
                            free = lean and c < K // CHUNK_K  # lean_loop's unpredicated chunks
                            wcodes, wscales = _load_weights(codes, scales, grp, N, K, cp, scale_group_bytes, n0,
                                                            warp, c, clamp=free)
                            for j in range(4):
                                xb, a = {}, {}
                                for lane in range(32):
                                    g, q = lane // 4, lane % 4
                                    chunks_ok = (K - 32 * q - 32) // CHUNK_K + 1 if K >= 32 * q + 32 else 0
                                    tile_ok = (count - g + 7) // 8 if g < count else 0
                                    for m in range(token_tiles):
                                        ok = free or (c < chunks_ok and m < tile_ok)
                                        tok = min(8 * m + g, count - 1) if free else 8 * m + g  # LeanTokens
                                        if resident and free:  # lt.x into the staged rows (load_tokens, kShared)
                                            e0 = tok * pitch + (c - c_begin) * CHUNK_K + 32 * q + 8 * j
                                            xb[lane, m] = staged[e0:e0 + 8]
                                        elif x4:  # Lane.xq / x_scale_offset: codes and a scale pair per token, chunk
                                            start = (block + tok) * (K // 2) + 16 * q + c * (CHUNK_K // 2)
                                            r = scale_row0 + tok
                                            off = ((r // 128) * 128 * cp + (q // 2) * 512 + 2 * (q & 1)
                                                   + (r % 128 % 32) * 16 + (r % 128 // 32) * 4 + c * 1024)
                                            xword = _u32(bytes(xcodes[start + 4 * j:start + 4 * j + 4])) if ok else 0
                                            xsc = _scale_pair(xscales[off + j // 2] if ok else 0)
                                            pairs = [_decode_pair(xword, i, xsc) for i in range(4)]
                                            xb[lane, m] = [v for pr in pairs for v in pr]
                                        elif ok:  # Lane.x + chunk * 128 + tile * 8 rows, in elements
                                            e0 = (block + tok) * K + 32 * q + c * CHUNK_K + 8 * j
                                            xb[lane, m] = xs[e0:e0 + 8].tolist()
                                        else:
                                            xb[lane, m] = [0.0] * 8
                                    for t in range(N8_PER_WARP):
                                        word = _u32(wcodes[lane][t][4 * j:4 * j + 4])
                                        sp = _scale_pair(wscales[lane][t][j // 2])
                                        for i in range(4):
                                            a[lane, t, i] = _decode_pair(word, i, sp)
                                for m in range(-(-count // 8)):  # tiles_live
                                    for st in range(2):  # elements 8j + 4st .. 8j + 4st + 3
                                        a_regs = [(a[l, 0, 2 * st], a[l, 1, 2 * st], a[l, 0, 2 * st + 1],
                                                   a[l, 1, 2 * st + 1]) for l in range(32)]
                                        b_regs = [(xb[l, m][4 * st:4 * st + 2], xb[l, m][4 * st + 2:4 * st + 4])
                                                  for l in range(32)]
                                        _mma(acc[m], a_regs, b_regs)
                        # partials: [weight row of the tile][token]
                        for m in range(token_tiles):
                            for lane in range(32):
                                g, q = lane // 4, lane % 4
                                for h in range(2):
                                    row = warp * (8 * N8_PER_WARP) + 8 * h + g
                                    partial[split][row, 8 * m + 2 * q] = acc[m][lane][2 * h] * unscale
                                    partial[split][row, 8 * m + 2 * q + 1] = acc[m][lane][2 * h + 1] * unscale
                # the cluster's reduction: CTA `rank` takes every splits-th block of 128 output pairs, adding
                # the partials of all CTAs in split order; the epilogue's leaves as _gemm_skinny sets them
                covered = set()
                for rank in range(splits):
                    for tid in range(128):
                        for e in range(rank * 128 + tid, count * (TILE_N // 2), splits * 128):
                            tok, col = e // (TILE_N // 2), 2 * (e % (TILE_N // 2))
                            assert (tok, col) not in covered
                            covered.add((tok, col))
                            row = block + tok
                            sa = alpha_a[{"row": row, "group": grp, "one": 0}[mode_a]]
                            for cc in (col, col + 1):
                                if n0 + cc < N:
                                    total = sum(partial[r][cc, tok].item() for r in range(splits))
                                    sb = alpha_b[{"vec": grp * N + n0 + cc, "group": grp, "one": 0}[mode_b]]
                                    out[row, n0 + cc] = total * sa * sb
                assert len(covered) == count * TILE_N // 2
    return out


def _load_weights(codes, scales, grp, N, K, cp, scale_group_bytes, n0, warp, c, clamp=False):
    """load_weights for every lane of a warp (Lane: rows r0 + g (t = 0) and r0 + g + 8 (t = 1) of
    group grp, addresses of chunk 0 plus c * 64 bytes of codes, c * 1024 bytes of scales). clamp:
    lean_loop's loads (no predicates; rows past N read row N - 1)."""
    wcodes, wscales = [], []
    for lane in range(32):
        g, q = lane // 4, lane % 4
        chunks_ok = (K - 32 * q - 32) // CHUNK_K + 1 if K >= 32 * q + 32 else 0
        lc, ls = [], []
        for t in range(N8_PER_WARP):
            row = n0 + warp * (8 * N8_PER_WARP) + g + 8 * t
            if clamp:
                row = min(row, N - 1)
            if clamp or (c < chunks_ok and row < N):
                start = grp * N * (K // 2) + row * (K // 2) + 16 * q + c * (CHUNK_K // 2)
                lc.append(bytes(codes[start:start + 16]))
                off = (grp * scale_group_bytes + (row // 128) * 128 * cp + (q // 2) * 512 + (row % 128 % 32) * 16
                       + (row % 128 // 32) * 4 + 2 * (q & 1)) + c * 1024
                ls.append((scales[off], scales[off + 1]))
            else:
                lc.append(bytes(16))
                ls.append((0, 0))
        wcodes.append(lc)
        wscales.append(ls)
    return wcodes, wscales


def _exact(x, w):
    wd = ref.dequantize_nvfp4(w, torch.float32, apply_alpha=False).double()
    if not isinstance(x, torch.Tensor):  # NVFP4 activations: their exact values, their alpha per row
        xa = x.alpha.double().reshape(-1, 1)
        x = ref.dequantize_nvfp4(x, torch.float32, apply_alpha=False).double() * xa
    return (x.double() @ wd.T) * w.alpha.double().reshape(1, -1)


@pytest.mark.parametrize("M,N,K,token_tiles,splits", [
    (3, 72, 288, 1, 2),    # a partial last chunk (288 = 2 x 128 + 32), a CTA tile past N
    (16, 64, 256, 2, 1),   # two full token tiles, one CTA
    (17, 8, 416, 4, 3),    # a partial third token tile; 8 rows of N; 4 chunks in 2 CTAs of 2
    (5, 136, 96, 1, 1),    # K shorter than a chunk; rows 128..135 in the second 128-row scale block
])
@pytest.mark.parametrize("lean", [False, True])
def test_lane_model_reproduces_the_exact_gemm(M, N, K, token_tiles, splits, lean):
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    wf = torch.randn(N, K, generator=g) * torch.rand(N, 1, generator=g).mul(6).sub(3).exp2()
    w = scalemm.quantize_nvfp4(wf.to(torch.bfloat16), scaling="token")
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    got = skinny_model(x, w, token_tiles, splits, lean=lean)
    want = _exact(x, w)
    assert not got.isnan().any(), "outputs the model never wrote"
    assert ((got - want).norm() / want.norm()).item() < 1e-12


@pytest.mark.parametrize("M,N,K,splits,x4", [
    (3, 72, 288, 2, False),   # a partial last chunk (read from x, not staged), 2 CTAs of 2 and 1 chunks
    (8, 64, 512, 3, True),    # a full tile of 8 tokens; 4 chunks in CTAs of 2, 2
    (1, 136, 1024, 1, True),  # one token, 8 chunks in one CTA; rows past the first 128-row scale block
    (5, 72, 96, 1, False),    # K shorter than a chunk: nothing staged, the checked path only
])
def test_lane_model_resident_reproduces_the_exact_gemm(M, N, K, splits, x4):
    """kLoopResident: the CTA's tokens staged once (copied, or decoded for W4A4) and read from the staged rows."""
    g = torch.Generator().manual_seed(M * 7 + N + K)
    w = scalemm.quantize_nvfp4((torch.randn(N, K, generator=g) * 3).to(torch.bfloat16), scaling="token")
    xf = torch.randn(M, K, generator=g) * torch.rand(M, 1, generator=g).mul(6).sub(3).exp2()
    x = scalemm.quantize_nvfp4(xf.to(torch.bfloat16), scaling="token") if x4 else xf.to(torch.bfloat16)
    got = skinny_model(x, w, 1, splits, lean=True, resident=True)
    assert not got.isnan().any(), "outputs the model never wrote, or staged elements never written"
    assert torch.equal(got, skinny_model(x, w, 1, splits, lean=True))  # the stepped loop's values, in its order
    want = _exact(x, w)
    assert ((got - want).norm() / want.norm()).item() < 1e-12


@pytest.mark.parametrize("M,N,K,token_tiles,splits,scaling", [
    (3, 72, 288, 1, 2, "token"),   # a partial last chunk, per-token activation alphas
    (17, 64, 160, 4, 1, "tensor"),  # tokens 8..23: scale rows past the first 32-row group of the atom
    (40, 8, 96, 8, 1, "token"),    # tokens 32..39: the second 32-row group of the scale atom
])
@pytest.mark.parametrize("lean", [False, True])
def test_lane_model_w4a4_reproduces_the_exact_gemm(M, N, K, token_tiles, splits, scaling, lean):
    """kX4: the tokens' codes and scale pairs read and decoded like the weights'."""
    g = torch.Generator().manual_seed(M + N + K)
    w = scalemm.quantize_nvfp4((torch.randn(N, K, generator=g) * 3).to(torch.bfloat16), scaling="token")
    xf = torch.randn(M, K, generator=g) * torch.rand(M, 1, generator=g).mul(6).sub(3).exp2()
    x = scalemm.quantize_nvfp4(xf.to(torch.bfloat16), scaling=scaling)
    got = skinny_model(x, w, token_tiles, splits, lean=lean)
    want = _exact(x, w)
    assert not got.isnan().any()
    assert ((got - want).norm() / want.norm()).item() < 1e-12


def _exact_grouped(x, w, offsets):
    """fp64 per group: x_g @ dequant(W_g)^T with both alphas; rows outside every group stay NaN."""
    from scalemm.formats.nvfp4 import dequantize_nvfp4_grouped
    T, K = x.shape
    G, N = offsets.numel(), w.group_rows
    # exact values without the alphas, which are applied here in fp64
    wd = dequantize_nvfp4_grouped(w, torch.float32, apply_alpha=False).double().reshape(G, N, K)
    wa = w.alpha.double().reshape(G, -1)  # [G, N] or [G, 1]
    if isinstance(x, torch.Tensor):
        xd, xa = x.double(), torch.ones(T, 1, dtype=torch.float64)
    else:
        xd = dequantize_nvfp4_grouped(x, torch.float32, apply_alpha=False).double()
        xa = x.alpha.double().reshape(-1, 1)  # [T, 1] or [G, 1]
    out = torch.full((T, N), float("nan"), dtype=torch.float64)
    for g, first, last in _groups(offsets, T):
        rows_a = xa[first:last] if xa.shape[0] == T else xa[g]
        out[first:last] = (xd[first:last] @ wd[g].T) * rows_a * wa[g]
    return out


@pytest.mark.parametrize("sizes,token_tiles,splits,x_nvfp4,scaling", [
    ([3, 0, 20, 1], 1, 2, False, "token"),  # an empty expert; 20 rows in blocks of 8 (weights streamed 3 times)
    ([9, 0, 0, 4], 2, 1, True, "token"),    # W4A4, scale rows at each group's 128-aligned sf_offset
    ([2, 5], 1, 3, True, "tensor"),         # per-expert alphas of both operands
])
@pytest.mark.parametrize("lean", [False, True])
def test_lane_model_grouped_reproduces_the_exact_gemm(sizes, token_tiles, splits, x_nvfp4, scaling, lean):
    """Grouped: expert g's weights at g * N rows and its batched scale block, its rows from the device
    offsets, several token blocks per expert where it has more rows than the kernel's tiles."""
    G, N, K = len(sizes), 72, 160
    gen = torch.Generator().manual_seed(sum(sizes) + G)
    w = scalemm.quantize_nvfp4_stacked((torch.randn(G, N, K, generator=gen) * 2).to(torch.bfloat16), scaling=scaling)
    T = sum(sizes)
    offsets = torch.tensor(sizes).cumsum(0).to(torch.int32)
    xf = (torch.randn(T, K, generator=gen) * torch.rand(T, 1, generator=gen).mul(4).exp2()).to(torch.bfloat16)
    x = scalemm.quantize_nvfp4_grouped(xf, offsets, scaling=scaling) if x_nvfp4 else xf
    got = skinny_model(x, w, token_tiles, splits, offsets, lean=lean)
    want = _exact_grouped(x, w, offsets)
    assert not got.isnan().any()
    assert ((got - want).norm() / want.norm()).item() < 1e-12


def test_lane_model_grouped_clamps_bad_offsets():
    """Offsets past T or decreasing: rows are clamped into [0, T], nothing outside is read or written."""
    G, N, K, T = 3, 16, 64, 10
    gen = torch.Generator().manual_seed(3)
    w = scalemm.quantize_nvfp4_stacked(torch.randn(G, N, K, generator=gen).to(torch.bfloat16), scaling="token")
    x = torch.randn(T, K, generator=gen).to(torch.bfloat16)
    offsets = torch.tensor([6, 6, 50], dtype=torch.int32)  # group 1 empty, group 2 ends past T: rows 6..9
    got = skinny_model(x, w, 1, 1, offsets)
    assert [(f, l) for _, f, l in _groups(offsets, T)] == [(0, 6), (6, 6), (6, 10)]
    want = _exact_grouped(x, w, offsets)
    assert torch.allclose(got, want, rtol=1e-12, atol=0)
    # decreasing offsets: the library's bounds (no overlap, nothing outside [0, T)), as layout.group_bounds
    from scalemm.formats import layout
    bad = torch.tensor([6, 4, -3, 50, 2], dtype=torch.int32)
    starts, ends = layout.group_bounds(bad, T)
    assert [(f, l) for _, f, l in _groups(bad, T)] == list(zip(starts.tolist(), ends.tolist()))
    assert [(f, l) for _, f, l in _groups(bad, T)] == [(0, 6), (6, 6), (6, 6), (6, 10), (10, 10)]


def test_lane_model_catches_a_wrong_pairing(monkeypatch):
    """The model is sensitive: swap the odd/even codes of each pair and it no longer matches."""
    M, N, K = 2, 8, 128
    g = torch.Generator().manual_seed(5)
    w = scalemm.quantize_nvfp4(torch.randn(N, K, generator=g).to(torch.bfloat16), scaling="tensor")
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    right = skinny_model(x, w, 1, 1)
    real = _decode_pair
    monkeypatch.setitem(globals(), "_decode_pair", lambda *a: real(*a)[::-1])
    wrong = skinny_model(x, w, 1, 1)
    assert ((right - _exact(x, w)).norm() / _exact(x, w).norm()).item() < 1e-12
    assert ((wrong - _exact(x, w)).norm() / _exact(x, w).norm()).item() > 1e-3


def test_pair_decode_of_every_byte_at_every_position():
    """decode_pair's PRMT + clean decode, for each of the 256 byte values in each byte of a word whose
    other bytes hold everything (0xFF), gives value(code) * 2^-126 of its two codes, sign included."""
    from scalemm.formats.nvfp4 import e2m1_decode
    values = e2m1_decode(torch.arange(16, dtype=torch.uint8)).double().tolist()
    for byte in range(4):
        for b in range(256):
            word = (0xFFFFFFFF & ~(0xFF << (8 * byte))) | (b << (8 * byte))
            got = _decode_pair(word, byte, 1.0)
            want = (values[b & 0xF] * 2.0 ** -126, values[b >> 4] * 2.0 ** -126)
            assert got == want and [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in want]
