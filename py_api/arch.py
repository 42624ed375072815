"""Which kernels a GPU gets: the one capability check of every op that launches kernels.

`kernel_arch(device)` maps the device's compute capability to the architecture whose configs
(cutlass_kernels/configs/<arch>.py) and kernels scalemm has, "sm90" for Hopper (9.0), and raises
NotImplementedError for any other GPU. gemm, grouped_gemm, grouped_gemm_wgrad, the NVFP4 GEMMs and
every quantizer call it before launching anything on a CUDA tensor (CPU tensors run the torch
reference and never ask); tests/conftest.py skips the GPU tests with `gpu_skip_reason()`.

The device's name, capability and SM count are read once per device and kept (`gpu_info`), so
the check costs a dictionary lookup per call.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cutlass_kernels import configs as _configs

# compute capability -> the architecture name of cutlass_kernels/configs/<name>.py
KERNEL_ARCHS = {(9, 0): "sm90"}
SUPPORTED = "sm_90: H100, H200"  # for messages


@dataclass(frozen=True)
class GpuInfo:
    name: str
    capability: tuple[int, int]
    num_sms: int


_info: dict[int, GpuInfo] = {}
_archs: dict = {}  # device (as the ops pass it) -> kernel arch, for GPUs that have kernels


def _query(index: int) -> GpuInfo:
    """The device's properties from the driver (tests replace this to fake a GPU)."""
    p = torch.cuda.get_device_properties(index)
    return GpuInfo(p.name, (p.major, p.minor), p.multi_processor_count)


def _index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def gpu_info(device=None) -> GpuInfo:
    """Name, compute capability and SM count of a CUDA device (the current one by default), cached."""
    index = _index(device)
    info = _info.get(index)
    if info is None:
        info = _info[index] = _query(index)
    return info


class on_device:
    """`device` current for the block (torch.cuda.device(device), skipped when it already is: the common case, and
    cheaper). Every kernel launch on CUDA tensors runs inside one, for the tensors' device: the kernel libraries
    link a static CUDA runtime, which launches on the calling thread's current device whatever device the stream
    and the pointers belong to, so a launch for tensors on cuda:1 while cuda:0 is current would run on cuda:0 (and
    read cuda:1's memory from there, or fault). torch.cuda.device sets the thread's current context, which that
    runtime reads too; the previous device is restored on exit. Host-only queries of a kernel library (a workspace
    size, the skinny kernel's split) run inside one as well: their launchers select the device themselves
    (cudaSetDevice), which would otherwise leave it current for torch too (tests/test_multi_gpu.py). With one
    visible GPU (torch caches the count once CUDA is up) there is nothing to select: no query per launch."""
    __slots__ = ("index", "prev")

    def __init__(self, device: torch.device | int):
        self.index, self.prev = device if isinstance(device, int) else device.index, None

    def __enter__(self):
        if self.index is None or torch.cuda.device_count() < 2:
            return
        cur = torch.cuda.current_device()
        if self.index != cur:
            self.prev = cur
            torch.cuda.set_device(self.index)

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.cuda.set_device(self.prev)


def _reset() -> None:
    """Forget the devices seen (tests: after faking one)."""
    _info.clear()
    _archs.clear()


def sm_name(capability: tuple[int, int]) -> str:
    """(10, 0) -> 'sm_100', (8, 9) -> 'sm_89'."""
    return f"sm_{capability[0]}{capability[1]}"


def kernel_arch(device=None) -> str:
    """The kernel architecture of a CUDA device ("sm90"), or NotImplementedError naming what it is."""
    arch = _archs.get(device)  # the per-call path: one dictionary read
    if arch is not None:
        return arch
    info = gpu_info(device)
    arch = KERNEL_ARCHS.get(info.capability)
    if arch is None:
        raise NotImplementedError(
            f"scalemm has no kernels for {sm_name(info.capability)} yet ({info.name}, compute capability "
            f"{info.capability[0]}.{info.capability[1]}); it has kernels for {SUPPORTED}. CPU tensors run "
            "the torch reference (scalemm.reference)")
    if isinstance(device, int) or (isinstance(device, torch.device) and device.index is not None):
        _archs[device] = arch  # (not None or "cuda": whichever device is current)
    return arch


def configs_for(device=None):
    """The configs module (cutlass_kernels/configs/<arch>.py) of a CUDA device's architecture."""
    return _configs.for_arch(kernel_arch(device))


def gpu_skip_reason() -> str | None:
    """None when the current CUDA device has scalemm kernels, else why GPU tests cannot run here."""
    if not torch.cuda.is_available():
        return f"needs a CUDA GPU scalemm has kernels for ({SUPPORTED}); none is available"
    try:
        kernel_arch()
    except NotImplementedError as e:
        return str(e)
    return None
