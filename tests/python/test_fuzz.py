"""pacheck.fuzz and the pytest plugin's pp.fuzz (issue 42 item 4): `pacheck fuzz`'s properties, shrinking and
reproduce strings on Python kernels. The honest NumPy kernel holds every default property; the planted V-tail
read fails tail-poison, shrinks, and its reproduce string replays the failure.

Run by ctest as python.fuzz with PACHECK_LIB (libpacheck_cells_c.so: the library with the properties).
"""
import pytest

import numpy_kernels  # noqa: F401
import pacheck
from numpy_kernels import numpy_decode, numpy_tail_fault

pytest_plugins = ["pytester"]


def test_properties_come_from_the_library():
    names = pacheck.properties()
    assert names[:2] == ["agreement", "tail-poison"] and "overflow" not in names
    assert "overflow" in pacheck.properties(opt_in=True)


def test_honest_numpy_kernel_holds_every_default_property():
    res = pacheck.fuzz(numpy_decode, cases=15, seed=7, max_size=40)
    assert [p.name for p in res.properties] == pacheck.properties()
    assert res.passed, res.report()
    assert all(p.cases == 15 for p in res.properties), res.report()
    assert res.seed == 7 and res.device == "cpu"


def test_planted_v_tail_read_fails_tail_poison_and_shrinks_and_replays():
    res = pacheck.fuzz(numpy_tail_fault, properties=["tail-poison"], cases=200, seed=3)
    p = res.properties[0]
    assert not p.passed, res.report()
    assert p.counterexample and p.cell_id and p.reproduce, p
    assert p.replay.startswith("pacheck.fuzz(KERNEL, properties=['tail-poison'], reproduce=")
    assert f"pacheck.run_cell(None, KERNEL, {p.cell_id!r})" in p.counterexample and "<python kernel" not in p.counterexample
    assert "V:" in p.cell_id and ("@tail" in p.cell_id or "@scales" in p.cell_id), p.cell_id
    again = pacheck.fuzz(numpy_tail_fault, properties=["tail-poison"], reproduce=p.reproduce).properties[0]
    assert not again.passed and again.cell_id == p.cell_id, (again.cell_id, p.cell_id)
    # The shrunk cell fails through run_cell too (the counterexample is a real cell).
    assert pacheck.run_cell(None, numpy_tail_fault, p.cell_id).failed


def test_fuzz_bad_arguments_raise():
    with pytest.raises(pacheck.PacheckError, match="unknown property 'nope'"):
        pacheck.fuzz(numpy_decode, properties=["nope"], cases=1)
    with pytest.raises(TypeError, match="properties: a list"):
        pacheck.fuzz(numpy_decode, properties="tail-poison")
    with pytest.raises(pacheck.PacheckError, match="reproduce replays one property"):
        pacheck.fuzz(numpy_decode, reproduce="xyz")


def test_pytest_fuzz_marker_one_test_per_property(pytester):
    pytester.makepyfile(test_inner="""
import pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode, numpy_tail_fault

@pp.fuzz(numpy_decode, cases=5, max_size=30, seed=1)
def test_ok(pacheck_property):
    pacheck_property.check()

@pp.fuzz(numpy_tail_fault, properties=["tail-poison"], cases=200, seed=3)
def test_planted(pacheck_property):
    pacheck_property.check()
""")
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "-q")
    res.assert_outcomes(passed=len(pacheck.properties()), failed=1)
    res.stdout.fnmatch_lines(["*property tail-poison does not hold on pacheck.Kernel('py.numpy_tail_fault'*",
                              "*minimal counterexample after*", "*replay pacheck.fuzz(KERNEL*"])
