#!/usr/bin/env python3
"""CLI-level tests of hostile and careless input, round 2 (issue 46), run by ctest against the built binary.

usage: test_hostile_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB]

Scenarios:
  empty_values    every option of every subcommand that takes a value, found in `pacheck SUB --help` (so a new
                  option is covered without editing this test), refuses '' (as `--opt ''` and `--opt=`): exit 2
                  naming the option; positionals too; `--bogus-global` before the subcommand is named
  in_process_exit a plugin kept in process (--no-isolate) that calls exit(0) in run() or supports(): exit 1,
                  saying so, the finished results kept in results.jsonl and the completion command printed
                  without --no-isolate; that command completes the run (the cells crash, isolated)
  in_process_hang a plugin kept in process that hangs: the --cell-timeout watchdog ends run (and repro) with
                  exit 1 naming the cell, the results before it kept
  repro_memory    repro refuses a cell over the memory budget before generating anything, as run does;
                  --max-memory raises it
  suite_size      a 20 KB suite of 20 M cells is refused before it is expanded, exit 2 naming the group, in
                  list cells and run; a group of batches whose sequences pass the cap likewise
  plugin_size     --plugin at a 20 GiB (sparse) file or at a small file that is not ELF: exit 2 at once
  fail_fast_resume the completion command printed after --fail-fast has no --fail-fast and completes the run
  manifest_edits  score refuses a manifest whose output shape, output tensor, file fault or file list was edited
  refused_values  selftest --ulps 0, --max-memory 2^64, score --kernel-name with a space or newline, a cell id
                  with qlen=1,1 on three sequences or 4,097 sequences, a suite's k_scale_slot = [2.0, 1.0] and
                  variants = [""]: exit 2 naming the field; --gpu-children 0 is documented as the default
  named_errors    report on a report.json that is [] names the file; --resume with a run.json that is [] says
                  it is not a run
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports_cli import check, numpy_python, read_jsonl, rejected, run, scenario_main  # noqa: E402



def isolation_suite(args):
    return os.path.join(args.source, "tests", "cli", "isolation.toml")


def help_options(args, *sub):
    """The options (first long name, else short) of `pacheck SUB --help` that take a value (a CLI11 type name such
    as TEXT, INT, FLOAT or SIZE follows the names), and the positionals."""
    text = run(args, *sub, "--help", expect=0).stdout
    options, positionals, section = [], [], None
    for line in text.splitlines():
        if re.match(r"^[A-Z][a-z]+:\s*$", line):
            section = line.strip().rstrip(":").upper()
            continue
        tokens = line.split()
        if section is None or not line.startswith("  ") or len(tokens) < 2:
            continue
        takes_value = re.match(r"^[A-Z]{2,}[A-Z0-9_]*(?:[:=]|$)", tokens[1]) is not None
        if section == "POSITIONALS" and takes_value:
            positionals.append(tokens[0])
        elif section == "OPTIONS" and tokens[0].startswith("-") and takes_value:
            longs = [n for n in tokens[0].split(",") if n.startswith("--")]
            options.append(longs[0] if longs else tokens[0].split(",")[0])
    return options, positionals


def subcommands(args):
    text = run(args, "--help", expect=0).stdout
    subs = text.split("Subcommands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^\s+(\w+)\s", subs, re.M)]


def scenario_empty_values(args, tmp):
    subs = subcommands(args)
    check({"run", "repro", "score", "export", "list", "report", "merge", "verify", "bench", "selftest"} <= set(subs),
          f"pacheck --help lists {subs}")
    tried = 0
    for sub in subs:
        options, positionals = help_options(args, sub)
        for opt in options:
            for form in ([opt, ""], [opt + "="]):
                p = run(args, sub, *form, expect=2, timeout=60)
                want = f"{opt}: the value is empty"
                # A validator an option had before (a range, a set of names, a size) may speak first.
                check(want in p.stdout or (opt in p.stdout and "pacheck: error:" in p.stdout),
                      f"{sub} {' '.join(form)!r}: exit 2 without naming {opt}:\n{p.stdout[-1500:]}")
            tried += 1
        for pos in positionals:
            p = run(args, sub, "", expect=2, timeout=60)
            check(f"{pos}: the value is empty" in p.stdout or f"pacheck: error: {pos}: " in p.stdout,
                  f"{sub} '' ({pos}): {p.stdout[-1500:]}")
            tried += 1
    check(tried >= 90, f"only {tried} options found in the subcommands' --help: the help parser missed some")
    print(f"{tried} options and positionals of {len(subs)} subcommands refuse ''")
    # The cases of the issue, with the words a CI log shows.
    base = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", isolation_suite(args)]
    for opt in ("--report-dir", "--json", "--threads", "--shard", "--filter", "--seed"):
        rejected(args, f"pacheck: error: {opt}: the value is empty (an unset variable?)", *base, opt, "")
    rejected(args, "--suite: the value is empty", "run", "--suite", "")
    rejected(args, "--device: the value is empty", "run", "--device", "")
    rejected(args, "'--bogus-global' is not an option of pacheck itself", "--bogus-global")
    rejected(args, "subcommands: run, list", "--bogus-global=1", "run")
    run(args, "--version", expect=0)


def plugin_run(args, tmp, name, *extra, env=None, expect=None, timeout=120):
    d = os.path.join(tmp, name)
    cmd = ["run", "--plugin", args.plugin, "--suite", isolation_suite(args), "-j1", "--report-dir", d, *extra]
    t0 = time.time()
    p = run(args, *cmd, env=env, expect=expect, timeout=timeout)
    return p, d, time.time() - t0


def scenario_in_process_exit(args, tmp):
    check(args.plugin and os.path.exists(args.plugin), "--plugin: planted plugin not built")
    for where in ("run", "supports"):
        env = dict(os.environ, PACHECK_TEST_PLUGIN_EXIT=where)
        p, d, _ = plugin_run(args, tmp, where, "--kernel", "planted.ok", "--no-isolate", env=env, expect=1)
        check("pacheck: error: exit() was called while `pacheck run` was running" in p.stdout and
              "the command did not finish" in p.stdout, f"exit in {where}(): {p.stdout[-2000:]}")
        check(f"kept in {os.path.join(d, 'results.jsonl')}" in p.stdout, p.stdout[-2000:])
        resume = [l.strip() for l in p.stdout.splitlines() if l.strip().startswith(args.pacheck) and "--resume" in l]
        check(len(resume) == 1 and "--no-isolate" not in resume[0], f"completion command: {resume}")
        check(os.path.exists(os.path.join(d, "results.jsonl")), "results.jsonl missing")
        check(not os.path.exists(os.path.join(d, "report.json")), "an unfinished run wrote report.json")
        # Completed isolated (as printed, the same environment): each exit(0) is then that cell's crash, and
        # the run fails as it must.
        cmd = resume[0].split()[1:]
        run(args, *[c.strip("'") for c in cmd], env=env, expect=1, timeout=300)
        results = read_jsonl(os.path.join(d, "results.jsonl"))
        check(len(results) == 9, f"exit in {where}(): {len(results)} results after the completion, want 9")
        want = {"crash", "error"}  # run(): the child died; supports(): its probe died
        check(all(r["verdict"] in want for r in results), f"exit in {where}(): {[r['verdict'] for r in results]}")
    # The exit code is a failure even when the plugin passes every cell before exiting at the last one: the
    # run planned 9 and finished 0 in the report's eyes (no report written).
    p = run(args, "repro", "h4/2 d32 bs16 f32 ctx17,32 nhd seed7 clean", "--plugin", args.plugin, "--kernel",
            "planted.ok", "--no-isolate", env=dict(os.environ, PACHECK_TEST_PLUGIN_EXIT="run"), expect=1)
    check("exit() was called while `pacheck repro` was running" in p.stdout, p.stdout[-2000:])


def scenario_in_process_hang(args, tmp):
    check(args.plugin and os.path.exists(args.plugin), "--plugin: planted plugin not built")
    p, d, took = plugin_run(args, tmp, "hang", "--kernel", "planted.hang", "--no-isolate", "--cell-timeout", "2",
                            expect=1, timeout=120)
    want = "pacheck: error: --cell-timeout: planted.hang on cell 'h4/2 d32 bs16 f32 ctx33,32 nhd seed7 clean' has run for 2 s"
    check(want in p.stdout and "without --no-isolate the cell runs in a child process" in p.stdout, p.stdout[-2000:])
    check(took < 60, f"the watchdog took {took:.0f} s")
    kept = read_jsonl(os.path.join(d, "results.jsonl"))
    # The three cells of the ctx17,32 case ran before ctx33 (cells run case by case, in suite order, with -j1).
    check(len(kept) == 3 and all(r["verdict"] == "pass" and " ctx17,32 " in r["cell"] for r in kept),
          f"kept: {[(r['cell'], r['verdict']) for r in kept]}")
    check("complete the run, its plugin kernels isolated, with:" in p.stdout, p.stdout[-2000:])
    # The other in-process cells of a run are unaffected: no watchdog without --no-isolate (isolated: timeout).
    p, d, _ = plugin_run(args, tmp, "isolated", "--kernel", "planted.hang", "--cell-timeout", "2", expect=1)
    check([r["verdict"] for r in read_jsonl(os.path.join(d, "results.jsonl"))].count("timeout") == 1, p.stdout[-2000:])
    # repro --no-isolate of the hanging cell.
    t0 = time.time()
    p = run(args, "repro", "h4/2 d32 bs16 f32 ctx33,32 nhd seed7 clean", "--plugin", args.plugin, "--kernel",
            "planted.hang", "--no-isolate", "--cell-timeout", "1", expect=1, timeout=120)
    check("--cell-timeout: planted.hang on cell 'h4/2 d32 bs16 f32 ctx33,32 nhd seed7 clean' has run for 1 s" in p.stdout
          and time.time() - t0 < 60, p.stdout[-2000:])
    # A plugin that returns in time passes under the same watchdog (no false alarm).
    plugin_run(args, tmp, "ok", "--kernel", "planted.ok", "--no-isolate", "--cell-timeout", "30", expect=0)


def scenario_repro_memory(args, tmp):
    cell = "h4/2 d64 bs16 bf16 ctx16777216 nhd seed1 clean"
    t0 = time.time()
    # 76.5 GiB with the fp64 oracle (pre-paging Q/K/V 16, paged cache 8, per-cell copies 20, oracle 32.5 GiB).
    p = rejected(args, f"--max-memory: cell '{cell}' needs about 76.5 GiB", "repro", "--kernel", "cpu.reference", cell,
                 "--max-memory", "8G")
    check(time.time() - t0 < 20 and "pass --max-memory 77G" in p.stdout, p.stdout)
    rejected(args, f"--max-memory: cell '{cell}' needs about", "repro", "--kernel", "cpu.reference", cell)  # default budget
    p = rejected(args, "--max-memory is 1.0 KiB (given)", "repro", "--kernel", "cpu.reference",
                 "h4/2 d32 bs16 f32 ctx17 nhd seed7 clean", "--max-memory", "1K")
    run(args, "repro", "--kernel", "cpu.reference", "h4/2 d32 bs16 f32 ctx17 nhd seed7 clean", "--max-memory", "64M",
        expect=0)


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def scenario_suite_size(args, tmp):
    values = lambda n, start: "[" + ", ".join(str(start + i) for i in range(n)) + "]"  # noqa: E731
    text = ('name = "big"\ndescription = "20 M cells"\n\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\nblock_sizes = 16\n'
            f'dtypes = "bf16"\nseq_lens = {values(2000, 1)}\nseeds = {values(2000, 0)}\n'
            'faults = ["clean", "V:nan@tail", "K:nan@tail", "K+V:nan@tail", "V:inf@tail"]\n')
    check(len(text) < 25000, f"the suite is {len(text)} bytes")
    big = write(tmp, "big.toml", text)
    want = (f"{big}:4: cells: this group expands into 20000000 cells (seq_lens 2000 x seeds 2000 x faults 5), over the "
            "100000 a suite may hold")
    for cmd in (["list", "cells", "--suite", big], ["run", "--suite", big, "--kernel", "cpu.reference", "--device", "cpu"]):
        t0 = time.time()
        rejected(args, want, *cmd)
        check(time.time() - t0 < 10, f"{cmd[0]}: the refusal took {time.time() - t0:.0f} s")
    # The cap counts the groups before it too.
    two = text.replace("seeds = " + values(2000, 0), "seeds = " + values(9, 0)) * 1
    two = two + two.split("\n\n", 1)[1].replace("seeds = " + values(9, 0), "seeds = " + values(2, 100))
    second = two.split("\n").index("[[cells]]", two.split("\n").index("[[cells]]") + 1) + 1
    rejected(args, f"two.toml:{second}: cells: this group expands into 20000 cells (seq_lens 2000 x seeds 2 x faults 5), "
             "after 90000 cells before it, over the 100000", "list", "cells", "--suite", write(tmp, "two.toml", two))
    # Sequences: 100 cells of 4,096-sequence batches hold 409,600 sequences (fine); 5,000 of them do not.
    batch = "{ cycle = [1, 2], count = 4096 }"
    text = ('name = "seqs"\ndescription = "x"\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\nblock_sizes = 16\n'
            f'dtypes = "bf16"\nseq_lens = [{batch}]\nseeds = {values(5000, 0)}\n')
    rejected(args, "hold 20480000 sequences, over the 16777216 a suite's cells may hold together", "list", "cells",
             "--suite", write(tmp, "seqs.toml", text))
    small = text.replace(values(5000, 0), values(100, 0))
    p = run(args, "list", "cells", "--suite", write(tmp, "small.toml", small), expect=0)
    check(len(p.stdout.splitlines()) >= 100, p.stdout[-500:])


def scenario_plugin_size(args, tmp):
    huge = os.path.join(tmp, "huge.so")
    with open(huge, "wb") as f:
        f.truncate(20 << 30)  # sparse: no disk used
    for cmd in (["run", "--device", "cpu"], ["repro", "h4/2 d32 bs16 f32 ctx17 nhd seed7 clean"], ["list", "kernels"]):
        t0 = time.time()
        rejected(args, f"pacheck: error: plugin '{huge}': cannot load: the file is 21474836480 bytes, over the 4 GiB",
                 *cmd, "--plugin", huge)
        check(time.time() - t0 < 10, f"{cmd[0]}: took {time.time() - t0:.0f} s")
    text = write(tmp, "text.so", "not a library\n")
    rejected(args, "cannot load: not an ELF shared library", "run", "--device", "cpu", "--plugin", text)


def scenario_fail_fast_resume(args, tmp):
    d = os.path.join(tmp, "ff")
    cmd = ["run", "--suite", isolation_suite(args), "--kernel", "planted.drop_last_token", "--device", "cpu", "-j1",
           "--fail-fast", "--report-dir", d]
    p = run(args, *cmd, expect=1)
    lines = [l.strip() for l in p.stdout.splitlines() if l.strip().startswith(args.pacheck) and "--resume" in l]
    check(len(lines) == 1 and "--fail-fast" not in lines[0], f"completion command: {lines}\n{p.stdout[-2000:]}")
    check(len(read_jsonl(os.path.join(d, "results.jsonl"))) == 1, "--fail-fast kept more than the first result")
    run(args, *lines[0].split()[1:], expect=1)
    check(len(read_jsonl(os.path.join(d, "results.jsonl"))) == 9, "the printed command did not complete the run")
    check(os.path.exists(os.path.join(d, "report.json")), "the completed run wrote no report.json")


def scenario_manifest_edits(args, tmp):
    cases, outputs = os.path.join(tmp, "cases"), os.path.join(tmp, "outputs")
    run(args, "export", "--suite", isolation_suite(args), "--out", cases, expect=0)
    runner = os.path.join(args.source, "examples", "python", "runner.py")
    python = numpy_python()
    if not python:
        print("skip: no Python 3 with NumPy for examples/python/runner.py")
        sys.exit(77)
    subprocess.run([python, runner, "--cases", cases, "--outputs", outputs], check=True,
                   stdout=subprocess.DEVNULL)
    run(args, "score", "--cases", cases, "--outputs", outputs, expect=0)

    def shape(m):
        m["files"][0]["output"]["shape"][0] += 1

    def tensor(m):
        m["files"][0]["output"]["tensor"] = "output"

    def fault(m):
        m["files"][0]["fault"] = "K:inf@tail"

    def duplicate(m):
        m["files"].append(m["files"][0])

    for name, edit, want in [
            ("shape", shape, "files[0]: field 'output.shape' is [3,4,32] but its case 'h4/2 d32 bs16 f32 ctx17,32 nhd "
                             "seed7' gives [2,4,32]"),
            ("tensor", tensor, "files[0]: field 'output.tensor' is \"output\" but its case"),
            ("fault", fault, "files[0]: case 'h4/2 d32 bs16 f32 ctx17,32 nhd seed7' with fault 'K:inf@tail' is no call "
                             "of the cells that use file '0000.safetensors'"),
            ("duplicate", duplicate, "files[9]: file '0000.safetensors' is listed again (first as files[0])")]:
        d = os.path.join(tmp, name)
        shutil.copytree(cases, d)
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        edit(m)
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(m, f, indent=1)
        rejected(args, want, "score", "--cases", d, "--outputs", outputs)


def scenario_refused_values(args, tmp):
    rejected(args, "--ulps: Value 0 not in range 1 to 1024", "selftest", "--ulps", "0")
    small = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", isolation_suite(args)]
    for size in ("18446744073709551616", "16E", "99999999999999999999K"):
        rejected(args, "--max-memory", *small, "--max-memory", size)
    helptext = run(args, "run", "--help", expect=0).stdout
    check("(0 or left out: the worker threads, at most 16)" in helptext, "--gpu-children 0 is not documented")
    run(args, *small, "--gpu-children", "0", expect=0)
    for name, shown in [("a b", "name 'a b' has character ' '"), ("a\nb", "name 'a\\x0ab' has character '\\x0a'")]:
        rejected(args, f"--kernel-name: {shown} (allowed: letters, digits, '.', '_', '-')", "score", "--cases", tmp,
                 "--outputs", tmp, "--kernel-name", name)
    repro = ["repro", "--kernel", "cpu.reference", "--device", "cpu"]
    rejected(args, "query_lens: 'qlen=1,1' gives 2 values for 3 sequences: give 1 (every sequence) or 3", *repro,
             "h4/2 d64 bs16 bf16 ctx30,31,32 nhd seed7 qlen=1,1 clean")
    run(args, *repro, "h4/2 d64 bs16 bf16 ctx30,31,32 nhd seed7 qlen=1,1,1 clean", expect=0)
    rejected(args, "seq_lens: 4097 sequences, more than 4096 (a decode batch)", *repro,
             "h4/2 d64 bs16 bf16 ctx" + ",".join(["2"] * 4097) + " nhd seed7 clean")
    slot = ('name = "slot"\ndescription = "x"\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\nblock_sizes = 16\n'
            'dtypes = "q=bf16,kv=fp8_e4m3fn,o=bf16"\nseq_lens = [30]\nk_scale_slot = [2.0, 1.0]\n')
    rejected(args, ":9: cells.k_scale: slot2~1: low 2 is above high 1", "list", "cells", "--suite",
             write(tmp, "slot.toml", slot))
    run(args, "list", "cells", "--suite", write(tmp, "slot_ok.toml", slot.replace("[2.0, 1.0]", "[1.0, 2.0]")), expect=0)
    var = ('name = "var"\ndescription = "x"\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\nblock_sizes = 16\n'
           'dtypes = "bf16"\nseq_lens = [30]\nvariants = ["none", ""]\n')
    rejected(args, ":9: cells.variants: an empty item: write \"none\" for plain decode", "list", "cells", "--suite",
             write(tmp, "var.toml", var))


def scenario_named_errors(args, tmp):
    as_list = write(tmp, "list.json", "[]")
    rejected(args, f"pacheck: error: {as_list}: not a pacheck report: a JSON array, not an object", "report", as_list)
    d = os.path.join(tmp, "rd")
    base = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", isolation_suite(args)]
    run(args, *base, "--report-dir", d, expect=0)
    with open(os.path.join(d, "report.json"), "w") as f:
        f.write("[]")
    rejected(args, f"{os.path.join(d, 'report.json')}: not a pacheck report: a JSON array", "report", d)
    with open(os.path.join(d, "run.json"), "w") as f:
        f.write("[]")
    rejected(args, f"--resume: {os.path.join(d, 'run.json')}: not a run pacheck wrote (a JSON array", *base, "--resume", d)


def main():
    scenario_main(globals(), "pacheck_hostile_")


if __name__ == "__main__":
    main()
