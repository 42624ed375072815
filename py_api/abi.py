"""scalemm's C ABI, read from its one definition: cutlass_kernels/include/scalemm/abi.h.

The header holds every constant and parameter struct that the extern "C" launchers and Python
share; this module parses it (a deliberately small subset of C++: see the header's rules) so
nothing is written twice. Exposes:

- ``constants``: name -> int for every ``constexpr int`` and enum entry (``abi.constants["kMaxLeaves"]``),
  also as module attributes (``abi.kMaxLeaves``);
- one ``ctypes.Structure`` subclass per struct (``abi.Nvfp4GemmArgs``), fields in header order;
- ``group_table_ints``: the size of the int32 group table the header describes, from its constants;
- ``workspace_bytes``: a GEMM launcher's workspace query (GemmWorkspaceArgs) run on the host.

Callers read the constants at use time (``abi.kLeafPerRow``), never copy them into their own names.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

HEADER = Path(__file__).resolve().parent.parent / "cutlass_kernels" / "include" / "scalemm" / "abi.h"
if not HEADER.is_file():  # installed: scalemm/cutlass_kernels/include sits beside this package's modules
    HEADER = Path(__file__).resolve().parent / "cutlass_kernels" / "include" / "scalemm" / "abi.h"

_CTYPES = {"int64_t": ctypes.c_int64, "int32_t": ctypes.c_int32, "uint64_t": ctypes.c_uint64,
           "uint32_t": ctypes.c_uint32, "float": ctypes.c_float}
_CONSTEXPR = re.compile(r"^\s*constexpr\s+int\s+(\w+)\s*=\s*(-?\w+)\s*;", re.M)
_ENUM = re.compile(r"enum\s+(\w+)\s*:\s*int\s*\{([^}]*)\}", re.S)
_STRUCT = re.compile(r"struct\s+(\w+)\s*\{([^}]*)\};", re.S)
_FIELD = re.compile(r"^\s*([\w\s]+?)\s*(\*?)\s*(\w+)\s*(?:\[(\w+)\])?\s*;")


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def _value(token: str, constants: dict) -> int:
    return constants[token] if token in constants else int(token, 0)


def parse(text: str) -> tuple[dict, dict]:
    """(constants, structs) of a header written to abi.h's rules."""
    text = _strip_comments(text)
    constants: dict[str, int] = {}
    for m in _ENUM.finditer(text):
        for entry in filter(None, (e.strip() for e in m[2].split(","))):
            name, _, value = (p.strip() for p in entry.partition("="))
            constants[name] = _value(value, constants)
    for name, value in _CONSTEXPR.findall(text):
        constants[name] = _value(value, constants)
    structs = {}
    for m in _STRUCT.finditer(text):
        fields = []
        for line in filter(str.strip, m[2].split(";")):
            f = _FIELD.match(line + ";")
            if not f:
                raise ValueError(f"abi.h: cannot parse field {line.strip()!r} of struct {m[1]}")
            base, star, name, count = f.groups()
            base = base.replace("const", "").strip()
            ctype = ctypes.c_void_p if star else _CTYPES.get(base)
            if ctype is None:
                raise ValueError(f"abi.h: unsupported field type {base!r} in struct {m[1]}")
            if count:
                ctype = ctype * _value(count, constants)
            fields.append((name, ctype))
        structs[m[1]] = type(m[1], (ctypes.Structure,), {"_fields_": fields})
    return constants, structs


constants, structs = parse(HEADER.read_text())
globals().update(constants)
globals().update(structs)


def group_table_ints(groups: int, tiles: int = 0) -> int:
    """int32 entries of the grouped kernels' group table (abi.h) for `groups` groups: ends [G] and the
    kGroupTablePositionTables position tables of G + 1 ints, rounded up to whole tile entries
    (16 bytes), then `tiles` tile entries of kGroupTileInts ints."""
    c = globals()  # the module attributes, so a test that patches abi.kGroupTileInts sees it here too
    table = groups + c["kGroupTablePositionTables"] * (groups + 1)
    per_tile = c["kGroupTileInts"]
    return -(-table // per_tile) * per_tile + per_tile * tiles


def workspace_bytes(query, call: ctypes.Structure) -> int:
    """The bytes of workspace the kernel behind `query` (a scalemm_*gemm_workspace function taking
    GemmWorkspaceArgs) needs for `call` (its launch struct; the pointers in it are not read). Nothing is launched."""
    got = ctypes.c_int64(-1)
    query(ctypes.byref(globals()["GemmWorkspaceArgs"](call=ctypes.addressof(call), bytes=ctypes.addressof(got))))
    return got.value


__all__ = ["constants", "structs", "parse", "HEADER", "group_table_ints", "workspace_bytes", *constants, *structs]
