"""Limits of Python kernels (issue 42 items 5 and 6, issue 46 items 3 and 9): pools a kernel can copy, the memory
budget checked up front, per-cell timeouts and wall time, bounded messages with the values at the worst element,
-k-friendly test ids, a plugin that crashes while registering, and arguments of the wrong type.

Run by ctest as python.limits with PACHECK_LIB, PACHECK_BINARY, PACHECK_MISBEHAVING and PYTHONPATH set.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import numpy_kernels  # noqa: F401
import pacheck
from numpy_kernels import numpy_decode, numpy_tail_fault
from pacheck.dtypes import to_float32

pytest_plugins = ["pytester"]

CELL = "h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan@tail"


def _hiblk_cells(kernel):
    return [c.id for c in pacheck.cells("gate", kernel) if "hiblk=" in c.id]


def whole_pool(inp):
    """The natural first NumPy kernel: converts each whole pool to float32 (22 GB on a high-block-id pool)."""
    to_float32(inp.key_cache.numpy(), inp.kv_dtype)
    to_float32(inp.value_cache.numpy(), inp.kv_dtype)
    numpy_decode.run(inp)


WHOLE = pacheck.Kernel("t.whole_pool", whole_pool, layouts=("nhd", "hnd", "vllm"))


def test_sparse_pool_is_declined_for_a_kernel_that_did_not_declare_it():
    ids = _hiblk_cells(WHOLE)
    assert len(ids) >= 2, "gate has its high-block-id cells"
    for cid in ids:
        r = pacheck.run_cell("gate", WHOLE, cid)
        assert r.verdict == "declined" and not r.failed, r.message()
        assert "high_block_ids" in r.detail and "sparse_pools" in r.detail and "GiB if copied dense" in r.detail, r.detail


def test_a_declared_sparse_kernel_gets_the_cells_and_passes():
    k = pacheck.Kernel("t.sparse_ok", numpy_decode.run, layouts=("nhd", "hnd", "vllm"), sparse_pools=True)
    ids = _hiblk_cells(k)
    for cid in ids:
        r = pacheck.run_cell("gate", k, cid)
        assert r.verdict == "pass", r.message()


def test_whole_pool_kernel_through_pytest_lives(pytester):
    pytester.makepyfile(test_inner="""
import pacheck, pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode
from pacheck.dtypes import to_float32

def whole_pool(inp):
    to_float32(inp.key_cache.numpy(), inp.kv_dtype)
    numpy_decode.run(inp)

@pp.cells("gate", pacheck.Kernel("t.whole_pool", whole_pool, layouts=("nhd", "hnd", "vllm")))
def test_whole(pacheck_cell):
    pacheck_cell.check()
""")
    res = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", "hiblk", "-rs",
                                        f"--junitxml={pytester.path / 'out.xml'}")
    # Every selected cell skipped (declined) and none killed the session; a kernel that ran no cell fails the
    # session (exit 1, "NO CELL RAN"), as `pacheck run` counts it.
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*declined: high_block_ids*sparse pool*"])
    res.stdout.fnmatch_lines(["*NO CELL RAN: *t.whole_pool* declined all 2 selected cells of suite 'gate'*"])
    assert (pytester.path / "out.xml").is_file()


def test_memory_budget_is_checked_before_anything_is_generated():
    with pytest.raises(pacheck.PacheckError) as e:
        pacheck.run_cell("gate", numpy_decode, CELL, max_memory=1 << 20)
    text = str(e.value)
    assert text.startswith(f"max_memory: cell '{CELL}' needs about "), text
    assert "pass max_memory=" in text and "1.0 MiB (given)" in text, text
    # The same cell with the default budget runs.
    assert pacheck.run_cell("gate", numpy_decode, CELL).verdict == "pass"


def test_the_budget_counts_a_python_kernels_float32_copy_of_its_inputs():
    # A budget that holds pacheck's own memory for the cell but not a float32 copy of its inputs as well.
    r = subprocess.run([os.environ["PACHECK_BINARY"], "run", "--kernel", "cpu.reference", "--filter",
                        "^h8/2 d128 bs16 bf16 ctx1000,37 vllm seed7 V:nan@tail$", "--threads", "1", "--max-memory", "1K"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    need = r.stdout.split("needs about ")[1].split(" (")[0]  # the CLI's estimate of the same case
    assert r.returncode == 2, r.stdout
    with pytest.raises(pacheck.PacheckError) as e:
        pacheck.run_cell("gate", numpy_decode, CELL, max_memory=_bytes(need) * 1.02)
    assert "per-cell copies" in str(e.value)


def _bytes(text):
    n, unit = text.split()
    return float(n) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def test_timeout_interrupts_a_python_kernel_and_the_cell_is_timeout():
    def spin(inp):
        while True:
            sum(range(1000))

    k = pacheck.Kernel("t.spin", spin, timeout=0.5)
    t0 = time.monotonic()
    r = pacheck.run_cell(None, k, CELL.replace(" V:nan@tail", " clean"))
    assert time.monotonic() - t0 < 20
    assert r.verdict == "timeout" and r.failed, r.message()
    assert "ran past its timeout of 0.5 s" in r.detail and "interrupted after" in r.detail, r.detail
    # The next call is not hit by a stale interrupt.
    assert pacheck.run_cell("gate", numpy_decode, CELL).verdict == "pass"


def test_a_kernel_that_returns_late_is_timeout_too():
    def slow(inp):
        numpy_decode.run(inp)
        time.sleep(0.4)  # one native call the interrupt cannot enter: reported once it returns

    r = pacheck.run_cell("gate", pacheck.Kernel("t.slow", slow, timeout=0.1), CELL)
    assert r.verdict == "timeout", r.message()


def test_wall_time_and_worst_values_and_bounded_messages(tmp_path):
    bad = pacheck.run_cell("gate", numpy_tail_fault, CELL)
    assert bad.seconds > 0
    assert bad.worst_values is not None and np.isnan(bad.worst_values["out"]), bad.worst_values
    assert np.isfinite(bad.worst_values["ref"])
    assert ": out nan, oracle " in bad.message(), bad.message()

    def loud(inp):
        raise RuntimeError("compiler said:\n" + "x" * 20000)

    r = pacheck.run_cell("gate", pacheck.Kernel("t.loud", loud), CELL)
    assert r.verdict == "error" and len(r.detail) < 1100, len(r.detail)
    assert "more characters: see the traceback" in r.detail, r.detail
    assert len(r.message()) < 4000 and "whole traceback in CellResult.traceback" in r.message()
    assert len(r.traceback) > 20000
    path = r.write_full_text(str(tmp_path), "loud")
    assert path and open(path).read().count("x") >= 20000
    assert path in r.message()


def test_pytest_ids_replace_at_and_k_selects_them(pytester):
    assert pacheck.pytest_id(CELL) == "h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan_at_tail"
    pytester.makepyfile(test_inner="""
import pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode

@pp.cells("gate", numpy_decode)
def test_k(pacheck_cell):
    pacheck_cell.check()
""")
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "--co", "-q", "-k",
                             "V:nan_at_tail and ctx1000,37 and h8 and bf16 and not fp8")
    res.stdout.fnmatch_lines(["*test_k[[]h8/2 d128 bs16 bf16 ctx1000,37 nhd seed7 V:nan_at_tail[]]"])


def test_load_plugin_that_crashes_while_registering_raises_and_we_live():
    plugin = os.environ["PACHECK_MISBEHAVING"]
    code = ("import os, pacheck\n"
            "os.environ['PACHECK_TEST_PLUGIN_LOAD'] = 'segfault'\n"
            "try:\n    pacheck.load_plugin(" + repr(plugin) + ")\n"
            "except pacheck.PacheckError as e:\n    print('RAISED', e)\n"
            "print('ALIVE')\n")
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    assert p.returncode == 0 and "ALIVE" in p.stdout, p.stdout
    assert f"RAISED plugin {plugin}: the library died while being loaded in a child process (crash" in p.stdout, p.stdout


@pytest.mark.parametrize("args, says", [
    ((None, "cpu.reference", 5), "cell_id: a cell id str"),
    ((5, "cpu.reference", CELL), "suite: a suite name"),
    (("gate", "cpu.reference", CELL, 3), "device: 'cpu'"),
    (("gate", 7, CELL), "kernel: a pacheck.Kernel"),
])
def test_run_cell_wrong_types_raise_typeerror_naming_the_argument(args, says):
    with pytest.raises(TypeError, match=says):
        pacheck.run_cell(*args)
    with pytest.raises(TypeError, match="path: the plugin library's path"):
        pacheck.load_plugin(None)


def test_kernel_options_are_checked():
    with pytest.raises(TypeError, match="sparse_pools: True or False"):
        pacheck.Kernel("t.bad_sparse", numpy_decode.run, sparse_pools="yes")
    with pytest.raises(ValueError, match="timeout: None or seconds"):
        pacheck.Kernel("t.bad_timeout", numpy_decode.run, timeout=-1)


def test_the_example_runner_names_a_missing_tensor(tmp_path):
    """examples/python/runner.py reads a case file without one of the tensors every case file has as a broken file
    named by its path and tensor (skipped, the others still run), not a KeyError traceback."""
    import runner

    tensors = {name: ("F32", np.zeros(4, np.float32)) for name in runner.REQUIRED_TENSORS if name != "seq_lens"}
    path = str(tmp_path / "0000.safetensors")
    runner.write_safetensors(path, tensors)
    with pytest.raises(runner.CaseFileError, match=r"0000\.safetensors: tensor 'seq_lens': missing"):
        runner.read_safetensors(path)
    tensors["seq_lens"] = ("I32", np.ones(1, np.int32))
    runner.write_safetensors(path, tensors)
    assert set(runner.read_safetensors(path)) == set(runner.REQUIRED_TENSORS)
