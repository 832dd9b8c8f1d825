#!/usr/bin/env python3
"""ctest driver for the NumPy examples' pytest routes, one (example, mode) per ctest test:

  --example gate: examples/python/test_numpy_kernel.py over suite gate (issue 20's acceptance): the multi-head
                  kernels of numpy_kernels.py, which implement every attention variant, layout and fp8 scale form;
  --example mla:  examples/python/test_numpy_mla_kernel.py over suite mla: the MLA kernels
                  of numpy_mla_kernels.py (Kernel(mla=True)) on every MLA cell: DeepSeek-V3, V2-Lite and Kimi-K2
                  shapes, page sizes 1 to 64, 32K tokens, batches to 64, several query tokens, fp8 latent caches.

  --mode correct: pytest on the correct kernel must pass every cell the kernel pairs with (pacheck.cells: exit 0,
                  no failure, no skip), run the example's coverage cells, and print the instrument check as ok;
  --mode planted: pytest on the planted whole-block V read (0 x NaN) must fail exactly the cells that put NaN or
                  Inf into the V of a straddling tail (CellInfo.poisons_v_tail, the set cpu.vector_v and
                  cpu.mla_v_tail must fail; checked here against the same set computed from the cell ids alone),
                  pass every other cell, and print each failing cell's rerun line (its pytest node id) and run_cell
                  repro, never a placeholder plugin.

Usage: check_numpy_example.py [--example gate|mla] --mode MODE --source SRC_DIR --lib LIBPACHECK_CELLS --work DIR
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

# file: the pytest route; tests: its (correct, planted) test functions; module and kernels: their pacheck.Kernels;
# runs: id fragments of which at least one cell must have run (each example's coverage).
Example = collections.namedtuple("Example", "file suite tests module kernels runs")
EXAMPLES = {
    # The attention variants, several query tokens per sequence, the aiter layout and per-slot scale tables.
    "gate": Example("test_numpy_kernel.py", "gate", ("test_numpy_decode", "test_numpy_tail_fault"), "numpy_kernels",
                    ("numpy_decode", "numpy_tail_fault"),
                    (" aiter ", " vs=slot", " win=", " cap=", " alibi=", " sinks=", " qlen=")),
    # Every model shape, page size, length class, query tokens, fp8 latent cache and the shorter V prefix.
    "mla": Example("test_numpy_mla_kernel.py", "mla", ("test_numpy_mla_decode", "test_numpy_mla_v_tail"),
                   "numpy_mla_kernels", ("numpy_mla_decode", "numpy_mla_v_tail"),
                   (" h128/1 ", " h64/1 ", " h8/1 ", " bs1 ", " bs32 ", " ctx32767 ", " ctx32768 ", " ctx131071 ", " qlen=",
                    " fp8_e4m3fn ", " fp8_e5m2 ", ",v256 ", " K:nan@tail", " V:nan@others")),
}


def v_tail_from_id(cell_id):
    """Whether a whole-final-block V read meets a NaN or Inf, from the cell id's text alone: a V or K+V fault of a
    non-finite poison in tail, all or scales with some sequence's length not a multiple of the block size, or in
    others (the tails of sequences 1..) with one of those straddling."""
    tokens = cell_id.split()
    block = int(next(t for t in tokens if re.fullmatch(r"bs\d+", t))[2:])
    lens = [int(x) for x in next(t for t in tokens if t.startswith("ctx"))[3:].split(",")]
    target, _, rest = tokens[-1].partition(":")
    poison, _, region = rest.partition("@")
    if target not in ("V", "K+V") or poison not in ("nan", "+inf", "-inf"):
        return False
    straddles = [n % block != 0 for n in lens]
    return any(straddles) if region in ("tail", "all", "scales") else region == "others" and any(straddles[1:])


def junit_cells(path):
    """(failed, passed, skipped) cell ids of a pytest junit file (the exact id is the junit property)."""
    failed, passed, skipped = set(), set(), set()
    for c in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in c.iter("property")}
        name = c.get("name")
        cell = props.get("pacheck_cell_id") or name[name.index("[") + 1 : -1]
        if c.find("failure") is not None or c.find("error") is not None:
            failed.add(cell)
        elif c.find("skipped") is not None:
            skipped.add(cell)
        else:
            passed.add(cell)
    return failed, passed, skipped


def planted_problems(ex, stdout, failed, want):
    """What is wrong with the planted kernel's session: not exactly `want` failed, or a failing cell without its
    pasteable lines (the pytest node id in the message and the summary, the pacheck.run_cell call as its repro;
    never the placeholder plugin label `pacheck repro` cannot load)."""
    import pacheck

    problems = []
    if not want:
        problems.append(f"{ex.suite} has no straddling V-poison cell: nothing to catch")
    if failed != want:
        problems.append(f"failed {len(failed)} cells, expected {len(want)}; unexpected: "
                        f"{sorted(failed - want)[:5]}, missed: {sorted(want - failed)[:5]}")
    if "<python kernel" in stdout:
        problems.append("a printed repro line names the placeholder plugin '<python kernel ...>'")
    for cell in sorted(failed):
        node = f"{ex.file}::{ex.tests[1]}[{pacheck.pytest_id(cell)}]"
        call = f"pacheck.run_cell('{ex.suite}', KERNEL, '{cell}')"
        if stdout.count(node) < 2 or call not in stdout:
            problems.append(f"no rerun line (pytest node id in the message and the summary) or run_cell repro "
                            f"printed for '{cell}'")
            break
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", choices=sorted(EXAMPLES), default="gate")
    ap.add_argument("--mode", choices=["correct", "planted"], required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    ex = EXAMPLES[a.example]
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, PACHECK_LIB=a.lib,
               PYTHONPATH=os.pathsep.join([os.path.join(a.source, "python"), os.path.join(a.source, "examples", "python")]))
    if a.mode == "planted":
        env["PACHECK_PLANTED"] = "1"
    junit = os.path.join(a.work, f"{a.example}-{a.mode}.xml")
    cmd = [sys.executable, "-m", "pytest", "-p", "pacheck.pytest_plugin", "-p", "no:cacheprovider", "-q",
           "-k", ex.tests[a.mode == "planted"], "--junitxml", junit,
           "--pacheck-report-dir", os.path.join(a.work, f"{a.example}-{a.mode}-reports"),
           os.path.join(a.source, "examples", "python", ex.file)]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout[-6000:])
    print(f"[{a.example} {a.mode}] pytest exit {p.returncode} after {time.time() - t0:.1f} s")

    sys.path[:0] = env["PYTHONPATH"].split(os.pathsep)
    os.environ["PACHECK_LIB"] = a.lib
    import importlib

    import pacheck

    kernel = getattr(importlib.import_module(ex.module), ex.kernels[a.mode == "planted"])
    cells = pacheck.cells(ex.suite, kernel)
    failed, passed, skipped = junit_cells(junit)
    problems = []
    # Each example kernel implements everything its suite's cells ask for: no cell is declined (skipped), every
    # cell the kernel pairs with ran, and so did at least one of each coverage fragment.
    if skipped:
        problems.append(f"skipped {len(skipped)} cells, expected none: {sorted(skipped)[:3]}")
    if failed | passed != {c.id for c in cells}:
        problems.append(f"ran {len(failed | passed)} cells, {ex.suite} has {len(cells)} for {kernel.name}")
    problems += [f"no {ex.suite} cell with '{f.strip()}' ran" for f in ex.runs
                 if not any(f in f" {cell} " for cell in failed | passed)]
    if a.mode == "correct":
        if p.returncode != 0:
            problems.append(f"pytest exit {p.returncode}, expected 0")
        if failed:
            problems.append(f"{len(failed)} failed cells, expected none: {sorted(failed)[:5]}")
        if f"instrument check, suite {ex.suite}: ok" not in p.stdout:
            problems.append("the instrument check's line is missing")
        print(f"[{a.example} correct] {len(passed)} passed of {len(cells)} cells")
    else:
        # The example kernels implement several query tokens per sequence and per-slot scale tables too: the
        # qlen= cells that poison the V tail, and the per-slot cells with NaN in the tail slots' V scale entries
        # (which the whole-block V read multiplies in), are failed as every other such cell.
        want = {c.id for c in cells if c.poisons_v_tail}
        by_id = {c.id for c in cells if v_tail_from_id(c.id)}
        if want != by_id:
            problems.append(f"CellInfo.poisons_v_tail and the cell ids disagree on {sorted(want ^ by_id)[:3]}")
        if p.returncode != 1:
            problems.append(f"pytest exit {p.returncode}, expected 1 (failures)")
        problems += planted_problems(ex, p.stdout, failed, want)
        print(f"[{a.example} planted] {len(failed)} failed (expected {len(want)} straddling V-poison cells), "
              f"{len(passed)} passed")
    for pr in problems:
        print("PROBLEM:", pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
