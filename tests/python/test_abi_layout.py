"""The Python module's hand-laid ctypes mirror of the kernel ABI (python/pacheck/_native.py) against the C
structs of the library it loads, field by field (offsetof, not only sizeof), and its attention-variant names
against the case field table (core/case_fields.cpp). Run by ctest as python.abi_layout."""
import copy

import pacheck
from pacheck import _native


def library_info():
    """pacheck_cells_info of the library, loaded without the module's own layout check, so that a mismatch is
    this test's failure with every field named rather than a load error."""
    return _native.Library(_native.find_library(), check_abi=False).info


def test_every_ctypes_field_sits_at_the_c_offset():
    info = library_info()
    assert sorted(info["abi_fields"]) == sorted(_native.MIRRORS)
    assert _native.abi_mismatches(info) == []
    for cname, struct in _native.MIRRORS.items():
        names = [f["name"] for f in info["abi_fields"][cname]]  # in offset order: the header's declaration order
        assert names == [name for name, *_ in struct._fields_], cname


def test_a_moved_field_is_named():
    # The check itself can fail: two fields of the library's description swapped, as a struct whose fields
    # moved would describe itself.
    info = copy.deepcopy(library_info())
    rows = {f["name"]: f for f in info["abi_fields"]["pacheck_case_info"]}
    rows["has_alibi"]["offset"], rows["has_sinks"]["offset"] = rows["has_sinks"]["offset"], rows["has_alibi"]["offset"]
    bad = _native.abi_mismatches(info)
    assert [line.split(":")[0] for line in bad] == ["pacheck_case_info.has_alibi", "pacheck_case_info.has_sinks"]


def test_the_abi_fields_of_the_case_field_table_are_mirrored():
    fields = library_info()["case_fields"]
    assert {f["name"] for f in fields} >= {"num_heads", "seq_lens", "sliding_window", "query_lens"}
    for f in fields:
        for name in f["abi_args"]:
            assert name in dict(_native.KernelArgs._fields_), (f["name"], name)
        for name in f["abi_info"]:
            assert name in dict(_native.CaseInfo._fields_), (f["name"], name)


def test_variants_are_the_case_field_tables():
    fields = library_info()["case_fields"]
    assert pacheck.VARIANTS == {f["name"]: f["variant_bit"] for f in fields if f["variant_bit"]}
