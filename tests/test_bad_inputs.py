"""Bad input to the public ops and modules raises a clear error that names the argument, before anything runs: one table of the
checks no other CPU test reaches (found by running the CPU suite under coverage and listing the `raise` lines it
never took). Every case runs on CPU tensors (a meta tensor stands in for a second device); the checks are the ones
the CUDA path makes too.
"""
import json

import pytest
import torch

import scalemm
from scalemm import nn as snn
from scalemm import recipes
from scalemm.formats import layout, nvfp4
from scalemm.formats import FP8Tensor, GroupedFP8Tensor, NVFP4Tensor
from scalemm.grouped import grouped_gemm_wgrad

E4M3 = torch.float8_e4m3fn


def _fp8(*shape):
    return torch.ones(shape).to(E4M3)


def _grouped():
    """An FP8 grouped problem: a [16, 32], b [2, 16, 32], offsets [8, 16], per-token / per-channel scales."""
    return _fp8(16, 32), _fp8(2, 16, 32), torch.tensor([8, 16], dtype=torch.int32), torch.ones(16), torch.ones(2, 16)


def _wgrad():
    """A grouped wgrad problem: dy_t [16, 32], x_t [32, 32] (W = 32 padded token columns), offsets [8, 16]."""
    return _fp8(16, 32), _fp8(32, 32), torch.tensor([8, 16], dtype=torch.int32), torch.ones(2), torch.ones(2)


def _x4():
    offs = torch.tensor([8, 16], dtype=torch.int32)
    return scalemm.quantize_nvfp4_grouped(torch.randn(16, 32), offs), scalemm.quantize_nvfp4_stacked(
        torch.randn(2, 16, 32)), offs


def _history(H=4, G=3, **bad):
    args = dict(history=torch.zeros(H, G), amax=torch.ones(G), next_amax=torch.zeros(G))
    args.update(bad)
    return args


def _fp8_tensor():
    return (scalemm.quantize_fp8(torch.randn(16, 32), columnwise=True),)


def _nvfp4_tensor():
    return (scalemm.quantize_nvfp4(torch.randn(16, 32)),)


def _grouped_fp8_tensor():
    return (scalemm.quantize_fp8_grouped(torch.randn(16, 32), torch.tensor([8, 16], dtype=torch.int32),
                                         columnwise=True),)


CASES = {
    # FP8 grouped GEMM
    "grouped: scale_a per token of the wrong length": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, torch.ones(15), sb, scale_a_per="token"),
        _grouped, ValueError, r"scale_a per token must hold T = 16 values, got 15"),
    "grouped: scale_a per group of the wrong length": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, torch.ones(3), sb, scale_a_per="group"),
        _grouped, ValueError, r"scale_a per group must hold G = 2 values, got 3"),
    "grouped: a non-contiguous operand": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(_fp8(32, 16).t(), b, o, sa, sb),
        _grouped, ValueError, r"^a must be contiguous"),
    "grouped: a scale missing": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, sa, None),
        _grouped, ValueError, r"scale_a and scale_b are required"),
    "grouped: a scale of another dtype": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, sa.double(), sb),
        _grouped, TypeError, r"scale_a must be a contiguous float32 tensor on cpu"),
    "grouped: an unknown scale_a_per": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, sa, sb, scale_a_per="row"),
        _grouped, ValueError, r"scale_a_per must be None, 'token' or 'group', got 'row'"),
    "grouped: out of the wrong shape": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, b, o, sa, sb, out=torch.empty(16, 8, dtype=torch.bfloat16)),
        _grouped, ValueError, r"out must be a contiguous \[16, 16\] tensor of torch.bfloat16 on cpu"),
    "grouped: a GroupedFP8Tensor with a scale_a": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(scalemm.quantize_fp8_grouped(torch.randn(16, 32), o), b, None,
                                                     sa, sb),
        _grouped, ValueError, r"a is a GroupedFP8Tensor: it carries its own scale; pass scale_a=None"),
    "grouped: a GroupedFP8Tensor's wgrad-layout copy as a": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(
            scalemm.quantize_fp8_grouped(torch.randn(16, 32), o, columnwise=True).columnwise, b, None, None, sb),
        _grouped, ValueError, r"a: grouped_gemm takes the rowwise \('rows' layout\) copy"),
    "grouped: grouped activations as the weights": (
        lambda a, b, o, sa, sb: scalemm.grouped_gemm(a, scalemm.quantize_fp8_grouped(torch.randn(16, 32), o), o,
                                                     sa, None),
        _grouped, ValueError, r"b: a GroupedFP8Tensor weight must come from quantize_fp8_stacked"),
    # FP8 grouped wgrad
    "wgrad: one container, one tensor": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(
            scalemm.quantize_fp8_grouped(torch.randn(16, 16), o, columnwise=True), x, o, None, sx),
        _wgrad, ValueError, r"pass both dy_t and x_t as GroupedFP8Tensors"),
    "wgrad: a container without its columnwise copy": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(scalemm.quantize_fp8_grouped(torch.randn(16, 16), o), x, o),
        _wgrad, ValueError, r"dy_t: quantize with columnwise=True"),
    "wgrad: dy_t of another dtype": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy.float(), x, o, sd, sx),
        _wgrad, TypeError, r"dy_t must be a float8_e4m3fn tensor"),
    "wgrad: x_t not 2-D": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy, x.view(2, 16, 32), o, sd, sx),
        _wgrad, ValueError, r"x_t must be a contiguous 2-D tensor"),
    "wgrad: operands on two devices": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy, x.to("meta"), o, sd, sx),
        _wgrad, ValueError, r"dy_t and x_t must be on the same device"),
    "wgrad: offsets of another dtype": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy, x, o.long(), sd, sx),
        _wgrad, ValueError, r"offsets must be a contiguous 1-D int32 tensor on cpu"),
    "wgrad: a scale of another dtype": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy, x, o, sd.double(), sx),
        _wgrad, TypeError, r"scale_dy must be a contiguous float32 tensor on cpu"),
    "wgrad: out of the wrong shape": (
        lambda dy, x, o, sd, sx: grouped_gemm_wgrad(dy, x, o, sd, sx, out=torch.empty(2, 16, 16,
                                                                                      dtype=torch.bfloat16)),
        _wgrad, ValueError, r"out must be a contiguous \[2, 16, 32\] tensor of torch.bfloat16 on cpu"),
    # FP8 dense GEMM scales
    "gemm: an FP8Tensor with a scale": (
        lambda: scalemm.gemm(scalemm.quantize_fp8(torch.randn(4, 32)), _fp8(16, 32), torch.ones(()), torch.ones(())),
        lambda: (), ValueError, r"a is an FP8Tensor: it carries its own scale; pass scale_a=None"),
    "gemm: a scale that is not a tensor": (
        lambda: scalemm.gemm(_fp8(4, 32), _fp8(16, 32), 1.0, torch.ones(())),
        lambda: (), TypeError, r"scale_a must be a float32 tensor \(one value or"),
    "gemm: a scale on another device": (
        lambda: scalemm.gemm(_fp8(4, 32), _fp8(16, 32), torch.ones((), device="meta"), torch.ones(())),
        lambda: (), ValueError, r"scale_a is on meta, the operands on cpu"),
    "gemm: a non-contiguous scale": (
        lambda: scalemm.gemm(_fp8(4, 32), _fp8(16, 32), torch.ones(()), torch.ones(16, 2)[:, 0]),
        lambda: (), ValueError, r"scale_b must be contiguous"),
    "gemm: b that is not a tensor": (
        lambda: scalemm.gemm(_fp8(4, 32), [[1.0]], torch.ones(()), torch.ones(())),
        lambda: (), TypeError, r"b must be a torch.Tensor or FP8Tensor, got list"),
    # NVFP4 GEMMs
    "nvfp4: activations with K of another size": (
        lambda: scalemm.gemm(scalemm.quantize_nvfp4(torch.randn(4, 64)), scalemm.quantize_nvfp4(torch.randn(16, 32))),
        lambda: (), ValueError, r"a is \[M, K\] = \[4, 64\] and b is \[N, K\] = \[16, 32\]: K differs"),
    "nvfp4: activations with only the columnwise copy": (
        lambda: scalemm.gemm(scalemm.quantize_nvfp4(torch.randn(16, 32), rowwise=False, columnwise=True),
                             scalemm.quantize_nvfp4(torch.randn(16, 32))),
        lambda: (), ValueError, r"a must be an NVFP4Tensor with a rowwise copy and no RHT"),
    "nvfp4 grouped: activations with K of another size": (
        lambda x4, w4, o: scalemm.grouped_gemm(scalemm.quantize_nvfp4_grouped(torch.randn(16, 64), o), w4, None),
        _x4, ValueError, r"a has K = 64, the weights K = 32"),
    "nvfp4 grouped: the wgrad-layout copy as activations": (
        lambda x4, w4, o: scalemm.grouped_gemm(
            scalemm.quantize_nvfp4_grouped(torch.randn(16, 32), o, columnwise=True).columnwise, w4, None),
        _x4, ValueError, r"a must be the rowwise \('rows' layout\) copy of quantize_nvfp4_grouped"),
    "nvfp4 grouped: a bias of the wrong shape": (
        lambda x4, w4, o: scalemm.grouped_gemm(x4, w4, None, bias=torch.zeros(3, dtype=torch.bfloat16)),
        _x4, ValueError, r"bias must be a contiguous \[G, N\] or \[N\] tensor of torch.bfloat16 on cpu"),
    # the amax history step (FP8 delayed scaling)
    "history: not a tensor": (
        lambda: scalemm.quantize.advance_amax_history(**_history(history=[0.0])),
        lambda: (), TypeError, r"'history' must be a torch.Tensor, got list"),
    "history: amax on another device": (
        lambda: scalemm.quantize.advance_amax_history(**_history(amax=torch.ones(3, device="meta"))),
        lambda: (), ValueError, r"'amax' is on meta but 'history' is on cpu"),
    "history: a non-contiguous next_amax": (
        lambda: scalemm.quantize.advance_amax_history(**_history(next_amax=torch.zeros(3, 2)[:, 0])),
        lambda: (), ValueError, r"'next_amax' must be contiguous"),
    # quantizers
    "quantize: a generator that is not one": (
        lambda: scalemm.quantize_nvfp4(torch.randn(16, 32), columnwise=True, stochastic_rounding=True,
                                       generator=123),
        lambda: (), TypeError, r"'generator' must be a torch.Generator or None, got int"),
    "quantize: empty stacked weights": (
        lambda: scalemm.quantize_fp8_stacked(torch.randn(0, 16, 32)),
        lambda: (), ValueError, r"'w' must not be empty"),
    # containers built by hand (from saved fields, say)
    "FP8Tensor: data of another dtype": (
        lambda q: FP8Tensor(q.data.float(), q.scale_inv, q.scaling, q.orig_dtype),
        _fp8_tensor, TypeError, r"FP8Tensor: 'data' must have dtype torch.float8_e4m3fn, got torch.float32"),
    "FP8Tensor: data that is not a tensor": (
        lambda q: FP8Tensor([1], q.scale_inv, q.scaling, q.orig_dtype),
        _fp8_tensor, TypeError, r"FP8Tensor: 'data' must be a torch.Tensor, got list"),
    "FP8Tensor: data not 2-D": (
        lambda q: FP8Tensor(q.data.view(-1), q.scale_inv, q.scaling, q.orig_dtype),
        _fp8_tensor, ValueError, r"FP8Tensor: 'data' must be 2-D \[M, K\], got shape \(512,\)"),
    "FP8Tensor: an orig_dtype no quantizer takes": (
        lambda q: FP8Tensor(q.data, q.scale_inv, q.scaling, torch.int8),
        _fp8_tensor, TypeError, r"FP8Tensor: 'orig_dtype' must be one of"),
    "FP8Tensor: nothing in it": (
        lambda q: FP8Tensor(None, None, q.scaling, q.orig_dtype),
        _fp8_tensor, ValueError, r"FP8Tensor: rowwise fields are None and 'columnwise' is None"),
    "FP8Tensor: a columnwise copy of another kind": (
        lambda q: FP8Tensor(q.data, q.scale_inv, q.scaling, q.orig_dtype, columnwise=q.data),
        _fp8_tensor, TypeError, r"FP8Tensor: 'columnwise' must be a FP8Tensor or None, got Tensor"),
    "FP8Tensor: a columnwise copy with its own": (
        lambda q: FP8Tensor(q.data, q.scale_inv, q.scaling, q.orig_dtype, columnwise=q),
        _fp8_tensor, ValueError, r"FP8Tensor: 'columnwise' must not itself carry a columnwise copy"),
    "FP8Tensor.to: a dtype": (
        lambda q: q.to(torch.float16), _fp8_tensor, TypeError, r"FP8Tensor.to takes a device, got the dtype"),
    "FP8Tensor.to: not a device": (
        lambda q: q.to(1.5), _fp8_tensor, TypeError, r"FP8Tensor.to: 'device' must be a torch.device"),
    "FP8Tensor.to: an unknown device string": (
        lambda q: q.to("nodevice"), _fp8_tensor, ValueError, r"FP8Tensor.to: 'device' must be a torch.device"),
    "NVFP4Tensor: rht not a bool": (
        lambda n: NVFP4Tensor(n.qdata, n.scales, n.alpha, n.amax, n.shape, n.scaling, n.orig_dtype, rht=1),
        _nvfp4_tensor, TypeError, r"NVFP4Tensor: 'rht' must be a bool, got int"),
    "NVFP4Tensor: a shape of strings": (
        lambda n: NVFP4Tensor(n.qdata, n.scales, n.alpha, n.amax, "ab", n.scaling, n.orig_dtype),
        _nvfp4_tensor, TypeError, r"NVFP4Tensor: 'shape' must be a pair of ints \(M, K\), got 'ab'"),
    "NVFP4Tensor: a negative shape": (
        lambda n: NVFP4Tensor(n.qdata, n.scales, n.alpha, n.amax, (16, -32), n.scaling, n.orig_dtype),
        _nvfp4_tensor, ValueError, r"NVFP4Tensor: 'shape' must be \(M, K\) with both >= 0"),
    "NVFP4Tensor: fields on two devices": (
        lambda n: NVFP4Tensor(n.qdata, n.scales, n.alpha, n.amax.to("meta"), n.shape, n.scaling, n.orig_dtype),
        _nvfp4_tensor, ValueError, r"NVFP4Tensor: all tensors must be on one device, got .*amax on meta"),
    "GroupedFP8Tensor: int64 offsets": (
        lambda g: GroupedFP8Tensor(g.data, g.scale_inv, g.offsets.long(), g.shape, g.scaling, g.orig_dtype),
        _grouped_fp8_tensor, TypeError, r"GroupedFP8Tensor: 'offsets' must be a non-empty 1-D int32 tensor"),
    "GroupedFP8Tensor: group_rows 0": (
        lambda g: GroupedFP8Tensor(g.data, g.scale_inv, g.offsets, g.shape, g.scaling, g.orig_dtype, group_rows=0),
        _grouped_fp8_tensor, ValueError, r"GroupedFP8Tensor: 'group_rows' must be None or a positive int, got 0"),
    "GroupedFP8Tensor: an unknown layout": (
        lambda g: GroupedFP8Tensor(g.data, g.scale_inv, g.offsets, g.shape, g.scaling, g.orig_dtype, layout="cols"),
        _grouped_fp8_tensor, ValueError, r"GroupedFP8Tensor: 'layout' must be one of \('rows', 'wgrad'\)"),
    "GroupedFP8Tensor: a rows-layout columnwise copy": (
        lambda g: GroupedFP8Tensor(g.data, g.scale_inv, g.offsets, g.shape, g.scaling, g.orig_dtype, columnwise=g),
        _grouped_fp8_tensor, ValueError, r"GroupedFP8Tensor: 'columnwise' must be a 'wgrad'-layout copy"),
    "GroupedFP8Tensor: a wgrad-layout container with a columnwise copy": (
        lambda g: GroupedFP8Tensor(g.columnwise.data, g.columnwise.scale_inv, g.offsets, g.shape, g.scaling,
                                   g.orig_dtype, layout="wgrad", columnwise=g.columnwise),
        _grouped_fp8_tensor, ValueError, r"GroupedFP8Tensor: a 'wgrad'-layout container cannot carry a columnwise"),
    "GroupedFP8Tensor: a dense columnwise copy": (
        lambda g: GroupedFP8Tensor(g.data, g.scale_inv, g.offsets, g.shape, g.scaling, g.orig_dtype,
                                   columnwise=scalemm.quantize_fp8(torch.randn(32, 16))),
        _grouped_fp8_tensor, TypeError, r"GroupedFP8Tensor: 'columnwise' must be a GroupedFP8Tensor or None"),
    # scalemm.nn
    "FP8Linear.from_linear: not an nn.Linear": (
        lambda: snn.FP8Linear.from_linear(torch.nn.Conv1d(2, 2, 1)),
        lambda: (), TypeError, r"from_linear takes an nn.Linear, got Conv1d"),
    "Linear.from_linear: not an nn.Linear": (
        lambda: snn.Linear.from_linear(torch.nn.Conv1d(2, 2, 1), scalemm.recipes.FP8Rowwise()),
        lambda: (), TypeError, r"from_linear takes an nn.Linear, got Conv1d"),
    "FP8Linear: in_features 0": (
        lambda: snn.FP8Linear(0, 16), lambda: (), ValueError, r"FP8Linear: 'in_features' must be a positive int, got 0"),
    "FP8Linear: out_features a bool": (
        lambda: snn.FP8Linear(16, True), lambda: (), ValueError,
        r"FP8Linear: 'out_features' must be a positive int, got True"),
    "FP8Linear: fast_accum not a bool": (
        lambda: snn.FP8Linear(32, 16, fast_accum=1), lambda: (), TypeError,
        r"FP8Linear: 'fast_accum' must be a bool, got int"),
    "NVFP4Linear: bias not a bool": (
        lambda: snn.NVFP4Linear(32, 16, bias=1), lambda: (), TypeError, r"NVFP4Linear: 'bias' must be a bool, got int"),
    "NVFP4Linear.from_blocks: codes of another dtype": (
        lambda: snn.NVFP4Linear.from_blocks(torch.zeros(16, 16), torch.ones(16, 2).to(E4M3), torch.ones(())),
        lambda: (), TypeError, r"from_blocks: 'codes' must be a uint8 \[out, in / 2\] tensor"),
    "NVFP4Linear.from_blocks: alpha of another dtype": (
        lambda: snn.NVFP4Linear.from_blocks(torch.zeros(16, 16, dtype=torch.uint8), torch.ones(16, 2).to(E4M3),
                                            torch.ones((), dtype=torch.float64)),
        lambda: (), TypeError, r"from_blocks: 'alpha' must be a float32 0-d or \[16\] tensor"),
    "convert: not a module": (
        lambda: snn.convert([torch.nn.Linear(32, 16)], scalemm.recipes.FP8Rowwise()),
        lambda: (), TypeError, r"convert: 'model' must be an nn.Module, got list"),
    "convert: a filter that cannot be called": (
        lambda: snn.convert(torch.nn.Sequential(torch.nn.Linear(32, 16)), scalemm.recipes.FP8Rowwise(), filter=3),
        lambda: (), TypeError, r"convert: 'filter' must be callable"),
    # recipes and the format helpers
    "recipes.from_key: unknown fields": (
        lambda: recipes.from_key(json.dumps({**json.loads(recipes.FP8Rowwise().key()), "extra": 1})),
        lambda: (), ValueError, r"has unknown fields \['extra'\]"),
    "e2m1_decode: codes of another dtype": (
        lambda: nvfp4.e2m1_decode(torch.zeros(4)), lambda: (), TypeError, r"'codes' must be a uint8 tensor"),
    "pack_fp4: codes of another dtype": (
        lambda: nvfp4.pack_fp4(torch.zeros(4)), lambda: (), TypeError, r"'codes' must be a uint8 tensor"),
    "unpack_fp4: packed of another dtype": (
        lambda: nvfp4.unpack_fp4(torch.zeros(4)), lambda: (), TypeError, r"'packed' must be a uint8 tensor"),
    "unpack_fp4: a 0-d tensor": (
        lambda: nvfp4.unpack_fp4(torch.zeros((), dtype=torch.uint8)), lambda: (), ValueError,
        r"'packed' must have at least one dimension"),
    "swizzle_scales: scales of a 4-byte dtype": (
        lambda: layout.swizzle_scales(torch.zeros(4, 4)), lambda: (), TypeError,
        r"'s' must be a tensor of a 1-byte dtype"),
    "unswizzle_scales: a buffer of a 4-byte dtype": (
        lambda: layout.unswizzle_scales(torch.zeros(512), 4, 4), lambda: (), TypeError,
        r"'buf' must be a tensor of a 1-byte dtype"),
    # dequantization
    "dequantize: a copy without rowwise data": (
        lambda: scalemm.quantize_fp8(torch.randn(16, 32), rowwise=False, columnwise=True).dequantize(),
        lambda: (), ValueError, r"'t' has no rowwise copy; dequantize t.columnwise to get x.T"),
    "dequantize: an integer dtype": (
        lambda: scalemm.quantize_nvfp4(torch.randn(16, 32)).dequantize(torch.int8),
        lambda: (), TypeError, r"'dtype' must be a floating-point dtype"),
    "dequantize: padded of a rows-layout container": (
        lambda: scalemm.quantize_nvfp4_grouped(torch.randn(16, 32), torch.tensor([8, 16], dtype=torch.int32))
        .dequantize(padded=True),
        lambda: (), ValueError, r"'padded' applies to a 'wgrad'-layout container"),
    "dequantize_nvfp4_grouped: a tensor (it has a .layout of its own)": (
        lambda: nvfp4.dequantize_nvfp4_grouped(torch.zeros(4), padded=True),
        lambda: (), TypeError, r"'t' must be a GroupedNVFP4Tensor, got Tensor"),
    # given amaxes
    "quantize_nvfp4: amax on another device": (
        lambda: scalemm.quantize_nvfp4(torch.randn(16, 32), amax=torch.ones((), device="meta")),
        lambda: (), ValueError, r"'amax' is on meta but 'x' is on cpu"),
    "quantize_fp8: amax of another dtype": (
        lambda: scalemm.quantize_fp8(torch.randn(16, 32), amax=torch.ones((), dtype=torch.float64)),
        lambda: (), TypeError, r"'amax' must be float32, got torch.float64"),
    "quantize_fp8: amax not a tensor": (
        lambda: scalemm.quantize_fp8(torch.randn(16, 32), amax=[1.0]),
        lambda: (), TypeError, r"'amax' must be a torch.Tensor or None, got list"),
    "quantize_fp8: amax_out sharing amax's memory": (
        lambda amax: scalemm.quantize_fp8(torch.randn(16, 32), amax=amax, amax_out=amax),
        lambda: (torch.ones(()),), ValueError, r"'amax_out' must not share memory with 'amax'"),
    "quantize_fp8: a given amax with per-token scaling": (
        lambda: scalemm.quantize_fp8(torch.randn(16, 32), scaling="token", amax=torch.ones(())),
        lambda: (), ValueError, r"'amax' / 'amax_out' \(FP8 delayed scaling\) take scaling='tensor', got 'token'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_with_its_name(case):
    call, make, exc, message = CASES[case]
    with pytest.raises(exc, match=message):
        call(*make())
