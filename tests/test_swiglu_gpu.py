"""scalemm.swiglu's kernels (cutlass_kernels/include/scalemm/swiglu.cuh) on a Hopper GPU: against the fp64 values
(one unit in the last place for 16-bit outputs, as the reference) and against scalemm.reference (mostly equal:
the same fp32 formulas, CUDA's expf and FMA contractions aside), on the vector and the element paths, on outputs
pre-filled with 0xFF and with 0x00 (every element written), CUDA-graph capture, autograd."""
import pytest
import torch
import torch.nn.functional as F

import scalemm
from scalemm import reference
from scalemm.activation import swiglu_backward, swiglu_forward
from test_swiglu import exact, term_scale, ulp_error

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def cuda_inputs(shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * 3).to(dtype)


@pytest.fixture(params=[0xFF, 0x00], ids=["poison_ff", "poison_00"])
def poisoned(request, monkeypatch):
    """Outputs pre-filled with this byte (scalemm.quantize._poison_byte, which the swiglu outputs are allocated
    through too), so an element the kernel does not write cannot pass the checks."""
    import scalemm.quantize as sq
    monkeypatch.setattr(sq, "_poison_byte", request.param)
    return request.param


def check(h, d, a, dh):
    tol = 1.0 if h.dtype != torch.float32 else 8.0
    assert ulp_error(a.cpu(), exact(h.cpu())) <= tol
    assert ulp_error(dh.cpu(), exact(h.cpu(), d.cpu()), term_scale(h.cpu(), d.cpu())) <= tol
    if h.dtype != torch.float32:  # the reference's fp32 formulas: almost always the same bits
        for got, ref in ((a, reference.swiglu(h)), (dh, reference.swiglu_backward(h, d))):
            assert (got == ref).float().mean() > 0.99


# (shape of h, what it exercises): I multiple of the vector (16-byte path), I odd (element path), real MLP widths
SHAPES = [(65, 2 * 768), (7, 2 * 7), (3, 5, 2 * 96), (1, 2 * 1), (4097, 2 * 1536), (129, 2 * 12), (2, 2 * 14336)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_kernels_match_the_reference(shape, dtype, poisoned):
    h = cuda_inputs(shape, dtype)
    d = cuda_inputs((*shape[:-1], shape[-1] // 2), dtype, seed=1)
    a = swiglu_forward(h)
    dh = swiglu_backward(h, d)
    assert a.shape == d.shape and dh.shape == h.shape and a.dtype == dh.dtype == dtype
    check(h, d, a, dh)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_and_strided_inputs(dtype, poisoned):
    rows, inner = 33, 64
    base = cuda_inputs((rows * 2 * inner + 1,), dtype)
    h = base[1:].view(rows, 2 * inner)  # contiguous but not 16-byte aligned: the element path
    d = cuda_inputs((rows * inner + 1,), dtype, seed=1)[1:].view(rows, inner)
    check(h, d, swiglu_forward(h), swiglu_backward(h, d))
    ht = cuda_inputs((2 * inner, rows), dtype).t()  # not contiguous: copied first
    dt = cuda_inputs((inner, rows), dtype, seed=2).t()
    check(ht, dt, swiglu_forward(ht), swiglu_backward(ht, dt))


def test_special_values_follow_torch():
    h = torch.tensor([[float("-inf"), float("inf"), float("nan"), 0.0, -100.0, 100.0, 1e-40, -88.0,
                       2.0, 2.0, 2.0, 2.0, float("inf"), 0.0, 1.0, 1.0]], device="cuda")
    for dtype in DTYPES:
        x = h.to(dtype)
        a = scalemm.swiglu(x)
        g, u = x.chunk(2, dim=-1)
        t = F.silu(g.float()) * u.float()
        assert torch.equal(a.isnan(), t.isnan()), (dtype, a, t)
        fin = ~t.isnan()
        assert torch.allclose(a[fin].float(), t[fin].to(dtype).float(), rtol=2 ** -7, atol=0), (dtype, a, t)


def test_empty():
    for shape in [(0, 16), (4, 0, 16)]:
        h = torch.zeros(shape, device="cuda", requires_grad=True)
        a = scalemm.swiglu(h)
        assert a.shape == (*shape[:-1], 8)
        a.sum().backward()
        assert h.grad.shape == h.shape


def test_autograd_on_gpu():
    h = cuda_inputs((256, 2 * 384), torch.bfloat16).requires_grad_()
    d = cuda_inputs((256, 384), torch.bfloat16, seed=3)
    a = scalemm.swiglu(h)
    a.backward(d)
    assert torch.equal(a, swiglu_forward(h.detach()))
    assert torch.equal(h.grad, swiglu_backward(h.detach(), d))


def test_cuda_graph_capture_and_replay():
    h = cuda_inputs((512, 2 * 256), torch.bfloat16)
    d = cuda_inputs((512, 256), torch.bfloat16, seed=1)
    swiglu_forward(h), swiglu_backward(h, d)  # loaded before the capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph):
        a = swiglu_forward(h)
        dh = swiglu_backward(h, d)
    torch.cuda.current_stream().wait_stream(s)
    for seed in (5, 6):
        h.copy_(cuda_inputs(h.shape, h.dtype, seed=seed))
        d.copy_(cuda_inputs(d.shape, d.dtype, seed=seed + 10))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(a, swiglu_forward(h)) and torch.equal(dh, swiglu_backward(h, d))


def test_more_than_2_32_packs_take_the_64_bit_row_division():
    """Past 2^32 packs the kernels find a pack's row by a 64-bit division instead of the magic number: an odd I (the
    element path, one element per pack) over 65537 rows is 4.3e9 packs. The rows around pack 2^32 and the ends are
    checked against the reference."""
    rows, inner = 65537, 65539
    need = rows * inner * 2 * 6  # h, dh (2I each), a and dout (I each), bf16
    if torch.cuda.mem_get_info()[0] < need + (4 << 30):
        pytest.skip(f"needs {need / 2**30:.0f} GiB of free GPU memory")
    h = torch.empty(rows, 2 * inner, device="cuda", dtype=torch.bfloat16).normal_(0, 3)
    d = torch.empty(rows, inner, device="cuda", dtype=torch.bfloat16).normal_()
    a = swiglu_forward(h)
    dh = swiglu_backward(h, d)
    boundary = (1 << 32) // inner  # the row holding pack 2^32
    for r in (0, boundary - 1, boundary, boundary + 1, rows - 1):
        ra, rdh = reference.swiglu(h[r:r + 1]), reference.swiglu_backward(h[r:r + 1], d[r:r + 1])
        assert (a[r:r + 1] == ra).float().mean() > 0.99, r
        assert (dh[r:r + 1] == rdh).float().mean() > 0.99, r
        assert ulp_error(a[r:r + 1].cpu(), exact(h[r:r + 1].cpu())) <= 1.0, r
