"""The pacheck Python module and pytest plugin (issue 20): buffers, declines, errors, the instrument check.

Run by ctest (tests/python/CMakeLists.txt) with PACHECK_LIB, PACHECK_BINARY and PYTHONPATH=python set.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import numpy_kernels  # noqa: F401 -- in sys.modules before pytester's in-process runs, which would otherwise
import pacheck           # import it afresh each run and register its kernels' names twice
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
    assert r.metrics == "" and "worst element" not in r.message(), r.message()


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
    assert "repro: pacheck.run_cell('gate', KERNEL, " in r.message()  # a Python kernel without a repro_label
    # no output was judged: no metrics, no "worst element: (seq -1 ...) rel_linf 0 against limit 0.0" line
    assert r.metrics == "" and "worst element" not in r.message() and "limit" not in r.message(), r.message()


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
    # A Python kernel without a repro_label cannot be loaded by `pacheck repro`: its repro is the Python call
    # (it named a placeholder plugin '<python kernel ...>' before).
    assert bad.repro == (f"pacheck.run_cell('gate', KERNEL, '{CELL}')  # KERNEL: the pacheck.Kernel "
                         "'py.numpy_tail_fault'"), bad.repro
    assert "<python kernel" not in bad.message()
    labelled = pacheck.Kernel("t.labelled", numpy_tail_fault.run, layouts=("nhd",), repro_label="build/libmine.so")
    r = pacheck.run_cell("gate", labelled, CELL)
    assert r.repro == f"python -m pacheck repro '{CELL}' --kernel t.labelled --plugin build/libmine.so", r.repro
    assert "worst element" in bad.message() and "worst: (seq " in bad.metrics
    good = pacheck.run_cell("gate", numpy_decode, CELL)
    assert good.verdict == "pass", good.message()


def test_bad_calls_raise():
    with pytest.raises(pacheck.PacheckError, match="no-such-suite"):
        pacheck.cells("no-such-suite", "cpu.reference")
    with pytest.raises(pacheck.PacheckError, match="has no cell"):
        pacheck.run_cell("gate", "cpu.reference", "h1/1 d64 bs16 f32 ctx5 nhd seed7 clean")
    with pytest.raises(ValueError, match="layouts"):  # at construction (see test_kernel_arguments_are_checked...)
        pacheck.Kernel("t.badlayout", _zero, layouts=("xyz",))
    with pytest.raises(ValueError, match="name"):
        pacheck.Kernel("bad name!", _zero)


# Every attention variant at once, a window edge inside a block (37 - 8 = 29) and GQA 4.
VCELL = "h8/2 d64 bs16 bf16 ctx37,20 nhd seed7 win=8 cap=30 alibi=geo sinks=-1~1"


def test_variant_inputs_carry_pacheck_bytes_and_none_when_absent():
    seen = []

    def look(inp):
        seen.append({"window": inp.sliding_window, "cap": inp.logits_soft_cap,
                     "alibi": None if inp.alibi_slopes is None else inp.alibi_slopes.numpy().copy(),
                     "sinks": None if inp.sinks is None else inp.sinks.numpy().copy(),
                     "shape": None if inp.sinks is None else (inp.sinks.shape, inp.sinks.dtype)})
        inp.out.numpy()[...] = 0

    infos = []
    k = pacheck.Kernel("t.variant_inputs", look, variants=tuple(pacheck.VARIANTS),
                       supports=lambda c: infos.append(c))
    pacheck.run_cell(None, k, VCELL + " clean")
    v = seen[0]
    assert v["window"] == 8 and v["cap"] == 30.0
    assert v["shape"] == ((8,), "f32")
    # ALiBi's geometric slopes 2^(-8 (h + 1) / num_heads), rounded to fp32 (core/case.hpp): exact bytes.
    assert v["alibi"].tobytes() == np.float32([2.0 ** (-8 * (h + 1) / 8) for h in range(8)]).tobytes()
    # sinks=-1~1: linear from head 0 to head 7, the ends exact.
    assert v["sinks"][0] == -1.0 and v["sinks"][-1] == 1.0
    assert np.allclose(v["sinks"], np.linspace(-1, 1, 8), rtol=0, atol=1e-6)
    assert (infos[0].sliding_window, infos[0].logits_soft_cap, infos[0].has_alibi, infos[0].has_sinks) == (8, 30.0, True, True)
    seen.clear()
    pacheck.run_cell(None, k, "h8/2 d64 bs16 bf16 ctx37,20 nhd seed7 clean")
    assert seen[0] == {"window": 0, "cap": 0.0, "alibi": None, "sinks": None, "shape": None}


def test_undeclared_variants_are_declined_naming_the_field():
    r = pacheck.run_cell(None, pacheck.Kernel("t.no_variants", _zero), "h8/2 d64 bs16 bf16 ctx37 nhd seed7 win=8 clean")
    assert r.verdict == "declined" and not r.failed and "sliding_window 8:" in r.detail, r.message()
    k = pacheck.Kernel("t.window_only", _zero, variants=("sliding_window",))
    r = pacheck.run_cell(None, k, "h8/2 d64 bs16 bf16 ctx37 nhd seed7 win=8 sinks=-1~1 clean")
    assert r.verdict == "declined" and "sinks -1~1:" in r.detail, r.message()
    with pytest.raises(ValueError, match=r"variants: 'window' is not known \(known: sliding_window"):
        pacheck.Kernel("t.bad_variant", _zero, variants=("window",))
    with pytest.raises(TypeError, match="variants: a list or tuple"):
        pacheck.Kernel("t.bad_variant2", _zero, variants="sinks")
    with pytest.raises(ValueError, match="variants: sinks listed twice"):
        pacheck.Kernel("t.bad_variant3", _zero, variants=("sinks", "sinks"))


@pytest.mark.parametrize("variants", [{"sliding_window": True}, {"sinks": 1, "nope": 2}, dict, None, 3,
                                      "query_lens"])
def test_variants_that_are_not_a_list_of_names_are_refused(variants):
    # A dict was accepted before (its keys read as the names, its values ignored).
    with pytest.raises(TypeError) as e:
        pacheck.Kernel("t.bad_variants", _zero, variants=variants)
    assert "pacheck.Kernel('t.bad_variants'): variants: a list or tuple" in str(e.value), str(e.value)
    assert "(known: sliding_window, alibi_slopes, logits_soft_cap, sinks, query_lens)" in str(e.value), str(e.value)


# Several query tokens per sequence: 3 and 1 tokens, the first sequence's straddling the block edge 32 (ctx 33:
# positions 30..32).
QCELL = "h8/2 d64 bs16 bf16 ctx33,20 nhd seed7 qlen=3,1"


def test_query_tokens_inputs_and_decline_naming_query_len_and_the_kernel():
    seen = {}

    def look(inp):
        seen.update(query=inp.query.shape, out=inp.out.shape, lens=inp.query_lens, loc=inp.query_start_loc_host,
                    loc_buf=None if inp.query_start_loc is None else inp.query_start_loc.numpy().tolist(),
                    n=inp.num_query_tokens, m=inp.max_query_len)
        inp.out.numpy()[...] = 0

    infos = []
    k = pacheck.Kernel("t.qlen_inputs", look, variants=("query_lens",), supports=lambda c: infos.append(c))
    pacheck.run_cell(None, k, QCELL + " clean")
    assert seen == {"query": (4, 8, 64), "out": (4, 8, 64), "lens": [3, 1], "loc": [0, 3, 4], "loc_buf": [0, 3, 4],
                    "n": 4, "m": 3}, seen
    assert (infos[0].max_query_len, infos[0].query_lens) == (3, [3, 1])
    seen.clear()
    pacheck.run_cell(None, k, "h8/2 d64 bs16 bf16 ctx33,20 nhd seed7 clean")  # plain decode: NULL, one row each
    assert (seen["query"], seen["lens"], seen["loc_buf"], seen["m"]) == ((2, 8, 64), [1, 1], None, 1), seen
    # A kernel that does not declare "query_lens" never sees such a cell: declined, naming query_len and it.
    r = pacheck.run_cell(None, pacheck.Kernel("t.one_token", _zero), QCELL + " clean")
    assert r.verdict == "declined" and not r.failed, r.message()
    assert "query_len 3:" in r.detail and "t.one_token" in r.detail, r.detail


def test_numpy_example_kernel_implements_query_tokens():
    from numpy_kernels import numpy_decode, numpy_tail_fault

    for cell in (QCELL, QCELL + " win=2 cap=30 alibi=geo sinks=-1~1"):
        for fault in ("clean", "V:nan@tail"):
            r = pacheck.run_cell(None, numpy_decode, f"{cell} {fault}")
            assert r.verdict == "pass", r.message()
    assert pacheck.run_cell(None, numpy_tail_fault, f"{QCELL} V:nan@tail").verdict == "poisoned"


def test_numpy_example_kernel_implements_the_variants():
    from numpy_kernels import numpy_decode, numpy_tail_fault

    for fault in ("clean", "V:nan@tail", "V:nan@window"):
        r = pacheck.run_cell(None, numpy_decode, f"{VCELL} {fault}")
        assert r.verdict == "pass", r.message()
    # The planted tail fault still reads the V tail through the variants' softmax.
    assert pacheck.run_cell(None, numpy_tail_fault, f"{VCELL} V:nan@tail").verdict == "poisoned"


def test_dtype_codecs():
    assert dtypes.from_float32(np.float32([1.0, 1.00390625, 1.01171875]), "bf16").tolist() == [0x3F80, 0x3F80, 0x3F82]
    assert dtypes.to_float32(np.uint16([0x3F80, 0xFF80]), "bf16").tolist() == [1.0, -np.inf]
    assert dtypes.to_float32(np.uint8([0x7E]), "fp8_e4m3fn")[0] == 448
    assert dtypes.to_float32(np.uint8([0x7F]), "fp8_e4m3fnuz")[0] == 240
    assert dtypes.to_float32(np.uint8([0x7B]), "fp8_e5m2")[0] == 57344
    assert np.isnan(dtypes.to_float32(np.uint8([0x7F, 0x80]), "fp8_e4m3fn")[0])
    assert np.isnan(dtypes.to_float32(np.uint8([0x80]), "fp8_e4m3fnuz")[0])
    assert dtypes.to_float32(np.uint8([0x01]), "fp8_e4m3fnuz")[0] == 2.0 ** -10


# -k that leaves out the gate cells with an attention variant (issue 19: win=, cap=, alibi=, sinks=, qlen=): the
# counts below are of plain decode cells (the NumPy example kernels run the four variants' cells too, and decline
# the qlen= ones; python.numpy_gate).
_NO_VARIANTS = " and not win and not cap and not alibi and not sinks and not qlen"

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
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "-k", "ctx1000 and V:nan and bf16 and not fp8" + _NO_VARIANTS, "-rs",
                             "--pacheck-no-instrument")
    # -k on the cell ids: the 8 bf16 gate cells at ctx1000 with a NaN in V, and the 6 page-size cells at
    # ctx1000,37,257 with K+V:nan@all (issue 18), and the 2 high-block-id cells at ctx1000,37 with
    # K+V:nan@unused (hiblk=31, hiblk=32), once per kernel (see --co)
    res.assert_outcomes(passed=16, skipped=16)
    res.stdout.fnmatch_lines(["*declined: q_dtype bf16: not here*"])
    ids = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "--co", "-q", "-k", "test_k and ctx1000 and V:nan and h8" + _NO_VARIANTS)
    ids.stdout.fnmatch_lines(["test_inner.py::test_k[[]h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan_at_tail[]]"])


def test_plugin_blind_instrument_fails_the_session(pytester):
    pytester.makeconftest("""
import pacheck
pacheck.check_instrument = lambda suite, *a, **k: pacheck.InstrumentCheck(True, "negative control planted: missed 1 cell\\n")
""")
    pytester.makepyfile(test_inner=_INNER)
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "-k", "ctx1000 and V:nan and tail and bf16 and not fp8 and h8" + _NO_VARIANTS)
    assert res.ret == 3
    res.stdout.fnmatch_lines(["*pacheck is blind on suite 'gate'*", "*BLIND*"])


def test_plugin_kernel_that_declines_every_selected_cell_fails_the_session(pytester):
    """A kernel that declined every cell it was given tested nothing: exit 1 and a NO CELL RAN line, as `pacheck
    run` counts it (the audit's MLA kernel on suite tail-poison: "32 skipped", exit 0). Its honest neighbour,
    which ran its cells, keeps the session green when alone."""
    pytester.makepyfile(test_inner=_INNER + """
@pp.cells("gate", pacheck.Kernel("t.declines_all", numpy_decode.run, supports=lambda c: "never this one"))
def test_d(pacheck_cell):
    pacheck_cell.check()
""")
    sel = "ctx1000 and V:nan and tail and bf16 and not fp8 and h8" + _NO_VARIANTS
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", "test_d and " + sel)
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*NO CELL RAN: *t.declines_all* declined all * selected cells of suite 'gate'*"])
    ok = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", "test_k and " + sel)
    assert ok.ret == 0
    assert "NO CELL RAN" not in ok.stdout.str()


# Issue 17/20 audit: a Kernel's arguments are checked in Python, at construction, and every message names
# the Python object and the field ("pacheck.Kernel('NAME'): FIELD: ...").
@pytest.mark.parametrize("field", ["head_sizes", "block_sizes", "gqa_ratios"])
@pytest.mark.parametrize("value, error, says", [
    ([2**32 + 128], ValueError, "4294967424 is out of range [1, 2147483647]"),  # c_int32 wrapped it to 128
    ([2**40], ValueError, "1099511627776 is out of range"),  # was "0 is not > 0"
    ([2**31], ValueError, "2147483648 is out of range"),
    ([0], ValueError, "0 is out of range"),
    ([-16], ValueError, "-16 is out of range"),
    ([True], TypeError, "entry True is a bool, not an int"),
    (["64"], TypeError, "entry '64' is a str, not an int"),
    ([64.0], TypeError, "entry 64.0 is a float, not an int"),
    (None, TypeError, "a list or tuple, not NoneType"),
    (64, TypeError, "a list or tuple, not int"),
    ("64", TypeError, "a list or tuple, not the str '64'"),
    ([64, 64], ValueError, "64 listed twice"),
])
def test_kernel_size_lists_are_checked(field, value, error, says):
    with pytest.raises(error) as e:
        pacheck.Kernel("t.sizes", _zero, **{field: value})
    assert str(e.value).startswith(f"pacheck.Kernel('t.sizes'): {field}: "), str(e.value)
    assert says in str(e.value)


def test_kernel_size_lists_keep_good_values():
    k = pacheck.Kernel("t.sizesok", _zero, head_sizes=[np.int64(128), 2**31 - 1], block_sizes=range(16, 33, 16))
    assert k.head_sizes == (128, 2**31 - 1) and type(k.head_sizes[0]) is int and k.block_sizes == (16, 32)


@pytest.mark.parametrize("args, kw, error, says", [
    (("bad name!", _zero), {}, ValueError, "pacheck.Kernel('bad name!'): name: character ' '"),
    (("h\u00e9llo", _zero), {}, ValueError, "pacheck.Kernel('h\u00e9llo'): name: character '\u00e9' (U+00E9) is not ASCII"),
    (("", _zero), {}, ValueError, "pacheck.Kernel(''): name: empty"),
    (("x" * 65, _zero), {}, ValueError, "name: 65 characters, longer than 64"),
    ((123, _zero), {}, TypeError, "pacheck.Kernel(123): name: a str, not int"),
    (("t.run", 42), {}, TypeError, "pacheck.Kernel('t.run'): run: a callable taking pacheck.Inputs, not int 42"),
    (("t.sup", _zero), {"supports": "f32 only"}, TypeError, "pacheck.Kernel('t.sup'): supports: None or a callable"),
    (("t.dev", _zero), {"device": "gpu"}, ValueError, "pacheck.Kernel('t.dev'): device: 'gpu': 'cpu' or 'cuda'"),
    (("t.lay", _zero), {"layouts": "nhd"}, TypeError,
     "pacheck.Kernel('t.lay'): layouts: a list or tuple, not the str 'nhd' (write layouts=('nhd',) for one entry)"),
    (("t.lay2", _zero), {"layouts": ("xyz",)}, ValueError, "pacheck.Kernel('t.lay2'): layouts: 'xyz' is not known"),
    (("t.lay3", _zero), {"layouts": ()}, ValueError, "pacheck.Kernel('t.lay3'): layouts: empty"),
    (("t.lay4", _zero), {"layouts": None}, TypeError, "pacheck.Kernel('t.lay4'): layouts: a list or tuple, not NoneType"),
    (("t.dt", _zero), {"q_dtypes": ("bf16", "f32", "bf16")}, ValueError, "pacheck.Kernel('t.dt'): q_dtypes: bf16 listed twice"),
    (("t.dt2", _zero), {"kv_dtypes": "bf16"}, TypeError, "pacheck.Kernel('t.dt2'): kv_dtypes: a list or tuple, not the str"),
    (("t.dt3", _zero), {"out_dtypes": (2,)}, TypeError, "pacheck.Kernel('t.dt3'): out_dtypes: entry 2 is a int, not a str"),
    (("t.dt4", _zero), {"out_dtypes": ("fp16",)}, ValueError, "pacheck.Kernel('t.dt4'): out_dtypes: 'fp16' is not known"),
    (("t.desc", _zero), {"description": 5}, TypeError, "pacheck.Kernel('t.desc'): description: a str, not int"),
])
def test_kernel_arguments_are_checked_at_construction(args, kw, error, says):
    with pytest.raises(error) as e:
        pacheck.Kernel(*args, **kw)
    assert says in str(e.value), str(e.value)


def test_kernel_register_checks_again_and_names_the_python_object():
    k = pacheck.Kernel("t.later", _zero)
    k.head_sizes = [2**32 + 128]  # changed after __init__: register() must not wrap it either
    with pytest.raises(ValueError, match=r"pacheck\.Kernel\('t\.later'\): head_sizes: 4294967424 is out of range"):
        k.register()
    pacheck.Kernel("t.twice", _zero).register()
    with pytest.raises(pacheck.PacheckError) as e:  # refused by the C side (the backstop), framed for Python
        pacheck.Kernel("t.twice", _zero).register()
    assert str(e.value) == ("pacheck.Kernel('t.twice'): duplicate kernel name 't.twice': already registered by "
                            "pacheck.Kernel('t.twice')"), str(e.value)


_PLANTED = """
import pacheck, pacheck.pytest_plugin as pp
from numpy_kernels import numpy_tail_fault

@pp.cells("gate", numpy_tail_fault)
def test_k(pacheck_cell):
    pacheck_cell.check()
"""
_ONE_FAILING = "ctx1000 and V:nan and tail and bf16 and not fp8 and h8 and not K+V" + _NO_VARIANTS  # the one cell CELL


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_plugin_junitxml_carries_the_verdict_and_cell_id(pytester, family):
    import xml.etree.ElementTree as ET

    pytester.makepyfile(test_inner=_PLANTED + """
@pp.cells("gate", "cpu.reference")
def test_ref(pacheck_cell):
    pacheck_cell.check()
""")
    xml = pytester.path / "out.xml"
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", _ONE_FAILING,
                             f"--junitxml={xml}", "-o", f"junit_family={family}")
    res.assert_outcomes(passed=1, failed=1)
    props, ids = {}, {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        test, cell = tc.get("name").split("[", 1)
        props[test] = {p.get("name"): p.get("value") for p in tc.iter("property")}
        ids[test] = cell[:-1]
        assert float(props[test].pop("pacheck_seconds")) > 0, props  # the cell's wall time
    # The test id writes '@' as '_at_' (-k cannot take '@'); the property keeps the exact id.
    assert ids["test_k"] == pacheck.pytest_id(CELL) and ids["test_ref"] == pacheck.pytest_id(CELL.replace(" nhd ", " vllm "))
    assert props["test_k"] == {"pacheck_verdict": "poisoned", "pacheck_cell_id": CELL}, props
    assert props["test_ref"] == {"pacheck_verdict": "pass", "pacheck_cell_id": CELL.replace(" nhd ", " vllm ")}, props


def test_plugin_rerun_line_works_from_the_invocation_dir(pytester):
    import shlex

    pytester.makeini("[pytest]\n")  # rootdir: pytester.path; pytest is started in sub/, a folder below it
    sub = pytester.mkpydir("sub")
    (sub / "test_inner.py").write_text(_PLANTED)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    first = subprocess.run([sys.executable, "-m", "pytest", "-p", "pacheck.pytest_plugin", "-p", "no:cacheprovider",
                            "--pacheck-no-instrument", "-k", _ONE_FAILING], cwd=sub, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    assert first.returncode == 1, first.stdout
    rerun = [line[len("rerun: "):] for line in first.stdout.splitlines() if line.startswith("rerun: ")]
    assert len(rerun) == 1, first.stdout
    words = shlex.split(rerun[0])
    assert words[-1] == f"test_inner.py::test_k[{pacheck.pytest_id(CELL)}]", rerun  # relative to sub/, not to the rootdir
    assert words[words.index("-p") + 1] == "pacheck.pytest_plugin", rerun
    # Pasted in sub/ (with the instrument check left out through the environment, to keep the test short):
    again = subprocess.run(words, cwd=sub, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(env, PYTEST_ADDOPTS="--pacheck-no-instrument -p no:cacheprovider"))
    assert again.returncode == 1 and "1 failed" in again.stdout and "verdict poisoned" in again.stdout, again.stdout


@pytest.mark.parametrize("option", ["--pacheck-suite", "--pacheck-device"])
def test_plugin_empty_option_is_a_usage_error(pytester, option):
    # `--pacheck-suite ''` was ignored: every test ran its marker's suite.
    pytester.makepyfile(test_inner=_PLANTED)
    res = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", option, "", "--co", "-q")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    assert f"{option}: empty value ''" in res.stderr.str(), res.stderr.str()


def test_plugin_summary_lists_pasteable_rerun_lines(pytester):
    pytester.makepyfile(test_inner=_PLANTED)
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", _ONE_FAILING)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "<python kernel" not in out, out
    summary = out.split("1 failing cells; rerun lines")[1].splitlines()[1]
    assert summary.strip().endswith(f"'test_inner.py::test_k[{pacheck.pytest_id(CELL)}]'"), summary
    assert f"repro: pacheck.run_cell('gate', KERNEL, '{CELL}')" in out, out


def test_plugin_bad_suite_is_a_clean_collection_error(pytester):
    suite = "no-such-suite"
    pytester.makepyfile(test_inner=_PLANTED.replace('"gate"', repr(suite)))
    res = pytester.runpytest("-p", "pacheck.pytest_plugin")
    assert res.ret == pytest.ExitCode.INTERRUPTED
    out = res.stdout.str()
    res.stdout.fnmatch_lines([f"*test_inner.py::test_k: pacheck cells of suite '{suite}' on kernel "
                              "pacheck.Kernel('py.numpy_tail_fault'*no suite named*(known: *gate*tail-poison*)"])
    assert "Traceback" not in out and "_hooks.py" not in out and "_pytest/" not in out and "UsageError" not in out, out
    between = out.split("ERROR collecting")[1].split("short test summary")[0].strip().splitlines()
    assert len(between) == 3, out  # the "ERROR collecting" line's end, the message, the next section's rule


def test_run_cell_refuses_an_unknown_device():
    # The lead's C++ fix (cells/cells.cpp run_cell_result validates the device) makes this pass.
    k = pacheck.Kernel("t.dev7", _zero)
    with pytest.raises(pacheck.PacheckError, match="gpu7"):
        pacheck.run_cell("gate", k, CELL, device="gpu7")
