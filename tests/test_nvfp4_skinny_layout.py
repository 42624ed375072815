"""The skinny NVFP4 kernel's data layout, checked on the CPU by a lane-level model of the kernel.

scalemm/sm90/nvfp4_skinny.cuh decides, for every lane, which bytes of the weight codes and of the
swizzled scales it loads, how it pairs codes into bf16x2 registers (__byte_perm + e2m1x2_tiny),
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


def _byte_perm(x: int, y: int, sel: int) -> int:
    src = x.to_bytes(4, "little") + y.to_bytes(4, "little")
    return _u32(bytes(src[(sel >> (4 * n)) & 7] for n in range(4)))


def _bf16(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


_E4M3 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double().tolist()


def _e2m1x2_tiny(x: int) -> tuple[float, float]:
    """nvfp4_numerics.cuh e2m1x2_tiny<bf16>: (low half, high half) as values."""
    r = (((x & 0x000F000F) * 0x1040) & 0xFFFFFFFF) & 0x81C081C0
    return _bf16(r & 0xFFFF), _bf16(r >> 16)


def _scale_pair(byte: int) -> float:
    """e4m3x4_to_scale_pairs<bf16>: s * 2^(126 - kDecodeShift), as a bf16 value."""
    return _E4M3[byte] * 2.0 ** 118


def _decode_pair(word: int, shifted: int, byte: int, scale: float) -> tuple[float, float]:
    sel = byte | (byte << 4) | ((4 + byte) << 8) | ((4 + byte) << 12)
    lo, hi = _e2m1x2_tiny(_byte_perm(word, shifted, sel))
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


def skinny_model(x, w, token_tiles: int, splits: int) -> torch.Tensor:
    """The kernel's arithmetic, lane by lane: fp64 [M, N] = x @ dequant(w)^T * alpha_a * alpha_b (no
    bias); x bf16 [M, K] (W4A16) or an NVFP4Tensor (W4A4: kX4, decoded by the lanes like the weights)."""
    x4 = not isinstance(x, torch.Tensor)
    M, K = x.shape
    N = w.shape[0]
    assert M <= 8 * token_tiles
    codes = w.qdata.contiguous().view(-1).tolist()
    scales = w.scales.contiguous().view(torch.uint8).view(-1).tolist()
    if x4:
        xcodes = x.qdata.contiguous().view(-1).tolist()
        xscales = x.scales.contiguous().view(torch.uint8).view(-1).tolist()
    else:
        xs = x.double()
    cp = -(-(K // 16) // 4) * 4
    chunks = -(-K // CHUNK_K)
    per_split = -(-chunks // splits)
    splits = -(-chunks // per_split)
    tokens = 8 * token_tiles
    unscale = DECODE_UNSCALE ** (2 if x4 else 1)
    alpha_a = x.alpha.double().reshape(-1) if x4 else torch.ones(1, dtype=torch.float64)
    out = torch.full((M, N), float("nan"), dtype=torch.float64)
    for tile in range(-(-N // TILE_N)):
        n0 = tile * TILE_N
        partial = [torch.zeros(TILE_N, tokens, dtype=torch.float64) for _ in range(splits)]
        for split in range(splits):
            c_begin = min(split * per_split, chunks)
            c_end = min(c_begin + per_split, chunks)
            for warp in range(WARPS):
                acc = [[[0.0] * 4 for _ in range(32)] for _ in range(token_tiles)]
                for c in range(c_begin, c_end):
                    # load_weights, per lane (Lane: rows r0 + g (t = 0) and r0 + g + 8 (t = 1), addresses
                    # of chunk 0 plus c * 64 bytes of codes, c * 1024 bytes of scales)
                    wcodes, wscales = [], []
                    for lane in range(32):
                        g, q = lane // 4, lane % 4
                        chunks_ok = (K - 32 * q - 32) // CHUNK_K + 1 if K >= 32 * q + 32 else 0
                        lc, ls = [], []
                        for t in range(N8_PER_WARP):
                            row = n0 + warp * (8 * N8_PER_WARP) + g + 8 * t
                            if c < chunks_ok and row < N:
                                start = row * (K // 2) + 16 * q + c * (CHUNK_K // 2)
                                lc.append(bytes(codes[start:start + 16]))
                                off = ((row // 128) * 128 * cp + (q // 2) * 512 + (row % 128 % 32) * 16
                                       + (row % 128 // 32) * 4 + 2 * (q & 1)) + c * 1024
                                ls.append((scales[off], scales[off + 1]))
                            else:
                                lc.append(bytes(16))
                                ls.append((0, 0))
                        wcodes.append(lc)
                        wscales.append(ls)
                    # mma_chunk
                    for j in range(4):
                        xb, a = {}, {}
                        for lane in range(32):
                            g, q = lane // 4, lane % 4
                            chunks_ok = (K - 32 * q - 32) // CHUNK_K + 1 if K >= 32 * q + 32 else 0
                            tile_ok = (M - g + 7) // 8 if g < M else 0
                            for m in range(token_tiles):
                                ok = c < chunks_ok and m < tile_ok
                                if x4:  # Lane.xq / Lane.xs: 16 bytes of codes, a scale pair, per token and chunk
                                    start = (8 * m + g) * (K // 2) + 16 * q + c * (CHUNK_K // 2)
                                    off = ((q // 2) * 512 + 2 * (q & 1) + ((8 * m + g) % 32) * 16
                                           + ((8 * m + g) // 32) * 4 + c * 1024)
                                    xword = _u32(bytes(xcodes[start + 4 * j:start + 4 * j + 4])) if ok else 0
                                    xsc = _scale_pair(xscales[off + j // 2] if ok else 0)
                                    pairs = [_decode_pair(xword, xword >> 4, i, xsc) for i in range(4)]
                                    xb[lane, m] = [v for pr in pairs for v in pr]
                                elif ok:  # Lane.x + chunk * 128 + tile * 8 rows, in elements
                                    e0 = (8 * m + g) * K + 32 * q + c * CHUNK_K + 8 * j
                                    xb[lane, m] = xs.reshape(-1)[e0:e0 + 8].tolist()
                                else:
                                    xb[lane, m] = [0.0] * 8
                            for t in range(N8_PER_WARP):
                                word = _u32(wcodes[lane][t][4 * j:4 * j + 4])
                                s = _scale_pair(wscales[lane][t][j // 2])
                                for i in range(4):
                                    a[lane, t, i] = _decode_pair(word, word >> 4, i, s)
                        for m in range(token_tiles):
                            for st in range(2):  # elements 8j + 4st .. 8j + 4st + 3
                                a_regs = [(a[l, 0, 2 * st], a[l, 1, 2 * st], a[l, 0, 2 * st + 1], a[l, 1, 2 * st + 1])
                                          for l in range(32)]
                                b_regs = [(xb[l, m][4 * st:4 * st + 2], xb[l, m][4 * st + 2:4 * st + 4]) for l in range(32)]
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
        # the partials of all CTAs in split order
        ntok = min(M, tokens)
        covered = set()
        for rank in range(splits):
            for tid in range(128):
                for e in range(rank * 128 + tid, ntok * (TILE_N // 2), splits * 128):
                    tok, col = e // (TILE_N // 2), 2 * (e % (TILE_N // 2))
                    assert (tok, col) not in covered
                    covered.add((tok, col))
                    for cc in (col, col + 1):
                        if n0 + cc < N:
                            total = sum(partial[r][cc, tok].item() for r in range(splits))
                            out[tok, n0 + cc] = (total * alpha_a[tok % alpha_a.numel()]
                                                 * w.alpha.double().reshape(-1)[(n0 + cc) % w.alpha.numel()])
        assert len(covered) == ntok * TILE_N // 2
    return out


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
def test_lane_model_reproduces_the_exact_gemm(M, N, K, token_tiles, splits):
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    wf = torch.randn(N, K, generator=g) * torch.rand(N, 1, generator=g).mul(6).sub(3).exp2()
    w = scalemm.quantize_nvfp4(wf.to(torch.bfloat16), scaling="token")
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    got = skinny_model(x, w, token_tiles, splits)
    want = _exact(x, w)
    assert not got.isnan().any(), "outputs the model never wrote"
    assert ((got - want).norm() / want.norm()).item() < 1e-12


@pytest.mark.parametrize("M,N,K,token_tiles,splits,scaling", [
    (3, 72, 288, 1, 2, "token"),   # a partial last chunk, per-token activation alphas
    (17, 64, 160, 4, 1, "tensor"),  # tokens 8..23: scale rows past the first 32-row group of the atom
    (40, 8, 96, 8, 1, "token"),    # tokens 32..39: the second 32-row group of the scale atom
])
def test_lane_model_w4a4_reproduces_the_exact_gemm(M, N, K, token_tiles, splits, scaling):
    """kX4: the tokens' codes and scale pairs read and decoded like the weights'."""
    g = torch.Generator().manual_seed(M + N + K)
    w = scalemm.quantize_nvfp4((torch.randn(N, K, generator=g) * 3).to(torch.bfloat16), scaling="token")
    xf = torch.randn(M, K, generator=g) * torch.rand(M, 1, generator=g).mul(6).sub(3).exp2()
    x = scalemm.quantize_nvfp4(xf.to(torch.bfloat16), scaling=scaling)
    got = skinny_model(x, w, token_tiles, splits)
    want = _exact(x, w)
    assert not got.isnan().any()
    assert ((got - want).norm() / want.norm()).item() < 1e-12


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
