#!/usr/bin/env python3
"""CLI-level tests of the run limits and console options of issue 21, run by ctest against the built binary.

usage: test_limits_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB]

Scenarios:
  max_memory  a cell whose estimate exceeds --max-memory (or the default budget: a 16M-token cell) is refused
              at once, exit 2, naming the cell, its estimate, the budget and the flag to raise it, for run,
              bench, export and score; --max-memory 1K refuses the gate; a bad SIZE (1.5x, -1) is exit 2
              naming --max-memory; a budget that fits runs
  fuzz_memory fuzz --max-memory: a small budget discards the generated cases over it (counted in the coverage
              line, the property still held on the rest), one no case fits makes the property give up saying so
              (exit 1), the default budget discards none; a bad SIZE (-1, 1.5x, lots) is exit 2 naming --max-memory
  color       --color always colours the verdict words (pass green, fail red), also with NO_COLOR set;
              --color never, a piped auto and auto on a terminal with NO_COLOR=1 or TERM=dumb print no escape,
              auto on a terminal does; --color maybe is exit 2 naming --color
"""
import argparse
import os
import pty
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports_cli import check, run  # noqa: E402

HUGE_SUITE = """name = "huge"
description = "one cell of 16M tokens (about 260 GiB before paging): only its memory estimate is ever made"

[[cells]]
heads = "64/8"
head_sizes = 256
block_sizes = 16
dtypes = "bf16"
layouts = "nhd"
seq_lens = [[16000000]]
faults = ["clean"]

[[cells]]
heads = "4/2"
head_sizes = 32
block_sizes = 16
dtypes = "f32"
layouts = "nhd"
seq_lens = [[17]]
faults = ["clean"]
"""


def scenario_max_memory(args, tmp):
    suite = os.path.join(tmp, "huge.toml")
    with open(suite, "w") as f:
        f.write(HUGE_SUITE)
    cpu = ["--kernel", "cpu.reference", "-j2"]
    # The default budget (half the RAM) refuses the 16M-token cell before anything is generated.
    t0 = time.time()
    p = run(args, "run", "--suite", suite, *cpu, "--filter", "ctx16000000", expect=2)
    check(time.time() - t0 < 30, f"the refusal took {time.time() - t0:.0f} s: something was generated")
    for want in ("--max-memory: cell 'h64/8 d256 bs16 bf16 ctx16000000 nhd seed7 clean' needs about",
                 "pre-paging Q/K/V", "paged cache", "1 case at once", "of RAM", "pass --max-memory"):
        check(want in p.stdout, f"refusal lacks {want!r}: {p.stdout}")
    check("pacheck: error:" in p.stdout, p.stdout)
    # The whole suite too: the small cell does not hide the huge one.
    run(args, "run", "--suite", suite, *cpu, expect=2)
    # Without the huge cell the run goes ahead; with a budget given, the message says so.
    run(args, "run", "--suite", suite, *cpu, "--filter", "ctx17 ", expect=0)
    p = run(args, "run", "--suite", suite, *cpu, "--filter", "ctx17 ", "--max-memory", "1K", expect=2)
    check("--max-memory is 1.0 KiB (given)" in p.stdout, p.stdout)
    run(args, "run", "--suite", suite, *cpu, "--filter", "ctx17 ", "--max-memory", "64MiB", expect=0)
    # The gate with 1K: refused, naming --threads when fewer workers would fit.
    p = run(args, "run", "--max-memory", "1K", "--kernel", "cpu.reference", expect=2)
    check("--max-memory: cell '" in p.stdout, p.stdout)
    p = run(args, "run", "--max-memory", "500M", "--kernel", "cpu.reference", "-j8", expect=2)
    check("8 cases at once" in p.stdout and "or --threads" in p.stdout, p.stdout)
    # Bad sizes are usage errors naming the flag.
    for bad in ("1.5x", "-1", "lots", ""):
        p = run(args, "run", "--suite", suite, *cpu, "--filter", "ctx17 ", "--max-memory", bad, expect=2)
        check("--max-memory" in p.stdout, f"{bad!r}: {p.stdout}")
    # bench, export and score refuse the same way, before timing, writing or scoring anything.
    p = run(args, "bench", "--suite", suite, "--kernel", "cpu.reference", "--filter", "ctx16000000", expect=2)
    check("--max-memory: cell 'h64/8 d256 bs16 bf16 ctx16000000" in p.stdout, p.stdout)
    out = os.path.join(tmp, "export")
    p = run(args, "export", "--suite", suite, "--out", out, expect=2)
    check("--max-memory: cell 'h64/8 d256 bs16 bf16 ctx16000000" in p.stdout, p.stdout)
    check(not os.path.exists(out), "a refused export created its directory")
    small = os.path.join(tmp, "small")
    run(args, "export", "--suite", suite, "--filter", "ctx17 ", "--out", small, expect=0)
    p = run(args, "score", "--cases", small, "--outputs", small, "--max-memory", "1K", expect=2)
    check("--max-memory: cell 'h4/2 d32 bs16 f32 ctx17" in p.stdout, p.stdout)


def scenario_fuzz_memory(args, tmp):
    fuzz = ["fuzz", "--kernel", "cpu.reference", "--property", "agreement", "--cases", "20", "--seed", "1"]
    coverage = re.compile(r"^agreement\s+(held|FAILED)\s+(\d+)\s+\S+\s+(.*)$", re.M)
    p = run(args, *fuzz, "--max-memory", "2M", expect=0)
    check("a case over --max-memory 2.0 MiB (given) is discarded" in p.stdout, p.stdout)
    m = coverage.search(p.stdout)
    check(m and m.group(1) == "held" and m.group(2) == "20", f"2M: {p.stdout}")
    d = re.search(r"(\d+) cases? over --max-memory discarded", m.group(3))
    check(d and int(d.group(1)) > 0, f"2M: the coverage line does not count discarded cases: {m.group(3)!r}")
    p = run(args, *fuzz, "--max-memory", "1", expect=1)
    m = coverage.search(p.stdout)
    check(m and m.group(1) == "FAILED" and "over --max-memory discarded" in m.group(3), p.stdout)
    check("did not fit --max-memory 1 B (given): raise it" in p.stdout, p.stdout)
    p = run(args, *fuzz, expect=0)
    check("over --max-memory discarded" not in p.stdout and "of RAM" in p.stdout, p.stdout)
    for bad in ("-1", "1.5x", "lots"):
        p = run(args, *fuzz, "--max-memory", bad, expect=2)
        check("--max-memory" in p.stdout, f"{bad!r}: {p.stdout}")


ESC = "\x1b["
SMALL = ["run", "--suite", "isolation.toml", "--kernel", "cpu.reference", "--kernel", "planted.drop_last_token",
         "--filter", "ctx17,"]


def on_terminal(args, *cmd, env):
    """stdout of pacheck CMD written to a pseudo-terminal (stdout is a tty), env as given."""
    master, slave = pty.openpty()
    print("+", " ".join([args.pacheck, *cmd]), "(stdout on a terminal)", flush=True)
    p = subprocess.Popen([args.pacheck, *cmd], stdout=slave, stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait()
    os.close(master)
    return out.decode(errors="replace")


def scenario_color(args, tmp):
    small = list(SMALL)
    small[2] = os.path.join(args.source, "tests", "cli", "isolation.toml")
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm"
    p = subprocess.run([args.pacheck, *small, "--color", "always"], stdout=subprocess.PIPE, text=True, env=env)
    check(p.returncode == 1, f"exit {p.returncode}: {p.stdout}")
    check(ESC + "32mpass" + ESC + "0m" in p.stdout, f"no green pass: {p.stdout!r}")
    check(ESC + "1;31m" in p.stdout, f"no red failure: {p.stdout!r}")
    # The columns after a coloured verdict stay where they were.
    plain = subprocess.run([args.pacheck, *small, "--color", "never"], stdout=subprocess.PIPE, text=True, env=env).stdout
    check(ESC not in plain, f"--color never printed an escape: {plain!r}")
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)
    check([l for l in stripped.splitlines() if "ctx17" in l][:3] == [l for l in plain.splitlines() if "ctx17" in l][:3],
          "colour moved the columns")
    piped = subprocess.run([args.pacheck, *small], stdout=subprocess.PIPE, text=True, env=env).stdout
    check(ESC not in piped, "auto coloured a pipe")
    no_color = dict(env, NO_COLOR="1")
    always = subprocess.run([args.pacheck, *small, "--color", "always"], stdout=subprocess.PIPE, text=True,
                            env=no_color).stdout
    check(ESC + "32mpass" in always, "--color always lost to NO_COLOR")
    tty = on_terminal(args, *small, env=env)
    check(ESC + "32mpass" in tty, f"auto on a terminal printed no colour: {tty[:400]!r}")
    check(ESC + "32mpass" in on_terminal(args, *small, env=dict(env, NO_COLOR="")), "an empty NO_COLOR disabled colour")
    check(ESC not in on_terminal(args, *small, env=no_color), "auto coloured with NO_COLOR=1")
    check(ESC not in on_terminal(args, *small, env=dict(env, TERM="dumb")), "auto coloured with TERM=dumb")
    p = run(args, *small, "--color", "maybe", expect=2)
    check("--color" in p.stdout, p.stdout)
    p = run(args, "score", "--cases", tmp, "--outputs", tmp, "--color", "maybe", expect=2)
    check("--color" in p.stdout, p.stdout)


def main():
    scenarios = ["max_memory", "fuzz_memory", "color"]
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=scenarios)
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_limits_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
