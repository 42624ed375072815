"""EVT trees: C++ emission and the torch evaluation, with integer-valued data (exact in fp32)."""
import pytest
import torch

from scalemm import epilogues as epi
from scalemm.epilogues import Acc, ColVector, RowVector, Scalar, Source, relu


def _ints(*shape, lo=-8, hi=8, gen=None):
    return torch.randint(lo, hi, shape, generator=gen).float()


def test_scaled_preset_emits_the_expected_tree():
    em = epi.emit(epi.scaled("bf16"), "bf16")
    t = em.evt_type
    # root: bf16 output of (scale_a * scale_b * acc) + bias
    assert t.startswith("cutlass::epilogue::fusion::Sm90EVT<cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, cutlass::bfloat16_t, float")
    assert "Sm90ColBroadcast<0, TileShape, float, float, cute::Stride<bool, cute::_0, int64_t>>" in t  # per-row, dynamic
    assert "Sm90RowBroadcast<0, TileShape, float, float, cute::Stride<cute::_0, bool, int64_t>>" in t  # per-col, dynamic
    assert "Sm90RowBroadcast<0, TileShape, cutlass::bfloat16_t, float, cute::Stride<cute::_0, cute::_1, int64_t>>" in t
    assert t.count("Sm90AccFetch") == 1
    assert [l.name for l in em.leaves] == ["scale_a", "scale_b", "bias"]
    assert "ptrs[0]" in em.args_expr and "vec[1] != 0" in em.args_expr and "ptrs[2]" in em.args_expr
    assert em.args_expr.count("{") == em.args_expr.count("}")


def test_swap_ab_swaps_row_and_column_roles():
    tree = RowVector("r") * Acc() + ColVector("c")
    plain, swapped = epi.emit(tree, "f32"), epi.emit(tree, "f32", swap_ab=True)
    assert plain.evt_type.index("Sm90ColBroadcast") < plain.evt_type.index("Sm90RowBroadcast")
    assert swapped.evt_type.index("Sm90RowBroadcast") < swapped.evt_type.index("Sm90ColBroadcast")


def test_row_vectors_in_registers():
    """row_registers=True (the dense FP8 GEMM's swap-AB kernels) emits scalemm's register row broadcast for the row
    vectors only, asks for its header, and is refused for grouped kernels; the default keeps CUTLASS's."""
    tree = epi.scaled("bf16")
    rows = epi.emit(tree, "bf16", swap_ab=True, row_registers=True)
    assert epi.ROW_REGISTERS_NODE in rows.evt_type and "Sm90RowBroadcast" not in rows.evt_type
    assert "Sm90ColBroadcast" in rows.evt_type and rows.includes == epi.ROW_REGISTERS_INCLUDE
    assert rows.args_expr == epi.emit(tree, "bf16", swap_ab=True).args_expr  # same arguments, same order
    plain = epi.emit(tree, "bf16", swap_ab=True)
    assert epi.ROW_REGISTERS_NODE not in plain.evt_type and plain.includes == ""
    with pytest.raises(ValueError, match="row_registers is for dense GEMMs"):
        epi.emit(tree, "bf16", swap_ab=True, grouped=True, row_registers=True)
    from scalemm.cutlass_kernels import GemmConfig
    from scalemm.gemm import gemm_kernel_spec
    import torch
    swap = gemm_kernel_spec(GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True), fast_accum=True,
                            out_dtype=torch.bfloat16, epilogue=tree)[0]
    flat = gemm_kernel_spec(GemmConfig(64, 128, 128, 1, 1, "pingpong"), fast_accum=True, out_dtype=torch.bfloat16,
                            epilogue=tree)[0]
    assert dict(swap.params)["PRELUDE"] == epi.ROW_REGISTERS_INCLUDE and dict(flat.params)["PRELUDE"] == ""


def test_activation_and_source_and_scalar_emit():
    tree = relu(Scalar("alpha") * Acc() + Source("f16"))
    em = epi.emit(tree, "f16")
    assert "cutlass::epilogue::thread::ReLu, cutlass::half_t" in em.evt_type
    assert "Sm90SrcFetch<cutlass::half_t>" in em.evt_type and em.source_dtype == "f16"
    assert "Sm90ScalarBroadcast<float>" in em.evt_type
    assert [l.name for l in em.leaves] == ["alpha", "c"]


def test_leaf_root_is_wrapped_in_identity_cast():
    em = epi.emit(Acc(), "bf16")
    assert "thread::Identity, cutlass::bfloat16_t" in em.evt_type and em.leaves == ()


def test_bad_trees_raise():
    with pytest.raises(TypeError, match="Scalar"):
        Acc() * 2.0
    with pytest.raises(ValueError, match="unknown epilogue op"):
        epi.Compute("tanh", (Acc(),))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        RowVector("x", "int8")
    with pytest.raises(ValueError, match="activation"):
        epi.scaled("bf16", activation="tanh")
    with pytest.raises(ValueError, match="one full M x N"):
        epi.emit(Acc() + Source("bf16", "c1") + Source("f16", "c2"), "bf16")


@pytest.mark.parametrize("shape", [(1, 8), (7, 16), (33, 24)])
def test_evaluate_matches_hand_computation_exactly(shape):
    g = torch.Generator().manual_seed(0)
    M, N = shape
    acc, sa, sb, bias = _ints(M, N, gen=g), _ints(M, gen=g), _ints(N, gen=g), _ints(N, gen=g)
    tree = epi.scaled("f32")
    got = epi.evaluate(tree, acc, {"scale_a": sa, "scale_b": sb, "bias": bias}, torch.float32)
    want = (sa[:, None] * sb[None, :]) * acc + bias[None, :]
    assert torch.equal(got, want)
    # per-tensor scales (one value each) and an omitted bias
    got = epi.evaluate(tree, acc, {"scale_a": torch.tensor(3.0), "scale_b": torch.tensor([-2.0]), "bias": None}, torch.float32)
    assert torch.equal(got, -6.0 * acc)


def test_evaluate_activations_and_cast():
    g = torch.Generator().manual_seed(1)
    acc = _ints(5, 8, gen=g)
    r = epi.evaluate(relu(RowVector("s") * Acc()), acc, {"s": _ints(5, gen=g)}, torch.bfloat16)
    assert r.dtype == torch.bfloat16 and (r >= 0).all()
    x = torch.linspace(-4, 4, 40).reshape(5, 8)
    assert torch.equal(epi.evaluate(epi.silu(Acc()), x, {}, torch.float32), torch.nn.functional.silu(x))
    assert torch.equal(epi.evaluate(epi.gelu(Acc()), x, {}, torch.float32), torch.nn.functional.gelu(x))
    with pytest.raises(ValueError, match="missing"):
        epi.evaluate(RowVector("s") * Acc(), acc, {}, torch.float32)


def test_describe_reads_like_the_formula():
    assert str(epi.scaled("bf16", activation="relu")) == "relu((scale_a[m] * scale_b[n] * acc + bias[n]))"
