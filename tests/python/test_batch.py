"""Batches of cells from Python (issue 42 item 2): pacheck.run_suite prepares cases on a pool of host threads
while the kernel runs on this thread, in order, and gives each cell the verdict run_cell (and `pacheck run`)
gives it; the pytest plugin runs a session's cells as such batches.

Run by ctest as python.batch (tests/python/CMakeLists.txt) with PACHECK_LIB, PACHECK_BINARY and PYTHONPATH set.
"""
import json
import os
import subprocess
import threading

import pytest

import numpy_kernels  # noqa: F401 -- registered before pytester's in-process runs import it again
import pacheck
from numpy_kernels import numpy_decode, numpy_tail_fault

pytest_plugins = ["pytester"]

# A few cases of gate with several cells each (clean and faulted), straddling lengths, every layout.
FILTER = r"ctx1000,37 .*(clean|V:nan@tail|K\+V:nan@unused)"


def _ids(kernel, pattern=FILTER):
    import re

    return [c.id for c in pacheck.cells("gate", kernel) if re.search(pattern, c.id)]


def test_batch_gives_run_cells_verdicts_in_order_on_this_thread():
    ids = _ids(numpy_tail_fault)
    assert len(ids) >= 6
    threads = set()

    def spy(inp):
        threads.add(threading.get_ident())
        numpy_tail_fault.run(inp)

    k = pacheck.Kernel("t.batch_spy", spy, layouts=numpy_tail_fault.layouts, variants=numpy_tail_fault.variants,
                       scale_forms=numpy_tail_fault.scale_forms)
    run = pacheck.run_suite("gate", k, ids=ids, threads=2, check_instrument=False)
    got = list(run)
    assert [r.cell_id for r in got] == ids  # batch order is the order asked for
    assert threads == {threading.get_ident()}, "the kernel ran on a thread other than the caller's"
    for r in got:
        single = pacheck.run_cell("gate", k, r.cell_id)
        assert (r.verdict, r.failed, r.declined) == (single.verdict, single.failed, single.declined), r.cell_id
        assert r.seconds > 0 or r.declined
    assert any(r.verdict == "poisoned" for r in got) and any(r.verdict == "pass" for r in got)
    s = run.close()
    assert s["results"] == len(ids) and s["exit_code"] == 1 and not s["stopped"], s


def test_batch_matches_the_cli_on_a_builtin_kernel(tmp_path):
    ids = _ids("cpu.reference")
    rep = tmp_path / "py"
    with pacheck.run_suite("gate", "cpu.reference", filter=FILTER, report_dir=rep, check_instrument=False) as run:
        mine = {r.cell_id: r.verdict for r in run}
    assert list(mine) == ids
    cli = tmp_path / "cli"
    subprocess.run([os.environ["PACHECK_BINARY"], "run", "--kernel", "cpu.reference", "--filter", FILTER,
                    "--report-dir", str(cli), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    theirs = {json.loads(line)["cell"]: json.loads(line)["verdict"] for line in (cli / "results.jsonl").open()}
    assert mine == theirs
    # The batch's report directory is a run's: results.jsonl, report.json, junit.xml.
    for name in ("results.jsonl", "report.json", "junit.xml"):
        assert (rep / name).is_file(), name
    report = json.loads((rep / "report.json").read_text())
    assert len(report["results"]) == len(ids)


def test_result_runs_up_to_the_cell_asked_for():
    ids = _ids(numpy_decode)
    run = pacheck.run_suite("gate", numpy_decode, ids=ids, check_instrument=False)
    r = run.result(ids[3])
    assert r.cell_id == ids[3] and len(run.results) == 4
    assert run.result(ids[1]).cell_id == ids[1] and len(run.results) == 4  # kept, not run again
    with pytest.raises(KeyError):
        run.result("h1/1 d64 bs16 f32 ctx5 nhd seed7 clean")
    assert run.close()["stopped"] is False  # KeyError ran the rest


def test_a_cell_over_the_memory_budget_is_an_error_result_not_a_kill():
    ids = _ids(numpy_decode)[:3]
    run = pacheck.run_suite("gate", numpy_decode, ids=ids, max_memory=64 * 1024, check_instrument=False)
    got = list(run)
    assert all(r.verdict == "error" and "refused before anything was generated: max_memory: cell" in r.detail
               for r in got), [r.detail for r in got]
    assert "pass max_memory=" in got[0].detail


def test_batch_bad_requests_raise():
    with pytest.raises(pacheck.PacheckError, match="has no cell"):
        pacheck.run_suite("gate", numpy_decode, ids=["h1/1 d64 bs16 f32 ctx5 nhd seed7 clean"], check_instrument=False)
    with pytest.raises(pacheck.PacheckError, match="matches none"):
        pacheck.run_suite("gate", numpy_decode, filter="no-such-cell", check_instrument=False)
    with pytest.raises(TypeError, match="ids: a list"):
        pacheck.run_suite("gate", numpy_decode, ids="h1/1", check_instrument=False)


_INNER = """
import pacheck.pytest_plugin as pp
from numpy_kernels import numpy_tail_fault

@pp.cells("gate", numpy_tail_fault)
def test_k(pacheck_cell):
    pacheck_cell.check()
"""


@pytest.mark.parametrize("mode", [[], ["--pacheck-serial"]])
def test_plugin_batches_and_serial_give_the_same_outcomes(pytester, mode):
    pytester.makepyfile(test_inner=_INNER)
    res = pytester.runpytest("-p", "pacheck.pytest_plugin", "--pacheck-no-instrument", "-k", "ctx1000 and bf16 and h8",
                             *mode)
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1 and outcomes.get("passed", 0) >= 1, outcomes
    if not mode:  # the batch wrote its report directory
        folder = pytester.path / ".pacheck-report" / "gate-py.numpy_tail_fault"
        assert (folder / "report.json").is_file() and (folder / "results.jsonl").is_file()
        res.stdout.fnmatch_lines(["*batch gate on pacheck.Kernel('py.numpy_tail_fault'*reports in*"])


def test_plugin_under_xdist_runs_each_workers_cells(pytester):
    pytest.importorskip("xdist", reason="pytest-xdist: ci/install-deps.sh installs python3-pytest-xdist")
    pytester.makepyfile(test_inner=_INNER)
    res = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "-n", "2", "-k", "ctx1000 and bf16 and h8",
                                        "--pacheck-no-instrument")
    serial = pytester.runpytest_subprocess("-p", "pacheck.pytest_plugin", "-k", "ctx1000 and bf16 and h8",
                                           "--pacheck-no-instrument")
    counts = [{k: v for k, v in r.parseoutcomes().items() if k in ("passed", "failed", "skipped")} for r in (res, serial)]
    assert counts[0] == counts[1] and counts[0]["failed"] > 0, (res.stdout.str()[-2000:], serial.stdout.str()[-2000:])
