#!/usr/bin/env python3
"""CLI-level tests of hostile input and of the console's colour and progress lines (issue 21), run by ctest
against the built pacheck binary.

usage: test_input_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB]

Scenarios:
  cell_ids     `repro` refuses an id that gives a field twice (d64 d32, seed7 seed9), two faults or an empty
               length (ctx30,), exit 2 naming the field; `--seed ''` is refused by run, export and fuzz
  suites_dir   PACHECK_SUITES_DIR='' means unset (the built-in suites); one that does not exist or is a file
               is exit 2 naming the variable, for `list suites` (it listed nothing, exit 0) and `run`
  json_env     `run --json FILE` carries report.json's environment fingerprint and run identity
  oracle_isa   `list devices` names the oracle's instruction set; PACHECK_ORACLE_ISA forces each one this CPU
               runs (a run passes on each), '' counts as unset, and an unknown name is exit 2 naming the variable
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports_cli import check, run  # noqa: E402


def rejected(args, want, *cmd, env=None):
    p = run(args, *cmd, env=env, expect=2, timeout=120)
    check(want in p.stdout, f"{' '.join(cmd)}: output lacks {want!r}:\n{p.stdout[-2000:]}")
    return p


def scenario_cell_ids(args, tmp):
    repro = ["repro", "--kernel", "cpu.reference", "--device", "cpu"]
    base = "h4/2 d64 bs16 bf16 ctx30 vllm seed7"
    run(args, *repro, base + " V:nan@tail", expect=0, timeout=120)
    for bad, want in [(base.replace("d64", "d64 d32"), "head_size: given twice ('d64' and 'd32')"),
                      (base + " seed9", "seed: given twice ('seed7' and 'seed9')"),
                      (base.replace("bf16", "bf16 f16"), "kv_dtype: given twice ('bf16' and 'f16')"),
                      (base.replace("vllm", "vllm nhd"), "layout: given twice ('vllm' and 'nhd')"),
                      (base.replace("ctx30", "ctx30,"), "seq_lens: entry 1 of 'ctx30,' is empty")]:
        rejected(args, want, *repro, bad + " V:nan@tail")
    rejected(args, "fault: given twice ('V:nan@tail' and 'K:inf@tail')", *repro, base + " V:nan@tail K:inf@tail")
    want = "--seed: the value is empty (an unset variable?)"
    rejected(args, want, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--seed", "")
    out = os.path.join(tmp, "exp")
    rejected(args, want, "export", "--suite", "tail-poison", "--out", out, "--seed", "")
    check(not os.path.exists(os.path.join(out, "manifest.json")), "export --seed '' wrote case files")
    rejected(args, want, "fuzz", "--kernel", "cpu.reference", "--cases", "1", "--seed", "")


def scenario_suites_dir(args, tmp):
    builtin = run(args, "list", "suites", expect=0).stdout
    check("tail-poison" in builtin, f"list suites: {builtin}")
    empty = run(args, "list", "suites", env=dict(os.environ, PACHECK_SUITES_DIR=""), expect=0).stdout
    check(empty == builtin, f"PACHECK_SUITES_DIR='' lists other suites than unset:\n{empty}")
    a_file = os.path.join(tmp, "file")
    open(a_file, "w").close()
    for value, why in [(os.path.join(tmp, "nosuch"), "does not exist"), (a_file, "is not a directory")]:
        env = dict(os.environ, PACHECK_SUITES_DIR=value)
        for cmd in (["list", "suites"], ["run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison"]):
            rejected(args, f"{value}: PACHECK_SUITES_DIR: {why}", *cmd, env=env)
    own = os.path.join(tmp, "suites")
    os.mkdir(own)
    with open(os.path.join(own, "mine.toml"), "w") as f:
        f.write('name = "mine"\ndescription = "one cell"\n[[cells]]\nheads = "4/2"\nhead_sizes = 64\n'
                'block_sizes = 16\ndtypes = "bf16"\nseq_lens = [[30]]\n')
    listed = run(args, "list", "suites", env=dict(os.environ, PACHECK_SUITES_DIR=own), expect=0).stdout
    check(listed.split()[0] == "mine" and "tail-poison" not in listed, f"PACHECK_SUITES_DIR={own}: {listed}")


def scenario_json_env(args, tmp):
    out, d = os.path.join(tmp, "r.json"), os.path.join(tmp, "reports")
    run(args, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--filter", " bf16 ",
        "--json", out, "--report-dir", d, expect=0)
    with open(out) as f:
        mine = json.load(f)
    with open(os.path.join(d, "report.json")) as f:
        report = json.load(f)
    check("environment" in mine, f"--json has no environment: keys {sorted(mine)}")
    check(mine["environment"] == report["environment"], f"--json environment {mine['environment']} != report.json's")
    check(mine["environment"]["pacheck_version"] and mine["environment"]["compiler"], f"{mine['environment']}")
    check(mine.get("run") == report["run"], "--json run identity differs from report.json's")
    alone = os.path.join(tmp, "alone.json")  # without a report directory too
    run(args, "run", "--device", "cpu", "--kernel", "cpu.reference", "--suite", "tail-poison", "--filter", " bf16 ",
        "--json", alone, expect=0)
    with open(alone) as f:
        env = json.load(f).get("environment")
    check(env and env["device"] == "cpu" and env["git_commit"], f"--json without --report-dir: environment {env}")


def scenario_oracle_isa(args, tmp):
    listed = run(args, "list", "devices", expect=0).stdout
    line = [l for l in listed.splitlines() if l.startswith("oracle: ")]
    check(len(line) == 1 and "PACHECK_ORACLE_ISA unset" in line[0], f"list devices: no oracle line:\n{listed}")
    chosen = line[0].split()[1]
    runs = line[0].split("run ", 1)[1].split(";")[0].split(", ")
    check(runs[0] == "baseline" and chosen == runs[-1], f"oracle line: {line[0]!r} (default = the widest)")
    empty = run(args, "list", "devices", env=dict(os.environ, PACHECK_ORACLE_ISA=""), expect=0).stdout
    check(f"oracle: {chosen} " in empty, f"PACHECK_ORACLE_ISA='' is not unset:\n{empty}")
    cmd = ["run", "--device", "cpu", "--kernel", "cpu.reference", "--kernel", "cpu.online", "--suite", "tail-poison",
           "--filter", " bf16 .*ctx(1000|4090)"]
    for isa in runs:
        env = dict(os.environ, PACHECK_ORACLE_ISA=isa)
        forced = run(args, "list", "devices", env=env, expect=0).stdout
        check(f"oracle: {isa} " in forced and f"PACHECK_ORACLE_ISA = {isa}" in forced, f"{isa}: {forced}")
        run(args, *cmd, env=env, expect=0)  # every path judges the honest kernels as passing
    for bad in ["sse9", "AVX2"]:
        env = dict(os.environ, PACHECK_ORACLE_ISA=bad)
        for c in (["list", "devices"], cmd):
            rejected(args, f"PACHECK_ORACLE_ISA: '{bad}' is not an instruction set of the oracle", *c, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=[n[len("scenario_"):] for n in globals() if n.startswith("scenario_")])
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_cli_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
