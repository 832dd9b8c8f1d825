#!/usr/bin/env python3
"""ctest driver for examples/python/test_numpy_kernel.py (issue 20's acceptance), one mode per ctest test:

  --mode correct: pytest over gate on the correct NumPy kernel must pass every cell (exit 0, no failure,
                  no skip), the cells with an attention variant included (the example kernels implement
                  sliding_window, logits_soft_cap, alibi_slopes, sinks and query_lens; issue 19), run at
                  least one of each variant, and print the instrument check as ok;
  --mode planted: pytest over gate on the planted tail-fault kernel must fail exactly the cells pacheck says
                  poison the V tail of a straddling length (CellInfo.poisons_v_tail, the set cpu.vector_v
                  must fail), pass every other cell, and print each failing cell's rerun line (its pytest
                  node id) and run_cell repro, never a placeholder plugin.

Usage: check_numpy_example.py --mode MODE --source SRC_DIR --lib LIBPACHECK_CELLS --work DIR
"""
import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["correct", "planted"], required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, PACHECK_LIB=a.lib,
               PYTHONPATH=os.pathsep.join([os.path.join(a.source, "python"), os.path.join(a.source, "examples", "python")]))
    test = "test_numpy_decode" if a.mode == "correct" else "test_numpy_tail_fault"
    if a.mode == "planted":
        env["PACHECK_PLANTED"] = "1"
    junit = os.path.join(a.work, f"{a.mode}.xml")
    cmd = [sys.executable, "-m", "pytest", "-p", "pacheck.pytest_plugin", "-p", "no:cacheprovider", "-q",
           "-k", test, "--junitxml", junit, "--pacheck-report-dir", os.path.join(a.work, f"{a.mode}-reports"),
           os.path.join(a.source, "examples", "python", "test_numpy_kernel.py")]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout[-6000:])
    print(f"[{a.mode}] pytest exit {p.returncode} after {time.time() - t0:.1f} s")

    cases = ET.parse(junit).getroot().iter("testcase")
    failed, passed, skipped = set(), set(), set()
    for c in cases:
        # The test id writes '@' as '_at_' (pacheck.pytest_id); the exact cell id is the junit property.
        props = {p.get("name"): p.get("value") for p in c.iter("property")}
        name = c.get("name")
        cell = props.get("pacheck_cell_id") or name[name.index("[") + 1 : -1]
        if c.find("failure") is not None or c.find("error") is not None:
            failed.add(cell)
        elif c.find("skipped") is not None:
            skipped.add(cell)
        else:
            passed.add(cell)
    problems = []
    # The example kernels implement the attention variants, several query tokens per sequence, every layout
    # (aiter included) and every fp8 scale form (per-slot tables included): no gate cell is declined (skipped),
    # and at least one cell of each variant and one with per-slot scale tables runs.
    if skipped:
        problems.append(f"skipped {len(skipped)} cells, expected none: {sorted(skipped)[:3]}")
    if not any(" aiter " in f" {cell} " for cell in failed | passed):
        problems.append("no gate cell in the aiter layout ran")
    if not any(" vs=slot" in f" {cell}" for cell in failed | passed):
        problems.append("no gate cell with per-slot scale tables (vs=slot) ran")
    for t in ("win", "cap", "alibi", "sinks", "qlen"):
        if not any(f" {t}=" in f" {cell}" for cell in failed | passed):
            problems.append(f"no gate cell with {t}= ran")
    if a.mode == "correct":
        if p.returncode != 0:
            problems.append(f"pytest exit {p.returncode}, expected 0")
        if failed:
            problems.append(f"{len(failed)} failed cells, expected none: {sorted(failed)[:5]}")
        if "instrument check, suite gate: ok" not in p.stdout:
            problems.append("the instrument check's line is missing")
        if len(passed) < 200:
            problems.append(f"only {len(passed)} cells passed: gate has about 270")
    else:
        sys.path[:0] = env["PYTHONPATH"].split(os.pathsep)
        os.environ["PACHECK_LIB"] = a.lib
        import pacheck
        from numpy_kernels import numpy_tail_fault

        # The example kernels implement several query tokens per sequence and per-slot scale tables too: the
        # qlen= cells that poison the V tail, and the per-slot cells with NaN in the tail slots' V scale entries
        # (which the whole-block V read multiplies in), are failed as every other such cell.
        want = {c.id for c in pacheck.cells("gate", numpy_tail_fault) if c.poisons_v_tail}
        if p.returncode != 1:
            problems.append(f"pytest exit {p.returncode}, expected 1 (failures)")
        if not want:
            problems.append("gate has no straddling V-poison cell: nothing to catch")
        if failed != want:
            problems.append(f"failed {len(failed)} cells, expected {len(want)}; unexpected: "
                            f"{sorted(failed - want)[:5]}, missed: {sorted(want - failed)[:5]}")
        # Each failing cell's lines paste: the pytest rerun command (the node id) in the message and in the
        # session summary, the pacheck.run_cell call as its repro; never the placeholder plugin label
        # `pacheck repro` cannot load.
        if "<python kernel" in p.stdout:
            problems.append("a printed repro line names the placeholder plugin '<python kernel ...>'")
        for cell in sorted(failed):
            node = f"test_numpy_kernel.py::test_numpy_tail_fault[{pacheck.pytest_id(cell)}]"
            call = f"pacheck.run_cell('gate', KERNEL, '{cell}')"
            if p.stdout.count(node) < 2 or call not in p.stdout:
                problems.append(f"no rerun line (pytest node id in the message and the summary) or run_cell repro "
                                f"printed for '{cell}'")
                break
        print(f"[planted] {len(failed)} failed (expected {len(want)} straddling V-poison cells), {len(passed)} passed")
    for pr in problems:
        print("PROBLEM:", pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
