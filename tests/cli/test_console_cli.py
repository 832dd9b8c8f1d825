#!/usr/bin/env python3
"""CLI-level tests of an interrupted run and of the console as a CI log shows it (issue 21), run by ctest
against the built pacheck binary.

usage: test_console_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB]

Scenarios:
  signals     SIGINT during a run with a report directory: exit 130, what finished and the exact --resume
              command printed, no reports written; that command completes the run with the results of an
              uninterrupted one. SIGTERM: exit 143; without a report directory the message says how to get
              one; a results.jsonl that cannot grow is reported as lost results and --resume completes the
              run; a plugin kernel hanging in its isolated child does not hold the run (it ends at once)
  console     rows in plan order whatever -j (two -j4 runs print the same rows, in report.json's order), each
              row ends with the whole cell id (fault included, no '~'), which `pacheck repro` takes as it
              stands; the title counts cells and results as report.json does; NaN rows show nan, not
              max_abs 0; the output ends with every failure and its repro line
  quiet       --quiet prints the failing rows only, then the summary and the failure list
  fail_fast   --fail-fast stops after the first failing result: exit 1, says it stopped early, keeps the
              finished results for --resume, which completes the run
  repeat      --repeat 3 runs each result 3 times and says whether any verdict differed; --repeat 0 and
              --repeat with --resume are refused (exit 2)
  score_fail_fast
              score --fail-fast stops after the first failing result (a declined case before it does not stop
              it): exit 1, says so, keeps the scored results in --report-dir's results.jsonl, writes no report
  score_repeat
              score --repeat 3 scores each result 3 times as run --repeat does: rows of the first repeat,
              results.jsonl and report.json holding each result once, verdicts of one score; --repeat 0 refused
  progress_interval
              --progress-interval 0, negative, 'abc', 'inf', 'nan' and '' are exit 2 naming the option, on run
              and score, before anything is written; a small interval prints [progress] lines on a non-tty
              (done/total, the cells running, the time elapsed); 'off' prints none
  repro_flags the repro lines of a run, a report and fuzz under --tolerance calibrated --oracle-precision f32
              carry those flags and reproduce the run's verdict and limit (without them, another limit)
  repro_mla   repro of an MLA cell places each of its worst elements in the v_head_dim-wide output row
  fuzz_mla    fuzz on an MLA kernel draws MLA cases: the five properties that apply hold on cpu.mla_online;
              cpu.mla_v_tail fails tail-poison on an MLA cell whose repro line is poisoned; a property that does
              not apply to an MLA kernel is refused (exit 2) naming it
  list_cells  `pacheck list cells --suite S [--kernel K] [--filter RE]`: one pasteable id per line, the ids a
              run of the same selection reports, in the same order; its options refused for other lists
"""
import argparse
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports_cli import (check, check_reports_dir, comparable, fail, load, read_jsonl, refused, run,  # noqa: E402
                              write_zero_output)

TAIL = ["--suite", "tail-poison", "--kernel", "cpu.reference", "--kernel", "cpu.vector_v"]
FAILING = ["--suite", "tail-poison", "--kernel", "cpu.reference", "--kernel", "planted.drop_last_token",
           "--filter", " bf16 "]
ROW = re.compile(r"^(\S+)\s+(\S+(?: \((?:caught|MISSED)\))?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(straddle|aligned)\s+(.+)$")


def rows(text):
    """The table rows of a console run: (kernel, verdict, rel_linf, max_abs, mean_abs, margin, length, cell)."""
    out = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m and m.group(1) != "kernel":
            cell = m.group(8).split("  # ")[0]
            out.append((*m.groups()[:7], cell))
    return out


def start(args, *cmd, stdout=subprocess.PIPE):
    full = [args.pacheck, *cmd]
    print("+", " ".join(full), "(signalled)", flush=True)
    # SIGINT stays default in the child even where the test itself was started with it ignored.
    return subprocess.Popen(full, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_lines(p, path, n, deadline_s=300):
    deadline = time.time() + deadline_s
    lines = 0
    while lines < n and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
        if os.path.exists(path):
            with open(path, "rb") as f:
                lines = f.read().count(b"\n")
    check(p.poll() is None, f"the run ended (exit {p.returncode}) before it could be signalled")


def scenario_signals(args, tmp):
    a, b = os.path.join(tmp, "interrupted"), os.path.join(tmp, "whole")
    sel = [*TAIL, "-j1"]
    whole = run(args, "run", *sel, "--report-dir", b, expect=0)
    planned = len(check_reports_dir(b)["results"])
    p = start(args, "run", *sel, "--report-dir", a)
    results = os.path.join(a, "results.jsonl")
    wait_for_lines(p, results, 5)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    print(out[-3000:])
    check(p.returncode == 130, f"exit {p.returncode} after SIGINT, want 130")
    done = read_jsonl(results)
    check(5 <= len(done) < planned, f"{len(done)} of {planned} cells in results.jsonl after SIGINT")
    m = re.search(r"pacheck: interrupted by SIGINT: (\d+) of (\d+) results finished \(([^)]*)\); no further cell was "
                  r"started", out)
    check(m, "no 'interrupted by SIGINT: N of M results finished (...)' line")
    check(int(m.group(1)) == len(done) and int(m.group(2)) == planned,
          f"says {m.group(1)} of {m.group(2)}, results.jsonl holds {len(done)} of {planned}")
    check(re.fullmatch(r"(\d+ [a-z_]+)(, \d+ [a-z_]+)*", m.group(3)), f"verdict counts: {m.group(3)!r}")
    check(sum(int(x.split()[0]) for x in m.group(3).split(", ")) == len(done), "verdict counts do not add up")
    check("STOPPED EARLY" in out, "the console summary does not say the run stopped early")
    check(not os.path.exists(os.path.join(a, "report.json")), "an interrupted run wrote report.json")
    lines = out.splitlines()
    at = [i for i, line in enumerate(lines) if "Complete the run with:" in line]
    check(at and at[0] + 1 < len(lines), "no resume command printed")
    resume = shlex.split(lines[at[0] + 1])
    check(resume == [args.pacheck, "run", *sel, "--resume", a], f"resume command {resume}")
    print("+", " ".join(resume), flush=True)
    q = subprocess.run(resume, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    check(q.returncode == 0, f"the printed resume command exits {q.returncode}:\n{q.stdout[-3000:]}")
    check(f"{len(done)} finished cells in results.jsonl are not run again" in q.stdout, "resume did not skip")
    check(comparable(check_reports_dir(a)) == comparable(check_reports_dir(b)),
          "the resumed report differs from the uninterrupted one")
    check(len(read_jsonl(results)) == planned, "results.jsonl does not hold each cell once")
    # The console of the resumed run lists the remaining rows, in order, after the ones already printed (a
    # row per result of the kernel under test: the negative control's are counted in the closing table).
    listed = sum(1 for r in check_reports_dir(b)["results"] if r["kernel"] == "cpu.reference")
    listed_done = sum(1 for r in done if r["kernel"] == "cpu.reference")
    check(len(rows(q.stdout)) == listed - listed_done, "the resumed run does not print the remaining rows")
    check(len(rows(whole.stdout)) == listed, "the uninterrupted run does not print a row per result")

    # SIGTERM without a report directory: 143, and how to get a resumable run.
    p = start(args, "run", *sel)
    time.sleep(1.0)
    check(p.poll() is None, "the run ended before SIGTERM")
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    check(p.returncode == 143, f"exit {p.returncode} after SIGTERM, want 143\n{out[-2000:]}")
    check("interrupted by SIGTERM" in out and "run with --report-dir DIR to keep them, and complete a stopped run "
          "with --resume DIR" in out, f"no advice without a report directory:\n{out[-2000:]}")

    # results.jsonl that cannot grow (a full disk; here RLIMIT_FSIZE, SIGXFSZ ignored): the stop says that
    # results were lost, and --resume (without the limit) completes the run from the torn file.
    e = os.path.join(tmp, "full")

    def small_files():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))

    full = [args.pacheck, "run", *sel, "--report-dir", e]
    print("+", " ".join(full), "(file size limit 4000 bytes, signalled)", flush=True)
    p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=small_files)
    results = os.path.join(e, "results.jsonl")
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None and not (os.path.exists(results) and os.path.getsize(results) >= 4000):
        time.sleep(0.01)
    time.sleep(1.0)  # a few more cells finish and cannot be appended
    check(p.poll() is None, f"the run ended (exit {p.returncode}) before it could be signalled")
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    check(p.returncode == 130, f"full results.jsonl: exit {p.returncode}\n{out[-2000:]}")
    check(re.search(r"pacheck: error: cannot append to '[^']*results.jsonl': File too large: the results after it were "
                    r"not kept", out), f"full results.jsonl: the loss is not reported\n{out[-2000:]}")
    run(args, "run", *sel, "--resume", e, expect=0)
    check(len(read_jsonl(results)) == planned, "--resume after a full results.jsonl did not complete the run")

    # An isolated plugin kernel hanging in a child (the ctx33 cell of tests/plugins/misbehaving.c): the run
    # must end at once, the child killed, not after the 600 s cell timeout.
    check(args.plugin and os.path.exists(args.plugin), "--plugin: planted plugin not built")
    c = os.path.join(tmp, "iso")
    suite = os.path.join(args.source, "tests", "cli", "isolation.toml")
    p = start(args, "run", "--plugin", args.plugin, "--kernel", "planted.hang", "--suite", suite, "-j1",
              "--cell-timeout", "600", "--report-dir", c)
    wait_for_lines(p, os.path.join(c, "results.jsonl"), 1)
    time.sleep(0.5)  # the next cell, ctx33, hangs
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    print(out[-2000:])
    check(p.returncode == 143, f"hung isolated cell: exit {p.returncode} after SIGTERM")
    check(time.time() - t0 < 30, "hung isolated cell: the run took more than 30 s to stop")
    check("Complete the run with:" in out, "hung isolated cell: no resume command")
    check(all(r["verdict"] == "pass" for r in read_jsonl(os.path.join(c, "results.jsonl"))),
          "the killed child's cell was recorded as a result")


def scenario_console(args, tmp):
    d = os.path.join(tmp, "r")
    first = run(args, "run", *TAIL, "-j4", "--report-dir", d, expect=0)
    second = run(args, "run", *TAIL, "-j4", expect=0)
    report = check_reports_dir(d)
    r1, r2 = rows(first.stdout), rows(second.stdout)
    # A row per cell of the kernel under test; the negative control's caught and not-run cells are counted
    # in its row of the closing table, not listed.
    listed = [x for x in report["results"] if x["kernel"] == "cpu.reference"]
    check(len(r1) == len(listed), f"{len(r1)} rows for {len(listed)} results of the kernel under test")
    check([(r[0], r[7]) for r in r1] == [(r[0], r[7]) for r in r2], "two -j4 runs print their rows in different orders")
    check([(r[0], r[7]) for r in r1] == [(x["kernel"], x["cell"]) for x in listed],
          "rows are not in report.json's (plan) order, or a row's cell id is not the whole id")
    check("~" not in first.stdout, "an id is cut with '~'")
    check(all(r[7].endswith(x["fault"]) for r, x in zip(r1, listed)), "a row's id lacks the fault")
    cells = len({x["cell"] for x in report["results"] if x["kernel"] == "cpu.reference"})
    results = len(report["results"])
    title = first.stdout.splitlines()[0]
    check(f"suite tail-poison: {cells:,} cells x 2 kernels = {results:,} results" in title, f"title: {title}")
    # NaN outputs (a softmax without its max, overflowing on far-above logits): the error columns say nan,
    # never a number measured over the finite elements only.
    nan_run = run(args, "run", "--suite", "gate", "--kernel", "planted.softmax_no_max", "--filter", "far_above.*clean",
                  expect=1)
    nan_rows = [r for r in rows(nan_run.stdout) if r[1].startswith("poisoned")]
    check(nan_rows, f"no poisoned row of planted.softmax_no_max:\n{nan_run.stdout}")
    check(all(r[2] == r[3] == r[4] == "nan" for r in nan_rows), f"a NaN row shows numbers: {nan_rows[0]}")
    # A row's id pastes into repro as it is.
    kernel, cell = nan_rows[0][0], nan_rows[0][7]
    rep = run(args, "repro", cell, "--kernel", kernel)
    check(rep.returncode == 1 and "verdict   poisoned" in rep.stdout, f"repro of a pasted row id:\n{rep.stdout[-1500:]}")

    # A failing run ends with its failures, each with the command that reruns it.
    f = os.path.join(tmp, "f")
    p = run(args, "run", *FAILING, "-j3", "--report-dir", f, expect=1)
    rep = check_reports_dir(f)
    failing = [x for x in rep["results"] if x["verdict"] not in ("pass", "declined", "not_run")]
    check(failing, "the planted kernel failed no cell")
    # Each line invokes pacheck as this run was invoked (ctest gives the binary's path), so it pastes as it is.
    want = [f"{shlex.quote(args.pacheck)} repro {shlex.quote(x['cell'])} --kernel {x['kernel']}" for x in failing]
    tail = p.stdout.rstrip("\n").splitlines()
    check(tail[-1].startswith("reports in "), f"last line: {tail[-1]}")
    tail = tail[:-1]  # the closing "reports in DIR: ..." line of --report-dir follows the failure list
    header = [i for i, line in enumerate(tail) if line.startswith("failures (")]
    check(header, "no failure list")
    check(tail[header[-1]] == f"failures ({len(failing)}), each with the command that reruns it:",
          f"failure list header: {tail[header[-1]]}")
    listed = [line.split(None, 1)[1] for line in tail[header[-1] + 1:]]
    check(listed == want, f"the failure list is not the last block, or differs:\n{listed[:3]}\nwant\n{want[:3]}")
    back = subprocess.run(want[0], shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    check(back.returncode == 1, f"the listed repro line, pasted into a shell, does not reproduce the failure: exit "
                                f"{back.returncode}\n{back.stdout[-1500:]}")


def scenario_quiet(args, tmp):
    loud = run(args, "run", *FAILING, "-j2", expect=1)
    quiet = run(args, "run", *FAILING, "-j2", "--quiet", expect=1)
    all_rows, quiet_rows = rows(loud.stdout), rows(quiet.stdout)
    check(any(r[1] == "pass" for r in all_rows), "the loud run has no passing row")
    check(quiet_rows and all(r[1] not in ("pass", "declined", "not_run") for r in quiet_rows), f"--quiet rows: {quiet_rows[:3]}")
    check(quiet_rows == [r for r in all_rows if r[1] not in ("pass", "declined", "not_run") and "(caught)" not in r[1]],
          "--quiet does not print exactly the failing rows")
    for want in ("verdicts: ", "passed, ", "failures ("):
        check(want in quiet.stdout, f"--quiet lacks {want!r}")


def scenario_fail_fast(args, tmp):
    d = os.path.join(tmp, "ff")
    whole = run(args, "run", *FAILING, "-j1", expect=1)
    planned = len(rows(whole.stdout))
    p = run(args, "run", *FAILING, "-j1", "--fail-fast", "--report-dir", d, expect=1)
    m = re.search(r"stopped early \(--fail-fast\) after the first failure, planted.drop_last_token '([^']+)' \((\w+)\): "
                  r"(\d+) of (\d+) results finished", p.stdout)
    check(m, f"--fail-fast does not say it stopped early:\n{p.stdout[-2000:]}")
    done = read_jsonl(os.path.join(d, "results.jsonl"))
    check(int(m.group(3)) == len(done) < planned == int(m.group(4)), f"{m.group(3)} of {m.group(4)}, {len(done)} kept")
    check(not os.path.exists(os.path.join(d, "report.json")), "a stopped run wrote report.json")
    first_fail = [r for r in rows(whole.stdout) if r[0] == "planted.drop_last_token" and r[1] != "pass"][0]
    check(m.group(1) == first_fail[7], f"first failure {m.group(1)}, want {first_fail[7]}")
    run(args, "run", *FAILING, "-j1", "--resume", d, expect=1)
    check(len(read_jsonl(os.path.join(d, "results.jsonl"))) == planned, "--resume did not complete the run")


def scenario_repeat(args, tmp):
    sel = ["--suite", "tail-poison", "--kernel", "cpu.reference", "--filter", " bf16 ", "-j2"]
    d = os.path.join(tmp, "rep")
    p = run(args, "run", *sel, "--repeat", "3", "--report-dir", d, expect=0)
    report = check_reports_dir(d)
    n = len(report["results"])
    check(f"--repeat 3: each of {n} results ran 3 times; every verdict was the same each time" in p.stdout,
          f"no repeat summary:\n{p.stdout[-1500:]}")
    check(len(rows(p.stdout)) == n, "rows are not the first repeat's alone")
    check(len(read_jsonl(os.path.join(d, "results.jsonl"))) == n, "results.jsonl does not hold each result once")
    p = run(args, "run", *FAILING, "--repeat", "2", expect=1)
    check("--repeat 2: each of" in p.stdout and "failures (" in p.stdout, "a failing repeated run")
    run(args, "run", *sel, "--repeat", "0", expect=2)
    p = run(args, "run", *sel, "--repeat", "2", "--resume", d, expect=2)
    check("--repeat: not with --resume" in p.stdout, p.stdout[-500:])


def scenario_list_cells(args, tmp):
    p = run(args, "list", "cells", "--suite", "tail-poison", expect=0)
    ids = p.stdout.splitlines()
    suites = run(args, "list", "suites", expect=0).stdout
    m = re.search(r"^tail-poison\s+(\d+) cells", suites, re.M)
    check(m and int(m.group(1)) == len(ids) == len(set(ids)), f"{len(ids)} ids, list suites says {m and m.group(1)}")
    d = os.path.join(tmp, "r")
    run(args, "run", "--suite", "tail-poison", "--kernel", "cpu.reference", "--report-dir", d, expect=0)
    ran = [x["cell"] for x in load(os.path.join(d, "report.json"))["results"]]
    p = run(args, "list", "cells", "--suite", "tail-poison", "--kernel", "cpu.reference", expect=0)
    check(p.stdout.splitlines() == ran, "list cells --kernel differs from the ids a run reports")
    p = run(args, "list", "cells", "--suite", "tail-poison", "--kernel", "cpu.reference", "--filter", " bf16 .*V:nan",
            expect=0)
    some = p.stdout.splitlines()
    check(some and all(re.search(" bf16 .*V:nan", i) for i in some) and set(some) < set(ran), f"--filter: {some[:3]}")
    rep = run(args, "repro", some[0], "--kernel", "cpu.reference")
    check(rep.returncode == 0, f"a listed id does not paste into repro: exit {rep.returncode}")
    p = run(args, "list", "kernels", "--suite", "gate", expect=2)
    check("only for `pacheck list cells`" in p.stdout, p.stdout[-500:])
    run(args, "list", "cells", "--suite", "no-such-suite", expect=2)
    run(args, "list", "cells", "--kernel", "no.such.kernel", expect=2)
    # A filter that matches nothing is a usage error, as for `run`, not an empty list with exit 0.
    p = run(args, "list", "cells", "--suite", "tail-poison", "--filter", "NO-SUCH-CELL", expect=2)
    check("--filter: 'NO-SUCH-CELL' matches none" in p.stdout, p.stdout[-500:])


JUDGE = ["--tolerance", "calibrated", "--oracle-precision", "f32"]
JUDGE_TEXT = " ".join(JUDGE)


def repro_limit(args, line):
    """Runs a printed repro line (which starts with the binary under test, as the run was invoked): (verdict,
    limit text)."""
    argv = shlex.split(line)
    check(argv[:2] == [args.pacheck, "repro"], f"not a repro line of {args.pacheck}: {line}")
    p = run(args, *argv[1:])
    verdict = re.search(r"^verdict\s+(\S+)", p.stdout, re.M)
    limit = re.search(r"^rel_linf\s+\S+\s+limit (\S+)\s+margin", p.stdout, re.M)
    check(verdict and limit, f"repro printed no verdict or limit:\n{p.stdout[-1500:]}")
    return verdict.group(1), limit.group(1)


def scenario_repro_flags(args, tmp):
    d = os.path.join(tmp, "cal")
    sel = ["--suite", "boundary", "--kernel", "planted.exp2_no_log2e", "--filter", "ctx100 ", "-j2"]
    p = run(args, "run", *sel, *JUDGE, "--report-dir", d, expect=1)
    lines = [ln.split(None, 1)[1] for ln in p.stdout.splitlines() if f" {shlex.quote(args.pacheck)} repro " in ln]
    check(lines, f"no failure list:\n{p.stdout[-1500:]}")
    check(all(ln.endswith(JUDGE_TEXT) for ln in lines), f"a repro line lacks '{JUDGE_TEXT}': {lines[0]}")
    # The line reproduces the verdict and the limit of report.json; the same line without the flags judges
    # under the default limits, a different one (so this test sees a line that drops them).
    report = load(os.path.join(d, "report.json"))
    check(report.get("judge_flags") == JUDGE_TEXT, f"report.json judge_flags: {report.get('judge_flags')!r}")
    cell = shlex.split(lines[0])[2]
    rec = next(r for r in report["results"] if r["cell"] == cell)
    verdict, limit = repro_limit(args, lines[0])
    check(verdict == rec["verdict"] and limit == f"{rec['limit']:.3e}",
          f"repro gave {verdict} at limit {limit}, the run {rec['verdict']} at {rec['limit']:.3e}")
    _, default_limit = repro_limit(args, lines[0][: -len(JUDGE_TEXT)])
    check(default_limit != limit, f"the default limit equals the calibrated one ({limit}): this cell cannot tell")
    # Every format with repro lines carries the flags; so do the re-rendered report and the fuzz replay line.
    for fmt_name, marker in (("tap", "  repro: "), ("github", "repro: ")):
        p = run(args, "run", *sel, *JUDGE, "--format", fmt_name, expect=1)
        got = [ln for ln in p.stdout.replace("%0A", "\n").splitlines() if marker in ln]
        check(got and all(JUDGE_TEXT in ln for ln in got), f"--format {fmt_name}: {got[:1]}")
    run(args, "report", d, expect=0)
    with open(os.path.join(d, "report.html")) as f:
        check(JUDGE_TEXT in f.read(), "report.html's repro lines lack the flags after `pacheck report`")
    p = run(args, "fuzz", "--kernel", "planted.exp2_no_log2e", "--property", "agreement", "--cases", "5",
            "--seed", "1", *JUDGE)
    fuzz_lines = [ln.strip().split(None, 1)[1] for ln in p.stdout.splitlines() if ln.strip().startswith("repro ")]
    check(fuzz_lines and fuzz_lines[0].endswith(JUDGE_TEXT), f"fuzz repro line: {fuzz_lines[:1]}\n{p.stdout[-800:]}")
    check(repro_limit(args, fuzz_lines[0])[0] == "fail", "the fuzz repro line does not reproduce the failure")
    for bad, msg in ((["--tolerance", "loose"], "--tolerance: 'loose'"), (["--multiple", "0"], "--multiple: 0"),
                     (["--oracle-precision", "f16"], "--oracle-precision: 'f16'")):
        p = run(args, "repro", cell, "--kernel", "cpu.reference", *bad, expect=2)
        check(msg in p.stdout, f"{bad}: {p.stdout[-300:]}")


def scenario_repro_mla(args, tmp):
    """repro of an MLA cell names each element by its place in the v_head_dim-wide output row, not the latent
    row: --top of every element lists each (head, dim) of 4 heads x 256 once."""
    cell = "h4/1 d576 bs32 bf16 ctx100 nhd seed7 scale=0.1352338 mla=512+64,v256 clean"
    p = run(args, "repro", cell, "--kernel", "cpu.mla_reference", "--top", "1024")
    check(re.search(r"^verdict\s+pass$", p.stdout, re.M) and "elements 1024" in p.stdout, p.stdout[-1500:])
    table = p.stdout.split("|diff|\n", 1)[-1].splitlines()
    places = [(int(r.split()[1]), int(r.split()[2])) for r in table if r.strip()]
    check(sorted(places) == [(h, d) for h in range(4) for d in range(256)],
          f"the rows are not each (head, dim) of 4 x 256 once: {len(places)} rows, dims up to "
          f"{max((d for _, d in places), default=-1)}, heads up to {max((h for h, _ in places), default=-1)}")


MLA_PROPERTIES = ["agreement", "tail-poison", "paging-invariance", "determinism", "batch-invariance"]


def scenario_fuzz_mla(args, tmp):
    """Before: fuzz refused every MLA kernel (exit 2: 'the generators draw multi-head cases only')."""
    p = run(args, "fuzz", "--kernel", "cpu.mla_online", "--cases", "10", "--seed", "1", expect=0)
    # Every case an MLA case: the coverage line's `mla` tag is on all of them.
    held = re.findall(r"^(\S+)\s+held\s+10\s.*\bmla 100%", p.stdout, re.M)
    check(held == MLA_PROPERTIES, f"held on MLA cases: {held}\n{p.stdout[-2000:]}")
    check("5 properties held, 0 not exercised, 0 failed" in p.stdout, p.stdout[-1000:])
    p = run(args, "fuzz", "--kernel", "cpu.mla_v_tail", "--cases", "40", "--seed", "5", expect=1)
    failed = re.findall(r"^(\S+)\s+FAILED\s", p.stdout, re.M)
    check(failed == ["tail-poison"], f"failed: {failed}\n{p.stdout[-3000:]}")
    line = re.search(r"^\s+repro\s+(\S+ repro .+)$", p.stdout, re.M)
    check(line and " mla=512+64" in line.group(1), f"repro line: {line and line.group(1)}\n{p.stdout[-2000:]}")
    check(repro_limit(args, line.group(1))[0] == "poisoned", f"{line.group(1)} is not poisoned")
    refused(args, "--property: property 'gqa-expansion' does not apply to cpu.mla_online, an MLA decode kernel",
            "fuzz", "--kernel", "cpu.mla_online", "--property", "gqa-expansion", "--cases", "1")


def score_inputs(args, tmp):
    """An export of tail-poison's bf16 cells and a foreign runner's outputs for it, written without NumPy: the
    first case's files declined (its cells are declined, not failed), every other output all zeros (each of
    its cells fails). Returns the score arguments."""
    cases, outs = os.path.join(tmp, "cases"), os.path.join(tmp, "outs")
    run(args, "export", "--suite", "tail-poison", "--filter", " bf16 ", "--out", cases, expect=0)
    os.makedirs(outs)
    files = load(os.path.join(cases, "manifest.json"))["files"]
    for e in files:
        if e["case"] == files[0]["case"]:
            with open(os.path.join(outs, e["output"]["file"] + ".declined"), "w") as f:
                f.write("this runner takes no such call\n")
        else:
            write_zero_output(os.path.join(outs, e["output"]["file"]), e)
    return ["score", "--cases", cases, "--outputs", outs]


def scenario_score_fail_fast(args, tmp):
    """Before: score had no --fail-fast (exit 2, an unknown option)."""
    score = score_inputs(args, tmp)
    whole = run(args, *score, "-j1", expect=1)
    whole_rows = rows(whole.stdout)
    planned = len(whole_rows)
    first = next(i for i, r in enumerate(whole_rows) if r[1] not in ("pass", "declined"))
    check(first > 0 and whole_rows[0][1] == "declined", f"the first case is not declined: {whole_rows[:2]}")
    d = os.path.join(tmp, "ff")
    p = run(args, *score, "-j1", "--fail-fast", "--report-dir", d, expect=1)
    m = re.search(r"stopped early \(--fail-fast\) after the first failure, foreign '([^']+)' \((\w+)\): "
                  r"(\d+) of (\d+) results finished", p.stdout)
    check(m, f"score --fail-fast does not say it stopped early:\n{p.stdout[-2000:]}")
    check(m.group(1) == whole_rows[first][7] and m.group(2) == whole_rows[first][1],
          f"first failure {m.group(1)} ({m.group(2)}), want {whole_rows[first][7]} ({whole_rows[first][1]})")
    done = read_jsonl(os.path.join(d, "results.jsonl"))
    # -j1: one cell at a time, so the cells before the first failure and that failure, no more.
    check(int(m.group(3)) == len(done) == first + 1 and int(m.group(4)) == planned,
          f"{m.group(3)} of {m.group(4)} finished, {len(done)} kept; want {first + 1} of {planned}")
    check(any(r["verdict"] == "declined" for r in done), "the declined cells before the failure were not kept")
    check(f"the scored results are kept in {os.path.join(d, 'results.jsonl')}" in p.stdout, p.stdout[-800:])
    check(not os.path.exists(os.path.join(d, "report.json")), "a stopped score wrote report.json")
    check(len(rows(p.stdout)) == first + 1, f"rows after the stop: {len(rows(p.stdout))}, want {first + 1}")
    p = run(args, *score, "-j2", "--fail-fast", expect=1)
    check("stopped early (--fail-fast)" in p.stdout and "score keeps no partial results without --report-dir"
          in p.stdout, f"score --fail-fast without --report-dir:\n{p.stdout[-1000:]}")


def scenario_score_repeat(args, tmp):
    """Before: score had no --repeat (exit 2, an unknown option)."""
    score = score_inputs(args, tmp) + ["-j2"]
    once_json, rep_json, d = (os.path.join(tmp, n) for n in ("once.json", "rep.json", "rep"))
    once = run(args, *score, "--json", once_json, expect=1)
    p = run(args, *score, "--repeat", "3", "--report-dir", d, "--json", rep_json, expect=1)
    report = check_reports_dir(d)
    n = len(report["results"])
    check(n == len(rows(once.stdout)) > 0, f"{n} results in report.json, {len(rows(once.stdout))} scored once")
    check(f"--repeat 3: each of {n} results ran 3 times; every verdict was the same each time" in p.stdout,
          f"no repeat summary:\n{p.stdout[-1500:]}")
    check(any("| score " in l and l.endswith("| --repeat 3") for l in p.stdout.splitlines()),
          f"the title does not say --repeat 3:\n{p.stdout[:600]}")
    check(rows(p.stdout) == rows(once.stdout), "rows are not the first repeat's alone, in the order of one score")
    log = read_jsonl(os.path.join(d, "results.jsonl"))
    check(len(log) == n == len({(r["kernel"], r["cell"]) for r in log}), "results.jsonl does not hold each result once")
    key = lambda r: (r["kernel"], r["cell"], r["verdict"], r["detail"])
    check(sorted(map(key, load(rep_json)["results"])) == sorted(map(key, load(once_json)["results"])),
          "the repeated score's verdicts differ from one score's")
    check(load(rep_json)["summary"] == load(once_json)["summary"], "the repeated score's summary differs")
    refused(args, "--repeat", *score, "--repeat", "0")
    refused(args, "--repeat", *score, "--repeat", "1001")


def scenario_progress_interval(args, tmp):
    """Before: neither run nor score had --progress-interval (exit 2 as an unknown option, not naming why)."""
    score = score_inputs(args, tmp)
    runs = ["run", "--device", "cpu", "--suite", "tail-poison", "--kernel", "cpu.reference", "--filter", " bf16 "]
    for cmd in (runs, score):
        d = os.path.join(tmp, "never")
        for bad in ("0", "-1", "-0.5", "abc", "inf", "nan", "", "5s"):
            flag = [f"--progress-interval={bad}"] if bad else ["--progress-interval", bad]
            # An empty value is refused by the one rule for every option (cli's refuse_empty_values), in its words.
            want = f"--progress-interval: '{bad}'" if bad else "--progress-interval: the value is empty"
            p = refused(args, want, *cmd, *flag, "--report-dir", d)
            check("| " not in p.stdout, f"{cmd[0]} --progress-interval={bad}: started before refusing:\n{p.stdout}")
            check(not os.path.exists(d), f"{cmd[0]} --progress-interval={bad}: wrote {d}")
    line = re.compile(r"^\[progress\] (\d+)/(\d+) results finished, (\d+) running(?: \((.+)\))?, "
                      r"(\d+s|\d+m\d\ds) elapsed$", re.M)
    for cmd in (runs + ["-j1"], score + ["-j1"]):
        p = run(args, *cmd, "--progress-interval", "0.01", expect=None)
        check(p.returncode in (0, 1), f"{cmd[0]}: exit {p.returncode}")
        found = line.findall(p.stdout)
        check(found, f"{cmd[0]} --progress-interval 0.01: no [progress] line:\n{p.stdout[-2000:]}")
        kernel = "cpu.reference" if cmd[0] == "run" else "foreign"
        total = len(rows(p.stdout))
        for done, of, running, ids, _ in found:
            # The cells running are those of the case being prepared and run (one case at a time at -j1).
            check(int(done) <= int(of) == total, f"{cmd[0]}: [progress] {done}/{of}, {total} rows")
            check(bool(ids) == (int(running) > 0), f"{cmd[0]}: {running} running, ids {ids!r}")
            check(not ids or ids.startswith(kernel + " '"), f"{cmd[0]}: running ids {ids!r}")
        check([int(f[0]) for f in found] == sorted(int(f[0]) for f in found), f"{cmd[0]}: done went down: {found}")
        p = run(args, *cmd, "--progress-interval", "off", expect=None)
        check("[progress]" not in p.stdout, f"{cmd[0]} --progress-interval off printed [progress]")


def main():
    scenarios = ["signals", "console", "quiet", "fail_fast", "repeat", "list_cells", "repro_flags", "repro_mla",
                 "fuzz_mla", "score_fail_fast", "score_repeat", "progress_interval"]
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=scenarios)
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_console_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
