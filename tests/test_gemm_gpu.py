"""FP8 GEMM on the GPU against an fp32 reference. Outputs are poisoned before each run."""
import pytest
import torch

import scalemm
from scalemm import epilogues as epi
from scalemm.__main__ import chunked_promotion_test_configs
from scalemm.cutlass_kernels import GemmConfig, default_config
from scalemm.cutlass_kernels.configs.sm90 import PREFILL_ONE_WAVE_TILES, PREFILL_TILE_MODEL, decode_tiles

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn

# Real-model (N, K): Llama-3 8B qkv / down, Llama-3 70B up, DeepSeek-V3 attention proj, Qwen3 MoE
SHAPES_NK = [(6144, 4096), (4096, 14336), (57344, 8192), (7168, 2048), (2048, 768)]


def _operands(M, N, K, seed=0, per_tensor=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g) * torch.rand(M, 1, device="cuda", generator=g).mul(4).exp2()
    b = torch.randn(N, K, device="cuda", generator=g) * 0.1
    a8, sa = _quant_rows(a, per_tensor)
    b8, sb = _quant_rows(b, per_tensor)
    return a8, b8, sa, sb


def _quant_rows(x, per_tensor):
    amax = x.abs().amax() if per_tensor else x.abs().amax(dim=1)
    scale = 448.0 / amax.clamp_min(1e-12)
    q = (x * (scale if per_tensor else scale[:, None])).clamp(-448, 448).to(E4M3)
    return q, (1.0 / scale).float().reshape(-1)


def _reference(a8, b8, sa, sb, bias, out_dtype, act=None):
    acc = a8.double() @ b8.double().T
    sa2 = sa.double().reshape(-1, 1) if sa.numel() > 1 else sa.double()
    sb2 = sb.double().reshape(1, -1) if sb.numel() > 1 else sb.double()
    r = sa2 * sb2 * acc
    if bias is not None:
        r = r + bias.double()
    if act == "relu":
        r = torch.relu(r)
    return r


def _rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def _poisoned(M, N, dtype):
    return torch.full((M, N), float("nan"), dtype=dtype, device="cuda")


TOL = {torch.bfloat16: 4e-3, torch.float16: 1e-3, torch.float32: 1e-5}


def _fp32_tol(a8, b8, fast_accum):
    """fp32 output: Hopper's FP8 wgmma accumulates with fewer than fp32's bits (more so with
    fast accumulation), so an fp32 result is held to QuACK's rule: at most 2x the error of
    cuBLASLt (torch._scaled_mm) on the same operands in the same accumulation mode."""
    one = torch.ones((), device="cuda")
    theirs = torch._scaled_mm(a8, b8.T, scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast_accum)
    exact = a8.double() @ b8.double().T
    return max(2 * _rel_err(theirs, exact), 1e-5)


@pytest.mark.parametrize("M", [1, 7, 129, 4096])
@pytest.mark.parametrize("N,K", SHAPES_NK[:4])
def test_gemm_rowwise_bf16(M, N, K):
    a8, b8, sa, sb = _operands(M, N, K, seed=M + N)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a8, b8, sa, sb, out=out)
    assert not out.isnan().any(), "some outputs were not written"
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.bfloat16)) <= 4e-3


@pytest.mark.parametrize("M,N,tile", [(17, 4096, "t64x16x256_c1x1_ping_swap"), (32, 4096, "t64x16x256_c1x1_ping_swap"),
                                      (32, 6144, "t64x32x256_c1x1_ping_swap"), (33, 4096, "t64x32x256_c1x2_ping_swap"),
                                      (48, 6144, "t64x48x128_c1x1_ping"), (64, 4096, "t64x32x256_c1x1_ping_swap"),
                                      (65, 4096, "t64x128x128_c1x1_ping"), (100, 4096, "t64x64x128_c1x2_ping_swap"),
                                      (72, 9216, "t64x144x128_c2x1_ping"), (65, 18432, "t128x144x128_c1x1_coop"),
                                      (128, 6144, "t64x128x128_c1x1_ping"), (80, 4096, "t64x80x128_c2x1_ping"),
                                      (65, 57344, "t64x128x128_c2x1_ping"), (1, 9216, "t128x16x256_c1x1_coop_swap"),
                                      (16, 10240, "t128x16x256_c1x1_coop_swap")])
def test_decode_heuristic_token_tiles(M, N, tile):
    """Fast accumulation at 1-128 tokens: two token tiles (the second one partial or nearly empty) of 16, 32
    or 64 (swap-AB), the one-wave tiles (ping-pong 64 x w, cooperative 128 x w), those in clusters of 2 along the
    tokens, and the cooperative swap-AB 128x16 at 1-16 tokens: written completely and right."""
    K = 4096
    assert default_config(M, N, K).key() == tile
    a8, b8, sa, sb = _operands(M, N, K, seed=M)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a8, b8, sa, sb, bias=bias, out=out, fast_accum=True)
    assert not out.isnan().any()
    assert _rel_err(out, _reference(a8, b8, sa, sb, bias, torch.bfloat16)) <= 4e-3


def _decode_tile_tokens(cfg):
    """Token counts that give `cfg` a partial token tile: one (the 128x16 tile), two 64-token tiles (the clustered
    tiles: both CTAs of a cluster busy), or either (ping-pong)."""
    if cfg.swap_ab and cfg.tile_n == 16:
        return (7, 16)
    if cfg.cluster_m * cfg.cluster_n > 1:
        return (70, 100)
    return (37, 100) if cfg.schedule == "pingpong" else (100,)


@pytest.mark.parametrize("cfg", decode_tiles(), ids=lambda c: c.key())
def test_decode_tiles_are_correct(cfg):
    """Every tile the decode rules can pick beside the swap-AB token tiles (configs.sm90.decode_tiles: weights on the
    wgmma's N side in widths of DECODE_WIDTHS, most of them CUTLASS's extended shapes; those in clusters of 2 along
    the tokens; the cooperative swap-AB 128x16): a partial token tile, a partial weight tile (N = 2056 divides by none
    of the widths) and a partial k-tile (K = 1040), with a bias; every output written, within the fast-accumulation
    tolerance."""
    N, K = 2056, 1040
    for M in _decode_tile_tokens(cfg):
        a8, b8, sa, sb = _operands(M, N, K, seed=M + cfg.tile_n)
        bias = torch.randn(N, device="cuda").to(torch.bfloat16)
        out = _poisoned(M, N, torch.bfloat16)
        scalemm.gemm(a8, b8, sa, sb, bias=bias, out=out, fast_accum=True, config=cfg)
        assert not out.isnan().any(), (cfg.key(), M)
        assert _rel_err(out, _reference(a8, b8, sa, sb, bias, torch.bfloat16)) <= 4e-3, (cfg.key(), M)


@pytest.mark.parametrize("cfg", [entry[0] for entry in PREFILL_TILE_MODEL] + list(PREFILL_ONE_WAVE_TILES),
                         ids=lambda c: c.key())
@pytest.mark.parametrize("M,N,K", [(1100, 4096, 4096), (2049, 3088, 1040), (4096, 576, 7168)])
def test_prefill_tiles_are_correct(cfg, M, N, K):
    """Every tile the prefill rule can pick (fast accumulation; ping-pong 128 x 128/160/192, cooperative 128 x
    128/192/224/256 in clusters of 2, and the one-wave cooperative 128x64 / 128x128 in clusters of 1), with an odd count of M tiles (one cluster half out of bounds), partial N and K
    tiles and a narrow N: every output written, within the fast-accumulation tolerance, bias and fp32 output
    included."""
    a8, b8, sa, sb = _operands(M, N, K, seed=M + N + K)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a8, b8, sa, sb, bias=bias, out=out, fast_accum=True, config=cfg)
    assert not out.isnan().any()
    assert _rel_err(out, _reference(a8, b8, sa, sb, bias, torch.bfloat16)) <= 4e-3
    out32 = _poisoned(M, N, torch.float32)
    scalemm.gemm(a8, b8, sa, sb, out=out32, out_dtype=torch.float32, fast_accum=True, config=cfg)
    assert not out32.isnan().any()
    assert _rel_err(out32, _reference(a8, b8, sa, sb, None, torch.float32)) <= _fp32_tol(a8, b8, True)


@pytest.mark.parametrize("M,N,K,pick", [(4096, 4096, 4096, "t128x128x128_c2x1_ping"),
                                        (1024, 576, 7168, "t128x64x128_c1x1_coop"),  # one wave (40 tiles of 128x128)
                                        (2048, 1024, 4096, "t128x128x128_c1x1_coop"),  # one wave (128 tiles)
                                        (300, 4096, 4096, "t128x128x128_c1x1_coop"),  # one wave, a partial M tile
                                        (768, 14336, 4096, "t64x256x128_c1x1_ping"),  # below 1024 tokens, wide N
                                        (512, 7168, 16384, "t128x224x128_c2x1_coop")])  # the model from 256 tokens
def test_prefill_heuristic_runs_its_pick(M, N, K, pick):
    """scalemm.gemm without config= from 256 tokens runs what the prefill rules pick: the model's tile, or for outputs
    of at most one wave of 128x128 tiles a cooperative tile in clusters of 1."""
    assert default_config(M, N, K).key() == pick
    a8, b8, sa, sb = _operands(M, N, K, seed=21)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a8, b8, sa, sb, out=out, fast_accum=True)
    assert not out.isnan().any()
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.bfloat16)) <= 4e-3


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fast_accum", [False, True])
@pytest.mark.parametrize("M", [1, 129])
def test_gemm_dtypes_bias_accum(out_dtype, fast_accum, M):
    N, K = 2048, 768
    a8, b8, sa, sb = _operands(M, N, K, seed=3)
    bias = torch.randn(N, device="cuda").to(out_dtype)
    out = _poisoned(M, N, out_dtype)
    scalemm.gemm(a8, b8, sa, sb, bias=bias, out_dtype=out_dtype, out=out, fast_accum=fast_accum)
    assert not out.isnan().any()
    ref = _reference(a8, b8, sa, sb, bias, out_dtype)
    tol = _fp32_tol(a8, b8, fast_accum) if out_dtype == torch.float32 else TOL[out_dtype]
    assert _rel_err(out, ref) <= tol


def test_gemm_per_tensor_scales_and_activation():
    M, N, K = 300, 4096, 4096
    a8, b8, sa, sb = _operands(M, N, K, seed=5, per_tensor=True)
    assert sa.numel() == 1 and sb.numel() == 1
    out = scalemm.gemm(a8, b8, sa, sb, epilogue="relu", out_dtype=torch.float32)
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.float32, act="relu")) <= _fp32_tol(a8, b8, False)
    # mixed: per-token a, per-tensor b, matches torch._scaled_mm's semantics
    a8, b8, sa, _ = _operands(M, N, K, seed=6)
    out = scalemm.gemm(a8, b8, sa, sb)
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.bfloat16)) <= 4e-3


# scalemm's full-accumulation mainloop (promotion in N slices): full accumulation only.
CHUNKED = chunked_promotion_test_configs()


@pytest.mark.parametrize("cfg", [
    GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(128, 256, 128, 2, 1, "cooperative"),
    GemmConfig(128, 192, 128, 2, 1, "cooperative"),  # N = 4096: a partial 192-wide tile
    GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 16, 128, 1, 1, "cooperative", swap_ab=True),
    GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, stream_k=True),
    *CHUNKED,
], ids=lambda c: c.key())
@pytest.mark.parametrize("M", [1, 33, 257])
def test_every_config_is_correct(cfg, M):
    N, K = 4096, 4096
    a8, b8, sa, sb = _operands(M, N, K, seed=9)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = _poisoned(M, N, torch.bfloat16)
    scalemm.gemm(a8, b8, sa, sb, bias=bias, out=out, config=cfg)
    assert not out.isnan().any()
    assert _rel_err(out, _reference(a8, b8, sa, sb, bias, torch.bfloat16)) <= 4e-3


@pytest.mark.parametrize("cfg", CHUNKED, ids=lambda c: c.key())
@pytest.mark.parametrize("M,N,K", [(257, 4096, 4096), (1000, 3088, 1040), (4096, 1024, 8192), (300, 2048, 112)])
def test_chunked_promotion_matches_cutlass_bit_for_bit(cfg, M, N, K):
    """The chunked promotion adds each k-tile's wgmma sum into fp32 in the same order as CUTLASS's
    promotion every 4 MMAs: its fp32 outputs equal CUTLASS's 128x128 full-accumulation kernel's (partial
    tiles in M, N and K included; K = 1040 an odd k-tile count, K = 112 a single partial k-tile), and neither is
    further from the fp64 product than cuBLASLt allows."""
    a8, b8, sa, sb = _operands(M, N, K, seed=M + K)
    theirs = scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.float32, config=GemmConfig(128, 128, 128, 2, 1, "cooperative"))
    out = _poisoned(M, N, torch.float32)
    scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.float32, out=out, config=cfg)
    assert not out.isnan().any()
    assert torch.equal(out, theirs)
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.float32)) <= _fp32_tol(a8, b8, False)


def test_custom_tree_matches_its_torch_evaluation():
    M, N, K = 64, 1024, 512
    a8, b8, sa, sb = _operands(M, N, K, seed=11)
    shift = torch.randn(M, device="cuda")
    tree = epi.relu(epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift"))
    out = scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.float32, epilogue=tree, epilogue_inputs={"shift": shift})
    acc = (a8.double() @ b8.double().T).float()
    ref = epi.evaluate(tree, acc, {"scale_a": sa, "shift": shift}, torch.float32)
    assert _rel_err(out, ref.double()) <= _fp32_tol(a8, b8, False)


def test_accumulating_into_out_in_place():
    """epilogues.accumulating with out = the Source (a weight's .grad: Linear(fuse_wgrad_accumulation=True)): out
    becomes bf16(out + the fp32 result of the same tile) bit for bit (the same config with an fp32 output, no
    Source), and a CUDA graph of it adds on every replay."""
    from scalemm import training
    M, N, K = 512, 256, 224  # Linear(256, 512)'s wgrad over 210 tokens padded to 224 (the train kernel set)
    a8, b8, sa, sb = _operands(M, N, K, seed=13)
    cfg = default_config(M, N, K, fast_accum=False)
    f32 = scalemm.gemm(a8, b8, sa, sb, out_dtype=torch.float32, epilogue=epi.scaled("f32", bias=False), config=cfg)
    tree = training.accumulating_wgrad_tree(torch.bfloat16)  # with its null bias leaf (the docstring says why)
    prior = (torch.randn(M, N, device="cuda") * 50).to(torch.bfloat16)
    out = prior.clone()
    scalemm.gemm(a8, b8, sa, sb, epilogue=tree, epilogue_inputs={epi.ACCUMULATOR: out}, out=out, config=cfg)
    once = (prior.float() + f32).to(torch.bfloat16)
    assert torch.equal(out, once)
    out.copy_(prior)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.gemm(a8, b8, sa, sb, epilogue=tree, epilogue_inputs={epi.ACCUMULATOR: out}, out=out, config=cfg)
    out.copy_(prior)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, (once.float() + f32).to(torch.bfloat16))


def test_matches_torch_scaled_mm():
    M, N, K = 512, 4096, 4096
    a8, b8, sa, sb = _operands(M, N, K, seed=12)
    ours = scalemm.gemm(a8, b8, sa, sb, fast_accum=True)
    theirs = torch._scaled_mm(a8, b8.T, scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16,
                              use_fast_accum=True)
    assert _rel_err(ours, theirs.double()) <= 8e-3


def test_cuda_graph_capture_and_no_sync():
    M, N, K = 16, 4096, 4096
    a8, b8, sa, sb = _operands(M, N, K, seed=13)
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    scalemm.gemm(a8, b8, sa, sb, out=out)  # warm-up: build/load outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        scalemm.gemm(a8, b8, sa, sb, out=out)
    out.fill_(float("nan"))
    sa.mul_(2.0)  # replays see new scale values: nothing was baked in
    g.replay()
    torch.cuda.synchronize()
    assert _rel_err(out, _reference(a8, b8, sa, sb, None, torch.bfloat16)) <= 4e-3


def test_gpu_validation_errors():
    a8, b8, sa, sb = _operands(8, 1024, 256)
    with pytest.raises(ValueError, match="multiple of 16"):
        scalemm.gemm(torch.empty(8, 40, dtype=E4M3, device="cuda"), torch.empty(1024, 40, dtype=E4M3, device="cuda"), sa, sb)
    with pytest.raises(ValueError, match="N = 1020"):
        scalemm.gemm(a8, b8[:1020], sa, sb[:1020])
    with pytest.raises(ValueError, match="16-byte"):
        raw = torch.empty(8 * 256 + 1, dtype=E4M3, device="cuda")
        scalemm.gemm(raw[1:].view(8, 256), b8, sa, sb)
    with pytest.raises(ValueError, match="is on"):
        scalemm.gemm(a8, b8, sa.cpu(), sb)
