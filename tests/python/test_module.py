"""The pacheck Python module and pytest plugin (issue 20): buffers, declines, errors, the instrument check.

Run by ctest (tests/python/CMakeLists.txt) with PACHECK_LIB, PACHECK_BINARY and PYTHONPATH=python set.
"""
import ctypes
import os
import subprocess

import numpy as np
import pytest

import pacheck
from pacheck import dtypes

pytest_plugins = ["pytester"]

CELL = "h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan@tail"  # a gate cell, straddling, V tail poisoned


def _zero(inp):
    inp.out.numpy()[...] = 0


def test_list_cells_matches_the_cli():
    ids = [c.id for c in pacheck.cells("gate", "cpu.reference")]
    out = subprocess.run([os.environ["PACHECK_BINARY"], "list", "cells", "--suite", "gate", "--kernel", "cpu.reference"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()
    assert ids == out


def test_buffers_are_pacheck_memory_with_layout_metadata():
    seen = {}

    def look(inp):
        for name, b in inp.buffers().items():
            seen[name] = (b.shape, b.strides, b.dtype)
        o = inp.out.numpy()
        seen["out_ptr"] = o.__array_interface__["data"][0] == inp.out.ptr
        seen["query_readonly"] = not inp.query.numpy().flags.writeable
        seen["out_all_nan"] = bool(np.isnan(dtypes.to_float32(o, inp.out_dtype)).all())
        o[...] = 0

    k = pacheck.Kernel("t.look", look, layouts=("vllm",))
    pacheck.run_cell(None, k, CELL.replace("nhd", "vllm"))
    assert seen["key_cache"][0][1:] == (2, 128 // 8, 16, 8)  # vllm key [blocks, G, D/x, B, x], x = 8 for bf16
    assert seen["value_cache"][0][1:] == (2, 128, 16)
    assert seen["query"] == ((2, 8, 128), (8 * 128, 128, 1), "bf16")
    assert seen["out_ptr"] and seen["query_readonly"] and seen["out_all_nan"]


def test_decline_names_the_reason():
    k = pacheck.Kernel("t.decline", _zero, supports=lambda c: f"q_dtype {c.q_dtype}: only f32" if c.q_dtype != "f32" else None)
    r = pacheck.run_cell("gate", k, CELL)
    assert r.verdict == "declined" and r.declined and not r.failed
    assert "q_dtype bf16: only f32" in r.detail


def test_decline_exception_and_failing_supports():
    def sup(c):
        raise pacheck.Decline("block_size 16: only 32")

    r = pacheck.run_cell("gate", pacheck.Kernel("t.decline2", _zero, supports=sup), CELL)
    assert r.verdict == "declined" and "block_size 16: only 32" in r.detail

    def broken(c):
        raise KeyError("oops")

    r = pacheck.run_cell("gate", pacheck.Kernel("t.badsupports", _zero, supports=broken), CELL)
    assert r.verdict == "error" and r.failed and "KeyError" in r.detail  # never a quiet decline


def test_kernel_exception_is_an_error_with_its_traceback():
    def boom(inp):
        return 1 / 0

    r = pacheck.run_cell("gate", pacheck.Kernel("t.boom", boom), CELL)
    assert r.verdict == "error" and r.failed
    assert "ZeroDivisionError" in r.detail and "ZeroDivisionError" in r.message()
    assert "repro: pacheck repro" in r.message()


def test_unwritten_output_and_written_input_fail():
    r = pacheck.run_cell("gate", pacheck.Kernel("t.nothing", lambda inp: None), CELL)
    assert r.failed and r.verdict != "pass"

    def scribble(inp):
        ctypes.memset(inp.query.ptr, 0, 2)  # behind NumPy's read-only flag: pacheck's checksum must see it
        inp.out.numpy()[...] = 0

    r = pacheck.run_cell("gate", pacheck.Kernel("t.scribble", scribble), CELL)
    assert r.failed, r.message()


def test_planted_kernel_cell_and_repro():
    from numpy_kernels import numpy_decode, numpy_tail_fault

    bad = pacheck.run_cell("gate", numpy_tail_fault, CELL)
    assert bad.verdict == "poisoned" and bad.failed, bad.message()
    assert bad.repro.startswith("pacheck repro 'h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan@tail'")
    assert "worst element" in bad.message()
    good = pacheck.run_cell("gate", numpy_decode, CELL)
    assert good.verdict == "pass", good.message()


def test_bad_calls_raise():
    with pytest.raises(pacheck.PacheckError, match="no-such-suite"):
        pacheck.cells("no-such-suite", "cpu.reference")
    with pytest.raises(pacheck.PacheckError, match="has no cell"):
        pacheck.run_cell("gate", "cpu.reference", "h1/1 d64 bs16 f32 ctx5 nhd seed7 clean")
    with pytest.raises(pacheck.PacheckError, match="layouts"):
        pacheck.Kernel("t.badlayout", _zero, layouts=("xyz",)).register()
    with pytest.raises(pacheck.PacheckError, match="name"):
        pacheck.Kernel("bad name!", _zero).register()


def test_dtype_codecs():
    assert dtypes.from_float32(np.float32([1.0, 1.00390625, 1.01171875]), "bf16").tolist() == [0x3F80, 0x3F80, 0x3F82]
    assert dtypes.to_float32(np.uint16([0x3F80, 0xFF80]), "bf16").tolist() == [1.0, -np.inf]
    assert dtypes.to_float32(np.uint8([0x7E]), "fp8_e4m3fn")[0] == 448
    assert dtypes.to_float32(np.uint8([0x7F]), "fp8_e4m3fnuz")[0] == 240
    assert dtypes.to_float32(np.uint8([0x7B]), "fp8_e5m2")[0] == 57344
    assert np.isnan(dtypes.to_float32(np.uint8([0x7F, 0x80]), "fp8_e4m3fn")[0])
    assert np.isnan(dtypes.to_float32(np.uint8([0x80]), "fp8_e4m3fnuz")[0])
    assert dtypes.to_float32(np.uint8([0x01]), "fp8_e4m3fnuz")[0] == 2.0 ** -10


_INNER = """
import pacheck, pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode

@pp.cells("gate", numpy_decode)
def test_k(pacheck_cell):
    pacheck_cell.check()
"""


def test_plugin_ids_selection_and_decline_skip(pytester):
    pytester.makepyfile(test_inner=_INNER + """
def _no_bf16(c):
    return "q_dtype bf16: not here" if c.q_dtype == "bf16" else None

@pp.cells("gate", pacheck.Kernel("t.nobf16", numpy_decode.run, supports=_no_bf16))
def test_d(pacheck_cell):
    pacheck_cell.check()
""")
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "-k", "ctx1000 and V:nan and bf16 and not fp8", "-rs",
                             "--pacheck-no-instrument")
    # -k on the cell ids: the 8 bf16 gate cells at ctx1000 with a NaN in V, and the 6 page-size cells at
    # ctx1000,37,257 with K+V:nan@all (issue 18), once per kernel (see --co)
    res.assert_outcomes(passed=14, skipped=14)
    res.stdout.fnmatch_lines(["*declined: q_dtype bf16: not here*"])
    ids = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "--co", "-q", "-k", "test_k and ctx1000 and V:nan and h8")
    ids.stdout.fnmatch_lines(["test_inner.py::test_k[[]h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan@tail[]]"])


def test_plugin_blind_instrument_fails_the_session(pytester):
    pytester.makeconftest("""
import pacheck
pacheck.check_instrument = lambda suite: pacheck.InstrumentCheck(True, "negative control planted: missed 1 cell\\n")
""")
    pytester.makepyfile(test_inner=_INNER)
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "-k", "ctx1000 and V:nan and tail and bf16 and not fp8 and h8")
    assert res.ret == 3
    res.stdout.fnmatch_lines(["*pacheck is blind on suite 'gate'*", "*BLIND*"])
