"""Tensors on a second GPU: every op family on cuda:1 gives, bit for bit, what it gives on cuda:0, whether cuda:1
is the current device or not (a model split over GPUs, e.g. Hugging Face's device_map="auto", calls layers on
cuda:1 while cuda:0 stays current), leaves the current device as it was, and runs in a CUDA graph captured on
cuda:1. The kernel libraries link a static CUDA runtime, which launches on the thread's current device whatever
device the stream and pointers are on: every call runs inside scalemm.arch.on_device (tests/test_arch.py checks
the call sites on the CPU). Before that guard covered the NVFP4 helper kernels, their launches for cuda:1 tensors
ran on cuda:0 and faulted (CUDA error 700 in the NVFP4 training layers), or read cuda:1's memory from cuda:0
(compute-sanitizer memcheck: out-of-bounds reads) while their results still matched; so run this file under
`compute-sanitizer --tool memcheck` as well. Needs two Hopper GPUs (skipped otherwise). Shapes are those of
tests/test_train_gpu.py and perf/gemm_sweep.py, so their kernels come with `python -m scalemm build --set train` /
`--set sweep`.
"""
import pytest
import torch

import scalemm
from scalemm.nn import GroupedLinear, Linear
from scalemm.recipes import NVFP4, FP8DelayedScaling, FP8Rowwise, FP8Tensorwise

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs")]

RECIPES = {"fp8_tensorwise": FP8Tensorwise(), "fp8_rowwise": FP8Rowwise(), "fp8_delayed": FP8DelayedScaling(),
           "nvfp4": NVFP4()}
DEVICE_CONTEXTS = ("cuda:0 current", "cuda:1 current")


def _tensors(obj, prefix="out"):
    """{name: tensor} of a tensor, a tuple / list / dict of them, or a scalemm container (its slots, nested)."""
    if obj is None or isinstance(obj, (int, float, str, bool, torch.dtype, torch.Size)):
        return {}
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, (tuple, list)):
        return {k: v for i, o in enumerate(obj) for k, v in _tensors(o, f"{prefix}[{i}]").items()}
    if isinstance(obj, dict):
        return {k: v for n, o in obj.items() for k, v in _tensors(o, f"{prefix}.{n}").items()}
    slots = [s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ())]
    assert slots, f"{prefix}: cannot compare a {type(obj).__name__}"
    return {k: v for s in slots for k, v in _tensors(getattr(obj, s, None), f"{prefix}.{s}").items()}


def _same_on_both(run, seed=0, sums=()):
    """run(device) on cuda:0 (current), then on cuda:1 with cuda:0 current and with cuda:1 current; every tensor
    it returns must be on the device it ran on and equal to cuda:0's bit for bit, except the outputs named in
    `sums` (torch's index_add_ sums with float atomics, in no fixed order: within 1e-5), and the current device
    must be the same after each call as before it."""
    torch.cuda.set_device(0)
    torch.manual_seed(seed)  # every GPU's generator: stochastic rounding draws the same seeds on each
    ref = {k: v.cpu() for k, v in _tensors(run(torch.device("cuda:0"))).items()}
    torch.cuda.synchronize(0)
    assert ref, "run returned no tensors"
    for ctx in DEVICE_CONTEXTS:
        print(f"cuda:1 with {ctx}", flush=True)  # (pytest -s: which context a crash came from)
        torch.cuda.set_device(1 if ctx == "cuda:1 current" else 0)
        try:
            torch.manual_seed(seed)
            before = torch.cuda.current_device()
            got = _tensors(run(torch.device("cuda:1")))
            assert torch.cuda.current_device() == before, f"{ctx}: the current device changed to cuda:" \
                                                          f"{torch.cuda.current_device()}"
            torch.cuda.synchronize(1)
        finally:
            torch.cuda.set_device(0)
        assert got.keys() == ref.keys(), ctx
        for k, v in got.items():
            assert v.device == torch.device("cuda:1"), f"{ctx}: {k} is on {v.device}"
            assert v.dtype == ref[k].dtype and v.shape == ref[k].shape, f"{ctx}: {k}"
            if k in sums:
                torch.testing.assert_close(v.cpu(), ref[k], rtol=1e-5, atol=1e-6, msg=f"{ctx}: {k}")
            else:
                assert torch.equal(_bytes(v), _bytes(ref[k])), f"{ctx}: {k} differs from cuda:0's"


def _bytes(t):
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _randn(shape, device, seed, dtype=torch.bfloat16, scale=1.0):
    g = torch.Generator().manual_seed(seed)  # made on the CPU: the same values for every device
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(device)


def test_quantizers_on_the_second_gpu():
    def run(dev):
        x = _randn((256, 512), dev, 1)
        offsets = torch.tensor([0, 100, 100, 256], dtype=torch.int32, device=dev)
        w = _randn((4, 128, 256), dev, 2)
        return (scalemm.quantize_fp8(x, scaling="token", columnwise=True),
                scalemm.quantize_fp8(x, scaling="tensor", columnwise=True),
                scalemm.quantize_nvfp4(x, scaling="token", columnwise=True, rht=True),
                scalemm.quantize_nvfp4(x, stochastic_rounding=True, seed=7),
                scalemm.quantize_mxfp8(x, columnwise=True),
                scalemm.quantize_fp8_grouped(x, offsets, scaling="token", columnwise=True),
                scalemm.quantize_nvfp4_grouped(x, offsets, scaling="token"),
                scalemm.quantize_fp8_stacked(w, columnwise=True),
                scalemm.quantize_nvfp4_stacked(w, scaling="token"))
    _same_on_both(run)


@pytest.mark.parametrize("M", [1, 16, 1024])
def test_gemms_on_the_second_gpu(M):
    N = K = 4096

    def run(dev):
        x = _randn((M, K), dev, 3)
        w = _randn((N, K), dev, 4, scale=0.05)
        xq, wq = scalemm.quantize_fp8(x, scaling="token"), scalemm.quantize_fp8(w, scaling="token")
        w4 = scalemm.quantize_nvfp4(w, scaling="token")
        return (scalemm.gemm(xq, wq, fast_accum=True),                             # FP8
                scalemm.gemm(x, w4),                                                # NVFP4 W4A16
                scalemm.gemm(scalemm.quantize_nvfp4(x, scaling="token"), w4))       # NVFP4 W4A4
    _same_on_both(run)


def test_grouped_gemms_on_the_second_gpu():
    G, N, K, T = 128, 1536, 2048, 8192  # Qwen3-30B-A3B's gate_up at 1024 tokens (perf/grouped_sweep.py)

    def run(dev):
        g = torch.Generator().manual_seed(5)
        sizes = torch.distributions.Categorical(torch.rand(G, generator=g) ** 3).sample((T,)).bincount(minlength=G)
        offsets = sizes.cumsum(0).to(torch.int32).to(dev)
        x = _randn((T, K), dev, 6)
        w = _randn((G, N, K), dev, 7, scale=0.05)
        xq = scalemm.quantize_fp8_grouped(x, offsets, scaling="token")
        wq = scalemm.quantize_fp8_stacked(w)
        return (scalemm.grouped_gemm(xq, wq, offsets, fast_accum=True),
                scalemm.grouped_gemm(x, scalemm.quantize_nvfp4_stacked(w, scaling="token"), offsets))
    _same_on_both(run)


@pytest.mark.parametrize("name", RECIPES)
def test_linear_on_the_second_gpu(name):
    """Forward and backward of Linear (the shape of tests/test_train_gpu.py)."""
    def run(dev):
        torch.manual_seed(0)
        layer = Linear(256, 512, recipe=RECIPES[name], device=dev)
        x = _randn((3, 70, 256), dev, 8).requires_grad_()
        y = layer(x)
        torch.manual_seed(1)
        y.backward(_randn(y.shape, dev, 10))
        return y, x.grad, layer.weight.grad, layer.bias.grad
    _same_on_both(run)


@pytest.mark.parametrize("name", RECIPES)
def test_grouped_linear_on_the_second_gpu(name):
    """Forward and backward of GroupedLinear with empty experts and rows past the last group (the shape of
    tests/test_train_gpu.py)."""
    def run(dev):
        torch.manual_seed(0)
        moe = GroupedLinear(4, 256, 128, bias=True, recipe=RECIPES[name], device=dev)
        x = _randn((300, 256), dev, 9).requires_grad_()
        offsets = torch.tensor([0, 100, 100, 290], dtype=torch.int32, device=dev)
        y = moe(x, offsets)
        torch.manual_seed(1)
        y.backward(_randn(y.shape, dev, 11))
        return y, x.grad, moe.weight.grad, moe.bias.grad
    _same_on_both(run, sums=("out[3]",))  # the bias gradient: torch's index_add_ (_group_sums)


def test_cuda_graph_captured_on_the_second_gpu():
    """A quantize + FP8 GEMM + NVFP4 GEMM captured on cuda:1 with cuda:0 current outside the capture, replayed on
    new inputs: the replay's outputs are the eager ones."""
    M, N, K = 16, 4096, 4096
    dev = torch.device("cuda:1")
    x, w = _randn((M, K), dev, 12), _randn((N, K), dev, 13, scale=0.05)
    wq, w4 = scalemm.quantize_fp8(w, scaling="token"), scalemm.quantize_nvfp4(w, scaling="token")

    def step(x):
        return scalemm.gemm(scalemm.quantize_fp8(x, scaling="token"), wq, fast_accum=True), scalemm.gemm(x, w4)
    torch.cuda.set_device(0)
    with torch.cuda.device(dev):
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            step(x)  # warm-up: kernels loaded, prepared weight copies made
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step(x)
    x.copy_(_randn((M, K), dev, 14))
    graph.replay()
    torch.cuda.synchronize(dev)
    assert torch.cuda.current_device() == 0
    for got, want in zip(outs, step(x)):
        assert got.device == dev and torch.equal(got, want)
