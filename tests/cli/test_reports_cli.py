#!/usr/bin/env python3
"""CLI-level tests of the reports CI reads (issue 8), run by ctest against the built pacheck binary.

usage: test_reports_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB]

Scenarios:
  junit        junit.xml read by a JUnit consumer (xml.etree): testsuites/testsuite/testcase/failure
               structure, counts, properties, and agreement with report.json and the exit code; the
               closing line and `pacheck list formats` agree with the files written; `--format` on stdout
               (tap, github, json, junit, markdown) parsed as each one's consumer reads it
  kill_resume  SIGKILL a run midway: results.jsonl stays valid, merge refuses the unfinished run,
               --resume completes it, and the report equals an uninterrupted run's
  shards       --shard 0/2 and GTEST_SHARD_INDEX=1/GTEST_TOTAL_SHARDS=2 merged equal the unsharded run;
               an incomplete merge and bad shard values exit 2
  gate_sh      ci/gate.sh writes the reports and exits with pacheck's code
  plugin       a planted plugin (tests/plugins/misbehaving.c) that segfaults, aborts, hangs, writes past its
               output or returns an error on one cell: that cell's verdict only, exit 1, every cell in
               results.jsonl; without isolation the segfault kills the run and --resume completes it
  bad_input    out-of-range numbers in a cell id, --seed and --shard, and a missing suite, exit 2 with a
               message naming the field (they used to wrap modulo 2^32 or clamp and run)
  selftest     `pacheck selftest` passes with every CPU negative control caught
  symlinks     no file written through a link planted in a report or export directory
  input_files  /dev/zero, FIFOs, directories and oversized files as inputs: exit 2 at once, naming them
  preflight    unwritable --json (run, score) refused before the first cell, reports left as they were
  lock         a second run into a report directory in use fails at once, naming the holder
  resume_check --resume checks each results.jsonl line against the plan (foreign, duplicate, malformed)
  score_reports score --report-dir writes run's reports for replayed outputs; decline notes; a broken export
               leaves an earlier report directory alone; no control scored: the reports say none ran
  controls_words every format (`pacheck list formats`) says which negative controls ran, in the console's
               words: none for cpu.reference alone, cpu.vector_v with its caught, missed and not-run cells
  controls_summary a negative control is one console table row, one junit testcase, one TAP point, no
               annotation and no figure panel; every cell stays in report.json and results.jsonl, which
               verify, --resume, merge and report read
"""
import argparse
import html
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

VERDICTS = {"pass", "fail", "poisoned", "variant", "unwritten", "oob_write", "input_mutated", "declined", "not_run", "error",
            "crash", "timeout", "overflow", "nondeterministic", "stateful", "biased"}  # = `pacheck list verdicts`
ERROR_VERDICTS = {"error", "crash", "timeout"}


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(args, *cmd, env=None, expect=None, timeout=600):
    full = [args.pacheck, *cmd]
    print("+", " ".join(full), flush=True)
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-4000:])
        fail(f"exit code {p.returncode}, want {expect}: {' '.join(full)}")
    return p


def load(path):
    with open(path) as f:
        return json.load(f)


def comparable(report):
    """What two reports of the same cells must agree on (timings excluded)."""
    out = {k: report[k] for k in ("results", "kernels", "summary", "selftest", "exit_code", "suite")}
    out["results"] = [{k: v for k, v in r.items() if k != "seconds"} for r in out["results"]]
    return out


def run_stdout(args, *cmd, expect=None):
    """Like run, but stdout alone (what a consumer of --format reads) and stderr apart."""
    full = [args.pacheck, *cmd]
    print("+", " ".join(full), flush=True)
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail(f"exit code {p.returncode}, want {expect}: {' '.join(full)}")
    return p


def parse_tap(text):
    """A TAP version 14 stream as a harness reads it: [(ok, description, directive, yaml dict)], checking
    the version line, consecutive numbers, YAML blocks and that the plan matches the points."""
    lines = text.split("\n")
    check(lines[0] == "TAP version 14", f"TAP: first line {lines[0]!r}")
    check(lines[-1] == "", "TAP: no newline at the end")
    points, plan, yaml = [], None, None
    for line in lines[1:-1]:
        if yaml is not None:
            if line == "  ...":
                points[-1][3].update(yaml)
                yaml = None
                continue
            check(line.startswith("  ") and ": " in line, f"TAP: not a YAML line: {line!r}")
            key, value = line[2:].split(": ", 1)
            yaml[key] = value if value in (".nan", ".inf", "-.inf") else json.loads(value)
            continue
        if line == "  ---":
            check(points and not points[-1][3], "TAP: YAML block without its own test point")
            yaml = {}
            continue
        m = re.fullmatch(r"(not ok|ok) (\d+) - (.*)", line)
        if m:
            check(int(m.group(2)) == len(points) + 1, f"TAP: point {m.group(2)} out of order")
            desc, directive, i, rest = "", "", 0, m.group(3)
            while i < len(rest):
                if rest[i] == "\\" and i + 1 < len(rest):
                    desc += rest[i + 1]
                    i += 2
                    continue
                if rest[i] == "#":
                    directive = rest[i + 1:].strip()
                    break
                desc += rest[i]
                i += 1
            points.append((m.group(1) == "ok", desc.rstrip(), directive, {}))
            continue
        m = re.fullmatch(r"1\.\.(\d+)", line)
        if m:
            check(plan is None, "TAP: two plans")
            plan = int(m.group(1))
            continue
        check(line.startswith("# "), f"TAP: not a TAP line: {line!r}")
    check(yaml is None, "TAP: unterminated YAML block")
    check(plan == len(points), f"TAP: plan {plan} but {len(points)} test points")
    return points


def parse_annotations(text, require_source=True):
    """GitHub workflow commands, one per line, unescaped as the runner does: [(kind, title, message)]. With
    require_source (output of `run`), a failing cell's error must carry file= and line=."""
    def unescape(v, prop):
        check(re.fullmatch(r"([^%]|%25|%0D|%0A" + ("|%3A|%2C" if prop else "") + r")*", v) is not None,
              f"github: bad escape in {v!r}")
        if prop:
            check(":" not in v and "," not in v, f"github: unescaped ':' or ',' in property {v!r}")
        for code, ch in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
            v = v.replace(code, ch)
        return v
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"::(error|warning|notice) (?:file=([^,:]*),line=([0-9]+),)?title=([^:]*)::(.*)", line)
        check(m is not None, f"github: not a workflow command: {line!r}")
        kind, title, message = m.group(1), unescape(m.group(4), True), unescape(m.group(5), False)
        # `run` knows every cell's suite file and [[cells]] line: a failing cell's error carries them.
        cell_error = kind == "error" and title.startswith("pacheck: ") and " " in title[len("pacheck: "):]
        if m.group(2) is not None:
            check(m.group(2).endswith(".toml") and int(m.group(3)) > 0, f"github: file/line {m.group(2)}:{m.group(3)}")
        elif cell_error and require_source:
            check(False, f"github: a failing cell's error without file= and line=: {line!r}")
        out.append((kind, title, message))
    return out


def check_stdout_formats(args, tmp, d, report):
    """`--format NAME` on stdout, for the run whose report directory is `d` (same selection)."""
    sel = [*TAIL, "--filter", " bf16 ", "-j2"]
    listed = {}
    for line in run(args, "list", "formats", expect=0).stdout.splitlines():
        name, file = line.split()[:2]
        listed[name] = None if file == "(stdout)" else file
    check({"console", "json", "junit", "markdown", "html", "tap", "github"} <= set(listed), f"list formats: {listed}")
    files = sorted(f for f in listed.values() if f)
    check(sorted(f for f in os.listdir(d) if f not in ("results.jsonl", "run.json", "evidence.json", ".pacheck.lock")) == files,
          f"{d} holds {sorted(os.listdir(d))}, the formats' files are {files}")
    # tap: one point per cell and per run check; this run passes, so every point is ok.
    p = run_stdout(args, "run", *sel, "--format", "tap", "--report-dir", os.path.join(tmp, "tap"), expect=0)
    points = parse_tap(p.stdout)
    tested = [r for r in report["results"] if r["kernel"] == "cpu.reference"]
    check(len(points) > len(tested), f"tap: {len(points)} points for {len(tested)} cells of the kernel under test")
    check(all(ok for ok, _, _, _ in points), "tap: a passing run has a failing point")
    check("reports in " in p.stderr, "tap: the closing line is not on stderr")
    # A negative control is one point, its check's, with its counts; none of its cells is a point.
    for k in report["kernels"]:
        if k["negative_control"] == "-":
            continue
        want = f"{k['kernel']}: negative control caught ({k['caught']} caught, {k['missed']} missed, {k['not_run']} not run)"
        check(sum(1 for _, desc, _, _ in points if desc == want) == 1, f"tap: no point {want!r}")
        check(not any(desc.startswith(k["kernel"] + " ") for _, desc, _, _ in points),
              f"tap: a point per cell of the negative control {k['kernel']}")
    # A failing run (a planted off-by-one mask; a filter that matches nothing is a usage error, exit 2):
    # failing points with their YAML blocks, one ::error annotation per failing cell and the notice last.
    planted = ["--suite", "tail-poison", "--kernel", "planted.drop_last_token", "--filter", " bf16 .*clean"]
    p = run_stdout(args, "run", *planted, "--format", "tap", expect=1)
    bad = [(desc, y) for ok, desc, _, y in parse_tap(p.stdout) if not ok]
    check(bad and all("detail" in y and "repro" in y for desc, y in bad), f"tap: {bad}")
    p = run_stdout(args, "run", *planted, "--format", "github", expect=1)
    notes = parse_annotations(p.stdout)
    kinds = [k for k, _, _ in notes]
    check(kinds[-1] == "notice" and kinds.count("error") == len(bad), f"github: {notes}")
    check(notes[-1][1] == "pacheck tail-poison: FAIL (exit 1)", f"github notice: {notes[-1]}")
    p = run_stdout(args, "run", *sel, "--format", "github", expect=0)
    check([k for k, _, _ in parse_annotations(p.stdout)] == ["notice"], f"github on a passing run: {p.stdout!r}")
    # json, junit and markdown on stdout are the documents a report directory holds.
    p = run_stdout(args, "run", *sel, "--format", "json", expect=0)
    check(comparable(json.loads(p.stdout)) == comparable(report), "--format json differs from report.json")
    p = run_stdout(args, "run", *sel, "--format", "junit", expect=0)
    check(ET.fromstring(p.stdout).tag == "testsuites", "--format junit is not a JUnit document")
    p = run_stdout(args, "run", *sel, "--format", "markdown", expect=0)
    check(p.stdout.startswith("## pacheck tail-poison: PASS (exit 0)"), f"--format markdown: {p.stdout[:200]!r}")
    p = run(args, "run", *sel, "--format", "nope", "--report-dir", d, expect=2)
    check("--format: no report format named 'nope' (known: console, json" in p.stdout,
          f"--format nope: {p.stdout[-500:]}")
    check(os.path.isfile(os.path.join(d, "report.json")), "a rejected --format emptied the report directory")


def read_jsonl(path):
    """Every line of results.jsonl must be a complete JSON result; a torn last line (no newline) is allowed."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # torn: a kill cut the last write short; resume drops it
    out = []
    for i, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{i}: not JSON: {e}")
        for key in ("suite", "kernel", "cell", "verdict", "metrics", "index"):
            check(key in r, f"{path}:{i}: no '{key}'")
        check(r["verdict"] in VERDICTS, f"{path}:{i}: unknown verdict {r['verdict']}")
        out.append(r)
    return out


def check_junit(path, report):
    """A JUnit consumer's view of junit.xml, checked against the structure CI tools rely on and against
    report.json: every cell of a kernel under test is a testcase, failing exactly when the cell counts as a
    failure; every negative control is one testcase (classname pacheck.SUITE.negative-controls) with its
    counts, failing exactly when one of its cells was missed or failed, and no not_run cell is a skip."""
    root = ET.parse(path).getroot()
    check(root.tag == "testsuites", f"root is <{root.tag}>")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    cases = {}
    for ts in root.findall("testsuite"):
        check(ts.get("name"), "testsuite without name")
        tcs = ts.findall("testcase")
        counts = {"tests": len(tcs),
                  "failures": sum(len(c.findall("failure")) for c in tcs),
                  "errors": sum(len(c.findall("error")) for c in tcs),
                  "skipped": sum(len(c.findall("skipped")) for c in tcs)}
        for k, v in counts.items():
            check(int(ts.get(k)) == v, f"testsuite {ts.get('name')}: {k}={ts.get(k)} but {v} elements")
            totals[k] += v
        float(ts.get("time"))
        props = {p.get("name"): p.get("value") for p in ts.find("properties").findall("property")}
        for key in ("pacheck.version", "pacheck.git_commit", "compiler", "device", "device.name"):
            check(props.get(key), f"testsuite {ts.get('name')}: property {key} missing or empty")
        for c in tcs:
            check(c.get("name") and c.get("classname"), "testcase without name/classname")
            float(c.get("time"))
            outcomes = c.findall("failure") + c.findall("error") + c.findall("skipped")
            check(len(outcomes) <= 1, f"testcase {c.get('name')}: {len(outcomes)} outcomes")
            for f in c.findall("failure") + c.findall("error"):
                check(f.get("type") and f.get("message"), f"testcase {c.get('name')}: failure without type/message")
            key = (c.get("classname"), c.get("name"))
            check(key not in cases, f"testcase {key} twice")
            cases[key] = c
    for k, v in totals.items():
        check(int(root.get(k)) == v, f"testsuites {k}={root.get(k)} but {v}")

    controls = {k["kernel"]: k for k in report["kernels"] if k["negative_control"] != "-"}
    failing_cells = 0
    for r in report["results"]:
        if r["kernel"] in controls:
            check((f"pacheck.{r['suite']}.{r['kernel']}", r["cell"]) not in cases,
                  f"a testcase for the negative control's cell {r['kernel']} {r['cell']}")
            continue
        c = cases.get((f"pacheck.{r['suite']}.{r['kernel']}", r["cell"]))
        check(c is not None, f"no testcase for {r['kernel']} {r['cell']}")
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        want_bad = r["verdict"] not in ("pass", "declined", "not_run")
        check((bad is not None) == want_bad, f"{r['kernel']} {r['cell']}: verdict {r['verdict']} but junit "
                                             f"{'fails' if bad is not None else 'passes'} it")
        if bad is not None:
            failing_cells += 1
            check(bad.get("type") == r["verdict"], f"{r['cell']}: type {bad.get('type')} != {r['verdict']}")
            check(bad.tag == ("error" if r["verdict"] in ERROR_VERDICTS else "failure"), f"{r['cell']}: <{bad.tag}>")
            check("rel_linf: " in (bad.text or ""), f"{r['cell']}: failure text lacks the metrics")
        if r["verdict"] == "declined":
            check(c.find("skipped") is not None, f"{r['cell']}: {r['verdict']} but not skipped")
    suites = {r["suite"] for r in report["results"]}
    for name, k in controls.items():
        tcs = [cases[(f"pacheck.{s}.negative-controls", name)] for s in suites
               if (f"pacheck.{s}.negative-controls", name) in cases]
        check(len(tcs) == len({r["suite"] for r in report["results"] if r["kernel"] == name}),
              f"negative control {name}: {len(tcs)} testcases, want one per suite it ran in")
        if len(suites) != 1 or not tcs:  # counts per suite; a control with no cell selected has no testcase
            continue
        c = tcs[0]
        props = {p.get("name"): p.get("value") for p in c.find("properties").findall("property")}
        for key in ("caught", "missed", "not_run", "declined", "passed", "failed"):
            check(props.get(key) == str(k[key]), f"negative control {name}: property {key}={props.get(key)}, "
                                                  f"report.json says {k[key]}")
        want_bad = k["missed"] + k["failed"] > 0
        check((c.find("failure") is not None) == want_bad, f"negative control {name}: missed {k['missed']}, failed "
                                                           f"{k['failed']}, but junit {'passes' if want_bad else 'fails'} it")
    check(not any((s.get("message") or "").startswith("not run:") for s in root.iter("skipped")),
          "a not_run cell is a skipped testcase")
    any_bad = totals["failures"] + totals["errors"] > 0
    check(any_bad == (report["exit_code"] != 0), f"junit {'fails' if any_bad else 'passes'} but exit code is "
                                                  f"{report['exit_code']}")
    return failing_cells


def check_reports_dir(d):
    for name in ("results.jsonl", "run.json", "report.json", "junit.xml", "summary.md"):
        check(os.path.isfile(os.path.join(d, name)), f"{d}: no {name}")
    report = load(os.path.join(d, "report.json"))
    results = read_jsonl(os.path.join(d, "results.jsonl"))
    check(len(results) == len(report["results"]), f"{d}: results.jsonl has {len(results)} lines, report "
                                                  f"{len(report['results'])} results")
    keys = {(r["kernel"], r["cell"]) for r in results}
    check(keys == {(r["kernel"], r["cell"]) for r in report["results"]}, f"{d}: results.jsonl and report differ")
    env = report["environment"]
    for key in ("pacheck_version", "git_commit", "compiler", "device", "device_name"):
        check(env.get(key), f"{d}: environment.{key} empty")
    summary = open(os.path.join(d, "summary.md")).read()
    check(f"(exit {report['exit_code']})" in summary, f"{d}: summary.md does not state the exit code")
    check_junit(os.path.join(d, "junit.xml"), report)
    return report


TAIL = ["--suite", "tail-poison", "--kernel", "cpu.reference", "--kernel", "cpu.vector_v"]


def scenario_junit(args, tmp):
    d = os.path.join(tmp, "pass")
    p = run(args, "run", *TAIL, "--filter", " bf16 ", "-j2", "--report-dir", d, expect=0)
    report = check_reports_dir(d)
    # The closing line names every report written, report.html included.
    closing = f"reports in {d}: results.jsonl report.json junit.xml summary.md report.html\n"
    check(p.stdout.endswith(closing), f"closing line is not {closing!r}: {p.stdout[-300:]!r}")
    check(os.path.isfile(os.path.join(d, "report.html")), f"{d}: no report.html")
    check(all(r.get("device") == "cpu" for r in report["results"] if r["verdict"] not in ("declined", "not_run")),
          "a CPU run's results do not name device cpu")
    check(report["summary"]["caught"] == 4, "the negative control's 4 bf16 cells were not caught")
    check_stdout_formats(args, tmp, d, report)
    # Planted: a failing run (an off-by-one mask) fails in junit too.
    d = os.path.join(tmp, "failing")
    run(args, "run", "--suite", "tail-poison", "--kernel", "planted.drop_last_token", "--filter", " bf16 ",
        "--report-dir", d, expect=1)
    report = check_reports_dir(d)
    root = ET.parse(os.path.join(d, "junit.xml")).getroot()
    check(int(root.get("failures")) > 0, "failing run has no junit failure")


def scenario_kill_resume(args, tmp):
    a, b = os.path.join(tmp, "killed"), os.path.join(tmp, "whole")
    sel = [*TAIL, "--filter", " bf16 "]  # 32 results
    cmd = [args.pacheck, "run", *sel, "-j1", "--report-dir", a]
    print("+", " ".join(cmd), "(killed after 10 cells)", flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = os.path.join(a, "results.jsonl")
    deadline = time.time() + 300
    lines = 0
    while lines < 10 and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
        if os.path.exists(results):
            with open(results, "rb") as f:
                lines = f.read().count(b"\n")
    check(p.poll() is None, f"the run ended (exit {p.returncode}) before it could be killed")
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = read_jsonl(results)
    check(10 <= len(done) < 32, f"{len(done)} cells in results.jsonl after the kill")
    check(not os.path.exists(os.path.join(a, "report.json")), "a killed run left a report.json")
    run(args, "merge", a, "--out", os.path.join(tmp, "m"), expect=2)  # unfinished: refused, not merged
    run(args, "run", *sel, "-j1", "--seed", "3", "--resume", a, expect=2)  # another run's options: refused
    p = run(args, "run", *sel, "-j2", "--resume", a, expect=0)
    check(f"{len(done)} finished cells in results.jsonl are not run again" in p.stdout, "resume did not skip")
    run(args, "run", *sel, "-j2", "--report-dir", b, expect=0)
    ra, rb = check_reports_dir(a), check_reports_dir(b)
    check(comparable(ra) == comparable(rb), "the resumed report differs from the uninterrupted one")
    check(len(read_jsonl(results)) == 32, "results.jsonl does not hold each of the 32 cells once")


def scenario_shards(args, tmp):
    sel = [*TAIL, "--filter", " f16 ", "-j2"]
    whole, s0, s1, merged = (os.path.join(tmp, n) for n in ("whole", "s0", "s1", "merged"))
    run(args, "run", *sel, "--report-dir", whole, expect=0)
    run(args, "run", *sel, "--shard", "0/2", "--report-dir", s0)
    status = os.path.join(tmp, "shard_status")
    env = dict(os.environ, GTEST_TOTAL_SHARDS="2", GTEST_SHARD_INDEX="1", GTEST_SHARD_STATUS_FILE=status)
    run(args, "run", *sel, "--report-dir", s1, env=env)
    check(os.path.exists(status), "GTEST_SHARD_STATUS_FILE was not touched")
    r0, r1 = load(os.path.join(s0, "report.json")), load(os.path.join(s1, "report.json"))
    check(r0["run"]["shard"] == {"index": 0, "count": 2} and r1["run"]["shard"] == {"index": 1, "count": 2},
          "shard not recorded in run")
    check(0 < len(r0["results"]) < len(load(os.path.join(whole, "report.json"))["results"]), "shard 0 is not a part")
    run(args, "merge", s1, s0, "--out", merged, expect=0)
    check(comparable(check_reports_dir(merged)) == comparable(check_reports_dir(whole)),
          "merged shards differ from the unsharded run")
    run(args, "merge", s0, "--out", os.path.join(tmp, "partial"), expect=2)  # shard 1 missing
    # A shard without cells (more shards than cells) passes, as a GoogleTest shard without tests does, and
    # says so. A --filter that matches no cell of the whole suite is a usage error, in every shard too
    # (issue 21: it used to pass each shard and fail only the merge).
    e0 = os.path.join(tmp, "e0")
    p = run(args, "run", *TAIL, "--shard", "40/41", "--report-dir", e0, expect=0)
    check("no cell in this shard" in p.stdout, f"empty shard: {p.stdout[-1000:]}")
    for shard in (["--shard", "0/2"], []):
        p = run(args, "run", *TAIL, "--filter", "NO SUCH CELL", *shard, expect=2)
        check("--filter: 'NO SUCH CELL' matches none of the 32 cells" in p.stdout, f"empty filter: {p.stdout[-500:]}")
    run(args, "run", *sel, "--shard", "2/2", expect=2)
    run(args, "run", *sel, "--shard", "1-2", expect=2)
    run(args, "run", *sel, env=dict(os.environ, GTEST_TOTAL_SHARDS="2"), expect=2)


def scenario_gate_sh(args, tmp):
    gate = os.path.join(args.source, "ci", "gate.sh")
    env = dict(os.environ, PACHECK=args.pacheck, GITHUB_STEP_SUMMARY=os.path.join(tmp, "step_summary.md"))
    d = os.path.join(tmp, "gate")
    base = ["bash", gate, "--kernel", "cpu.reference", "--report-dir", d, "--", "--filter", "bs16 .*ctx(17|1000|1030),"]
    print("+", " ".join(base), flush=True)
    p = subprocess.run(base, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode == 0, f"gate.sh exit {p.returncode}:\n{p.stdout[-3000:]}")
    check_reports_dir(d)
    check("## pacheck gate: PASS (exit 0)" in open(env["GITHUB_STEP_SUMMARY"]).read(), "step summary not written")
    # Planted: a failing kernel (an off-by-one mask) makes pacheck exit 1; gate.sh must pass that on.
    failing = [a if a != "cpu.reference" else "planted.drop_last_token" for a in base]
    p = subprocess.run(failing, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode == 1, f"gate.sh exit {p.returncode} for a failing run:\n{p.stdout[-3000:]}")
    p = subprocess.run(["bash", gate, "--no-such-option"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    check(p.returncode == 2, f"gate.sh exit {p.returncode} for a bad option")
    # A kernel repository: the example plugin project, built by gate.sh from a copy outside pacheck's tree.
    src = os.path.join(tmp, "kernel-repo")
    shutil.copytree(os.path.join(args.source, "examples", "plugin"), src)
    d = os.path.join(tmp, "gate-plugin")
    cmd = ["bash", gate, "--plugin-src", src, "--plugin-lib", "libpacheck_example_plugin.so", "--report-dir", d,
           "--", "--filter", "bs16 .*ctx(17|1000|1030),"]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode == 0, f"gate.sh on the example plugin: exit {p.returncode}:\n{p.stdout[-3000:]}")
    report = check_reports_dir(d)
    plugins = report["environment"]["plugins"]
    check(len(plugins) == 1 and plugins[0]["path"].endswith("libpacheck_example_plugin.so"), f"plugins: {plugins}")
    check(all(r["kernel"] != "cpu.reference" for r in report["results"]), "built-in kernels ran alongside the plugin")
    # A plugin that does not build is an input error: exit 2.
    with open(os.path.join(src, "example_cpu_plugin.c"), "a") as f:
        f.write("\nthis is not C;\n")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode == 2, f"gate.sh exit {p.returncode} for a plugin that does not build")


def scenario_plugin(args, tmp):
    check(args.plugin and os.path.exists(args.plugin), "--plugin: planted plugin not built")
    suite = os.path.join(args.source, "tests", "cli", "isolation.toml")
    kernels = ["planted.ok", "planted.segfault", "planted.abort", "planted.hang", "planted.oob_write", "planted.error"]
    want = {"planted.ok": "pass", "planted.segfault": "crash", "planted.abort": "crash", "planted.hang": "timeout",
            "planted.oob_write": "oob_write", "planted.error": "error"}
    d = os.path.join(tmp, "isolated")
    common = ["--plugin", args.plugin, "--suite", suite, "--cell-timeout", "3"]
    p = run(args, "run", *common, "-j2", "--report-dir", d, expect=1)  # plugin kernels are isolated by default
    check("negative controls: none ran" in p.stdout, "a run without controls does not say so in its summary")
    report = check_reports_dir(d)
    check([k["kernel"] for k in report["kernels"]] == kernels, "not every planted kernel ran")
    cells = len(report["results"]) // len(kernels)
    for r in report["results"]:
        trigger = " ctx33," in r["cell"]
        expected = want[r["kernel"]] if trigger else "pass"
        check(r["verdict"] == expected, f"{r['kernel']} {r['cell']}: {r['verdict']} ({r['detail']}), want {expected}")
        if r["kernel"] == "planted.segfault" and trigger:
            check("SIGSEGV" in r["detail"], f"segfault detail: {r['detail']}")
        if r["kernel"] == "planted.abort" and trigger:
            check("SIGABRT" in r["detail"], f"abort detail: {r['detail']}")
    check(cells == 9, f"{cells} cells per kernel, want 9")
    # A kernel whose supports() dies: every cell is an `error`, printed and in results.jsonl as it is settled.
    ds = os.path.join(tmp, "supports_dies")
    env = dict(os.environ, PACHECK_TEST_PLUGIN_SUPPORTS="segfault")
    p = run(args, "run", *common, "--kernel", "planted.ok", "--report-dir", ds, env=env, expect=1)
    lines = read_jsonl(os.path.join(ds, "results.jsonl"))
    check(len(lines) == 9 and all(r["verdict"] == "error" and "which cells it supports failed" in r["detail"]
                                  for r in lines), f"supports() dying: results.jsonl {lines[:2]}")
    check(p.stdout.count("which cells it supports failed") >= 9, "supports() errors missing from the live table")
    plugins = report["environment"]["plugins"]
    check(len(plugins) == 1 and len(plugins[0]["sha256"]) == 64, "plugin SHA-256 missing from the fingerprint")
    # supports() that cannot tell (PACHECK_ERROR) is an `error` in repro as in run, never a decline; repro
    # without --kernel names the plugin's kernels when there are several (issue 17 audit).
    one_cell = next(r["cell"] for r in report["results"] if r["kernel"] == "planted.ok")
    env = dict(os.environ, PACHECK_TEST_PLUGIN_SUPPORTS="error")
    p = run(args, "repro", one_cell, "--plugin", args.plugin, "--kernel", "planted.ok", env=env, expect=1)
    check("verdict   error  (supports() failed: planted: cannot tell)" in p.stdout and "declines" not in p.stdout,
          f"repro of a supports() error:\n{p.stdout}")
    p = run(args, "repro", one_cell, "--plugin", args.plugin, expect=2)
    check("--kernel is required: the plugins load 6 kernels (planted.abort, planted.error" in p.stdout,
          f"repro without --kernel:\n{p.stdout}")
    p = run(args, "repro", one_cell, "--plugin", args.plugin, env=dict(os.environ, PACHECK_TEST_PLUGIN_ONLY="planted.ok"),
            expect=0)
    check("kernel    planted.ok on" in p.stdout and "verdict   pass" in p.stdout, f"repro of a one-kernel plugin:\n{p.stdout}")

    # Without isolation the segfault takes the run down, but every cell finished before it is kept, and
    # --resume (isolated again by default) completes the run.
    d = os.path.join(tmp, "in_process")
    p = run(args, "run", *common, "-j1", "--kernel", "planted.segfault", "--no-isolate", "--report-dir", d)
    check(p.returncode == -signal.SIGSEGV, f"in-process segfault: exit {p.returncode}")
    kept = read_jsonl(os.path.join(d, "results.jsonl"))
    check(0 < len(kept) < cells, f"{len(kept)} cells kept after the crash")
    run(args, "run", *common, "-j1", "--kernel", "planted.segfault", "--resume", d, expect=1)
    report = check_reports_dir(d)
    check([r["verdict"] for r in report["results"]].count("crash") == 1, "resumed run lacks the one crash")


def scenario_bad_input(args, tmp):
    def rejected(want, *cmd):
        p = run(args, *cmd, expect=2, timeout=120)
        check(want in p.stdout, f"{' '.join(cmd)}: output lacks {want!r}:\n{p.stdout[-2000:]}")

    rejected("'bogus' is not a pacheck subcommand; subcommands: run, list", "bogus")
    # CLI11's own refusals carry pacheck's prefix and name the subcommand's --help (issue 17 audit).
    rejected("pacheck: error: Could not convert: --threads = abc", "run", "--threads", "abc")
    rejected("Run 'pacheck run --help' for the options.", "run", "--threads", "abc")
    rejected("pacheck: error: The following argument was not expected: --bogus", "list", "kernels", "--bogus")
    repro = ["repro", "--kernel", "cpu.reference", "--device", "cpu"]
    cell = "h32/8 d128 bs16 bf16 ctx100 vllm seed7 clean"
    for old, bad, want in [("ctx100", "ctx4294967396", "seq_lens: 4294967396 is out of range"),
                           ("ctx100", "ctx-4294967196", "seq_lens: -4294967196 is out of range"),
                           ("d128", "d4294967424", "head_size: 4294967424 is out of range"),
                           ("h32/8", "h4294967328/8", "num_heads: 4294967328 is out of range"),
                           ("bs16", "bs4294967312", "block_size: 4294967312 is out of range")]:
        rejected(want, *repro, cell.replace(old, bad))
    run(args, *repro, cell, expect=0, timeout=120)
    # An unknown kernel is named with the known ones, in every command that takes --kernel.
    for cmd in (["repro", cell], ["run", "--suite", "tail-poison"], ["fuzz"], ["bench", "--suite", "tail-poison"]):
        rejected("no kernel named 'nope' (known: cpu.reference", *cmd, "--kernel", "nope", "--device", "cpu")
    tiny = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--filter", "NOTHING"]
    for seed, want in [("-1", "--seed: -1 is out of range [0, 18446744073709551615]"),
                       ("99999999999999999999", "--seed: 99999999999999999999 is out of range"),
                       ("7x", "--seed: '7x' is not an unsigned 64-bit integer")]:
        rejected(want, *tiny, "--seed", seed)
        rejected(want, "export", "--suite", "tail-poison", "--out", os.path.join(tmp, "exp"), "--seed", seed)
    # A selection that exists but that case files cannot carry (high block ids; several query tokens per sequence
    # are carried since format_version 3, per-slot scale tables since 4) is said to be that, not "no cell was
    # selected" (which names --filter, as run and list cells do).
    rejected("export: none of the 2 selected cells of suite gate can be written as case files (0 pinned to "
             "another layout or not valid in it, 0 of an untagged dtype, 2 with high block ids, 0 MLA cells)",
             "export", "--suite", "gate", "--filter", "hiblk=", "--out", os.path.join(tmp, "exp-hiblk"))
    # A format_version 4 export (for a runner that reads up to 4) carries no latent cache: gate's MLA group is
    # counted as such, with the reason (format_version 5 carries them).
    rejected("export: none of the 4 selected cells of suite gate can be written as case files (0 pinned to "
             "another layout or not valid in it, 0 of an untagged dtype, 0 with high block ids, 4 MLA cells (a "
             "format_version 4 export carries no latent cache; format_version 5 added it))",
             "export", "--suite", "gate", "--filter", "mla=", "--format-version", "4", "--out",
             os.path.join(tmp, "exp-mla"))
    rejected("--format-version: 3 (this pacheck writes 4 to 5;", "export", "--suite", "gate", "--format-version",
             "3", "--out", os.path.join(tmp, "exp-v3"))
    rejected("--filter: 'NOTHING' matches none of the", "export", "--suite", "tail-poison", "--filter",
             "NOTHING", "--out", os.path.join(tmp, "exp-none"))
    rejected("--shard '0/99999999999': N must be at most 2147483647", *tiny, "--shard", "0/99999999999")
    rejected("--shard '0/x': I and N must be non-negative integers", *tiny, "--shard", "0/x")
    rejected("--threads: -1 (must be 0 to 1024", *tiny, "--threads", "-1")
    # Issue 21: an empty selection, an empty --seed, a glob for a regex, an endless timeout, a thread count
    # that is a typo and an unwritable --json are refused before the first cell, naming the flag.
    one = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison"]
    rejected("--filter: 'NOTHING' matches none of the", *one, "--filter", "NOTHING")
    rejected("--seed: the value is empty (an unset variable?)", *one, "--seed", "")
    rejected("not a glob", *one, "--filter", "*d128")
    rejected("--cell-timeout: inf s (must be > 0 and finite", *one, "--cell-timeout", "inf")
    rejected("--threads: 100000 (must be 0 to 1024", *one, "--threads", "100000")
    rejected("--gpu-children: 65 (must be 1 to 64", *one, "--gpu-children", "65")
    rejected("--gpu-children: -1 (must be 1 to 64", *one, "--gpu-children", "-1")
    rejected("directory '" + os.path.join(tmp, "no", "dir") + "' does not exist", *one, "--json",
             os.path.join(tmp, "no", "dir", "r.json"))
    rejected("it is a directory", *one, "--json", tmp)
    p = run(args, "run", "--device", "cpu", "--suite", "nosuch", expect=2, timeout=120)
    check("no suite named 'nosuch'" in p.stdout and ":0" not in p.stdout, f"--suite nosuch: {p.stdout[-1000:]}")

    # A run that cannot start (bad or absent device) must leave an earlier run's reports as they were.
    d = os.path.join(tmp, "kept")
    run(args, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--report-dir", d,
        expect=0, timeout=300)
    before = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}
    rejected("--device: unknown device 'foo'", "run", "--suite", "tail-poison", "--device", "foo", "--report-dir", d)
    if not os.path.exists("/dev/nvidiactl"):  # a named device must exist, even for CPU kernels only
        rejected("no CUDA device", "run", "--suite", "tail-poison", "--kernel", "cpu.reference", "--device", "cuda:0",
                 "--report-dir", d)
    rejected("--device: 'cuda:x' is not cuda:N", "run", "--suite", "tail-poison", "--device", "cuda:x",
             "--report-dir", d)
    after = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}
    check(before == after, f"a run rejected for its device changed the report directory: {sorted(after)}")
    # Merging into one of the inputs would replace that shard's reports.
    rejected("is the input", "merge", d, "--out", d)
    check(before == {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))},
          "merge --out INPUT changed the input")

    # A plugin that dies while being registered is an input error naming it, not a dead pacheck.
    for how, sig in [("segfault", "SIGSEGV"), ("abort", "SIGABRT")]:
        env = dict(os.environ, PACHECK_TEST_PLUGIN_LOAD=how)
        p = run(args, "run", "--device", "cpu", "--suite", "tail-poison", "--plugin", args.plugin, env=env,
                expect=2, timeout=120)
        check("the library died while being loaded" in p.stdout and sig in p.stdout,
              f"plugin {how} on load: {p.stdout[-1000:]}")

    # bench and fuzz numbers: no hang on NaN, no silent acceptance of negatives, no 300-digit ranges.
    bench = ["bench", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison"]
    rejected("--min-sample-ms: nan (must be > 0", *bench, "--min-sample-ms", "nan")
    rejected("--min-sample-ms: 1e+308 (must be > 0", *bench, "--min-sample-ms", "1e308")
    rejected("--warmup: -1 calls", *bench, "--warmup", "-1")
    rejected("--threads: -3", *bench, "--threads", "-3")
    rejected("--json: cannot write", *bench, "--json", os.path.join(tmp, "no", "such", "dir", "b.json"))
    rejected("--filter: 'NOTHING' matches none of the", *bench, "--filter", "NOTHING")
    # Options bench would ignore are refused; a bench that times nothing leaves an earlier --json as it was.
    for flag in (["--seed", "5"], ["--shard", "1/2"], ["--isolate"], ["--cell-timeout", "3"], ["--gpu-children", "2"]):
        rejected(f"{flag[0]}: not used by bench", *bench, *flag)
    rejected("--samples: 2000000000 (must be 3 to 100000)", *bench, "--samples", "2000000000")
    cpu_bench = [a for a in bench if a not in ("--device", "cpu")]
    rejected("every --kernel given is a CPU kernel", *cpu_bench, "--device", "cuda:0")
    rejected("bench times on one device (give cuda:N)", *cpu_bench, "--device", "cuda:all")
    old_json = os.path.join(tmp, "old.json")
    with open(old_json, "w") as f:
        f.write('{"old": true}\n')
    run(args, *bench, "--filter", "NOTHING", "--json", old_json, expect=2, timeout=120)
    check(load(old_json) == {"old": True}, "a bench that timed nothing replaced an earlier --json")
    # A case that cannot be prepared (no memory for 16M tokens under a 3 GB address-space limit) is an
    # `error` row; the row before it is kept, in the table and in the JSON (exit 1, not a usage error).
    if b"__asan_init" not in open(args.pacheck, "rb").read():  # ASan reserves more address space than that
        suite = os.path.join(tmp, "mixed.toml")
        with open(suite, "w") as f:
            f.write('name = "mixed"\ndescription = "one small case, one too big"\n[[cells]]\nheads = "8/2"\n'
                    'head_sizes = 64\nblock_sizes = 16\ndtypes = "bf16"\nseq_lens = [[1000], [16777216]]\n')
        out = os.path.join(tmp, "mixed.json")
        # --max-memory 1T lets the big case past the memory pre-flight (which would refuse it, exit 2), so
        # that its preparation fails under the address-space limit.
        cmd = [args.pacheck, "bench", "--device", "cpu", "--kernel", "cpu.reference", "--suite", suite, "--samples", "3",
               "--json", out, "--max-memory", "1T"]
        print("+", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)))
        check(p.returncode == 1, f"bench with an unpreparable case: exit {p.returncode}:\n{p.stdout[-2000:]}")
        rows = load(out)["rows"]
        check([r["kernels"][0]["verdict"] for r in rows] == ["pass", "error"] and "preparing the case failed"
              in rows[1]["kernels"][0]["note"], f"bench rows: {rows}")
    fuzz = ["fuzz", "--kernel", "cpu.reference"]
    for flag, value in [("--cases", "0"), ("--cases", "-1"), ("--budget", "0"), ("--budget", "nan")]:
        rejected(f"must be a positive finite number, got '{value}'", *fuzz, flag, value)
    rejected("--seed: -1 is out of range", *fuzz, "--seed", "-1")
    rejected("--seed: 99999999999999999999 is out of range", *fuzz, "--seed", "99999999999999999999")


def selftest_suite(name, dtype, extra=""):
    """A one-group stand-in for a built-in suite: h8/2 d64 bs16 ctx37 (straddling), clean and V-tail NaN."""
    return (f'name = "{name}"\ndescription = "cli.selftest stand-in"\n[[cells]]\nheads = "8/2"\nhead_sizes = 64\n'
            f'block_sizes = 16\ndtypes = "{dtype}"\nseq_lens = [37]\nfaults = ["clean", "V:nan@tail"]\n{extra}')


SELFTEST_TAIL = selftest_suite("tail-poison", "bf16")
# Per-KV-head scales, so both fp8 scale controls have cells to fail.
SELFTEST_FP8 = selftest_suite("fp8", "q=bf16,kv=fp8_e4m3fn,o=bf16",
                              "k_scale_range = [0.3, 3.0]\nv_scale_range = [3.0, 0.3]\n") + (
    # Per-slot scale tables (seed 002) with NaN in the unwritten slots' V entries: cpu.slot_scale_unmasked.
    '[[cells]]\nheads = "8/2"\nhead_sizes = 64\nblock_sizes = 16\ndtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"\n'
    'seq_lens = [37]\nfaults = ["V:nan@scales"]\nk_scale_slot = [0.5, 2.0]\nv_scale_slot = [0.25, 4.0]\n')
# Gemma-3's softmax scale at head 64's geometry stand-in: cpu.fixed_scale (1/sqrt(head_size)) must fail it.
SELFTEST_SCALES = selftest_suite("scales", "bf16", 'scales = ["query_pre_attn_scalar:168"]\n')
# Attention variants (issue 19): a 100-token window at ctx 300 (one 256-token partition of two: cpu.window_scratch
# merges the unwritten one) with a soft cap of 50 on extreme logits (cpu.softcap_ratio's inf/inf).
SELFTEST_VARIANTS = ('name = "variants"\ndescription = "cli.selftest stand-in"\n[[cells]]\nheads = "8/2"\n'
                     'head_sizes = 64\nblock_sizes = 16\ndtypes = "bf16"\nseq_lens = [300]\ndists = "extreme"\n'
                     'variants = ["win=100 cap=50"]\nfaults = ["clean", "V:nan@tail"]\n'
                     # 4 query tokens at ctx 37 (normal values): cpu.qlen_no_causal's rows see keys past them.
                     '[[cells]]\nheads = "8/2"\nhead_sizes = 64\nblock_sizes = 16\ndtypes = "bf16"\nseq_lens = [37]\n'
                     'variants = ["qlen=4"]\nfaults = ["clean", "V:nan@tail"]\n')

# High block ids (issue 18): offsets past 2^32 elements, unused blocks NaN: cpu.int32_offset and cpu.uint32_offset.
SELFTEST_POOL = selftest_suite("pool", "bf16", "high_block_ids = 32\n").replace(
    'faults = ["clean", "V:nan@tail"]', 'faults = ["K+V:nan@unused"]')


# The groups of gate (suites/gate.toml) that hold the only expected failures of some controls, smaller: logits
# far below zero and sequences of one batch far apart (cpu.sentinel_max, cpu.carried_max), a far_above case then
# a peaked one on the same buffers (cpu.replay_output, cpu.stale_max), f16 weights all below 2^-14 at 20,000
# tokens (cpu.p_f16_ftz); with `fp8`, e4m3fn codes of the top binade (cpu.e4m3_ieee) and per-slot tables in
# the nhd layout (cpu.slot_scale_nhd); with `mla`, gate's MLA group (every cpu.mla_* control), as it is.
def selftest_gate(fp8=True, mla=True):
    group = '[[cells]]\nheads = "{}"\nhead_sizes = {}\nblock_sizes = 16\ndtypes = "{}"\nseq_lens = {}\n{}'
    text = ('name = "gate"\ndescription = "cli.selftest stand-in"\n'
            + group.format("8/2", 64, "bf16", "[[300, 37, 45]]", 'dists = ["far_below", "mixed_scales"]\n')
            + group.format("4/1", 64, "bf16", "[[700, 77]]", 'dists = ["far_above", "peaked"]\n')
            + group.format("1/1", 32, "f16", "[20000]", 'dists = "uniform"\nscales = [1e-6]\n'))
    if fp8:
        text += (group.format("8/2", 64, "q=bf16,kv=fp8_e4m3fn,o=bf16", "[37]",
                              'dists = "uniform"\nk_scale = 0.0023\nv_scale = 0.0023\n')
                 + group.format("8/2", 64, "q=bf16,kv=fp8_e4m3fn,o=bf16", "[[1000, 37]]",
                                'layouts = ["nhd"]\nk_scale_slot = [0.25, 4.0]\nv_scale_slot = [0.25, 4.0]\n'))
    if mla:
        text += ('[[cells]]\nmla = "512+64"\nheads = "16/1"\nhead_sizes = 576\nblock_sizes = 16\nlayouts = "nhd"\n'
                 'dtypes = "bf16"\nseq_lens = [[100, 5]]\nscales = [0.1352338]\n'
                 'faults = ["clean", "V:nan@tail", "K:nan@tail", "V:nan@others"]\n')
    return text


def scenario_selftest(args, tmp):
    """`pacheck selftest` passes with every CPU negative control caught on a suite that plants its fault (the
    fp8 scale controls have none in tail-poison: before the fix the command exited 3 on a healthy build),
    fails (exit 3) when a control is not exercised, and refuses --ulps 0 (which would seed no corruption) as a
    usage error. Small stand-ins for its six suites (PACHECK_SUITES_DIR) keep it short; the built-in suites
    run the same code."""
    def suites(name, fp8_text, gate_text):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        for file, text in (("tail-poison.toml", SELFTEST_TAIL), ("fp8.toml", fp8_text), ("scales.toml", SELFTEST_SCALES),
                           ("variants.toml", SELFTEST_VARIANTS), ("pool.toml", SELFTEST_POOL), ("gate.toml", gate_text)):
            with open(os.path.join(d, file), "w") as f:
                f.write(text)
        return dict(os.environ, PACHECK_SUITES_DIR=d)

    def controls(p):
        return {c[0]: c[1] for c in (l.split() for l in p.stdout.splitlines() if l.startswith("  cpu."))}

    p = run(args, "selftest", env=suites("both", SELFTEST_FP8, selftest_gate()), expect=0)
    got = controls(p)
    check(set(got) >= {"cpu.vector_v", "cpu.fp8_head0_scale", "cpu.fp8_scale_fault", "cpu.fixed_scale",
                       "cpu.softcap_ratio", "cpu.window_scratch", "cpu.int32_offset", "cpu.uint32_offset",
                       "cpu.qlen_no_causal", "cpu.slot_scale_unmasked", "cpu.sentinel_max", "cpu.softmax_no_max",
                       "cpu.carried_max", "cpu.p_f16_ftz", "cpu.e4m3_ieee", "cpu.slot_scale_nhd", "cpu.replay_output",
                       "cpu.stale_max", "cpu.mla_fixed_scale", "cpu.mla_rope_dropped", "cpu.mla_rope_unscaled",
                       "cpu.mla_v_offset", "cpu.mla_v_tail", "cpu.mla_packed_tile"}, p.stdout)
    check(all(v == "caught" for v in got.values()), f"a control not caught:\n{p.stdout}")
    check(p.stdout.rstrip().endswith("selftest: passed"), p.stdout[-500:])
    # Planted: fp8 and gate without an fp8 cell leave the fp8 controls unexercised, which must fail; so does a
    # gate without its MLA group for the MLA controls.
    p = run(args, "selftest", env=suites("no_fp8", selftest_suite("fp8", "bf16"), selftest_gate(fp8=False)), expect=3)
    got = controls(p)
    check(got.get("cpu.fp8_scale_fault") == "not" and got.get("cpu.vector_v") == "caught", p.stdout)
    p = run(args, "selftest", env=suites("no_mla", SELFTEST_FP8, selftest_gate(mla=False)), expect=3)
    got = controls(p)
    check(got.get("cpu.mla_v_tail") == "not" and got.get("cpu.mla_packed_tile") == "not"
          and got.get("cpu.vector_v") == "caught", p.stdout)
    # --ulps 0 would seed nothing: it is a usage error (exit 2 naming the range), not a blind instrument.
    p = run(args, "selftest", "--ulps", "0", expect=2)
    check("--ulps: Value 0 not in range 1 to 1024" in p.stdout, p.stdout)


# A small selection for the file-safety scenarios: tail-poison's bf16 cells on cpu.reference (16 results).
SMALL = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--filter", " bf16 ", "-j2"]
TINY_SUITE = ('name = "tiny"\ndescription = "file-safety stand-in"\n[[cells]]\nheads = "8/2"\nhead_sizes = 64\n'
              'block_sizes = 16\ndtypes = "bf16"\nseq_lens = [37]\nfaults = ["clean", "V:nan@tail"]\n')
ASAN = None


def bounded(args):
    """preexec_fn capping the address space at 4 GiB (not under ASan, which reserves more): a reader without a
    size cap fails the test by running out of it, not by taking the machine's memory."""
    global ASAN
    if ASAN is None:
        ASAN = b"__asan_init" in open(args.pacheck, "rb").read()
    return None if ASAN else (lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)))


def rejected(args, want, *cmd, env=None, expect=2, timeout=120):
    """`pacheck CMD` exits `expect` (2: a usage error) and its output holds `want`."""
    p = run(args, *cmd, env=env, expect=expect, timeout=timeout)
    check(want in p.stdout, f"{' '.join(cmd)}: output lacks {want!r}:\n{p.stdout[-3000:]}")
    return p


def scenario_main(namespace, prefix="pacheck_cli_"):
    """The command line of a tests/cli script: SCENARIO --pacheck P --source S [--plugin L]; runs
    namespace["scenario_" + SCENARIO](args, tmp) in a fresh temporary directory."""
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=[n[len("scenario_"):] for n in namespace if n.startswith("scenario_")])
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        namespace["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


def refused(args, want, *cmd, timeout=60):
    """`pacheck CMD` exits 2 within `timeout` seconds (a FIFO read without O_NONBLOCK hangs) and its output
    holds `want`, and neither std::bad_alloc nor basic_filebuf::underflow."""
    full = [args.pacheck, *cmd]
    print("+", " ".join(full), flush=True)
    try:
        p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           preexec_fn=bounded(args), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(cmd)}: still running after {timeout} s (blocked on a FIFO?)")
    check(p.returncode == 2, f"{' '.join(cmd)}: exit {p.returncode}, want 2:\n{p.stdout[-2000:]}")
    check(want in p.stdout, f"{' '.join(cmd)}: output lacks {want!r}:\n{p.stdout[-2000:]}")
    for bad in ("bad_alloc", "underflow"):
        check(bad not in p.stdout, f"{' '.join(cmd)}: {bad} in the output:\n{p.stdout[-2000:]}")
    return p


def snapshot(d):
    """Every file of directory `d` (links as their target text), for "nothing changed"; the lock file, which
    names the last run that held the directory, aside."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f == ".pacheck.lock":
            continue
        path = os.path.join(d, f)
        out[f] = ("link", os.readlink(path)) if os.path.islink(path) else open(path, "rb").read()
    return out


def scenario_symlinks(args, tmp):
    """No file is written through a symbolic link planted in a report or export directory (issue 21): a
    fresh run replaces links at results.jsonl and at the temporary names of the other reports; --resume
    refuses a results.jsonl that is a link (exit 2, naming it); export replaces a link at manifest.json.
    The files the links point at stay as they were. Before: results.jsonl and manifest.json were opened
    through the link (the outside file truncated and overwritten), report.json.tmp written through."""
    outside = os.path.join(tmp, "outside.txt")
    with open(outside, "w") as f:
        f.write("precious\n")
    d = os.path.join(tmp, "reports")
    os.makedirs(d)
    for name in ("results.jsonl", "report.json.tmp", "run.json.tmp", "junit.xml"):
        os.symlink(outside, os.path.join(d, name))
    run(args, *SMALL, "--report-dir", d, expect=0)
    check(open(outside).read() == "precious\n", "a fresh run wrote through a link in its report directory")
    for name in ("results.jsonl", "junit.xml"):
        check(not os.path.islink(os.path.join(d, name)), f"{name} is still a link")
    check(len(read_jsonl(os.path.join(d, "results.jsonl"))) == 16, "results.jsonl does not hold the 16 results")
    check_reports_dir(d)

    # --resume appends to results.jsonl: a link there is refused, even to a file of valid result lines.
    lines = open(os.path.join(d, "results.jsonl")).read().splitlines(keepends=True)
    with open(outside, "w") as f:
        f.writelines(lines[:3])
    os.remove(os.path.join(d, "results.jsonl"))
    os.symlink(outside, os.path.join(d, "results.jsonl"))
    refused(args, "results.jsonl': is a symbolic link", *SMALL, "--resume", d)
    check(open(outside).read() == "".join(lines[:3]), "--resume appended through a link")

    suite = os.path.join(tmp, "tiny.toml")
    with open(suite, "w") as f:
        f.write(TINY_SUITE)
    with open(outside, "w") as f:
        f.write("precious\n")
    e = os.path.join(tmp, "export")
    os.makedirs(e)
    os.symlink(outside, os.path.join(e, "manifest.json"))
    os.symlink(outside, os.path.join(e, "0000.safetensors"))
    run(args, "export", "--suite", suite, "--out", e, expect=0)
    check(open(outside).read() == "precious\n", "export wrote through a link in --out")
    check(not os.path.islink(os.path.join(e, "manifest.json")), "manifest.json is still a link")
    check(load(os.path.join(e, "manifest.json"))["suite"] == "tiny", "manifest.json is not the export's")


def scenario_input_files(args, tmp):
    """Input files are read only when regular and within a size cap (issue 21): /dev/zero, a FIFO or a
    directory given as a suite, an include, a manifest, a case file, an output file, results.jsonl or
    run.json on --resume, or report.json for `pacheck report`, and an output file over its cap, each exit 2 at
    once naming the option or field and the reason. Before: /dev/zero grew until std::bad_alloc, a FIFO hung,
    a directory gave basic_filebuf::underflow or a JSON parse error, a sparse output file was read whole."""
    fifo = os.path.join(tmp, "fifo.toml")
    os.mkfifo(fifo)
    refused(args, "--suite: '/dev/zero': not a regular file (a character device)", *SMALL[:5], "--suite",
            "/dev/zero")
    refused(args, f"--suite: '{fifo}': not a regular file (a FIFO)", "run", "--device", "cpu", "--suite", fifo)
    refused(args, f"--suite: '{tmp}': not a regular file (a directory)", "run", "--device", "cpu", "--suite", tmp)
    refused(args, "--suite: '/dev/zero': not a regular file", "export", "--suite", "/dev/zero", "--out",
            os.path.join(tmp, "never"))
    big = os.path.join(tmp, "big.toml")
    with open(big, "w") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB of zeros, no disk
    refused(args, "is 1073741824 bytes, over the 16 MiB limit for a suite file", "run", "--device", "cpu", "--suite",
            big)
    for target, kind in (("/dev/zero", "a character device"), (fifo, "a FIFO")):
        inc = os.path.join(tmp, "inc.toml")
        with open(inc, "w") as f:
            f.write(f'name = "inc"\ninclude = ["{target}"]\n')
        refused(args, f"inc.toml:2: include: '{target}': not a regular file ({kind})", "run", "--device", "cpu",
                "--suite", inc)

    # score: the manifest, a case file and an output file.
    suite = os.path.join(tmp, "tiny.toml")
    with open(suite, "w") as f:
        f.write(TINY_SUITE)
    cases = os.path.join(tmp, "cases")
    run(args, "export", "--suite", suite, "--out", cases, expect=0)
    outputs = os.path.join(tmp, "outputs")
    os.makedirs(outputs)

    def hostile_copy(name, file, make):
        d = os.path.join(tmp, name)
        shutil.copytree(cases, d)
        os.remove(os.path.join(d, file))
        make(os.path.join(d, file))
        return d

    for how, make, kind in (("fifo", os.mkfifo, "a FIFO"), ("dir", os.mkdir, "a directory")):
        d = hostile_copy("manifest_" + how, "manifest.json", make)
        refused(args, f"--cases: cannot read '{d}/manifest.json': not a regular file ({kind})", "score", "--cases", d,
                "--outputs", outputs)
        d = hostile_copy("case_" + how, "0000.safetensors", make)
        refused(args, f"--cases: {d}/manifest.json: files[0]: cannot read '{d}/0000.safetensors': not a regular "
                f"file ({kind})", "score", "--cases", d, "--outputs", outputs)
        o = os.path.join(tmp, "outputs_" + how)
        os.makedirs(o)
        make(os.path.join(o, "0000.safetensors"))
        refused(args, f"--outputs: output of {cases}/manifest.json: files[0]: cannot read '{o}/0000.safetensors': "
                f"not a regular file ({kind})", "score", "--cases", cases, "--outputs", o)
    o = os.path.join(tmp, "outputs_sparse")
    os.makedirs(o)
    with open(os.path.join(o, "0000.safetensors"), "w") as f:
        f.truncate(10 << 30)  # sparse 10 GiB
    refused(args, "is 10737418240 bytes, over the", "score", "--cases", cases, "--outputs", o)
    refused(args, "limit for an output file of this case", "score", "--cases", cases, "--outputs", o)

    # --resume: results.jsonl and run.json; `pacheck report` and `merge`: report.json.
    d = os.path.join(tmp, "reports")
    run(args, *SMALL, "--report-dir", d, expect=0)
    keep = os.path.join(tmp, "results.keep")
    shutil.move(os.path.join(d, "results.jsonl"), keep)
    os.mkfifo(os.path.join(d, "results.jsonl"))
    refused(args, "results.jsonl': not a regular file (a FIFO)", *SMALL, "--resume", d)
    os.remove(os.path.join(d, "results.jsonl"))
    shutil.move(keep, os.path.join(d, "results.jsonl"))
    shutil.move(os.path.join(d, "run.json"), keep)
    os.mkdir(os.path.join(d, "run.json"))
    refused(args, "run.json': not a regular file (a directory)", *SMALL, "--resume", d)
    os.rmdir(os.path.join(d, "run.json"))
    shutil.move(keep, os.path.join(d, "run.json"))
    r = os.path.join(tmp, "report_fifo")
    shutil.copytree(d, r)
    os.remove(os.path.join(r, "report.json"))
    os.mkfifo(os.path.join(r, "report.json"))
    refused(args, "report.json': not a regular file (a FIFO)", "report", r, "--out", os.path.join(tmp, "r.html"))
    refused(args, "report.json': not a regular file (a FIFO)", "merge", r, "--out", os.path.join(tmp, "merged"))
    refused(args, "cannot read bench results '/dev/zero': not a regular file", "report", d, "--out",
            os.path.join(tmp, "r.html"), "--bench", "/dev/zero")


def scenario_preflight(args, tmp):
    """Every output path is checked before the first cell (issue 21), by trying it, not by access() (which
    says yes to root on /proc): an unwritable --json of run fails at once with exit 2 and leaves the
    earlier run's report directory as it was; score's --json is checked before any output is scored.
    Before: run found /proc/... unwritable only after every cell, with the reports already deleted, and score
    never checked --json before scoring."""
    d = os.path.join(tmp, "kept")
    run(args, *SMALL, "--report-dir", d, expect=0)
    before = snapshot(d)
    for bad in ("/proc/pacheck-preflight.json", os.path.join(tmp, "no", "dir", "r.json"), tmp):
        p = refused(args, "--json: cannot write", *SMALL, "--report-dir", d, "--json", bad)
        check("passed," not in p.stdout and " | suite " not in p.stdout, f"--json {bad}: the run started:\n{p.stdout}")
        check(snapshot(d) == before, f"--json {bad}: the earlier run's reports changed")
    suite = os.path.join(tmp, "tiny.toml")
    with open(suite, "w") as f:
        f.write(TINY_SUITE)
    cases, outputs = os.path.join(tmp, "cases"), os.path.join(tmp, "outputs")
    run(args, "export", "--suite", suite, "--out", cases, expect=0)
    os.makedirs(outputs)
    for bad in ("/proc/pacheck-preflight.json", os.path.join(tmp, "no", "dir", "s.json")):
        p = refused(args, "--json: cannot write", "score", "--cases", cases, "--outputs", outputs, "--json", bad)
        check("| score" not in p.stdout and "failed" not in p.stdout, f"score --json {bad} scored first:\n{p.stdout}")
    # A good --json is written (through a temporary file: none is left beside it).
    good = os.path.join(tmp, "score.json")
    run(args, "score", "--cases", cases, "--outputs", outputs, "--json", good, expect=1)
    check(load(good)["suite"] == "tiny", "score --json did not write the report")
    check(not [f for f in os.listdir(tmp) if ".tmp" in f or f.startswith(".pacheck-probe")],
          f"temporary files left: {os.listdir(tmp)}")


def write_zero_output(path, entry):
    """A foreign runner's output file for manifest entry `entry`, written without NumPy: one tensor "out" of
    the entry's output dtype and shape, all zero bytes (a wrong answer: every such cell fails)."""
    out = entry["output"]
    size = {"F32": 4, "F16": 2, "BF16": 2}[out["dtype"]]
    n = size
    for d in out["shape"]:
        n *= d
    header = json.dumps({"out": {"dtype": out["dtype"], "shape": out["shape"], "data_offsets": [0, n]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bytes(n))


def scenario_score_reports(args, tmp):
    """`score --report-dir` (issue 17): the reports of `run --report-dir` for replayed outputs, results.jsonl
    written as cells are scored, report.json agreeing with `score --json`, readable by `pacheck report`; a
    runner's decline note counted as declined; a broken export refused (exit 2) before an earlier report
    directory is touched. Before: score had no --report-dir."""
    cases, outs, d = (os.path.join(tmp, n) for n in ("cases", "outs", "reports"))
    run(args, "export", "--suite", "tail-poison", "--filter", " bf16 ", "--out", cases, expect=0)
    os.makedirs(outs)
    files = load(os.path.join(cases, "manifest.json"))["files"]
    for e in files:
        if e["case"] != files[0]["case"]:
            write_zero_output(os.path.join(outs, e["output"]["file"]), e)
        else:  # every file of one case declined: its cells are declined
            with open(os.path.join(outs, e["output"]["file"] + ".declined"), "w") as f:
                f.write("this runner takes no such call\n")
    j = os.path.join(tmp, "score.json")
    p = run(args, "score", "--cases", cases, "--outputs", outs, "--report-dir", d, "--json", j, expect=1)
    closing = f"reports in {d}: results.jsonl report.json junit.xml summary.md report.html\n"
    check(p.stdout.endswith(closing), f"closing line is not {closing!r}: {p.stdout[-300:]!r}")
    report = check_reports_dir(d)
    check(os.path.isfile(os.path.join(d, "report.html")), f"{d}: no report.html")
    scored = load(j)
    key = lambda r: (r["cell"], r["verdict"], r["detail"])
    check(sorted(map(key, report["results"])) == sorted(map(key, scored["results"])),
          "report.json and score --json disagree")
    declined = [r for r in report["results"] if r["verdict"] == "declined"]
    check(declined and all("declined by the runner: this runner takes no such call" in r["detail"] for r in declined),
          f"the decline note did not decline its case's cells: {declined[:2]}")
    check(report["summary"]["declined"] == len(declined), "summary.declined does not count the declines")
    run_json = load(os.path.join(d, "run.json"))
    check(run_json.get("score", {}).get("cases") == os.path.abspath(cases), f"run.json lacks the score inputs: {run_json}")
    # No --negative-control: the reports say that no control ran (summary.md said every one was caught).
    with open(os.path.join(d, "summary.md")) as f:
        check(NONE_RAN in f.read(), "score's summary.md does not say that no negative control ran")
    # The console's hint names score's own way to add a control, not run's option.
    check("`pacheck score --control-outputs DIR`" in p.stdout and "--with-controls" not in p.stdout,
          f"score's console hint: {[l for l in p.stdout.splitlines() if NONE_RAN in l]}")
    run(args, "report", d, expect=0)
    # A broken export is refused before the report directory is started: the earlier reports stay.
    before = snapshot(d)
    os.remove(os.path.join(cases, "manifest.json"))
    refused(args, "--cases: cannot read", "score", "--cases", cases, "--outputs", outs, "--report-dir", d)
    check(snapshot(d) == before, "a refused score changed the earlier reports")


def scenario_lock(args, tmp):
    """Two runs into one report directory (issue 21): the second fails at once (exit 2) naming the directory
    and the holder's pid, and changes nothing there; so do --resume and merge --out into it. The lock goes
    with its holder, even one killed with SIGKILL. Before: both ran and wrote every cell twice."""
    d = os.path.join(tmp, "shared")
    cmd = [args.pacheck, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "gate", "-j1",
           "--report-dir", d]
    print("+", " ".join(cmd), "(held while a second run tries)", flush=True)
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = os.path.join(d, "results.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and first.poll() is None and not (os.path.exists(results) and os.path.getsize(results)):
        time.sleep(0.02)
    check(first.poll() is None, f"the first run ended (exit {first.returncode}) before the second could start")
    try:
        want = f"report directory '{d}' is in use by another pacheck run (pid {first.pid})"
        refused(args, want, *SMALL, "--report-dir", d)
        refused(args, want, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "gate", "-j1",
                "--resume", d)
        other = os.path.join(tmp, "other")
        run(args, *SMALL, "--report-dir", other, expect=0)
        refused(args, want, "merge", other, "--out", d)
        check(first.poll() is None, "the first run ended while the others tried")
        lines = read_jsonl(results)
        check(len({(r["kernel"], r["cell"]) for r in lines}) == len(lines), "a cell was written twice")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    run(args, *SMALL, "--report-dir", d, expect=0)  # released with its killed holder
    check_reports_dir(d)


def scenario_resume_check(args, tmp):
    """--resume checks each line of results.jsonl against the run's plan (issue 21): a line of a cell the
    plan does not hold is reported (line number, kernel, cell), dropped from the file and not counted; two
    lines for one cell are an error naming both line numbers (exit 2, nothing changed); a malformed line is
    an error naming its number. Before: foreign lines were counted as finished and kept, and an appended
    duplicate with verdict fail won (exit 1)."""
    d = os.path.join(tmp, "reports")
    run(args, *SMALL, "--report-dir", d, expect=0)
    results = os.path.join(d, "results.jsonl")
    lines = open(results).read().splitlines(keepends=True)
    check(len(lines) == 16, f"{len(lines)} lines")
    foreign = json.loads(lines[0])
    foreign["cell"] = re.sub(r" ctx\d+ ", " ctx99 ", foreign["cell"])  # a length the suite does not have
    with open(results, "a") as f:
        f.write(json.dumps(foreign) + "\n")
    p = run(args, *SMALL, "--resume", d, expect=0)
    check("16 finished cells in results.jsonl are not run again" in p.stdout, p.stdout[-2000:])
    check(f"1 lines of results.jsonl are not cells of this run and were dropped, not counted: line 17: "
          f"cpu.reference '{foreign['cell']}'" in p.stdout, f"the foreign line is not reported:\n{p.stdout[-2000:]}")
    check(open(results).read() == "".join(lines), "results.jsonl does not hold exactly the run's 16 lines")
    check(len(check_reports_dir(d)["results"]) == 16, "report.json does not hold 16 results")

    dup = json.loads(lines[0])
    dup["verdict"] = "fail"
    with open(results, "a") as f:
        f.write(json.dumps(dup) + "\n")
    before = snapshot(d)
    refused(args, f"results.jsonl:17: a second result for cpu.reference '{dup['cell']}' (the first is line 1)", *SMALL,
            "--resume", d)
    check(snapshot(d) == before, "a refused resume changed the report directory")

    with open(results, "w") as f:
        f.writelines(lines[:4] + ["{not json\n"] + lines[4:])
    refused(args, "results.jsonl:5: malformed result line", *SMALL, "--resume", d)


def numpy_python():
    """The first of this Python, python3 on PATH and Debian's /usr/bin/python3 that imports NumPy (what
    examples/python/runner.py computes with), or None."""
    for cand in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if cand and os.path.exists(cand) and subprocess.run([cand, "-c", "import numpy"], capture_output=True).returncode == 0:
            return cand
    return None


NONE_RAN = "negative controls: none ran, so this run does not show that its checks can fail here"


def format_texts(args, d, sel):
    """Every format `pacheck list formats` names, as its reader gets it for the run of `sel` that wrote the
    report directory `d`: the file there, or stdout of `--format NAME`."""
    texts = {}
    for line in run(args, "list", "formats", expect=0).stdout.splitlines():
        name, file = line.split()[:2]
        if file == "(stdout)":
            texts[name] = run_stdout(args, "run", *sel, "--format", name).stdout
        else:
            with open(os.path.join(d, file)) as f:
                texts[name] = f.read()
    return texts


def verdicts_of(line):
    """The counts of a format's "verdicts: ..." line (console, TAP, GitHub) or sentence (summary.md,
    report.html), without the sentence's full stop and any markup after it."""
    return re.split(r"\.?(?:<|$)", html.unescape(line.split("erdicts: ", 1)[1]), maxsplit=1)[0]


def scenario_controls_words(args, tmp):
    """Every format says which negative controls ran, in the console's words (issue 43): a run of a kernel
    under test alone says none ran and never that every control was caught (summary.md and report.html did);
    beside cpu.vector_v, every format names it with its caught, missed and not-run cells."""
    sel = ["--suite", "tail-poison", "--kernel", "cpu.reference", "--filter", "h32/8 .* bf16 ", "-j2"]
    d = os.path.join(tmp, "alone")
    run(args, "run", *sel, "--report-dir", d, expect=0)
    texts = format_texts(args, d, sel)
    check({"console", "json", "junit", "markdown", "html", "tap", "github"} <= set(texts), f"formats: {sorted(texts)}")
    for name, text in texts.items():
        check(NONE_RAN in text, f"{name}: does not say that no negative control ran:\n{text[-2000:]}")
        for line in (l for l in text.splitlines() if "erdicts: " in l):
            check(verdicts_of(line) == "8 pass", f"{name}: verdicts line {line!r}")
        check("every negative control was caught" not in text, f"{name}: claims a negative control that did not run")
    summary = load(os.path.join(d, "report.json"))["summary"]
    check(summary["negative_controls"]["statement"] == NONE_RAN and summary["meaning"] == "every cell passed",
          f"report.json summary: {summary}")
    sel += ["--kernel", "cpu.vector_v"]
    d = os.path.join(tmp, "beside")
    run(args, "run", *sel, "--report-dir", d, expect=0)
    caught = "negative controls: 1 ran; caught: cpu.vector_v; cells: 2 caught, 0 missed, 6 not run"
    for name, text in format_texts(args, d, sel).items():
        check(caught in text, f"{name}: does not name the control and its counts ({caught!r}):\n{text[-2000:]}")
        check(NONE_RAN not in text, f"{name}: says no control ran beside cpu.vector_v")
        # The cells per verdict: the kernel under test's apart from the control's, so the control's caught
        # failures never read as the kernel's (the line said "2 poisoned, 6 not_run, 8 pass" beside "0 failed").
        for line in (l for l in text.splitlines() if "erdicts: " in l):
            tested, _, controls = verdicts_of(line).partition("; negative controls: ")
            check(tested == "8 pass" and "6 not_run" in controls and "pass" not in controls,
                  f"{name}: the verdicts line does not keep the control's cells apart: {line!r}")


def scenario_controls_summary(args, tmp):
    """A run with a negative control: the console lists the kernel under test's cells and counts the
    control's caught and not-run cells in one line and its row of the closing table; junit.xml has one
    testcase for it and no skip per not_run cell, TAP one point, the GitHub annotations none, report.html
    no panel and no not_run cell; report.json and results.jsonl keep every cell, and verify, --resume, merge
    and report read them as before."""
    # 8 small cells x cpu.reference and the negative control cpu.vector_v (2 caught, 6 not run); a suite
    # file, not a --filter, as `pacheck verify` accepts no filtered run.
    suite = os.path.join(tmp, "small.toml")
    with open(suite, "w") as f:
        f.write('name = "controls-small"\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\nblock_sizes = 16\ndtypes = "bf16"\n'
                'seq_lens = [17, 32]\nfaults = ["clean", "K:nan@tail", "V:nan@tail", "K+V:nan@tail"]\n')
    sel = ["--suite", suite, "--kernel", "cpu.reference", "--kernel", "cpu.vector_v", "-j2"]
    d = os.path.join(tmp, "rep")
    p = run(args, "run", *sel, "--report-dir", d, expect=0)
    report = check_reports_dir(d)
    check(len(report["results"]) == 16 and len(read_jsonl(os.path.join(d, "results.jsonl"))) == 16,
          "report.json and results.jsonl do not keep every cell of both kernels")
    k = {x["kernel"]: x for x in report["kernels"]}["cpu.vector_v"]
    check(k["caught"] > 0 and k["not_run"] > 0 and k["missed"] == 0, f"cpu.vector_v: {k}")
    # The rows (stderr's [progress] lines, which name running cells, are merged into p.stdout).
    lines = [line for line in p.stdout.splitlines() if not line.startswith("[progress]")]
    rows = [line for line in lines if " seed7 " in line]
    check(len(rows) == 8 and all(line.startswith("cpu.reference ") for line in rows),
          f"console: {len(rows)} rows, want cpu.reference's 8 only:\n{p.stdout}")
    counted = (f"{k['caught'] + k['not_run']} cells of negative controls are counted, not listed ({k['caught']} caught, "
               f"{k['not_run']} not run): each control's counts are in the table below; every cell is in "
               f"{d}/results.jsonl and {d}/report.json")
    check(counted in lines, f"console: no line {counted!r}:\n{p.stdout}")
    table = re.compile(rf"cpu\.vector_v +0 +0 +0 +{k['caught']} +0 +{k['not_run']}  caught$")
    check(sum(1 for line in lines if table.match(line)) == 1, f"console: the control's table row:\n{p.stdout}")
    p = run(args, "run", *sel, "--quiet", expect=0)
    check(not any(" seed7 " in line and not line.startswith("[progress]") for line in p.stdout.splitlines()),
          f"--quiet prints rows:\n{p.stdout}")
    check(f"{k['caught'] + k['not_run']} cells of negative controls are counted, not listed" in p.stdout and
          "--report-dir DIR or --json FILE keeps every cell" in p.stdout, f"--quiet: the counted line:\n{p.stdout}")
    root = ET.parse(os.path.join(d, "junit.xml")).getroot()
    check(int(root.get("skipped")) == 0 and int(root.get("tests")) == 8 + 1 + len(root.findall("testsuite[@name='pacheck.checks']/testcase")),
          f"junit.xml: tests={root.get('tests')} skipped={root.get('skipped')}")
    points = parse_tap(run_stdout(args, "run", *sel, "--format", "tap", expect=0).stdout)
    check(not any(desc.startswith("cpu.vector_v h") for _, desc, _, _ in points), "tap: a point per control cell")
    notes = parse_annotations(run_stdout(args, "run", *sel, "--format", "github", expect=0).stdout)
    check([kind for kind, _, _ in notes] == ["notice"], f"github: {notes}")
    html = open(os.path.join(d, "report.html")).read()
    check('data-kernel="cpu.vector_v"' not in html and 'data-verdict="not_run"' not in html,
          "report.html draws the negative control's cells")
    check('<td class="mono">cpu.vector_v</td>' in html, "report.html has no row for the negative control")
    # The machine-readable files are whole: verify, a resume of the finished run, merge and report read them.
    run(args, "verify", d, "--suite", suite, expect=0)
    p = run(args, "run", *sel, "--resume", d, expect=0)
    check("16 finished cells in results.jsonl are not run again" in p.stdout and counted in p.stdout.splitlines(),
          f"--resume: {p.stdout[-2000:]}")
    check(comparable(check_reports_dir(d)) == comparable(report), "the resumed report differs")
    run(args, "verify", d, "--suite", suite, expect=0)
    m = os.path.join(tmp, "merged")
    run(args, "merge", d, "--out", m, expect=0)
    check(comparable(check_reports_dir(m)) == comparable(report), "the merged report differs")
    out = os.path.join(tmp, "again.html")
    run(args, "report", d, "--out", out, expect=0)
    check(open(out).read() == html, "pacheck report renders another page from report.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["junit", "kill_resume", "shards", "gate_sh", "plugin", "bad_input", "selftest",
                                         "symlinks", "input_files", "preflight", "lock", "resume_check",
                                         "score_reports", "controls_words", "controls_summary"])
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_cli_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
