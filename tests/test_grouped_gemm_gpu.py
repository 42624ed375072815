"""Grouped (MoE) FP8 GEMM on the GPU vs an fp64 per-group reference; offsets stay on the device."""
import pytest
import torch

import scalemm
from scalemm.cutlass_kernels import GemmConfig

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn


def _sizes(G, T, seed, empty=()):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(G, generator=g) ** 3  # skewed routing
    for e in empty:
        w[e] = 0
    sizes = (w / w.sum() * T).floor().long()
    sizes[int(torch.argmax(w))] += T - sizes.sum()
    return sizes


def _problem(sizes, N, K, seed=0):
    G, T = len(sizes), int(sizes.sum())
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(T, K, device="cuda", generator=g) * 8).to(E4M3)
    b = (torch.randn(G, N, K, device="cuda", generator=g) * 8).to(E4M3)
    sa = torch.rand(T, device="cuda", generator=g) + 0.5
    sb = torch.rand(G, N, device="cuda", generator=g) + 0.5
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    return a, b, sa, sb, offs


def _reference(a, b, offs, sa, sb, bias=None, per_group_a=False):
    T, N = a.shape[0], b.shape[1]
    ref = torch.zeros(T, N, dtype=torch.float64, device="cuda")
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            acc = a[start:end].double() @ b[g].double().T
            s_a = sa[g].double() if per_group_a else sa[start:end].double()[:, None]
            s_b = sb[g].double() if sb.dim() == 2 else sb[g].double()
            r = s_a * s_b * acc
            if bias is not None:
                r = r + (bias[g] if bias.dim() == 2 else bias).double()
            ref[start:end] = r
        start = end
    return ref


def _rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("G,T,N,K", [(1, 300, 2048, 768), (8, 4096, 4096, 7168), (64, 1500, 768, 2048),
                                     (256, 2048, 2048, 7168), (8, 40, 4096, 2048)])
@pytest.mark.parametrize("fast_accum", [False, True])
def test_grouped_ragged_with_empty_groups(G, T, N, K, fast_accum):
    sizes = _sizes(G, T, seed=G + T, empty=(0, G // 2) if G > 2 else ())
    a, b, sa, sb, offs = _problem(sizes, N, K, seed=G)
    bias = torch.randn(G, N, device="cuda").to(torch.bfloat16)
    out = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    scalemm.grouped_gemm(a, b, offs, sa, sb, bias=bias, out=out, fast_accum=fast_accum)
    assert not out.isnan().any(), "rows not written"
    assert _rel(out, _reference(a, b, offs, sa, sb, bias)) <= 4e-3


@pytest.mark.parametrize("cfg", [None, GemmConfig(128, 128, 128, 1, 1, "cooperative"),
                                 GemmConfig(64, 128, 128, 1, 1, "pingpong"),
                                 GemmConfig(64, 16, 128, 1, 1, "pingpong", swap_ab=True),
                                 GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True),
                                 # scalemm's chunked promotion (full accumulation, the default here)
                                 GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2),
                                 GemmConfig(128, 128, 128, 1, 1, "cooperative", promotion_chunks=1),
                                 GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True, promotion_chunks=1)])
def test_grouped_configs_and_per_group_scales(cfg):
    sizes = torch.tensor([0, 1, 17, 128, 129, 0, 300, 2])
    a, b, sa, sb, offs = _problem(sizes, 1024, 512, seed=3)
    sa_g, sb_g = torch.rand(8, device="cuda") + 0.5, torch.rand(8, device="cuda") + 0.5
    out = scalemm.grouped_gemm(a, b, offs, sa_g, sb_g, scale_a_per="group", out_dtype=torch.float32, config=cfg)
    ref = _reference(a, b, offs, sa_g, sb_g, per_group_a=True)
    one = torch.ones((), device="cuda")
    torch_err = _rel(torch._scaled_mm(a[:129], b[3].T, scale_a=one, scale_b=one, out_dtype=torch.float32),
                     a[:129].double() @ b[3].double().T)
    assert _rel(out, ref) <= max(2 * torch_err, 1e-5)


@pytest.mark.parametrize("cfg", [GemmConfig(128, 192, 128, 1, 1, "pingpong"), GemmConfig(128, 128, 128, 1, 1, "pingpong"),
                                 GemmConfig(128, 160, 128, 1, 1, "pingpong")],  # an extended wgmma width (config=)
                         ids=lambda c: c.key())
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_grouped_pingpong_prefill_tiles(cfg, out_dtype):
    """The ping-pong 128-row tiles the fast-accumulation rule picks from 32 rows per expert (128x192) or the tuner
    may (128x128), and 128x160 (CUTLASS's extended wgmma shapes, by config=): empty, one-row, partial and multi-tile groups, a partial 192-wide tile (N = 1088), bias, every
    row written; and the heuristic's own pick at K <= 4096."""
    from scalemm.cutlass_kernels.configs import default_grouped_config
    sizes = torch.tensor([0, 1, 17, 128, 129, 0, 300, 2, 385])
    a, b, sa, sb, offs = _problem(sizes, 1088, 1040, seed=13)
    bias = torch.randn(len(sizes), 1088, device="cuda").to(out_dtype)
    out = torch.full((int(sizes.sum()), 1088), float("nan"), dtype=out_dtype, device="cuda")
    scalemm.grouped_gemm(a, b, offs, sa, sb, bias=bias, out=out, out_dtype=out_dtype, fast_accum=True, config=cfg)
    assert not out.isnan().any(), "rows not written"
    if out_dtype == torch.bfloat16:
        tol = 4e-3
    else:  # fp32: at most 2x cuBLASLt's error in the same (fast) accumulation mode
        one = torch.ones((), device="cuda")
        theirs = torch._scaled_mm(a[:385], b[3].T, scale_a=one, scale_b=one, out_dtype=torch.float32,
                                  use_fast_accum=True)
        tol = max(2 * _rel(theirs, a[:385].double() @ b[3].double().T), 1e-5)
    ref = _reference(a, b, offs, sa, sb, bias)
    assert _rel(out, ref) <= tol
    assert default_grouped_config(int(sizes.sum()), len(sizes), 1088, 1040).schedule == "pingpong"
    auto = scalemm.grouped_gemm(a, b, offs, sa, sb, bias=bias, out_dtype=out_dtype, fast_accum=True)
    assert _rel(auto, ref) <= tol


def test_grouped_graph_capture_with_changing_offsets():
    G, N, K = 8, 2048, 1024
    sizes = _sizes(G, 1024, seed=5)
    a, b, sa, sb, offs = _problem(sizes, N, K, seed=5)
    out = torch.empty(1024, N, dtype=torch.bfloat16, device="cuda")
    scalemm.grouped_gemm(a, b, offs, sa, sb, out=out)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        scalemm.grouped_gemm(a, b, offs, sa, sb, out=out)
    for seed in (6, 7, 8):
        new = _sizes(G, 1024, seed=seed, empty=(seed % G,))
        offs.copy_(torch.cumsum(new, 0).to(torch.int32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert not out.isnan().any()
        assert _rel(out, _reference(a, b, offs, sa, sb)) <= 4e-3


def test_grouped_matches_torch_scaled_grouped_mm():
    sizes = _sizes(8, 2048, seed=9)
    a, b, sa, sb, offs = _problem(sizes, 2048, 1024, seed=9)
    ours = scalemm.grouped_gemm(a, b, offs, sa, sb, fast_accum=True)
    theirs = torch._scaled_grouped_mm(a, b.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                      use_fast_accum=True)
    assert _rel(ours, theirs.double()) <= 8e-3


def test_grouped_bad_input():
    sizes = torch.tensor([3, 5])
    a, b, sa, sb, offs = _problem(sizes, 256, 128)
    with pytest.raises(ValueError, match="offsets must be a contiguous int32"):
        scalemm.grouped_gemm(a, b, offs.long(), sa, sb)
    with pytest.raises(ValueError, match="offsets must be"):
        scalemm.grouped_gemm(a, b, offs.cpu(), sa, sb)
    with pytest.raises(ValueError, match="K differs"):
        scalemm.grouped_gemm(a, b[:, :, :64].contiguous(), offs, sa, sb)
    with pytest.raises(ValueError, match="scale_b must be"):
        scalemm.grouped_gemm(a, b, offs, sa, torch.ones(3, 256, device="cuda"))
    with pytest.raises(ValueError, match="scale_a must be"):
        scalemm.grouped_gemm(a, b, offs, torch.ones(7, device="cuda"), sb)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        scalemm.grouped_gemm(a.float(), b, offs, sa, sb)
    with pytest.raises(ValueError, match="bias"):
        scalemm.grouped_gemm(a, b, offs, sa, sb, bias=torch.ones(2, 256, device="cuda"))


def _wgrad_reference(dy, x, offs, s_dy, s_x):
    G, N, K = len(offs), dy.shape[1], x.shape[1]
    ref = torch.zeros(G, N, K, dtype=torch.float64, device="cuda")
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            sd = s_dy[g].double().reshape(-1, 1) if s_dy.dim() == 2 else s_dy[g].double()
            sx = s_x[g].double().reshape(1, -1) if s_x.dim() == 2 else s_x[g].double()
            ref[g] = sd * sx * (dy[start:end].double().T @ x[start:end].double())
        start = end
    return ref


@pytest.mark.parametrize("G,T,N,K,per_channel,config", [
    (8, 4096, 2048, 1024, False, None), (64, 1500, 768, 2048, True, None), (1, 300, 1024, 512, True, None),
    (16, 100, 512, 768, False, None),
    # the default's clusters of 2 along N: an odd count of N tiles (5), a second tile of 8 rows, one tile (cluster
    # of 1), and the 128x128 tile for K < 256
    (8, 2000, 640, 512, True, None), (6, 700, 136, 256, False, None), (4, 300, 120, 512, True, None),
    (8, 900, 384, 128, True, None),
    # scalemm's chunked promotion, empty experts (K = 0 groups reduce over the zero buffer) included
    (8, 4096, 2048, 1024, True, GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2)),
    (16, 100, 512, 768, False, GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2))])
def test_grouped_wgrad(G, T, N, K, per_channel, config):
    from scalemm.grouped import pad_groups_transposed, wgrad_column_starts
    sizes = _sizes(G, T, seed=G * 7, empty=(0, G - 1) if G > 2 else ())
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(G)
    dy = (torch.randn(T, N, device="cuda", generator=g) * 8).to(E4M3)
    x = (torch.randn(T, K, device="cuda", generator=g) * 8).to(E4M3)
    W = (T + 15 * G + 15) // 16 * 16
    dy_t, x_t = pad_groups_transposed(dy, offs, W), pad_groups_transposed(x, offs, W)
    starts = wgrad_column_starts(offs)
    assert int(starts[-1]) <= W and (starts % 16 == 0).all()
    s_dy = torch.rand(G, N, device="cuda") + 0.5 if per_channel else torch.rand(G, device="cuda") + 0.5
    s_x = torch.rand(G, K, device="cuda") + 0.5 if per_channel else torch.rand(G, device="cuda") + 0.5
    out = torch.full((G, N, K), float("nan"), dtype=torch.bfloat16, device="cuda")
    scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out, config=config)
    assert not out.isnan().any(), "some dW entries (empty experts included) were not written"
    ref = _wgrad_reference(dy, x, offs, s_dy, s_x)
    for e in ((0, G - 1) if G > 2 else ()):
        assert (out[e] == 0).all(), "an expert with no tokens must get dW = 0"
    assert _rel(out, ref) <= 4e-3


@pytest.mark.parametrize("G,T,empty", [(300, 3000, (0, 127, 128, 200, 255, 256, 299)), (129, 700, (128,)),
                                         (128, 900, ())])
def test_grouped_wgrad_many_groups(G, T, empty):
    """More groups than the setup kernel's block (128): the groups' padded column starts are a block scan carried
    from one chunk of 128 groups to the next; empty groups on both sides of a chunk's edge."""
    N, K = 256, 128
    offs, dy, x, dy_t, x_t, s_dy, s_x, _ = _wgrad_operands(G, T, N, K, G, G, empty)
    sizes = torch.diff(offs.long(), prepend=offs.new_zeros(1).long()).tolist()
    out = torch.full((G, N, K), float("nan"), dtype=torch.bfloat16, device="cuda")
    scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out)
    assert not out.isnan().any()
    for e in empty:
        assert (out[e] == 0).all(), "an expert with no tokens must get dW = 0"
    ref = _wgrad_reference(dy, x, offs, s_dy, s_x)
    for e in range(G):  # each expert on its own: a wrong column start would hit one expert, not the average
        if sizes[e] > 0:
            assert _rel(out[e], ref[e]) <= 4e-3, f"expert {e}"


def test_fp8_grouped_gemm_zero_rows_past_groups():
    """fp8_grouped_gemm(zero_rows_past_groups=True) (the training layers' grouped fprop / dgrad): the rows past the
    last group come out zero from the kernel's setup launch, the others as grouped_gemm writes them; under graph
    replay with new offsets the zeroed rows move with the last group's end."""
    from scalemm.grouped import fp8_grouped_gemm
    G, T, N, K = 8, 4096, 2048, 256
    sizes = _sizes(G, T - 700, seed=5, empty=(2,))
    a, b, sa, sb, offs = _problem(sizes, N, K, seed=5)
    a = torch.cat([a, (torch.randn(700, K, device="cuda") * 8).to(E4M3)])
    sa = torch.cat([sa, torch.ones(700, device="cuda")])
    want = scalemm.grouped_gemm(a, b, offs, sa, sb)
    last = int(offs[-1])
    for end in (last, T):  # rows past the groups, and none (T - end = 0)
        o = offs.clone()
        o[-1] = end
        out = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_grouped_gemm(a, b, o, sa, sb, out=out, zero_rows_past_groups=True)
        assert torch.equal(out[:last], want[:last])
        assert (out[end:] == 0).all() and not out.isnan().any()
    out = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    o = offs.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp8_grouped_gemm(a, b, o, sa, sb, out=out, zero_rows_past_groups=True)
    for ends in ([0] * G, [int(v) for v in offs.tolist()]):
        o.copy_(torch.tensor(ends, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        end = ends[-1]
        assert (out[end:] == 0).all() and not out.isnan().any()
        assert torch.equal(out[:end], want[:end])


def _wgrad_operands(G, T, N, K, sizes_seed, seed, empty):
    """Random FP8 dY [T, N] and X [T, K] over G groups (those in `empty` without tokens), their wgrad-layout copies
    and per-channel scales: (offs, dy, x, dy_t, x_t, s_dy, s_x, the generator for more)."""
    from scalemm.grouped import pad_groups_transposed
    offs = torch.cumsum(_sizes(G, T, seed=sizes_seed, empty=empty), 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(seed)
    dy = (torch.randn(T, N, device="cuda", generator=g) * 8).to(E4M3)
    x = (torch.randn(T, K, device="cuda", generator=g) * 8).to(E4M3)
    W = (T + 15 * G + 15) // 16 * 16
    dy_t, x_t = pad_groups_transposed(dy, offs, W), pad_groups_transposed(x, offs, W)
    s_dy, s_x = torch.rand(G, N, device="cuda") + 0.5, torch.rand(G, K, device="cuda") + 0.5
    return offs, dy, x, dy_t, x_t, s_dy, s_x, g


@pytest.mark.parametrize("G,T,N,K", [(8, 4096, 2048, 1024), (6, 700, 136, 256), (8, 2000, 640, 512)])
def test_grouped_wgrad_fast_accum(G, T, N, K):
    """Fast accumulation: the default kernel (clusters of 2 along N) against the reference and against the same tile
    in a cluster of 1, which computes every output element by the same operations (bit-identical)."""
    from scalemm.cutlass_kernels.configs import default_wgrad_config
    assert default_wgrad_config(N, K, fast_accum=True).cluster_m == 2
    offs, dy, x, dy_t, x_t, s_dy, s_x, _ = _wgrad_operands(G, T, N, K, G * 5, G + 1, empty=(1,))
    outs = []
    for config in (None, GemmConfig(128, 256, 128, 1, 1, "cooperative")):
        out = torch.full((G, N, K), float("nan"), dtype=torch.bfloat16, device="cuda")
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out, fast_accum=True, config=config)
        outs.append(out)
    assert not outs[0].isnan().any() and (outs[0][1] == 0).all()
    assert torch.equal(outs[0], outs[1])
    assert _rel(outs[0], _wgrad_reference(dy, x, offs, s_dy, s_x)) <= 4e-3


@pytest.mark.parametrize("G,T,N,K,fast_accum", [(8, 2000, 640, 512, False), (8, 2000, 640, 512, True),
                                                  (16, 100, 512, 768, False), (8, 900, 384, 128, False)])
def test_grouped_wgrad_accumulate(G, T, N, K, fast_accum):
    """accumulate=True: out[g] += dW_g in the epilogue, bit for bit bf16(out + the fp32 dW the same tile computes
    (the kernel with fp32 output)); experts without tokens keep their out[g]; under graph replay it adds each time."""
    from scalemm.cutlass_kernels.configs import default_wgrad_config
    offs, dy, x, dy_t, x_t, s_dy, s_x, g = _wgrad_operands(G, T, N, K, G * 3, G + 2, empty=(0, G - 1))
    cfg = default_wgrad_config(N, K, fast_accum=fast_accum)
    dw32 = scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out_dtype=torch.float32, fast_accum=fast_accum,
                                      config=cfg)
    prior = (torch.randn(G, N, K, device="cuda", generator=g) * 100).to(torch.bfloat16)
    out = prior.clone()
    scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out, accumulate=True, fast_accum=fast_accum)
    assert torch.equal(out, (prior.float() + dw32).to(torch.bfloat16))
    assert torch.equal(out[0], prior[0]) and torch.equal(out[G - 1], prior[G - 1])
    ref = _wgrad_reference(dy, x, offs, s_dy, s_x)
    assert _rel(out, prior.double() + ref) <= 4e-3
    out.copy_(prior)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s_dy, s_x, out=out, accumulate=True, fast_accum=fast_accum)
    out.copy_(prior)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    once = (prior.float() + dw32).to(torch.bfloat16)
    assert torch.equal(out, (once.float() + dw32).to(torch.bfloat16))


def test_grouped_wgrad_graph_capture_and_errors():
    from scalemm.grouped import pad_groups_transposed
    G, T, N, K = 4, 512, 256, 512
    W = (T + 15 * G + 15) // 16 * 16
    offs = torch.tensor([100, 100, 300, 512], dtype=torch.int32, device="cuda")
    dy = (torch.randn(T, N, device="cuda") * 8).to(E4M3)
    x = (torch.randn(T, K, device="cuda") * 8).to(E4M3)
    s = torch.ones(G, device="cuda")
    dy_t, x_t = pad_groups_transposed(dy, offs, W), pad_groups_transposed(x, offs, W)
    out = torch.empty(G, N, K, dtype=torch.bfloat16, device="cuda")
    scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, s, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, s, out=out)
    offs.copy_(torch.tensor([0, 256, 256, 512], dtype=torch.int32))
    dy_t.copy_(pad_groups_transposed(dy, offs, W)); x_t.copy_(pad_groups_transposed(x, offs, W))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, _wgrad_reference(dy, x, offs, s, s)) <= 4e-3
    with pytest.raises(ValueError, match="W differs"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t[:, :W - 16].contiguous(), offs, s, s)
    with pytest.raises(ValueError, match="scale_x must be"):
        scalemm.grouped_gemm_wgrad(dy_t, x_t, offs, s, torch.ones(G, N + 1, device="cuda"))
    with pytest.raises(ValueError, match="multiple of 16"):
        scalemm.grouped_gemm_wgrad(dy_t[:, :W - 8].contiguous(), x_t[:, :W - 8].contiguous(), offs, s, s)


def test_grouped_containers_end_to_end():
    """quantize_fp8_grouped / quantize_fp8_stacked containers go straight into the grouped GEMMs."""
    G, T, N, K = 8, 1024, 512, 256
    sizes = _sizes(G, T, seed=21, empty=(3,))
    offs = torch.cumsum(sizes, 0).to(torch.int32).cuda()
    g = torch.Generator(device="cuda").manual_seed(21)
    x = torch.randn(T, K, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(G, N, K, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    dy = torch.randn(T, N, device="cuda", generator=g).to(torch.bfloat16)
    xq = scalemm.quantize_fp8_grouped(x, offs, scaling="token", columnwise=True)
    wq = scalemm.quantize_fp8_stacked(w, scaling="token")
    y = scalemm.grouped_gemm(xq, wq, None)
    w8, sw = wq.data.view(G, N, K), wq.scale_inv.view(G, N)
    assert _rel(y, _reference(xq.data, w8, offs, xq.scale_inv, sw)) <= 4e-3  # exact on the quantized data
    bounds = [0] + offs.tolist()
    true_y = torch.cat([x[s:e].double() @ w[i].double().T for i, (s, e) in enumerate(zip(bounds, bounds[1:]))])
    assert _rel(y, true_y) < 0.08  # e4m3 quantization of both operands
    dyq = scalemm.quantize_fp8_grouped(dy, offs, scaling="token", columnwise=True)
    dw = scalemm.grouped_gemm_wgrad(dyq, xq)
    assert dw.shape == (G, N, K) and (dw[3] == 0).all()
    true_dw = torch.stack([dy[s:e].double().T @ x[s:e].double() for s, e in zip(bounds, bounds[1:])])
    assert _rel(dw, true_dw) < 0.08
    with pytest.raises(ValueError, match="offsets=None"):
        scalemm.grouped_gemm(xq, wq, offs.clone())
    with pytest.raises(ValueError, match="carries its own scale"):
        scalemm.grouped_gemm(xq, wq, None, xq.scale_inv)


@pytest.mark.parametrize("offs", [[10, 10, 30, 40], [30, 10, 60, 45], [-4, 70, 20, 48], [48, 48, 48, 48]])
def test_pad_groups_transposed_bad_cuda_offsets_stay_in_bounds(offs):
    """CUDA offsets are not read on the host: decreasing, negative or past-T offsets must neither fault
    nor trip a device-side assert (which would kill the CUDA context); the groups follow the clamping
    rule (clamp into [0, T], then a running max), i.e. the CPU result for the clamped offsets."""
    from scalemm.grouped import pad_groups_transposed
    T, C, W = 48, 32, 112
    x = (torch.randn(T, C) * 8).to(E4M3)
    o = torch.tensor(offs, dtype=torch.int32)
    got = pad_groups_transposed(x.cuda(), o.cuda(), W)
    torch.cuda.synchronize()  # a device-side assert would surface here and poison every later call
    clamped = torch.cummax(o.long().clamp(0, T), 0).values.to(torch.int32)
    want = pad_groups_transposed(x, clamped, W)
    assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(torch.ones(4, device="cuda").sum().cpu(), torch.tensor(4.0))  # the context still works
