#!/usr/bin/env python3
"""Runs a build's ctest tests as ctest would and records each one's wall time AND CPU time (user + sys of the
test and every process it waited for), which ctest does not: on a machine shared with other jobs the wall time
of a test says more about the neighbours than about the test, its CPU time does not.

    python3 ci/ctest-times.py BUILD_DIR [-j 2] [--out times.tsv] [-- CTEST_SELECTION...]

CTEST_SELECTION is passed to `ctest --show-only=json-v1` (e.g. `-L property`, `-LE long`, `-R Registry`), so
the tests are exactly those ctest would select, with their command, working directory, ENVIRONMENT, TIMEOUT,
SKIP_RETURN_CODE and WILL_FAIL; RUN_SERIAL tests run alone, after the others. The table (TSV: test, labels,
status, wall_s, user_s, sys_s) is sorted by CPU time, heaviest first, and followed by the totals per label.
Exit 0 when every test passed or skipped, 1 otherwise (the table is written either way).

    python3 ci/ctest-times.py BUILD_DIR --cost-data [--top 40]

prints, without running anything, what the last ctest runs of BUILD_DIR measured: ctest's own record of each
test's average wall time (Testing/Temporary/CTestCostData.txt), the TOP heaviest tests and the sums per label
(labels from `ctest --show-only=json-v1`). .ci/run prints it after its tests, so CI's log carries per-test times.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def load_tests(build, selection):
    """The tests `ctest --test-dir BUILD SELECTION` would run, as dicts of name, command, cwd, env, timeout,
    labels, skip_code, will_fail, serial."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1", *selection],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    tests = []
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(os.environ)
        for kv in props.get("ENVIRONMENT", []):
            key, _, value = kv.partition("=")
            env[key] = value
        tests.append({
            "name": t["name"], "command": t.get("command"), "env": env,
            "cwd": props.get("WORKING_DIRECTORY", build), "timeout": float(props.get("TIMEOUT", 1500)),
            "labels": props.get("LABELS", []), "skip_code": props.get("SKIP_RETURN_CODE"),
            "will_fail": bool(props.get("WILL_FAIL", False)), "serial": bool(props.get("RUN_SERIAL", False)),
        })
    return tests


def kill_group(pid):
    """Kills a test that ran past its TIMEOUT, with every process it started."""
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass


def run_one(test):
    """Runs one test; returns (status, wall seconds, user seconds, sys seconds)."""
    if not test["command"]:
        return "not_built", 0.0, 0.0, 0.0
    start = time.monotonic()
    proc = subprocess.Popen(test["command"], cwd=test["cwd"], env=test["env"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    timer = threading.Timer(test["timeout"], kill_group, (proc.pid,))
    timer.start()
    # wait4 reports the child's own usage and that of every descendant it waited for (Linux: RUSAGE_BOTH).
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code == test["skip_code"]:
        verdict = "skipped"
    elif code < 0:
        verdict = f"killed({-code})"
    else:
        verdict = "passed" if (code == 0) != test["will_fail"] else f"failed({code})"
    return verdict, wall, usage.ru_utime, usage.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("-j", type=int, default=2, help="tests at once (default 2)")
    ap.add_argument("--out", default="ctest-times.tsv")
    ap.add_argument("--cost-data", action="store_true", help="print the last runs' times instead of running")
    ap.add_argument("--top", type=int, default=40, help="with --cost-data: how many of the heaviest tests")
    argv = sys.argv[1:]
    selection = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.selection = selection
    if args.cost_data:
        return print_cost_data(args.build, args.top)
    tests = load_tests(args.build, args.selection)
    rows = {}

    def record(test):
        rows[test["name"]] = (test, *run_one(test))
        status, wall, user, sys_ = rows[test["name"]][1:]
        print(f"{status:>10} {wall:8.1f} s wall {user + sys_:8.1f} s cpu  {test['name']}", flush=True)

    start = time.monotonic()
    with ThreadPoolExecutor(args.j) as pool:
        list(pool.map(record, [t for t in tests if not t["serial"]]))
    for t in tests:
        if t["serial"]:
            record(t)
    total_wall = time.monotonic() - start
    write_table(args.out, rows.values(), total_wall)
    return 0 if all(r[1] in ("passed", "skipped") for r in rows.values()) else 1


def write_table(path, rows, total_wall):
    """The TSV table, heaviest CPU first, then per-label totals and the whole run's wall time."""
    rows = sorted(rows, key=lambda r: -(r[3] + r[4]))
    by_label = {}
    with open(path, "w") as f:
        f.write("test\tlabels\tstatus\twall_s\tuser_s\tsys_s\n")
        for test, status, wall, user, sys_ in rows:
            f.write(f"{test['name']}\t{';'.join(test['labels'])}\t{status}\t{wall:.1f}\t{user:.1f}\t{sys_:.1f}\n")
            for label in test["labels"] or ["(none)"]:
                n, w, c = by_label.get(label, (0, 0.0, 0.0))
                by_label[label] = (n + 1, w + wall, c + user + sys_)
        f.write("\nlabel\ttests\twall_s_sum\tcpu_s_sum\n")
        for label, (n, w, c) in sorted(by_label.items(), key=lambda kv: -kv[1][2]):
            f.write(f"{label}\t{n}\t{w:.0f}\t{c:.0f}\n")
        cpu = sum(r[3] + r[4] for r in rows)
        f.write(f"\nall\t{len(rows)}\twall {total_wall:.0f} s (the run)\tcpu {cpu:.0f} s\n")
    print(f"ctest-times: {len(rows)} tests, {total_wall:.0f} s wall, table in {path}", file=sys.stderr)


def read_cost_data(build):
    """{test name: average wall seconds} from ctest's CTestCostData.txt (lines `NAME RUNS AVERAGE`, then `---`)."""
    costs = {}
    path = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")
    with open(path) as f:
        for line in f:
            if line.startswith("---"):
                break
            name, runs, average = line.rstrip("\n").rsplit(" ", 2)
            if int(runs) > 0:
                costs[name] = float(average)
    return costs


def print_cost_data(build, top):
    """The TOP heaviest tests of the last ctest runs and the sums per label; 1 when there is no record."""
    try:
        costs = read_cost_data(build)
    except OSError as e:
        print(f"ctest-times: no ctest record in {build}: {e}", file=sys.stderr)
        return 1
    labels = {t["name"]: t["labels"] for t in load_tests(build, [])}
    by_label = {}
    print(f"ctest's record of {len(costs)} tests in {build} (wall seconds of each test's last runs, averaged):")
    for name, seconds in sorted(costs.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{seconds:9.1f} s  {name}  [{';'.join(labels.get(name, []))}]")
    for name, seconds in costs.items():
        for label in labels.get(name) or ["(none)"]:
            n, total = by_label.get(label, (0, 0.0))
            by_label[label] = (n + 1, total + seconds)
    for label, (n, total) in sorted(by_label.items(), key=lambda kv: -kv[1][1]):
        print(f"label {label}: {total:.0f} s over {n} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
