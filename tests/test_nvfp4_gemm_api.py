"""NVFP4-weight GEMMs through scalemm.gemm / scalemm.grouped_gemm on CPU: the reference path and the
input checks (which run before any kernel on either device). No GPU needed."""
from dataclasses import replace

import pytest
import torch

import scalemm
from scalemm import abi
from scalemm import reference as ref
from scalemm.gemm_nvfp4 import _chunk_permutation, prepare_sm90_weight
from scalemm.cutlass_kernels.configs import SKINNY_DEFAULT_MAINLOOP, SKINNY_MAINLOOPS, SkinnyConfig


def _data(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(torch.bfloat16)


def _exact(x, w, alpha_a=None):
    xd = x.double() if isinstance(x, torch.Tensor) else ref.dequantize_nvfp4(x, torch.float32, apply_alpha=False).double()
    wd = ref.dequantize_nvfp4(w, torch.float32, apply_alpha=False).double()
    aa = torch.ones(()) if alpha_a is None else alpha_a
    return (aa.double().reshape(-1, 1) if aa.dim() else aa.double()) * w.alpha.double().reshape(1, -1) * (xd @ wd.T)


@pytest.mark.parametrize("w_scaling", ["tensor", "token"])
def test_w4a16_cpu_is_the_exact_dequant_product(w_scaling):
    w = scalemm.quantize_nvfp4(_data(48, 80, seed=1), scaling=w_scaling)
    x = _data(7, 80, seed=2)
    out = scalemm.gemm(x, w, out_dtype=torch.float32)
    assert out.shape == (7, 48)
    torch.testing.assert_close(out.double(), _exact(x, w), rtol=1e-5, atol=1e-5)


def test_w4a4_cpu_with_bias_and_activation():
    w = scalemm.quantize_nvfp4(_data(32, 64, seed=3), scaling="token")
    a = scalemm.quantize_nvfp4(_data(5, 64, seed=4), scaling="token")
    bias = torch.randn(32)
    out = scalemm.gemm(a, w, bias=bias, epilogue="relu", out_dtype=torch.float32)
    want = torch.relu(_exact(a, w, a.alpha) + bias.double())
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_grouped_cpu_matches_per_group_gemms():
    sizes = [3, 0, 5, 1]
    offsets = torch.tensor(sizes).cumsum(0).to(torch.int32)
    G, N, K, T = 4, 16, 48, 9
    w = scalemm.quantize_nvfp4_stacked(_data(G, N, K, seed=5), scaling="token")
    x = _data(T + 2, K, seed=6)
    out = torch.full((T + 2, N), 7.0)
    scalemm.grouped_gemm(x, w, offsets, out_dtype=torch.float32, out=out)
    dense_w = [scalemm.quantize_nvfp4(_data(G, N, K, seed=5)[g], scaling="token") for g in range(G)]
    s = 0
    for g, m in enumerate(sizes):
        if m:
            torch.testing.assert_close(out[s:s + m].double(), _exact(x[s:s + m], dense_w[g]), rtol=1e-5, atol=1e-5)
        s += m
    assert (out[T:] == 7).all(), "rows past the last group must not be written"
    a = scalemm.quantize_nvfp4_grouped(x[:T], offsets, scaling="tensor")
    out4 = scalemm.grouped_gemm(a, w, None, out_dtype=torch.float32)
    s = 0
    for g, m in enumerate(sizes):
        if m:
            rows = scalemm.quantize_nvfp4(x[s:s + m].float(), scaling="tensor", amax=a.amax[g])
            torch.testing.assert_close(out4[s:s + m].double(), _exact(rows, dense_w[g], a.alpha[g]), rtol=1e-5, atol=1e-5)
        s += m


@pytest.mark.parametrize("shape", [(3, 40), (2, 5, 64), (1, 8)])  # K = 80, 128, 16: padded to multiples of 64
def test_prepared_layout_is_a_permutation_of_each_64_chunk(shape):
    perm = torch.tensor(_chunk_permutation())
    assert sorted(perm.tolist()) == list(range(64))
    q = torch.randint(0, 256, shape, dtype=torch.uint8)
    *lead, half = shape
    k, k_pad = 2 * half, -(-2 * half // 64) * 64
    p = prepare_sm90_weight(q)
    assert p.shape == (*lead, k_pad // 2) and p.is_contiguous()
    codes = torch.nn.functional.pad(torch.stack((q & 15, q >> 4), -1).reshape(*lead, k), (0, k_pad - k))
    pc = torch.stack((p & 15, p >> 4), -1).reshape(*lead, k_pad)
    for c in range(k_pad // 64):
        assert torch.equal(pc[..., 64 * c:64 * (c + 1)], codes[..., 64 * c:64 * (c + 1)][..., perm])


@pytest.mark.parametrize("kw,exc,match", [
    (dict(scale_a=torch.ones(4)), ValueError, "scale_a=None"),
    (dict(epilogue_inputs={"x": torch.ones(4)}), ValueError, "epilogue_inputs"),
    (dict(epilogue="tanh"), ValueError, "activation"),
    (dict(epilogue=3), TypeError, "epilogue"),
    (dict(out_dtype=torch.int8), TypeError, "out_dtype"),
    (dict(bias=torch.ones(3)), ValueError, "bias"),
    (dict(out=torch.empty(4, 3)), ValueError, "out must be"),
    (dict(fast_accum="yes"), TypeError, "fast_accum"),
])
def test_bad_input_raises_clear_errors(kw, exc, match):
    w = scalemm.quantize_nvfp4(_data(16, 32))
    with pytest.raises(exc, match=match):
        scalemm.gemm(_data(4, 32), w, **kw)


def test_bad_activations_raise_clear_errors():
    w = scalemm.quantize_nvfp4(_data(16, 32))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        scalemm.gemm(torch.zeros(4, 32), w)
    with pytest.raises(ValueError, match="K = 48"):
        scalemm.gemm(_data(4, 48), w)
    with pytest.raises(ValueError, match="contiguous"):
        scalemm.gemm(_data(32, 4).T, w)
    wt = scalemm.quantize_nvfp4(_data(16, 32), rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match="rowwise"):
        scalemm.gemm(_data(4, 32), wt)


def test_layout_rules_hold_on_cpu_too():
    """N aligned to 16 output bytes, 16-byte aligned activations and K >= 16: the CUDA kernels' rules,
    checked on CPU tensors too (one validation path for both devices)."""
    w12 = scalemm.quantize_nvfp4(_data(12, 32))
    with pytest.raises(ValueError, match=r"N = 12 must be a multiple of 8 for torch.bfloat16 output"):
        scalemm.gemm(_data(4, 32), w12)
    assert scalemm.gemm(_data(4, 32), w12, out_dtype=torch.float32).shape == (4, 12)  # 12 % 4 == 0
    w = scalemm.quantize_nvfp4(_data(16, 32))
    raw = _data(4 * 32 + 1)
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        scalemm.gemm(raw[1:].view(4, 32), w)
    empty_k = scalemm.NVFP4Tensor(torch.zeros(16, 0, dtype=torch.uint8), torch.zeros(0, dtype=torch.float8_e4m3fn),
                                  torch.ones(()), torch.zeros(()), (16, 0), "tensor", torch.bfloat16)
    with pytest.raises(ValueError, match=r"K = 0: NVFP4 GEMMs need K >= 16"):
        scalemm.gemm(_data(4, 0), empty_k)
    ws = scalemm.quantize_nvfp4_stacked(_data(2, 12, 32))
    offs = torch.tensor([2, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"N = 12 must be a multiple of 8 for torch.bfloat16 output"):
        scalemm.grouped_gemm(_data(5, 32), ws, offs)
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        scalemm.grouped_gemm(_data(5 * 32 + 1)[1:].view(5, 32), ws, offs, out_dtype=torch.float32)


def test_operands_on_two_devices_are_refused():
    """An activation on another device than the weights: refused before any dispatch, dense and grouped (a meta
    tensor stands in for a second device on a CPU-only machine)."""
    on_meta = torch.empty(5, 32, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="a is on meta, b on cpu"):
        scalemm.gemm(on_meta, scalemm.quantize_nvfp4(_data(16, 32)))
    with pytest.raises(ValueError, match="a is on meta, b on cpu"):
        scalemm.grouped_gemm(on_meta, scalemm.quantize_nvfp4_stacked(_data(2, 16, 32)),
                             torch.tensor([2, 5], dtype=torch.int32))


def test_grouped_bad_offsets_and_weights():
    w = scalemm.quantize_nvfp4_stacked(_data(2, 16, 32))
    x = _data(5, 32)
    with pytest.raises(ValueError, match="offsets"):
        scalemm.grouped_gemm(x, w, torch.tensor([2, 5, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match="offsets"):
        scalemm.grouped_gemm(x, w, torch.tensor([2, 5]))
    dense = scalemm.quantize_nvfp4_grouped(_data(5, 32), torch.tensor([2, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match="quantize_nvfp4_stacked"):
        scalemm.grouped_gemm(x, dense, torch.tensor([2, 5], dtype=torch.int32))


def test_skinny_config_and_heuristic():
    from scalemm.cutlass_kernels.configs import SkinnyConfig, default_nvfp4_skinny_config, skinny_config_for_tokens
    picks = {M: skinny_config_for_tokens(M) for M in (1, 8, 9, 16, 17, 32, 33, 64, 65, 4096)}
    assert picks == {1: SkinnyConfig(1), 8: SkinnyConfig(1), 9: SkinnyConfig(2), 16: SkinnyConfig(2),
                     17: SkinnyConfig(4), 32: SkinnyConfig(4), 33: SkinnyConfig(8), 64: SkinnyConfig(8), 65: None,
                     4096: None}
    # the default (where it beat the CUTLASS kernel on an H100): the skinny kernel up to 8 tokens (stepped
    # loop); its wgmma loop at 9-16 tokens on any shape, at 17-32 where N * K <= 2^26 and at 33-64 where
    # N * K <= 2^25; the CUTLASS kernel elsewhere; NVFP4 activations alike (the wgmma loop takes them through
    # the bf16 decode pass)
    # NVFP4 activations up to 8 tokens: the resident loop (decoded once per CTA; the caller keeps it where the
    # launcher's split leaves a CTA enough chunks, tests/test_nvfp4_gemm_gpu.py)
    Ms = (0, 1, 8, 9, 16, 17, 64, 65)
    t1, t2, r1 = SkinnyConfig(1), SkinnyConfig(2), SkinnyConfig(1, mainloop="resident")
    w2, w4, w8 = (SkinnyConfig(t, mainloop="wgmma") for t in (2, 4, 8))
    for x4 in (False, True):
        t = r1 if x4 else t1
        assert [default_nvfp4_skinny_config(M, 4096, 4096, x4) for M in Ms] == [t, t, t, w2, w2, w4, w8, w4]
        assert [default_nvfp4_skinny_config(M, 1024, 2048, x4) for M in (24, 32, 33, 65)] == [w4, w4, w8, w4]
        assert [default_nvfp4_skinny_config(M, 6144, 4096, x4) for M in Ms] == [t, t, t, w2, w2, w4, w8, None]
        for N, K in ((8192, 8192), (14336, 4096), (8200, 4096), (4096, 8224)):  # N * K in (2^25, 2^26]: to 32,
            assert [default_nvfp4_skinny_config(M, N, K, x4) for M in (9, 16, 17, 32, 33, 64)] == [  # and K <= 12288,
                w2, w2, w4, w4, w8, w8]                                                             # N <= 24576: to 64
        assert [default_nvfp4_skinny_config(M, 8200, 8192, x4) for M in Ms] == [t, t, t, w2, w2, None, w8, None]
        for N, K in ((28672, 8192), (4096, 16400), (24640, 4096), (8192, 12320)):  # larger: 9-16 only
            assert [default_nvfp4_skinny_config(M, N, K, x4) for M in Ms] == [t, t, t, w2, w2, None, None, None]
    # NVFP4 activations at 9-16 tokens where N * K <= 12 x 2^20: the stepped loop (decoded in registers, no pass)
    for N, K, small in ((2048, 4096, True), (3072, 4096, True), (576, 7168, True), (3072, 4128, False),
                        (4096, 4096, False)):
        for M in (9, 16):
            assert default_nvfp4_skinny_config(M, N, K, True) == (t2 if small else w2), (M, N, K)
            assert default_nvfp4_skinny_config(M, N, K, False) == w2
        assert default_nvfp4_skinny_config(17, N, K, True) == w4 and default_nvfp4_skinny_config(8, N, K, True) == r1
    # above 64 tokens: blocks of 32 tokens up to 96, of 64 above, where ceil(N / 64) x blocks <= 1.5 x the SMs and
    # blocks x N x K <= 60 x 2^20
    kv_a = [default_nvfp4_skinny_config(M, 576, 7168) for M in (65, 96, 97, 128, 960, 961)]
    assert kv_a == [w4, w4, w8, w8, w8, None]  # 16 blocks of 576 x 7168 stream more than 60 x 2^20 weights
    assert default_nvfp4_skinny_config(65, 6144, 4096) is None  # 96 x 3 CTAs: more than 1.5 waves of 132 SMs
    assert default_nvfp4_skinny_config(65, 4096, 4096, num_sms=100) is None  # 64 x 3: more than 1.5 waves of 100
    assert default_nvfp4_skinny_config(256, 4096, 4096) is None and default_nvfp4_skinny_config(192, 4096, 4096) == w8
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_sms"):
            default_nvfp4_skinny_config(1, 4096, 4096, num_sms=bad)
    from scalemm.cutlass_kernels.configs.sm90 import SKINNY_RESIDENT_MIN_CHUNKS as C, resident_pays
    assert [resident_pays(M, C + M) for M in (1, 8)] == [True, True]
    assert [resident_pays(M, C + M - 1) for M in (1, 8)] == [False, False] and not resident_pays(1, 0)
    # grouped: the skinny kernel up to 4 rows per expert on average (token tiles for 4x the mean), CUTLASS above;
    # the wgmma loop from 24 rows where an expert has >= 2^23 weights or the experts hold 2 rows on average
    from scalemm.cutlass_kernels.configs import default_nvfp4_grouped_skinny_config as grouped
    w1 = SkinnyConfig(1, mainloop="wgmma")
    Ts = (0, 1, 8, 16, 23, 24, 128, 255, 256, 512, 513, 4096)
    assert [grouped(T, 128, 4096, 7168) for T in Ts] == [t1, t1, t1, t1, t1, w1, w1, w1, w1, w2, None, None]
    assert [grouped(T, 128, 1536, 2048) for T in Ts] == [t1, t1, t1, t1, t1, t1, t1, t1, w1, w2, None, None]
    assert grouped(2000, 2048, 4096, 2048) == w1  # 2^23 weights per expert: large
    assert grouped(2000, 2048, 4096, 2016) == t1 and grouped(4096, 2048, 4096, 2016) == w1  # below: from 2 rows each
    assert grouped(64, 16, 16384, 5120) == w2 and grouped(65, 16, 16384, 5120) is None
    assert grouped(3, 1, 64, 64) == t2 and grouped(24, 8, 512, 1024) == w2 and grouped(23, 8, 512, 1024) == t2
    assert SkinnyConfig(2, 5).compiled() == SkinnyConfig(2) and SkinnyConfig(2, 5).label() == "skinny_t2_s5"
    for bad in (dict(token_tiles=3), dict(token_tiles=16), dict(splits=9), dict(splits=-1), dict(splits=True),
                dict(splits=2.0)):
        with pytest.raises(ValueError):
            SkinnyConfig(**bad)
    for bad in ("fast", "staged", "registers", 1, True, ["lean"]):  # the main loop: one of the compiled kinds, named
        with pytest.raises(ValueError, match="mainloop"):
            SkinnyConfig(mainloop=bad)
    assert SkinnyConfig().mainloop == "stepped"  # the default main loop's kernels carry no suffix
    assert SkinnyConfig(1, 3, "resident").label() == "skinny_t1_resident_s3"
    for tiles in (2, 4, 8):  # the resident tokens: one tile of 8
        with pytest.raises(ValueError, match="one token tile"):
            SkinnyConfig(tiles, mainloop="resident")
    assert [SkinnyConfig(2, 4, m).label() for m in ("stepped", "lean")] == ["skinny_t2_s4", "skinny_t2_lean_s4"]


def test_skinny_problem_says_why():
    from scalemm.cutlass_kernels.configs import SkinnyConfig
    from scalemm.gemm_nvfp4 import skinny_problem
    x = _data(4, 64)
    assert skinny_problem(4, 16, 64, SkinnyConfig(1), [(x, "a")]) is None
    assert skinny_problem(9, 16, 64, SkinnyConfig(1), [(x, "a")]) is None  # dense: blocks of 8 tokens side by side
    assert skinny_problem(65535 * 64, 16, 64, SkinnyConfig(8), [(x, "a")]) is None
    assert "65535 blocks" in skinny_problem(65535 * 64 + 1, 16, 64, SkinnyConfig(8), [(x, "a")])
    assert "multiple of 32" in skinny_problem(4, 16, 48, SkinnyConfig(1), [(x, "a")])
    assert "tiles" in skinny_problem(4, 65536 * 64, 64, SkinnyConfig(1), [(x, "a")])
    assert "16-byte" in skinny_problem(4, 16, 32, SkinnyConfig(1), [(_data(4 * 64 + 1)[1:], "a")])
    assert skinny_problem(900, 16, 64, SkinnyConfig(1), [(x, "a")], groups=8) is None  # grouped: any rows
    assert "groups" in skinny_problem(9, 16, 64, SkinnyConfig(1), [(x, "a")], groups=70000)
    assert "contiguous" in skinny_problem(4, 16, 32, SkinnyConfig(1), [(_data(4, 64)[:, :32], "a")])
    # the resident loop: a split's token rows of (its 128-chunks x 128 + 8) bf16 elements (+ 16) in 48 KB
    res = SkinnyConfig(1, mainloop="resident")
    assert abi.kSkinnyResidentTokenBytes == 48 * 1024
    assert skinny_problem(8, 16, 8 * 2944, res, [(x, "a")]) is None  # 8 splits of 23 chunks: 8 x 2952 x 2 + 16
    why = skinny_problem(8, 16, 8 * 2944 + 32, res, [(x, "a")])  # one more chunk in the first split
    assert "shared memory" in why and "49152" in why
    assert skinny_problem(3, 16, 8 * 2944 + 32, res, [(x, "a")]) is None  # fewer tokens fit
    assert skinny_problem(1, 16, 14336, replace(res, splits=1), [(x, "a")]) is None
    assert "shared memory" in skinny_problem(8, 16, 4096, replace(res, splits=1), [(x, "a")])
    assert skinny_problem(8, 16, 4096, replace(res, splits=2), [(x, "a")]) is None
    assert "shared memory" in skinny_problem(2, 16, 8 * 2944 + 32, res, [(x, "a")], groups=4)  # grouped: 8 rows


def test_skinny_config_dense_and_grouped():
    from scalemm.cutlass_kernels.configs import SkinnyConfig, skinny_config_for_groups
    w = scalemm.quantize_nvfp4(_data(16, 64))
    x = _data(3, 64)
    assert torch.equal(scalemm.gemm(x, w, config=SkinnyConfig(1)), scalemm.gemm(x, w))  # CPU: the reference
    ws = scalemm.quantize_nvfp4_stacked(_data(2, 16, 64))
    offs = torch.tensor([1, 3], dtype=torch.int32)
    assert torch.equal(scalemm.grouped_gemm(x, ws, offs, config=SkinnyConfig(2)), scalemm.grouped_gemm(x, ws, offs))
    with pytest.raises(TypeError, match="SkinnyConfig"):
        scalemm.grouped_gemm(x, ws, offs, config="skinny")
    from scalemm.cutlass_kernels import GemmConfig
    with pytest.raises(ValueError, match="stream-K"):  # refused before any kernel or allocation, on any device
        scalemm.grouped_gemm(x, ws, offs, config=GemmConfig(128, 64, 64, 1, 1, swap_ab=True, stream_k=True))
    # grouped decode: 4x the mean rows per expert (skewed routing), none above 16 on average
    picks = {T: skinny_config_for_groups(T, 128) for T in (1, 128, 256, 1024, 2048, 2049)}
    assert picks == {1: SkinnyConfig(1), 128: SkinnyConfig(1), 256: SkinnyConfig(1), 1024: SkinnyConfig(4),
                     2048: SkinnyConfig(8), 2049: None}


def test_skinny_env_switch(monkeypatch):
    from scalemm.gemm_nvfp4 import SKINNY_ENV, skinny_by_default
    monkeypatch.delenv(SKINNY_ENV, raising=False)
    assert skinny_by_default()
    monkeypatch.setenv(SKINNY_ENV, "0")
    assert not skinny_by_default()
    monkeypatch.setenv(SKINNY_ENV, "yes")
    with pytest.raises(ValueError, match=SKINNY_ENV):
        skinny_by_default()


def test_decode_kernel_set():
    """`python -m scalemm build --set decode`: the skinny kernels of the tests set (both main loops), the
    CUTLASS kernel's decode picks and the quantizers, no duplicates."""
    from scalemm.__main__ import kernel_set
    names = [s.name for s in kernel_set("decode")]
    assert len(names) == len(set(names))
    skinny = {n for n in names if "skinny" in n}
    others = [loop for loop in SKINNY_MAINLOOPS if loop != SKINNY_DEFAULT_MAINLOOP]
    for loop in others:  # every main loop's kernels, the default's without a suffix
        assert any(f"_{loop}_" in n for n in skinny)
    assert any(all(f"_{loop}_" not in n for loop in others) for n in skinny)
    assert any(n.startswith("nvfp4_gemm_") for n in names)
    assert skinny == {s.name for s in kernel_set("tests") if "skinny" in s.name}
    # --set skinny: the same skinny kernels, the bf16 quantizers and the nvfp4_dequant library (the wgmma loop's
    # prepared weights) only, all of them in --set decode
    small = [s.name for s in kernel_set("skinny")]
    assert {n for n in small if "skinny" in n} == skinny and set(small) <= set(names)
    others = sorted(n for n in small if "skinny" not in n)
    assert others == ["nvfp4_dequant", "quant_bfloat16", "quant_grouped_bfloat16"]


def test_guarded_reads_script_on_cpu(capsys, guarded_reads):
    """tests/guarded_reads.py (run on the GPU by test_skinny_reads_stay_inside_inputs) with plain copies on
    the reference: its cases are valid calls and its container copies keep every field."""
    module = guarded_reads
    assert module.cases("stepped") == len(module.DENSE_CASES) + len(module.GROUPED_CASES)
    assert 0 < module.cases("resident") < module.cases("stepped")  # one token tile: not the 9-16 token cases
    for loop in ("stepped", "resident"):
        assert module.run(loop, device="cpu") == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[-1] == "0 mismatches"
        assert sum(line.endswith(": ok") for line in lines) == 2 * module.cases(loop)


def test_skinny_splits_refuses_before_any_kernel():
    """scalemm.gemm_nvfp4.skinny_splits (the launcher's split choice, for perf studies) names what is wrong."""
    from scalemm.cutlass_kernels.configs import SkinnyConfig
    from scalemm.gemm_nvfp4 import skinny_splits
    w = scalemm.quantize_nvfp4(_data(64, 128), scaling="token")
    x = _data(1, 128)
    with pytest.raises(ValueError, match="CUDA"):
        skinny_splits(x, w, SkinnyConfig(1))
    with pytest.raises(TypeError, match="SkinnyConfig"):
        skinny_splits(x, w, None)
    with pytest.raises(TypeError, match="out_dtype"):  # the GEMM's own option checks, before the device check
        skinny_splits(x, w, SkinnyConfig(1), out_dtype=torch.int8)
    with pytest.raises(ValueError, match="epilogue activation"):
        skinny_splits(x, w, SkinnyConfig(1), epilogue="tanh")


def test_w4a4_mainloop_decode_configs():
    """W4A4 decoded in the CUTLASS mainloop: cooperative kernels with token tiles of whole 128-row scale atoms;
    others are refused by name before anything is built (gemm_nvfp4 runs them after the bf16 decode pass)."""
    from dataclasses import replace
    from scalemm import epilogues as epi
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.cutlass_kernels.configs import nvfp4_decodes_activations
    from scalemm.gemm_nvfp4 import nvfp4_gemm_kernel_spec, nvfp4_grouped_kernel_spec
    ok = GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True)
    tree = epi.scaled(torch.bfloat16)
    for cfg in (ok, replace(ok, tile_n=128), replace(ok, stream_k=True), replace(ok, tile_n=128, cluster_m=2)):
        assert nvfp4_decodes_activations(cfg)
        spec, _ = nvfp4_gemm_kernel_spec(cfg, act_dtype="nvfp4", out_dtype=torch.bfloat16, epilogue=tree)
        assert dict(spec.params)["ELEMENT_B"] == "scalemm::sm90::Nvfp4Activations" and "_nvfp4_bf16_" in spec.name
    for bad in (replace(ok, tile_n=64), replace(ok, tile_n=128, schedule="pingpong")):
        assert not nvfp4_decodes_activations(bad)
        with pytest.raises(ValueError, match="cooperative kernels with tile_n a multiple of 128"):
            nvfp4_gemm_kernel_spec(bad, act_dtype="nvfp4", out_dtype=torch.bfloat16, epilogue=tree)
        with pytest.raises(ValueError, match="cooperative kernels with tile_n a multiple of 128"):
            nvfp4_grouped_kernel_spec(bad, act_dtype="nvfp4", out_dtype=torch.bfloat16, epilogue=tree)
    w16, _ = nvfp4_gemm_kernel_spec(ok, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)
    assert dict(w16.params)["ELEMENT_B"] == "cutlass::bfloat16_t" and w16.name != spec.name
    for bad in (replace(ok, tile_n=40), replace(ok, tile_n=72), replace(ok, tile_m=64, schedule="pingpong")):
        with pytest.raises(ValueError, match="NVFP4 kernels use 128 x tile_n x 64 tiles"):
            nvfp4_gemm_kernel_spec(bad, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)


def test_tokens_on_a_configs():
    """swap_ab=False NVFP4 configs: the tokens on A (dense W4A4, B the weights' bf16 decode), a kernel of its own;
    refused grouped, with NVFP4 or fp16 B; the default's rule and tile (default_nvfp4_config's with the roles
    exchanged)."""
    from scalemm import epilogues as epi
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.cutlass_kernels.configs import (default_nvfp4_config, default_nvfp4_tokens_on_a_config,
                                                 nvfp4_tokens_on_a, sm90)
    from scalemm.gemm_nvfp4 import nvfp4_gemm_kernel_spec, nvfp4_grouped_kernel_spec
    tree = epi.scaled(torch.bfloat16)
    swapped = GemmConfig(128, 192, 64, 1, 1, "cooperative", swap_ab=True)
    on_a = replace(swapped, swap_ab=False)
    spec, emitted = nvfp4_gemm_kernel_spec(on_a, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)
    w16, emitted16 = nvfp4_gemm_kernel_spec(swapped, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)
    assert dict(spec.params)["TOKENS_ON_A"] == "true" and dict(w16.params)["TOKENS_ON_A"] == "false"
    assert spec.name != w16.name and emitted.evt_type != emitted16.evt_type  # the alphas' broadcasts exchange roles
    for act in ("nvfp4", torch.float16):
        with pytest.raises(ValueError, match="tokens on A"):
            nvfp4_gemm_kernel_spec(on_a, act_dtype=act, out_dtype=torch.bfloat16, epilogue=tree)
    with pytest.raises(ValueError, match="tokens on A"):
        nvfp4_grouped_kernel_spec(on_a, act_dtype=torch.bfloat16, out_dtype=torch.bfloat16, epilogue=tree)
    lo, r = sm90.NVFP4_TOKENS_ON_A_MIN_TOKENS, sm90.NVFP4_TOKENS_ON_A_RATIO
    assert nvfp4_tokens_on_a(max(lo, 576 * r), 576, 7168) and not nvfp4_tokens_on_a(lo - 1, 16, 7168)
    assert not nvfp4_tokens_on_a(4096, 4096 // r + 16, 4096)
    got = default_nvfp4_tokens_on_a_config(16384, 576, 7168)
    assert got == replace(default_nvfp4_config(576, 16384, 7168), swap_ab=False) and not got.swap_ab
    # stream-K's last-wave bound from the real token count: 8192 tokens of kv_a are 64 x 3 = 192 tiles of 128x192,
    # 1.45 waves of 132 SMs (last wave 0.45: above the bound for fewer than 1024 tokens, within the prefill one)
    sk = default_nvfp4_tokens_on_a_config(8192, 576, 7168)
    assert (sk.tile_n, sk.stream_k) == (192, True) and not sk.swap_ab
    assert not default_nvfp4_config(576, 8192, 7168).stream_k  # what reading N as the tokens gave
    assert not default_nvfp4_tokens_on_a_config(16384, 576, 7168).stream_k  # 2.91 waves: the last one 0.91 full
    assert default_nvfp4_tokens_on_a_config(12000, 512, 3584).stream_k  # 94 x 2 = 188 tiles: 1.42 waves
    k_min = sm90.NVFP4_TOKENS_ON_A_STREAM_K_MIN_K  # shorter K: no stream-K (its fix-up costs more than the wave)
    assert not default_nvfp4_tokens_on_a_config(8192, 576, k_min - 512).stream_k
    assert default_nvfp4_tokens_on_a_config(8192, 576, k_min).stream_k
    # fewer than NVFP4_TOKENS_ON_A_MIN_WIDTH weight rows: the pass by default; "registers" on a 64-wide tile
    w = sm90.NVFP4_TOKENS_ON_A_MIN_WIDTH
    assert nvfp4_tokens_on_a(4096, w, 4096) and not nvfp4_tokens_on_a(4096, w - 16, 4096)
    for n in (8, 16, 32, 48):
        small = default_nvfp4_tokens_on_a_config(4096, n, 4096)
        assert small.tile_n == w and small.stream_k == default_nvfp4_config(n, 4096, 4096).stream_k
    # the weight tile narrowed to NVFP4_TOKENS_ON_A_WIDTHS with as many tiles: kv_a at 4096 tokens 4 x 144 (not 4 x
    # 160), MiniCPM3's kv_a (288 rows) 3 x 96 (not 3 x 128), gpt-oss o (2880) 12 x 240 (not 12 x 256)
    for (M, N, K), width in {(4096, 576, 7168): 144, (4096, 288, 2560): 96, (8192, 2880, 4096): 240,
                             (3000, 1024, 4096): 208, (8192, 1024, 4096): 256}.items():
        cfg = default_nvfp4_tokens_on_a_config(M, N, K)
        assert cfg.tile_n == width and cfg.tile_n in sm90.NVFP4_TOKENS_ON_A_WIDTHS, (M, N, K, cfg)
    for N in range(64, 4096, 16):  # never more weight tiles than the unfitted width, never wider than it
        for M in (2 * N, 4 * N):
            cfg = default_nvfp4_tokens_on_a_config(max(M, 1024), N, 4096)
            base = replace(default_nvfp4_config(N, max(M, 1024), 4096), swap_ab=False)
            if N > 128:
                assert -(-N // cfg.tile_n) == -(-N // base.tile_n) and cfg.tile_n <= base.tile_n, (N, cfg, base)
            assert cfg.tile_n in sm90.NVFP4_TOKENS_ON_A_WIDTHS


def test_tokens_on_a_by_default_dispatch():
    """gemm_nvfp4's choice without a config (_tokens_on_a_by_default; CPU containers, the sm90 rules): W4A4 by
    nvfp4_tokens_on_a under "auto" or always under "registers", never with exact rows or K % 32 != 0 under "auto";
    W4A16 by nvfp4_w4a16_on_a, bf16 activations and "auto" only."""
    from scalemm.cutlass_kernels.configs import sm90
    from scalemm.formats.nvfp4 import attach_exact_rows
    from scalemm.gemm_nvfp4 import _tokens_on_a_by_default as on_a
    x = torch.zeros(1024, 64, dtype=torch.bfloat16)
    q = scalemm.quantize_nvfp4(x)
    for M, N, K in [(4096, 576, 7168), (8192, 576, 7168), (4096, 4096, 4096), (2048, 1024, 4096), (1024, 16, 1024)]:
        assert on_a(q, M, N, K, "auto", sm90, 132) == sm90.nvfp4_tokens_on_a(M, N, K), (M, N, K)
        assert on_a(q, M, N, K, "registers", sm90, 132) and not on_a(q, M, N, K, "pass", sm90, 132)
        assert not on_a(q, M, N, K, "mainloop", sm90, 132)
        assert on_a(x, M, N, K, "auto", sm90, 132) == sm90.nvfp4_w4a16_on_a(M, N, K), (M, N, K)
        assert not on_a(x.half(), M, N, K, "auto", sm90, 132) and not on_a(x, M, N, K, "pass", sm90, 132)
    assert sm90.nvfp4_tokens_on_a(4096, 576, 7168) and sm90.nvfp4_w4a16_on_a(4096, 576, 7168)
    rows = attach_exact_rows(scalemm.quantize_nvfp4(x), x.clone())  # W4A16 on the rows instead
    assert not on_a(rows, 4096, 576, 7168, "auto", sm90, 132)
    odd = scalemm.quantize_nvfp4(torch.zeros(4, 48, dtype=torch.bfloat16))  # K % 32 != 0: the pass
    assert not on_a(odd, 4096, 576, 7168, "auto", sm90, 132)


def test_w4a16_tokens_on_a_rule():
    """W4A16 goes on A (nvfp4_w4a16_on_a) where W4A4 would (nvfp4_tokens_on_a) and the swapped default is data-parallel
    with token tiles at most NVFP4_W4A16_ON_A_MAX_TOKEN_TILE wide; not on wide layers, short prompts or stream-K."""
    from scalemm.cutlass_kernels.configs import default_nvfp4_config, nvfp4_tokens_on_a, nvfp4_w4a16_on_a, sm90
    from scalemm.cutlass_kernels.configs.sm90 import tile_waves
    assert nvfp4_w4a16_on_a(4096, 576, 7168)  # DeepSeek-V3 kv_a: one wave of 128 x 160
    assert default_nvfp4_config(4096, 576, 7168).tile_n == 160
    assert nvfp4_w4a16_on_a(4096, 512, 3584) and nvfp4_w4a16_on_a(2048, 1024, 4096)
    assert not nvfp4_w4a16_on_a(8192, 576, 7168)  # stream-K over 128 x 192
    assert not nvfp4_w4a16_on_a(8192, 1024, 4096)  # 256-wide token tiles
    assert not nvfp4_w4a16_on_a(4096, 4096, 4096) and not nvfp4_tokens_on_a(4096, 4096, 4096)  # M < 2 N
    assert not nvfp4_w4a16_on_a(512, 64, 4096)  # fewer than NVFP4_TOKENS_ON_A_MIN_TOKENS tokens
    for M in range(1024, 20000, 999):
        for N, K in ((576, 7168), (512, 3584), (1024, 4096), (256, 2048), (160, 2560)):  # (160: padded, too few rows)
            sw = default_nvfp4_config(M, N, K)
            want = nvfp4_tokens_on_a(M, N, K) and not sw.stream_k and sw.tile_n <= sm90.NVFP4_W4A16_ON_A_MAX_TOKEN_TILE
            assert nvfp4_w4a16_on_a(M, N, K) == want
    # weight rows the swapped kernel pads by a fifth or more (MiniCPM3 kv_a, 288 -> 384; 320 -> 384), where the waves
    # model says the tokens on A cost less: on A whatever the swapped tile
    assert not sm90.nvfp4_tokens_on_a(500, 288, 2560) and not nvfp4_w4a16_on_a(500, 288, 2560)
    for M in (12000, 16384, 40000):
        for N, K in ((288, 2560), (400, 4096), (320, 960), (416, 2560)):  # padded 1.33 / 1.28 / 1.20 / 1.23
            assert default_nvfp4_config(M, N, K).tile_n > sm90.NVFP4_W4A16_ON_A_MAX_TOKEN_TILE  # not the tile rule
            assert nvfp4_w4a16_on_a(M, N, K), (M, N, K)
    assert default_nvfp4_config(16384, 288, 2560).stream_k and default_nvfp4_config(16384, 320, 960).stream_k
    # ... but not where the swapped kernel's 128 x 256 tiles fill one whole wave without stream-K (11008 tokens: 3 x 43
    # tiles; timed 0.76-0.89x on A) while the tokens on A would need stream-K over 1.3 waves
    for N, K in ((288, 2560), (272, 4096), (320, 960)):
        sw = default_nvfp4_config(11008, N, K)
        assert not sw.stream_k and sw.tile_n == 256 and not nvfp4_w4a16_on_a(11008, N, K), N
    assert nvfp4_w4a16_on_a(11008, 400, 4096)  # there the swapped kernel's 4 x 43 tiles need stream-K
    # ... nor where the swapped kernel's tiles fill one whole wave and the tokens on A would run stream-K over 1.03-1.27
    # waves (NVFP4_W4A16_STREAM_K_WAVE_COST 0.7; with 0.5 these went on A and ran 0.77-0.95x, held_wave.log)
    for M in (8704, 10112, 10240, 10624):
        for N, K in ((264, 3072), (288, 5120), (288, 2560), (280, 3584), (272, 4096)):
            sw = default_nvfp4_config(M, N, K)
            assert not sw.stream_k and tile_waves(sw, M, N, 132) == 1 and not nvfp4_w4a16_on_a(M, N, K), (M, N, K)
    for N in (256, 336, 352, 384, 432, 576):  # padded by less than a fifth: the tile condition alone
        for M in (8192, 11008, 16384):
            assert not nvfp4_w4a16_on_a(M, N, 2560) or not default_nvfp4_config(M, N, 2560).stream_k, (M, N)
    assert nvfp4_w4a16_on_a(4096, 576, 7168) and not nvfp4_w4a16_on_a(8192, 576, 7168)


def test_w4a16_on_a_tile_drops_stream_k_on_narrow_tiles():
    """W4A16's tokens-on-A tile (default_nvfp4_w4a16_on_a_config) is W4A4's, data-parallel where that takes stream-K on
    weight tiles at most NVFP4_W4A16_ON_A_DP_MAX_WIDTH wide and a data-parallel last wave more than
    NVFP4_W4A16_ON_A_DP_LAST_WAVE full; gemm_nvfp4 runs it for bf16 activations (W4A4 keeps the shared tile)."""
    from dataclasses import replace
    from scalemm.cutlass_kernels.configs import sm90
    from scalemm.cutlass_kernels.configs.sm90 import default_nvfp4_tokens_on_a_config as shared
    from scalemm.cutlass_kernels.configs.sm90 import default_nvfp4_w4a16_on_a_config as w4a16
    for M in (12000, 12288, 12672, 20480):  # 2 x 144 / 160 weight tiles: last waves 0.42-0.50 full
        for N, K in ((288, 2560), (272, 4096), (304, 3072), (320, 2560)):
            cfg = shared(M, N, K)
            assert cfg.stream_k and cfg.tile_n <= sm90.NVFP4_W4A16_ON_A_DP_MAX_WIDTH, (M, N)
            assert w4a16(M, N, K) == replace(cfg, stream_k=False, raster="auto"), (M, N)
    for M, N, K in ((11008, 288, 2560), (10240, 288, 2560), (18000, 288, 2560),  # last waves 0.30 / 0.21 / 0.14 full
                    (12000, 400, 5120), (11008, 400, 5120),  # 208-wide weight tiles
                    (4096, 576, 7168), (8192, 576, 7168), (16384, 288, 2560)):  # data-parallel already / 192 wide
        assert w4a16(M, N, K) == shared(M, N, K), (M, N, K)
    assert shared(11008, 288, 2560).stream_k and shared(12000, 400, 5120).stream_k
    for M in range(1024, 40000, 997):  # only ever stream-K taken away, from tiles at most 160 wide
        for N, K in ((288, 2560), (320, 960), (400, 4096), (576, 7168), (512, 3584), (256, 2048)):
            a, b = shared(M, N, K), w4a16(M, N, K)
            assert a == b or (a.stream_k and not b.stream_k and a.tile_n <= 160 and b == replace(a, stream_k=False,
                                                                                               raster="auto"))


def test_dispatch_rules_are_cached_per_shape(monkeypatch):
    """The NVFP4 dispatch rules are cached per shape; clear_dispatch_caches() makes an edited constant count."""
    from scalemm.cutlass_kernels.configs import sm90
    assert sm90.nvfp4_w4a16_on_a(12000, 288, 2560)
    assert sm90.nvfp4_w4a16_on_a.cache_info().currsize > 0
    monkeypatch.setattr(sm90, "NVFP4_W4A16_ON_A_MIN_ROW_PADDING", 2.0)
    try:
        sm90.clear_dispatch_caches()
        assert not sm90.nvfp4_w4a16_on_a(12000, 288, 2560)  # the padding term no longer holds
    finally:
        monkeypatch.undo()
        sm90.clear_dispatch_caches()
    assert sm90.nvfp4_w4a16_on_a(12000, 288, 2560)


def test_w4a16_waves_cost():
    """The waves model of nvfp4_w4a16_on_a: whole waves x tile area; stream-K's fractional waves plus
    NVFP4_W4A16_STREAM_K_WAVE_COST."""
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.cutlass_kernels.configs import sm90
    dp, sk = GemmConfig(128, 144, 64, 1, 1, "cooperative"), GemmConfig(128, 144, 64, 1, 1, "cooperative", stream_k=True)
    tiles = lambda n: (128 * n, 144)  # noqa: E731 (an output of n tiles of 128 x 144)
    assert sm90._w4a16_waves_cost(dp, *tiles(132), 132) == sm90._w4a16_waves_cost(dp, *tiles(1), 132) == 128 * 144
    assert sm90._w4a16_waves_cost(dp, *tiles(133), 132) == 2 * 128 * 144
    assert sm90._w4a16_waves_cost(sk, *tiles(198), 132) == (1.5 + sm90.NVFP4_W4A16_STREAM_K_WAVE_COST) * 128 * 144
    assert sm90._w4a16_waves_cost(sk, *tiles(198), 66) == (3 + sm90.NVFP4_W4A16_STREAM_K_WAVE_COST) * 128 * 144
    swapped = GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True)  # N on the tile's M side: 3 x 43 tiles
    assert sm90._w4a16_waves_cost(swapped, 11008, 288, 132) == 128 * 256


def test_w4a16_tokens_on_a_kernel_spec():
    """W4A16 with the tokens on A: the FP8 GEMM's template with bf16 operands (gemm_kernel_spec element "bf16"), a
    kernel of its own name (tests/test_nvfp4_gemm_gpu.py runs it)."""
    from scalemm import epilogues as epi
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.gemm import gemm_kernel_spec
    cfg = GemmConfig(128, 192, 64, 1, 1, "cooperative", swap_ab=False)
    tree = epi.scaled(torch.float32, bias=True)
    bf16, _ = gemm_kernel_spec(cfg, fast_accum=False, out_dtype=torch.float32, epilogue=tree, element="bf16")
    fp8, _ = gemm_kernel_spec(cfg, fast_accum=False, out_dtype=torch.float32, epilogue=tree)
    p = dict(bf16.params)
    assert p["ELEMENT_A"] == p["ELEMENT_B"] == "cutlass::bfloat16_t"
    assert p["MAINLOOP_SCHEDULE"] == "cutlass::gemm::KernelTmaWarpSpecializedCooperative"
    assert bf16.name.startswith("bf16_gemm_") and fp8.name.startswith("fp8_gemm_")
    assert dict(fp8.params)["ELEMENT_A"] == "cutlass::float_e4m3_t"
    with pytest.raises(ValueError, match="fast accumulation is an FP8 wgmma mode"):
        gemm_kernel_spec(cfg, fast_accum=True, out_dtype=torch.float32, epilogue=tree, element="bf16")
    with pytest.raises(ValueError, match="element must be one of"):
        gemm_kernel_spec(cfg, fast_accum=False, out_dtype=torch.float32, epilogue=tree, element="fp16")


def test_w4a4_decode_in_mainloop_rule():
    from dataclasses import replace
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.gemm_nvfp4 import _decode_in_mainloop
    ok = GemmConfig(128, 256, 64, 1, 1, "cooperative", swap_ab=True)
    a = scalemm.quantize_nvfp4(torch.randn(300, 2080).to(torch.bfloat16))
    assert _decode_in_mainloop(a, ok, "mainloop") and not _decode_in_mainloop(a, ok, "pass")
    with pytest.raises(ValueError, match="not cooperative with tile_n a multiple of 128"):
        _decode_in_mainloop(a, replace(ok, tile_n=64), "mainloop")
    assert not _decode_in_mainloop(a, replace(ok, tile_n=64), "pass")
    odd = scalemm.quantize_nvfp4(torch.randn(300, 2064).to(torch.bfloat16))
    with pytest.raises(ValueError, match="K = 2064 is not a multiple of 32"):
        _decode_in_mainloop(odd, ok, "mainloop")
    with pytest.raises(ValueError, match="activation_decode must be one of"):
        _decode_in_mainloop(a, ok, "bogus")


def test_default_config_rasters_stream_k_along_the_weight_rows():
    from dataclasses import replace
    from scalemm.cutlass_kernels.configs import default_nvfp4_config
    decode = default_nvfp4_config(64, 8192, 8192)
    assert decode.stream_k and decode.raster == "m"
    assert decode.compiled() == replace(decode, raster="auto")  # a run-time knob: the same kernel
    prefill = default_nvfp4_config(4096, 8192, 8192)
    assert not prefill.stream_k and prefill.raster == "auto"


def test_prepare_refuses_what_is_not_packed_codes():
    with pytest.raises(ValueError, match=r"qdata must be packed codes, uint8 \[..., N, K/2\]"):
        prepare_sm90_weight(torch.zeros(4, 16, dtype=torch.float32))
    with pytest.raises(ValueError, match="qdata must be packed codes"):
        prepare_sm90_weight(torch.zeros(16, dtype=torch.uint8))


def test_default_config_above_128_tokens():
    """default_nvfp4_config's rule above 128 tokens (configs/sm90.py, _nvfp4_mid_tokens_config; 132 SMs): one wave of
    the widest narrow tile that busies half the SMs where 128x256 tiles would leave them idle and K is short; stream-K
    below one wave for long K (over 128-token tiles where 128x256 ones would be a quarter wave or less, with at most
    3072 of K per SM) and for a short last wave of fewer than 8 waves (up to 0.3 full, from 1024 tokens 0.5); else
    128x256. Token tiles of 256 narrow to the fewest columns of 160 / 192 / 224 / 256 that keep their count; a one-wave
    pick of 256 to the narrowest of those whose tiles still fit one wave (without half-empty extra token tiles); and
    with long K, one wave of such tiles busying 90% of the SMs replaces stream-K."""
    from scalemm.cutlass_kernels.configs import default_nvfp4_config
    picks = {(M, N, K): default_nvfp4_config(M, N, K).label() for M, N, K in [
        (192, 4096, 4096), (512, 4096, 4096), (256, 7168, 2048), (192, 4096, 14336), (768, 6144, 4096),
        (640, 57344, 8192), (1024, 8192, 8192), (4096, 4096, 4096), (129, 64, 4096), (256, 2048, 7168),
        (1024, 1024, 16384), (4096, 1536, 7168), (1024, 6144, 4096), (384, 28672, 4096), (576, 4096, 4096),
        (4096, 576, 7168), (2048, 1536, 7168), (192, 8192, 8192), (448, 9216, 4096), (160, 28672, 4096)]}
    assert picks == {
        (192, 4096, 4096): "t128x64x64_c1x1_coop_swap",        # 96 tiles of 64 tokens (128x256: 32)
        (512, 4096, 4096): "t128x128x64_c1x1_coop_swap",       # 128 tiles of 128
        (256, 7168, 2048): "t128x128x64_c1x1_coop_swap",       # 112 tiles of 128
        (192, 4096, 14336): "t128x192x64_c1x1_coop_swap_sk_rm",  # long K: stream-K (8 x 14336 of K per SM: 256),
                                                                 # 192 tokens in one tile of 192
        (768, 6144, 4096): "t128x256x64_c1x1_coop_swap_sk_rm",   # 144 tiles: a last wave 9% full
        (640, 57344, 8192): "t128x224x64_c1x1_coop_swap",      # 10.2 waves: the last one matters less; 3 x 224
        (1024, 8192, 8192): "t128x256x64_c1x1_coop_swap",      # 1.94 waves
        (4096, 4096, 4096): "t128x256x64_c1x1_coop_swap",      # 3.9 waves
        (129, 64, 4096): "t128x128x64_c1x1_coop_swap_sk_rm",   # 1 tile: no narrow tile busies half the SMs
        (256, 2048, 7168): "t128x128x64_c1x1_coop_swap_sk_rm",  # 16 tiles of 256 (a quarter wave or less): 128
        (1024, 1024, 16384): "t128x256x64_c1x1_coop_swap_sk_rm",  # 32 tiles, but 3971 of K per SM: 256
        (4096, 1536, 7168): "t128x256x64_c1x1_coop_swap_sk_rm",  # 1.45 waves, from 1024 tokens: stream-K
        (1024, 6144, 4096): "t128x256x64_c1x1_coop_swap_sk_rm",  # 1.45 waves
        (384, 28672, 4096): "t128x192x64_c1x1_coop_swap",      # 3.39 waves: below 1024 tokens only up to 0.3; 2 x 192
        (576, 4096, 4096): "t128x160x64_c1x1_coop_swap",       # 96 tiles of 256 -> 128 of 160 (4 x 160 = 640 tokens)
        (4096, 576, 7168): "t128x160x64_c1x1_coop_swap",       # long K: 130 tiles of 160 (26 x 160 = 4160 tokens)
        (2048, 1536, 7168): "t128x192x64_c1x1_coop_swap",      # long K: 132 tiles of 192
        (192, 8192, 8192): "t128x192x64_c1x1_coop_swap_sk_rm",  # long K: not 128 tiles of 160 (2 x 160 for 192 tokens)
        (448, 9216, 4096): "t128x224x64_c1x1_coop_swap_sk_rm",  # 144 tiles: a last wave 9% full; 2 x 224
        (160, 28672, 4096): "t128x160x64_c1x1_coop_swap",      # 1.7 waves; one tile of 160
    }


def test_mainloop_decode_stand_in_for_the_default():
    """W4A4 with activation_decode="mainloop" and no config: the default's token tiles that are not whole 128-row
    scale atoms (64, 160, 192, 224) widen to 128 or 256; decodable picks stay."""
    from scalemm.cutlass_kernels.configs import GemmConfig, default_nvfp4_config, sm90
    for M, N, K, want in [(576, 4096, 4096, 256), (384, 9216, 4096, 256), (192, 4096, 4096, 128),
                          (4096, 4096, 4096, 256), (512, 4096, 4096, 128)]:
        cfg = default_nvfp4_config(M, N, K)
        got = sm90.nvfp4_mainloop_decode_config(cfg)
        assert got.tile_n == want and sm90.nvfp4_decodes_activations(got), (M, N, K, cfg.label(), got.label())
        assert (got.stream_k, got.tile_m, got.tile_k) == (cfg.stream_k, cfg.tile_m, cfg.tile_k)
    c = GemmConfig(128, 128, 64, 1, 1, "cooperative", swap_ab=True)
    assert sm90.nvfp4_mainloop_decode_config(c) is c


def test_prepared_copy_of_an_inference_tensor():
    """A weight quantized under torch.inference_mode is an inference tensor, which has no version counter: its prepared
    copy is still made once and kept (it raised before); an ordinary tensor's in-place change still makes a new one."""
    from scalemm.gemm_nvfp4 import _prepared_weight
    with torch.inference_mode():
        q = scalemm.quantize_nvfp4(torch.randn(256, 128))
        assert q.qdata.is_inference()
        first = _prepared_weight(q.qdata)
        assert _prepared_weight(q.qdata) is first
    assert torch.equal(first, prepare_sm90_weight(q.qdata))
    w = scalemm.quantize_nvfp4(torch.randn(256, 128)).qdata
    before = _prepared_weight(w)
    w.add_(0)
    assert _prepared_weight(w) is not before


def test_exact_rows_bounds():
    """Which rowwise copies the NVFP4 quantizers give exact rows (quantize.exact_rows_wanted): dense 9-256 rows (up to
    8 the skinny kernel's mma.sync loops decode the codes themselves), grouped 1-256 (its stepped loop ran faster on
    the rows), none above (prefill)."""
    from scalemm.cutlass_kernels.configs.sm90 import SKINNY_DEFAULT_MAX_TOKENS
    from scalemm.quantize import exact_rows_wanted
    tokens = SKINNY_DEFAULT_MAX_TOKENS
    dense = [exact_rows_wanted(m) for m in (0, 1, tokens, tokens + 1, 256, 257)]
    assert dense == [False, False, False, True, True, False]
    grouped = [exact_rows_wanted(t, grouped=True) for t in (0, 1, 8, 9, 256, 257)]
    assert grouped == [False, True, True, True, True, False]


def test_exact_rows_are_used_while_their_sources_are_unchanged(monkeypatch):
    """The quantizers' exact bf16 rows (CUDA only; attached here by hand to CPU containers, whose version counters
    behave the same): bf16_rows takes them instead of the decode pass while the codes, scales (and a grouped copy's
    offsets) they were made from are the container's and unchanged in place; the quantizers on CPU attach none."""
    import scalemm.gemm_nvfp4 as g
    from scalemm.formats.nvfp4 import attach_exact_rows, exact_rows
    monkeypatch.setattr(g, "dequantize_rows_bf16", lambda *x, **kw: "pass")
    x = _data(6, 64, seed=9)
    q = scalemm.quantize_nvfp4(x, scaling="token")
    assert exact_rows(q) is None and g.bf16_rows(q) == "pass"
    rows = ref.dequantize_nvfp4(q, torch.bfloat16, apply_alpha=False)
    for change in (None, "codes", "scales", "rows", "replaced"):
        q = attach_exact_rows(scalemm.quantize_nvfp4(x, scaling="token"), rows.clone())
        if change == "codes":
            q.qdata[0, 0] ^= 0x11
        elif change == "scales":
            q.scales.view(torch.uint8)[0] += 1
        elif change == "rows":
            exact_rows(q)[0, 0] = 1.0
        elif change == "replaced":
            q.scales = q.scales.clone()
        got = g.bf16_rows(q)
        assert (got == "pass") if change else torch.equal(got, rows), change
    assert exact_rows(q.to("cpu")) is None  # a new container
    offsets = torch.tensor([2, 6], dtype=torch.int32)
    qg = scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token")
    assert exact_rows(qg) is None
    attach_exact_rows(qg, rows.clone(), offsets)
    assert torch.equal(g.bf16_rows(qg, offsets=offsets), rows)
    offsets[0] = 3  # rerouted in place: the rows no longer describe the copy
    assert g.bf16_rows(qg, offsets=offsets) == "pass"


def test_activation_decode_is_checked_first():
    """A bad activation_decode, "registers" (tokens on A: dense only) for a grouped GEMM, or any decode but "auto"
    with a skinny config, is refused by name before the operands are looked at."""
    from scalemm.gemm_nvfp4 import grouped_gemm_nvfp4, gemm_nvfp4
    with pytest.raises(ValueError, match="activation_decode must be one of"):
        gemm_nvfp4(None, None, activation_decode="bogus")
    with pytest.raises(ValueError, match="activation_decode must be one of"):
        grouped_gemm_nvfp4(None, None, None, activation_decode="bogus")
    with pytest.raises(ValueError, match="'registers' .* is for dense W4A4 GEMMs"):
        grouped_gemm_nvfp4(None, None, None, activation_decode="registers")
    for decode in ("pass", "mainloop", "registers"):  # the skinny kernel decodes its own way
        with pytest.raises(ValueError, match=f"activation_decode='{decode}' names a CUTLASS kernel's decode"):
            gemm_nvfp4(None, None, config=SkinnyConfig(2, 0), activation_decode=decode)
        with pytest.raises(ValueError, match=f"activation_decode='{decode}' names a CUTLASS kernel's decode"):
            grouped_gemm_nvfp4(None, None, None, config=SkinnyConfig(2, 0), activation_decode=decode)
