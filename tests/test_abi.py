"""scalemm's C ABI: cutlass_kernels/include/scalemm/abi.h, read by scalemm.abi.

(a) Python's parse of the header lays every struct out as the C++ compiler does: a small C++ file,
    generated from Python's view, static_asserts each struct's size and alignment and each field's
    offset, size and kind against the header, and every constant's value; g++ compiles it (abi.h is
    plain C++). A second file, generated from a deliberately altered header, must fail to compile.
(b) Every extern "C" launcher of the templates takes exactly one `scalemm::<Struct> const*`, and the
    Python side declares that launcher with argtypes [POINTER(abi.<Struct>)].
(c) Python holds no copy of the shared constants: patching abi.<name> changes what the modules do.
(d) The CUDA paths fill each struct from the right tensors (run here on CPU tensors, with the launcher
    and the stream replaced by fakes that capture the struct).
"""
import ctypes
from dataclasses import replace
import re
import shutil
import subprocess

import pytest
import torch

import importlib

from scalemm import abi, epilogues as epi, quantize_nvfp4
from scalemm.cutlass_kernels import GemmConfig
from scalemm.cutlass_kernels.configs.sm90 import full_accumulation, full_tile_config
from scalemm.jit import describe_status, toolchain

# the modules (scalemm.gemm, the attribute, is the function of the same name)
activation, gemm, gemm_nvfp4, grouped, quantize, quantize_grouped = (
    importlib.import_module(f"scalemm.{m}")
    for m in ("activation", "gemm", "gemm_nvfp4", "grouped", "quantize", "quantize_grouped"))
INCLUDE = abi.HEADER.parent.parent  # cutlass_kernels/include
TEMPLATES = toolchain.TEMPLATE_DIR
bf16 = torch.bfloat16


# ---------------------------------------------------------------------------------------------
# (a) the header as Python reads it == the header as C++ compiles it
# ---------------------------------------------------------------------------------------------

def test_module_matches_a_fresh_parse():
    constants, structs = abi.parse(abi.HEADER.read_text())
    assert constants == abi.constants
    assert list(structs) == list(abi.structs)
    for name, s in structs.items():
        assert [(f, ctypes.sizeof(t)) for f, t in s._fields_] == \
            [(f, ctypes.sizeof(t)) for f, t in abi.structs[name]._fields_]
        assert getattr(abi, name) is abi.structs[name]
    for name, value in constants.items():
        assert getattr(abi, name) == value


def test_every_struct_of_the_header_is_parsed():
    """A struct the parser's pattern missed (say, a nested brace) would escape the layout check."""
    text = re.sub(r"//[^\n]*", "", abi.HEADER.read_text())
    assert set(re.findall(r"\bstruct\s+(\w+)", text)) == set(abi.structs)
    assert set(re.findall(r"\benum\s+(\w+)", text)) >= {"LaunchCode", "GroupedLeafMode", "GroupTablePosition"}
    for name in ("GemmArgs", "GroupedGemmArgs", "QuantizeNvfp4Args", "QuantizeFp8Args", "QuantizeMxfp8Args",
                 "QuantizeFp8GroupedArgs", "QuantizeNvfp4GroupedArgs", "QuantizeMxfp8GroupedArgs"):
        assert name in abi.structs


def test_the_parser_refuses_what_it_cannot_lay_out():
    with pytest.raises(ValueError, match="unsupported field type"):
        abi.parse("struct S {\n  double x;\n};\n")
    with pytest.raises(ValueError, match="cannot parse field"):
        abi.parse("struct S {\n  int64_t (*fn)(int);\n};\n")


def _kind(ctype) -> str:
    base = getattr(ctype, "_type_", None) if issubclass(ctype, ctypes.Array) else ctype
    return {ctypes.c_void_p: "pointer", ctypes.c_int64: "int64_t", ctypes.c_int32: "int32_t",
            ctypes.c_uint64: "uint64_t", ctypes.c_uint32: "uint32_t", ctypes.c_float: "float"}[base]


def _layout_checks(constants: dict, structs: dict) -> str:
    """C++ static_asserts of Python's view of the ABI (compiled against the real header)."""
    lines = ['#include <cstddef>', '#include <cstdint>', '#include <type_traits>', '#include "scalemm/abi.h"', '']
    for name, value in constants.items():
        lines.append(f'static_assert(static_cast<long long>(scalemm::{name}) == {value}LL, "constant {name}");')
    for name, s in structs.items():
        t = f"scalemm::{name}"
        lines += [f'static_assert(std::is_standard_layout_v<{t}> && std::is_trivially_copyable_v<{t}>, "{name} POD");',
                  f'static_assert(sizeof({t}) == {ctypes.sizeof(s)}, "sizeof {name}");',
                  f'static_assert(alignof({t}) == {ctypes.alignment(s)}, "alignof {name}");']
        for field, ctype in s._fields_:
            where = f"{name}::{field}"
            offset = getattr(s, field).offset
            decl = f"decltype({t}::{field})"
            elem = f"std::remove_all_extents_t<{decl}>"
            lines += [f'static_assert(offsetof({t}, {field}) == {offset}, "offset of {where}");',
                      f'static_assert(sizeof({t}::{field}) == {ctypes.sizeof(ctype)}, "size of {where}");']
            if issubclass(ctype, ctypes.Array):
                lines.append(f'static_assert(std::extent_v<{decl}> == {ctype._length_}, "length of {where}");')
            else:
                lines.append(f'static_assert(std::rank_v<{decl}> == 0, "{where} is not an array");')
            kind = _kind(ctype)
            check = f"std::is_pointer_v<{elem}>" if kind == "pointer" else f"std::is_same_v<{elem}, {kind}>"
            lines.append(f'static_assert({check}, "type of {where}: {kind}");')
    return "\n".join(lines) + "\n"


def _compile(source: str, tmp_path) -> subprocess.CompletedProcess:
    src = tmp_path / "abi_layout.cpp"
    src.write_text(source)
    return subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", f"-I{INCLUDE}", str(src)],
                          capture_output=True, text=True)


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the C++ side of the ABI "
                               "cannot be compiled here")


@needs_gxx
def test_cpp_layout_matches_python(tmp_path):
    proc = _compile(_layout_checks(abi.constants, abi.structs), tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]


@needs_gxx
@pytest.mark.parametrize("change", [
    ("  int64_t k;\n", "  int64_t k;\n  int64_t extra;\n"),          # a field Python has and C++ lacks
    ("  int64_t leaf_count;", "  int32_t leaf_count;"),              # a narrower type: offsets move
    ("  int64_t rht;", "  float rht;"),                               # same size, another type
    ("constexpr int kMaxLeaves = 8;", "constexpr int kMaxLeaves = 6;"),
    ("  kLeafShared = 4,", "  kLeafShared = 7,"),
])
def test_cpp_layout_check_catches_a_disagreement(tmp_path, change):
    """The check has teeth: Python's view of an altered header does not compile against the real one."""
    old, new = change
    text = abi.HEADER.read_text()
    assert old in text
    constants, structs = abi.parse(text.replace(old, new))
    proc = _compile(_layout_checks(constants, structs), tmp_path)
    assert proc.returncode != 0
    assert "static assertion failed" in proc.stderr or "static_assert" in proc.stderr


# ---------------------------------------------------------------------------------------------
# (b) every launcher takes its struct, on both sides
# ---------------------------------------------------------------------------------------------

_EXTERN_C = re.compile(r'extern\s+"C"\s+int\s+(\w+)\s*\(([^)]*)\)')


def _template_launchers() -> dict:
    """launcher name -> (template, its parameter list), over every template but the JIT self-test."""
    found = {}
    for path in sorted(TEMPLATES.glob("*.cu")):
        if path.name == "jit_selftest.cu":
            continue
        for name, params in _EXTERN_C.findall(path.read_text()):
            assert name not in found, f"{name} is defined in {found[name][0]} and {path.name}"
            found[name] = (path.name, " ".join(params.split()))
    return found


def test_every_template_launcher_takes_one_struct_pointer():
    launchers = _template_launchers()
    assert len(launchers) == 22
    for name, (template, params) in launchers.items():
        m = re.fullmatch(r"scalemm::(\w+) const\* a", params)
        assert m and m[1] in abi.structs, f"{template}: {name}({params}) does not take an abi.h struct by pointer"


class _FakeKernel:
    def __init__(self, declared):
        self.declared = declared

    def function(self, name, argtypes):
        self.declared[name] = list(argtypes)
        return lambda *args: None


def test_python_declares_each_launcher_with_its_struct(monkeypatch):
    declared = {}
    fake_build = lambda spec, **kw: _FakeKernel(declared)  # noqa: E731
    for module in (gemm, grouped, quantize, quantize_grouped, gemm_nvfp4, activation):
        monkeypatch.setattr(module, "build", fake_build)
    cfg = GemmConfig(128, 128, 128, 1, 1, "cooperative")
    gemm._launcher.__wrapped__(gemm.gemm_kernel_spec(cfg, fast_accum=False, out_dtype=bf16,
                                                     epilogue=epi.scaled(bf16))[0])
    gemm._workspace_fn.__wrapped__(gemm.gemm_kernel_spec(cfg, fast_accum=False, out_dtype=bf16,
                                                         epilogue=epi.scaled(bf16))[0])
    grouped._launcher.__wrapped__(grouped.grouped_gemm_kernel_spec(cfg, fast_accum=False, out_dtype=bf16,
                                                                   epilogue=epi.scaled(bf16))[0])
    for name in quantize._ARGS:
        quantize._launcher.__wrapped__(bf16, name)
    for name in quantize_grouped._ARGS:
        quantize_grouped._launcher.__wrapped__(bf16, name)
    quantize._history_launcher.__wrapped__()
    for name in ("scalemm_swiglu_forward", "scalemm_swiglu_backward"):
        activation._launcher.__wrapped__(bf16, name)
    nv_cfg = gemm_nvfp4.default_nvfp4_config(16, 256, 512)
    gemm_nvfp4._gemm_launcher.__wrapped__(gemm_nvfp4.nvfp4_gemm_kernel_spec(nv_cfg, act_dtype=bf16, out_dtype=bf16,
                                                                            epilogue=epi.scaled(bf16))[0])
    gemm_nvfp4._grouped_launcher.__wrapped__(gemm_nvfp4.nvfp4_grouped_kernel_spec(
        gemm_nvfp4.default_nvfp4_grouped_config(64, 4, 256, 512), act_dtype=bf16, out_dtype=bf16,
        epilogue=epi.scaled(bf16))[0])
    gemm_nvfp4._gemm_workspace_fn.__wrapped__(gemm_nvfp4.nvfp4_gemm_kernel_spec(nv_cfg, act_dtype=bf16, out_dtype=bf16,
                                                                                epilogue=epi.scaled(bf16))[0])
    for name in gemm_nvfp4._DEQUANT_ARGS:
        gemm_nvfp4._dequant_fn.__wrapped__(name)
    gemm_nvfp4._skinny_launcher.__wrapped__(gemm_nvfp4.skinny_kernel_spec(
        gemm_nvfp4.SkinnyConfig(1), act_dtype=bf16, out_dtype=bf16))
    gemm_nvfp4._skinny_splits_fn.__wrapped__(gemm_nvfp4.skinny_kernel_spec(
        gemm_nvfp4.SkinnyConfig(1), act_dtype=bf16, out_dtype=bf16))

    launchers = _template_launchers()
    assert set(declared) == set(launchers)  # every launcher is declared, and nothing else
    for name, argtypes in declared.items():
        struct = re.fullmatch(r"scalemm::(\w+) const\* a", launchers[name][1])[1]
        assert argtypes == [ctypes.POINTER(abi.structs[struct])], name


def test_headers_include_the_abi():
    for rel in ("sm90/gemm.cuh", "sm90/grouped_gemm.cuh", "sm90/launch.cuh", "quant_grouped.cuh"):
        text = (INCLUDE / "scalemm" / rel).read_text()
        assert '#include "scalemm/abi.h"' in text or '#include "scalemm/sm90/gemm.cuh"' in text, rel
    assert not (INCLUDE / "scalemm" / "sm90_gemm.cuh").exists()
    assert not (INCLUDE / "scalemm" / "sm90_grouped_gemm.cuh").exists()


# A line that clamps an offset it reads by an expression of its own (min / max or a comparison with 0 next to a
# load of the offsets), instead of group_offsets.cuh's helpers.
_OWN_OFFSET_CLAMP = re.compile(r"__ldg\(\s*(?:\w+\.)?offsets\b.*(?:\bmin\(|\bmax\(|< 0 \?)"
                               r"|(?:\bmin\(|\bmax\(|< 0 \?).*__ldg\(\s*(?:\w+\.)?offsets\b")


def own_offset_clamps(text: str) -> list[str]:
    return [line for line in text.splitlines() if _OWN_OFFSET_CLAMP.search(line) and "group_offsets::" not in line]


def test_offsets_rule_has_one_owner():
    """The device rule for a grouped op's offsets (each clamped into [0, T], then a running maximum: numerics.md
    12.5) and the zeroing of the rows past the groups live in scalemm/group_offsets.cuh; every other header calls
    it. The scan flags the clamps the headers wrote themselves before (the first three lines below)."""
    for old in ("    int e = g < G ? min(max(__ldg(offsets + g), 0), T) : 0;",
                "        last = max(last, min(max(int64_t(__ldg(offsets + g)), int64_t(0)), M));",
                "    m = max(m, static_cast<int>(min(static_cast<int64_t>(max(__ldg(offsets + g), 0)), rows)));",
                "    m = max(m, int(group_offsets::clamp_offset(__ldg(s.offsets + g), s.T)));"):
        assert bool(own_offset_clamps(old)) == ("group_offsets::" not in old), old
    headers = sorted((INCLUDE / "scalemm").rglob("*.cuh"))
    assert INCLUDE / "scalemm" / "group_offsets.cuh" in headers
    for path in headers:
        if path.name != "group_offsets.cuh":
            text = path.read_text()
            assert not own_offset_clamps(text), (path.name, own_offset_clamps(text))
            assert "clear_workspace" not in text, path.name  # the grid's byte clear is group_offsets::zero_bytes


# ---------------------------------------------------------------------------------------------
# (c) the constants come from abi.h only
# ---------------------------------------------------------------------------------------------

_LEAF_MODES = ("kLeafNull", "kLeafPerRow", "kLeafPerGroupVec", "kLeafPerGroup", "kLeafShared", "kLeafOne")


@pytest.fixture
def shifted_leaf_modes(monkeypatch):
    """Every leaf mode moved to a value no module could have written down."""
    values = {name: 100 + 7 * i for i, name in enumerate(_LEAF_MODES)}
    for name, value in values.items():
        monkeypatch.setattr(abi, name, value)
    return values


def test_grouped_leaf_modes_are_read_from_abi(shifted_leaf_modes):
    v = shifted_leaf_modes
    T, G, N = 12, 3, 16
    assert grouped._scale_a_mode(torch.ones(1), T, G, None) == v["kLeafOne"]
    assert grouped._scale_a_mode(torch.ones(T), T, G, None) == v["kLeafPerRow"]
    assert grouped._scale_a_mode(torch.ones(G), T, G, None) == v["kLeafPerGroup"]
    assert grouped._scale_b_mode(torch.ones(G, N), G, N) == v["kLeafPerGroupVec"]
    assert grouped._scale_b_mode(torch.ones(N), G, N) == v["kLeafShared"]
    assert grouped._scale_b_mode(torch.ones(G, 1), G, N) == v["kLeafPerGroup"]
    tree = epi.scaled(bf16, bias=True)
    given = {"scale_a": (torch.ones(T), v["kLeafPerRow"], 0), "scale_b": (torch.ones(G, N), v["kLeafPerGroupVec"], N),
             "bias": (None, v["kLeafNull"], 0)}
    inputs = grouped._epilogue_leaves(tree, given, {}, T, G, N, torch.device("cpu"))
    assert {k: m for k, (_, m, _) in inputs.items()} == {"scale_a": v["kLeafPerRow"], "scale_b": v["kLeafPerGroupVec"],
                                                         "bias": v["kLeafNull"]}
    # one value per group for a leaf that reads a vector (bias) is refused by the (patched) vector modes,
    # and one vector per group is not
    given["bias"] = (torch.ones(G, N).to(bf16), v["kLeafPerGroupVec"], N)
    grouped._epilogue_leaves(tree, given, {}, T, G, N, torch.device("cpu"))
    given["bias"] = (torch.ones(G).to(bf16), v["kLeafPerGroup"], 1)
    with pytest.raises(ValueError, match="broadcast=True"):
        grouped._epilogue_leaves(tree, given, {}, T, G, N, torch.device("cpu"))


def test_grouped_gemm_cpu_path_follows_the_abi_modes(shifted_leaf_modes):
    """The whole CPU path runs with moved mode values: nothing compares against a private copy."""
    T, G, N, K = 24, 3, 16, 32
    a = torch.randn(T, K).to(torch.float8_e4m3fn)
    b = torch.randn(G, N, K).to(torch.float8_e4m3fn)
    offsets = torch.tensor([8, 16, 24], dtype=torch.int32)
    scale_b = torch.rand(G, N) + 0.5
    got = grouped.grouped_gemm(a, b, offsets, torch.full((G,), 0.5), scale_b, scale_a_per="group")
    want = torch.cat([(a[8 * g:8 * g + 8].float() @ b[g].float().T) * 0.5 * scale_b[g] for g in range(G)])
    torch.testing.assert_close(got.float(), want.to(bf16).float(), rtol=1e-2, atol=1e-2)


def test_max_leaves_is_read_from_abi(monkeypatch):
    monkeypatch.setattr(abi, "kMaxLeaves", 2)
    tree = epi.scaled(bf16, bias=True)  # three leaves
    with pytest.raises(ValueError, match="at most 2 inputs"):
        grouped._epilogue_leaves(tree, {}, {}, 4, 1, 16, torch.device("cpu"))
    monkeypatch.setattr(gemm, "_launcher", lambda spec: None)
    with pytest.raises(ValueError, match="at most 2 inputs"):
        gemm._plan.__wrapped__(128, 128, 128, False, bf16, None, GemmConfig(), torch.device("cpu"), True)


def test_launch_codes_are_read_from_abi(monkeypatch):
    for name, words in (("kWorkspaceTooSmall", "workspace too small"), ("kCannotImplement", "can_implement"),
                        ("kBadArgument", "bad argument")):
        assert words in describe_status(getattr(abi, name))
        monkeypatch.setattr(abi, name, 4242)
        assert words in describe_status(4242)
        monkeypatch.undo()
    assert describe_status(abi.kCutlassStatusBase + 2) == "CUTLASS status 2 (invalid data type)"
    monkeypatch.setattr(abi, "kCutlassStatusBase", 5000)
    assert describe_status(5002) == "CUTLASS status 2 (invalid data type)"


def test_group_table_follows_abi(monkeypatch):
    G = 5
    ints = G + abi.kGroupTablePositionTables * (G + 1)
    assert abi.group_table_ints(G) == -(-ints // abi.kGroupTileInts) * abi.kGroupTileInts
    assert quantize_grouped._table(G, "cpu", tiles=3).numel() == abi.group_table_ints(G, 3)
    assert abi.group_table_ints(G, 3) == abi.group_table_ints(G) + 3 * abi.kGroupTileInts
    monkeypatch.setattr(abi, "kGroupTileInts", 8)
    monkeypatch.setattr(abi, "kGroupTablePositionTables", 5)
    assert quantize_grouped._table(G, "cpu", tiles=3).numel() == -(-(G + 5 * (G + 1)) // 8) * 8 + 24


def test_no_module_spells_out_a_launch_code():
    import scalemm
    from pathlib import Path
    root = Path(scalemm.__file__).parent
    for path in list(root.glob("*.py")) + list(root.glob("jit/*.py")):
        if path.name == "abi.py":
            continue
        text = path.read_text()
        for name in ("kWorkspaceTooSmall", "kCannotImplement", "kBadArgument"):
            assert not re.search(rf"\b{abi.constants[name]}\b", text), f"{path.name} spells out {name}"
        assert "range(6)" not in text and not re.search(r"_MAX_LEAVES\s*=", text), path.name


# ---------------------------------------------------------------------------------------------
# (d) the CUDA paths fill the structs from the right tensors (CPU tensors, fake launchers)
# ---------------------------------------------------------------------------------------------

STREAM = 0x5EED


class _Capture:
    """A fake launcher: keeps a copy of each struct it is given by pointer."""

    def __init__(self):
        self.calls = []

    def __call__(self, ref):
        obj = ref._obj
        self.calls.append((type(obj).__name__, type(obj).from_buffer_copy(obj)))

    @property
    def args(self):
        assert len(self.calls) == 1
        return self.calls[0][1]


@pytest.fixture
def fake_stream(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: STREAM, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # arch.on_device around the launches: cuda:0 current
    monkeypatch.setattr(quantize, "_stream", lambda device: STREAM)


def _p(t):
    return None if t is None else t.data_ptr()


FULL_RULE = tuple(full_tile_config(n, c) for c in (2, 1) for n in (128, 192, 256))  # the full rule's kernels (sm90)
FULL_KEEPS_LEAF = (GemmConfig(128, 128, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True),
                   GemmConfig(128, 128, 128, 2, 1, "cooperative"),
                   full_accumulation(GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True)))


def test_bias_leaf_rule():
    """gemm.bias_leaf: a call with a bias always has the leaf; without one, fast accumulation never, full
    accumulation only on the kernels not measured faster without it (bias_free_full_kernel: the rule's three widths in
    clusters of 2 and 1)."""
    for cfg in (GemmConfig(), *FULL_RULE, *FULL_KEEPS_LEAF):
        assert gemm.bias_leaf(True, True, cfg) and gemm.bias_leaf(True, False, cfg)
        assert not gemm.bias_leaf(False, True, cfg)
    assert all(gemm.bias_leaf(False, False, cfg) for cfg in FULL_KEEPS_LEAF)
    assert not any(gemm.bias_leaf(False, False, cfg) for cfg in FULL_RULE)
    assert not gemm.bias_leaf(False, False, replace(FULL_RULE[0], raster="m", swizzle=4))  # run-time knobs: same kernel
    assert [(c.tile_n, c.promotion_chunks, c.promotion_overlap) for c in FULL_RULE] == 2 * [(128, 1, True), (192, 2, True),
                                                                                             (256, 2, False)]


@pytest.mark.parametrize("fast_accum, cfg, leafless", [(True, GemmConfig(), True), (False, FULL_RULE[0], True),
                                                       (False, FULL_KEEPS_LEAF[0], False)])
def test_gemm_without_bias_plans_the_preset_bias_leaf_says(monkeypatch, fast_accum, cfg, leafless):
    """Without a bias the call plans the bias-free preset (two leaves, its own kernel) where bias_leaf says so,
    else the three-leaf preset with a null bias; with a bias always the three-leaf one; a caller's tree is used
    as given."""
    monkeypatch.setattr(gemm, "_launcher", lambda spec: spec)
    dev = torch.device("cpu")
    plain = gemm._plan.__wrapped__(256, 256, 128, fast_accum, bf16, None, cfg, dev)
    biased = gemm._plan.__wrapped__(256, 256, 128, fast_accum, bf16, None, cfg, dev, True)
    assert [leaf.name for leaf, _, _ in plain[1]] == ["scale_a", "scale_b"] + ([] if leafless else ["bias"])
    assert [leaf.name for leaf, _, _ in biased[1]] == ["scale_a", "scale_b", "bias"]
    assert (plain[2].name != biased[2].name) == leafless
    tree = epi.scaled(bf16, bias=True)
    assert gemm._plan.__wrapped__(256, 256, 128, fast_accum, bf16, tree, cfg, dev)[2].name == biased[2].name


@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, 128, 1, 1, "cooperative", raster="n", swizzle=4),
                                 GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True, stream_k=True)])
def test_gemm_fills_gemm_args(monkeypatch, fake_stream, cfg):
    M, N, K = 32, 64, 128
    device = torch.device("cpu", 0)
    a = torch.randn(M, K).to(torch.float8_e4m3fn)
    b = torch.randn(N, K).to(torch.float8_e4m3fn)
    out = torch.empty(M, N, dtype=bf16)
    inputs = {"scale_a": torch.rand(M), "scale_b": torch.rand(1), "bias": torch.randn(N).to(bf16)}
    monkeypatch.setattr(gemm, "_launcher", lambda spec: None)
    monkeypatch.setattr(gemm, "_epilogue_input", lambda leaf, t, dev: t)  # CPU tensors on a device with an index
    monkeypatch.setattr(gemm, "_stream_k_workspace_bytes", lambda spec, *call: asked.append(call) or 12345)
    asked = []
    cfg_, leaves, _, workspace = gemm._plan.__wrapped__(M, N, K, False, bf16, None, cfg, device, True)
    assert (workspace is not None) == cfg.stream_k
    launch = _Capture()
    gemm.launch_planned(cfg_, leaves, launch, workspace, a, b, out, inputs, M, N, K, device)
    name, args = launch.calls[0]
    assert name == "GemmArgs"
    x, y, m, n = (b, a, N, M) if cfg.swap_ab else (a, b, M, N)
    assert (args.a, args.b, args.c, args.d) == (x.data_ptr(), y.data_ptr(), None, out.data_ptr())
    assert (args.m, args.n, args.k) == (m, n, K)
    assert [leaf.name for leaf, _, _ in leaves] == ["scale_a", "scale_b", "bias"]
    assert list(args.leaf_ptrs) == [_p(inputs[l.name]) for l, _, _ in leaves] + [None] * (abi.kMaxLeaves - 3)
    assert list(args.leaf_is_vector) == [1, 0, 1] + [0] * (abi.kMaxLeaves - 3)
    # stream-K: the workspace its kernel asks for, in the kernel's problem coordinates (swap-AB: n, m)
    assert (args.workspace is not None, args.workspace_bytes) == ((True, 12345) if cfg.stream_k else (False, 0))
    assert asked == ([(m, n, K, 0, args.raster, args.swizzle)] if cfg.stream_k else [])
    assert (args.device, args.raster, args.swizzle, args.splits, args.stream) == \
        (0, {"m": 0, "n": 1, "auto": 2}[cfg.raster], cfg.swizzle, 1, STREAM)


@pytest.mark.parametrize("stream_k", [False, True])
def test_w4a16_tokens_on_a_plans_a_bf16_gemm(monkeypatch, stream_k):
    """W4A16 with the tokens on A (gemm_nvfp4._gemm_weights_decoded): the weights' exact bf16 decode as b, the bf16
    activations as a, problem (M, N, K) unswapped, the bf16 x bf16 gemm_sm90.cu kernel with alpha_a = one value,
    alpha_b per column and the bias; the launch itself is test_gemm_fills_gemm_args's."""
    M, N, K = 48, 64, 128
    x = torch.randn(M, K).to(bf16)
    b = quantize_nvfp4(torch.randn(N, K).to(bf16), scaling="token")
    decoded = torch.randn(N, K).to(bf16)
    out, bias = torch.empty(M, N, dtype=bf16), torch.randn(N).to(bf16)
    one = torch.ones(())
    monkeypatch.setattr(gemm, "_launcher", lambda spec: spec)
    monkeypatch.setattr(gemm_nvfp4, "dequantize_rows_bf16", lambda q: decoded if q is b else None)
    monkeypatch.setattr(gemm_nvfp4, "_one", lambda device: one)
    seen = []
    monkeypatch.setattr(gemm_nvfp4, "launch_planned", lambda *call: seen.append(call))
    cfg = GemmConfig(128, 192, 64, 1, 1, "cooperative", swap_ab=False, stream_k=stream_k)
    assert gemm_nvfp4._gemm_weights_decoded(x, b, bias, out, cfg, "gelu") is out
    (cfg_, leaves, spec, workspace, a_, w_, out_, inputs, m, n, k, device), = seen
    assert (cfg_, a_, w_, out_, (m, n, k), device) == (cfg, x, decoded, out, (M, N, K), out.device)
    p = dict(spec.params)
    assert spec.name.startswith("bf16_gemm_t128x192x64") and p["ELEMENT_A"] == p["ELEMENT_B"] == "cutlass::bfloat16_t"
    assert p["LAYOUT_D"] == "cutlass::layout::RowMajor" and "GELU" in p["EVT_TYPE"].upper()
    assert [leaf.name for leaf, _, _ in leaves] == ["scale_a", "scale_b", "bias"]
    assert inputs["scale_a"] is one and inputs["bias"] is bias and torch.equal(inputs["scale_b"], b.alpha.reshape(-1))
    assert (workspace is not None) == stream_k
    with pytest.raises(ValueError, match="takes bf16 activations"):
        gemm_nvfp4._gemm_weights_decoded(x.half(), b, None, out, cfg, None)


@pytest.mark.parametrize("wgrad", [False, True])
def test_grouped_gemm_fills_grouped_gemm_args(monkeypatch, fake_stream, wgrad):
    T, G, N, K = 48, 3, 32, 64
    device = torch.device("cpu", 0)
    a = torch.empty(T, K, dtype=torch.uint8)
    b = torch.empty(G, N, K, dtype=torch.uint8)
    out = torch.empty(T, N, dtype=bf16)
    offsets = torch.tensor([16, 32, 48], dtype=torch.int32)
    scale_a, scale_b, bias = torch.rand(T), torch.rand(G, N), torch.randn(N).to(bf16)
    inputs = {"scale_a": (scale_a, abi.kLeafPerRow, 0), "scale_b": (scale_b, abi.kLeafPerGroupVec, N),
              "bias": (None, abi.kLeafNull, 0) if wgrad else (bias, abi.kLeafShared, N)}
    launch = _Capture()
    monkeypatch.setattr(grouped, "_launcher", lambda spec: launch)
    cfg = GemmConfig(128, 128, 128, 1, 1, "cooperative")
    leaves, launcher = grouped._kernel(cfg, False, bf16, epi.scaled(bf16, bias=True), wgrad=wgrad)
    grouped._launch(leaves, launcher, wgrad, a, b, out, offsets, G, T, N, K, inputs, device,
                    zero_rows_past_groups=not wgrad)
    name, args = launch.calls[0]
    assert name == "GroupedGemmArgs"
    assert (args.a, args.b, args.d, args.offsets) == (a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets.data_ptr())
    assert (args.groups, args.tokens, args.n, args.k) == (G, T, N, K)
    # wgrad's zero buffer is carved from the workspace by the launcher (its room counted in workspace_bytes)
    assert args.zeros is None and args.zero_rows_past_groups == int(not wgrad)
    assert args.leaf_count == 3
    names = ["scale_a", "scale_b", "bias"]
    assert list(args.leaf_base)[:3] == [_p(inputs[n][0]) for n in names]
    assert list(args.leaf_mode)[:3] == [inputs[n][1] for n in names]
    assert list(args.leaf_group_stride)[:3] == [inputs[n][2] for n in names]
    assert list(args.leaf_elem_bytes)[:3] == [4, 4, 0 if wgrad else 2]
    assert args.workspace is not None and args.workspace_bytes == grouped._workspace_bytes(G, 16 * max(N, K) * wgrad)
    assert (args.device, args.stream) == (0, STREAM)


def _quant_capture(monkeypatch, module):
    launch = _Capture()
    names = []

    def launcher(dtype, name):
        names.append(name)
        return launch
    monkeypatch.setattr(module, "_launcher", launcher)
    return launch, names


@pytest.mark.parametrize("scaling,rowwise,columnwise,rht", [
    ("tensor", True, False, False), ("tensor", True, True, False), ("tensor", False, True, True),
    ("token", True, True, False), ("token", True, True, True)])
def test_quantize_nvfp4_fills_its_args(monkeypatch, fake_stream, scaling, rowwise, columnwise, rht):
    M, K = 32, 64
    x = torch.randn(M, K, dtype=bf16)
    launch, names = _quant_capture(monkeypatch, quantize)
    q = quantize._nvfp4_cuda(x, scaling, None, rowwise, columnwise, rht, True, 11, 22)
    args = launch.args
    assert names == ["scalemm_quantize_nvfp4"] and type(args).__name__ == "QuantizeNvfp4Args"
    token = scaling == "token"
    col = q.columnwise
    assert (args.x, args.m, args.k) == (x.data_ptr(), M, K)
    assert (args.q_row, args.s_row, args.alpha_row) == ((_p(q.qdata), _p(q.scales), _p(q.alpha)) if rowwise
                                                        else (None, None, None))
    assert (args.q_col, args.s_col, args.alpha_col, args.amax_col) == \
        ((_p(col.qdata), _p(col.scales), _p(col.alpha), _p(col.amax)) if columnwise else (None,) * 4)
    if rowwise:
        assert args.amax_row == _p(q.amax)
    # the stats pass fills exactly the amaxes nobody gave
    stats = (args.stats_amax, args.stats_amax_rht, args.stats_row_amax, args.stats_col_amax)
    if token:
        assert stats == (None, None, _p(q.amax) if rowwise else None, _p(col.amax) if columnwise else None)
    elif rht:
        assert stats == ((args.amax_row,) if rowwise else (None,)) + (_p(col.amax), None, None)
    else:
        assert stats == (args.amax_row, None, None, None) and args.amax_row is not None
    assert (args.row_token, args.col_token, args.rht, args.sr, args.seed, args.offset, args.stream) == \
        (int(token), int(token), int(rht), 1, 11, 22, STREAM)


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_quantize_fp8_and_mxfp8_fill_their_args(monkeypatch, fake_stream, scaling):
    M, K = 32, 64
    x = torch.randn(M, K, dtype=bf16)
    launch, names = _quant_capture(monkeypatch, quantize)
    q = quantize._fp8_cuda(x, scaling, True, True)
    args = launch.args
    assert names == ["scalemm_quantize_fp8"] and type(args).__name__ == "QuantizeFp8Args"
    token = int(scaling == "token")
    assert (args.x, args.m, args.k) == (x.data_ptr(), M, K)
    assert (args.q_row, args.scale_inv_row, args.q_col, args.scale_inv_col) == \
        (_p(q.data), _p(q.scale_inv), _p(q.columnwise.data), _p(q.columnwise.scale_inv))
    assert args.amax_row is not None and args.amax_col is not None
    assert (args.amax_row == args.amax_col) == (not token)  # one 0-d amax shared by both copies
    assert (args.row_token, args.col_token, args.stream) == (token, token, STREAM)

    launch, names = _quant_capture(monkeypatch, quantize)
    q = quantize._fp8_cuda(x, scaling, True, False)  # the rowwise copy alone
    args = launch.args
    assert (args.q_row, args.scale_inv_row, args.q_col) == (_p(q.data), _p(q.scale_inv), None)
    # per token it is one kernel that keeps the row amaxes to itself (no buffer); per tensor the 0-d amax is read
    assert (args.amax_row is None, args.amax_col is None) == (bool(token), bool(token))

    launch, names = _quant_capture(monkeypatch, quantize)
    q = quantize._mxfp8_cuda(x, True, True)
    args = launch.args
    assert names == ["scalemm_quantize_mxfp8"] and type(args).__name__ == "QuantizeMxfp8Args"
    assert (args.x, args.m, args.k, args.stream) == (x.data_ptr(), M, K, STREAM)
    assert (args.q_row, args.s_row, args.q_col, args.s_col) == \
        (_p(q.data), _p(q.scales), _p(q.columnwise.data), _p(q.columnwise.scales))


def _table_base(sf_offsets, G, which):
    """The start of the group table that `sf_offsets` (position table `which`, a view) lies in."""
    return sf_offsets.data_ptr() - 4 * (G + which * (G + 1))


@pytest.mark.parametrize("scaling", ["tensor", "token"])
def test_grouped_quantizers_fill_their_args(monkeypatch, fake_stream, scaling):
    T, K, G = 40, 64, 3
    x = torch.randn(T, K, dtype=bf16)
    offsets = torch.tensor([10, 10, 33], dtype=torch.int32)
    token = int(scaling == "token")
    from scalemm.formats import layout

    launch, names = _quant_capture(monkeypatch, quantize_grouped)
    q = quantize_grouped._fp8_grouped_cuda(x, offsets, G, scaling, True, True)
    args = launch.args
    assert names == ["scalemm_quantize_fp8_grouped"] and type(args).__name__ == "QuantizeFp8GroupedArgs"
    assert (args.x, args.tokens, args.k, args.offsets, args.groups, args.token) == \
        (x.data_ptr(), T, K, offsets.data_ptr(), G, token)
    assert args.table is not None
    assert (args.q_row, args.sinv_row, args.q_col, args.sinv_col, args.w) == \
        (_p(q.data), _p(q.scale_inv), _p(q.columnwise.data), _p(q.columnwise.scale_inv), q.columnwise.data.shape[1])
    assert ((args.g_amax is None), (args.row_amax is None), (args.gcol_amax is None)) == \
        (bool(token), not token, not token)
    assert args.stream == STREAM

    launch, names = _quant_capture(monkeypatch, quantize_grouped)
    q = quantize_grouped._fp8_grouped_cuda(x, offsets, G, scaling, True, False)  # the rowwise copy alone
    args = launch.args
    assert (args.q_row, args.sinv_row, args.q_col, args.gcol_amax) == (_p(q.data), _p(q.scale_inv), None, None)
    # per token: one kernel (quantize_rows_kernel) that reads neither the group table nor a row amax buffer
    assert ((args.table is None), (args.g_amax is None), (args.row_amax is None)) == (bool(token), bool(token), True)

    launch, names = _quant_capture(monkeypatch, quantize_grouped)
    scale_rows = layout.grouped_scale_rows(T, G)
    q = quantize_grouped._nvfp4_grouped_cuda(x, offsets, G, scaling, True, True, scale_rows, rht=True, sr=True,
                                             seed=5, offset=6)
    args = launch.args
    assert names == ["scalemm_quantize_nvfp4_grouped"] and type(args).__name__ == "QuantizeNvfp4GroupedArgs"
    col = q.columnwise
    assert (args.x, args.tokens, args.k, args.offsets, args.groups, args.token) == \
        (x.data_ptr(), T, K, offsets.data_ptr(), G, token)
    # the containers' sf_offsets are the position tables abi.h places in the table the kernel got
    assert args.table == _table_base(q.sf_offsets, G, abi.kGroupTablePos128)
    assert (args.q_row, args.s_row, args.alpha_row, args.scale_rows) == \
        (_p(q.qdata), _p(q.scales), _p(q.alpha), scale_rows)
    assert (args.q_col, args.s_col, args.alpha_col, args.w, args.cb_total) == \
        (_p(col.qdata), _p(col.scales), _p(col.alpha), layout.wgrad_width(T, G), layout.wgrad_scale_cols(T, G))
    assert args.col_amax == _p(col.amax)  # rht: the columnwise amax has its own buffer
    assert args.row_amax == (_p(q.amax) if token else None) and args.g_amax == (None if token else _p(q.amax))
    assert (args.rht, args.sr, args.seed, args.offset, args.stream) == (1, 1, 5, 6, STREAM)

    launch, names = _quant_capture(monkeypatch, quantize_grouped)
    q = quantize_grouped._mxfp8_grouped_cuda(x, offsets, G)
    args = launch.args
    assert names == ["scalemm_quantize_mxfp8_grouped"] and type(args).__name__ == "QuantizeMxfp8GroupedArgs"
    assert (args.x, args.tokens, args.k, args.offsets, args.groups) == (x.data_ptr(), T, K, offsets.data_ptr(), G)
    assert args.table == _table_base(q.sf_offsets, G, abi.kGroupTablePos128)
    assert (args.q_row, args.s_row, args.scale_rows, args.stream) == \
        (_p(q.data), _p(q.scales), layout.grouped_scale_rows(T, G), STREAM)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("x4", [False, True])
def test_skinny_gemm_fills_its_args(monkeypatch, fake_stream, grouped, x4):
    """_gemm_skinny's Nvfp4SkinnyGemmArgs: operands, the leaf modes of abi.h, groups and offsets."""
    from types import SimpleNamespace
    import scalemm
    from scalemm.cutlass_kernels.configs import SkinnyConfig
    captured = []
    monkeypatch.setattr(gemm_nvfp4, "_skinny_launcher", lambda spec: captured.append)
    monkeypatch.setattr(gemm_nvfp4, "ctypes", SimpleNamespace(byref=lambda obj: obj))
    monkeypatch.setattr(gemm_nvfp4.abi, "Nvfp4SkinnyGemmArgs", lambda **kw: kw)
    G, N, K, T = 3, 64, 128, 7
    offsets = torch.tensor([2, 2, 7], dtype=torch.int32) if grouped else None
    if grouped:
        b = scalemm.quantize_nvfp4_stacked(torch.randn(G, N, K).to(bf16), scaling="token")
        bias = torch.randn(G, N).to(bf16)
    else:
        b = scalemm.quantize_nvfp4(torch.randn(N, K).to(bf16), scaling="tensor")
        bias = torch.randn(N).to(bf16)
    x = torch.randn(T, K).to(bf16)
    if x4:
        a = (scalemm.quantize_nvfp4_grouped(x, offsets, scaling="tensor") if grouped
             else scalemm.quantize_nvfp4(x, scaling="token"))
    else:
        a = x
    out = torch.empty(T, N, dtype=bf16)
    gemm_nvfp4._gemm_skinny(a, b, bias, out, SkinnyConfig(2, 3), "relu", offsets=offsets)
    args, = captured
    assert args["weight"] == b.qdata.data_ptr() and args["weight_scales"] == b.scales.data_ptr()
    assert args["x"] == (a.qdata if x4 else a).data_ptr() and args["d"] == out.data_ptr()
    assert args["x_scales"] == (a.scales.data_ptr() if x4 else None)
    assert args["x_sf_offsets"] == (a.sf_offsets.data_ptr() if (x4 and grouped) else None)
    assert (args["offsets"], args["groups"]) == ((offsets.data_ptr(), G) if grouped else (None, 1))
    mode_a = (abi.kLeafPerGroup if grouped else abi.kLeafPerRow) if x4 else abi.kLeafOne
    assert args["scale_a_mode"] == mode_a and args["scale_a"] == (a.alpha.data_ptr() if x4 else args["scale_a"])
    assert args["scale_b_mode"] == (abi.kLeafPerGroupVec if grouped else abi.kLeafOne)
    assert (args["bias"], args["bias_mode"]) == (bias.data_ptr(), abi.kLeafPerGroupVec if grouped else abi.kLeafShared)
    assert (args["n"], args["tokens"], args["k"], args["scale_cols"], args["splits"]) == (N, T, K, 8, 3)
    assert args["stream"] == STREAM
    real = {k: v for k, v in args.items() if k != "device"}
    abi.structs["Nvfp4SkinnyGemmArgs"](device=0, **real)  # every field exists in the struct


def test_workspace_bytes_passes_the_call_and_reads_the_answer():
    """abi.workspace_bytes hands a launcher's workspace query the call struct's address and returns what the query
    wrote through `bytes` (the protocol of scalemm_gemm_workspace and scalemm_nvfp4_gemm_workspace)."""
    seen = []

    def query(ptr):
        args = ptr._obj
        call = abi.GemmArgs.from_address(args.call)
        seen.append((call.m, call.n, call.k))
        ctypes.c_int64.from_address(args.bytes).value = 4096 * call.m
        return 0

    call = abi.GemmArgs(m=3, n=64, k=128)
    assert abi.workspace_bytes(query, call) == 4096 * 3
    assert seen == [(3, 64, 128)]
