"""scalemm.gemm input validation and the CPU (reference) path. No GPU needed."""
import pytest
import torch

import scalemm
from scalemm import epilogues as epi
from scalemm.cutlass_kernels import GemmConfig, default_config

E4M3 = torch.float8_e4m3fn


def _fp8(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 4).to(E4M3)


def test_cpu_path_is_the_reference():
    a, b = _fp8(7, 32), _fp8(24, 32, seed=1)
    sa, sb = torch.rand(7) + 0.5, torch.rand(24) + 0.5
    bias = torch.randn(24).to(torch.bfloat16)
    out = scalemm.gemm(a, b, sa, sb, bias=bias)
    ref = ((sa[:, None] * sb[None, :]) * (a.float() @ b.float().T) + bias.float()).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    out32 = scalemm.gemm(a, b, torch.tensor(2.0), torch.tensor([0.5]), out_dtype=torch.float32, epilogue="relu")
    assert torch.equal(out32, torch.relu(a.float() @ b.float().T))


@pytest.mark.parametrize("case,exc,match", [
    (dict(a=torch.zeros(4, 32)), TypeError, "float8_e4m3fn"),
    (dict(a=_fp8(4, 32)[:, :16]), ValueError, "contiguous"),
    (dict(a=_fp8(4, 48)), ValueError, "K differs"),
    (dict(a=_fp8(2, 4, 32)), ValueError, "2-D"),
    (dict(scale_a=torch.ones(5)), ValueError, "scale_a must hold one value or 4"),
    (dict(scale_b=torch.ones(16, dtype=torch.float64)), TypeError, "scale_b must be float32"),
    (dict(scale_a=None), ValueError, "required"),
    (dict(scale_b=torch.ones(8, 2)), ValueError, "scale_b"),
    (dict(bias=torch.ones(16)), ValueError, "bias must be a \\[N\\]"),
    (dict(bias=torch.ones(8, dtype=torch.bfloat16)), ValueError, "bias"),
    (dict(out_dtype=torch.int8), TypeError, "out_dtype"),
    (dict(out=torch.empty(4, 16)), ValueError, "out must be"),
    (dict(epilogue=3), TypeError, "epilogue must be"),
    (dict(epilogue="tanh"), ValueError, "activation"),
])
def test_bad_input_raises_clear_errors(case, exc, match):
    args = dict(a=_fp8(4, 32), b=_fp8(16, 32), scale_a=torch.ones(4), scale_b=torch.ones(16))
    args.update(case)
    a, b, sa, sb = args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b")
    with pytest.raises(exc, match=match):
        scalemm.gemm(a, b, sa, sb, **args)


def test_custom_epilogue_tree_with_extra_inputs():
    a, b = _fp8(8, 16), _fp8(8, 16, seed=2)
    tree = epi.RowVector("scale_a") * epi.Acc() + epi.RowVector("shift")
    shift = torch.arange(8).float()
    out = scalemm.gemm(a, b, torch.ones(8), torch.ones(8), out_dtype=torch.float32, epilogue=tree,
                       epilogue_inputs={"shift": shift})
    assert torch.equal(out, a.float() @ b.float().T + shift[:, None])
    with pytest.raises(ValueError, match="shift"):
        scalemm.gemm(a, b, torch.ones(8), torch.ones(8), out_dtype=torch.float32, epilogue=tree)


def test_heuristic_is_readable_and_valid():
    assert default_config(1, 4096, 4096).swap_ab and default_config(1, 4096, 4096).schedule == "pingpong"
    assert default_config(16, 4096, 4096).tile_n == 16 and default_config(33, 4096, 4096).tile_n == 64
    assert default_config(128, 4096, 4096).schedule == "pingpong"
    big = default_config(8192, 8192, 8192)
    assert (big.tile_m, big.tile_n, big.schedule) == (128, 256, "cooperative")
    with pytest.raises(ValueError, match="cooperative"):
        GemmConfig(64, 128, 128, schedule="cooperative")
    cpp = big.cpp(fast_accum=True, out_dtype="bf16", epilogue=epi.emit(epi.scaled("bf16"), "bf16"))
    assert cpp["MAINLOOP_SCHEDULE"].endswith("CooperativeFP8FastAccum") and cpp["LAYOUT_D"].endswith("RowMajor")


def test_grouped_gemm_validates_before_any_launch():
    a, b = _fp8(16, 32), _fp8(2, 16, 32).reshape(2, 16, 32)
    offs = torch.tensor([8, 16], dtype=torch.int32)
    with pytest.raises(ValueError, match="same CUDA device"):
        scalemm.grouped_gemm(a, b, offs, torch.ones(16), torch.ones(2, 16))
    with pytest.raises(ValueError, match="3-D"):
        scalemm.grouped_gemm(a, b[0], offs, torch.ones(16), torch.ones(2, 16))
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        scalemm.grouped_gemm(a.float(), b, offs, torch.ones(16), torch.ones(2, 16))


def test_grouped_heuristic_and_scale_modes():
    from scalemm.cutlass_kernels.configs import default_grouped_config
    from scalemm.grouped import PER_GROUP, PER_GROUP_VEC, PER_ROW, SHARED, ONE, _scale_a_mode, _scale_b_mode
    assert default_grouped_config(2048, 256, 2048, 7168).swap_ab          # 8 rows per expert: decode form
    assert default_grouped_config(8 * 4096, 8, 4096, 7168).tile_n == 256
    assert default_grouped_config(8 * 4096, 8, 4096, 7168, fast_accum=False).tile_n == 128
    assert _scale_a_mode(torch.ones(10), 10, 4, None) == PER_ROW
    assert _scale_a_mode(torch.ones(4), 10, 4, None) == PER_GROUP
    assert _scale_a_mode(torch.ones(1), 10, 4, None) == ONE
    with pytest.raises(ValueError, match="T == G"):
        _scale_a_mode(torch.ones(4), 4, 4, None)
    assert _scale_a_mode(torch.ones(4), 4, 4, "group") == PER_GROUP
    assert _scale_b_mode(torch.ones(4, 16), 4, 16) == PER_GROUP_VEC
    assert _scale_b_mode(torch.ones(4), 4, 16) == PER_GROUP
    assert _scale_b_mode(torch.ones(16), 4, 16) == SHARED
    with pytest.raises(ValueError, match="scale_b must be"):
        _scale_b_mode(torch.ones(3, 16), 4, 16)
