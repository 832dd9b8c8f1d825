#!/usr/bin/env python3
"""The README's figure and console rows, from a real run: the command of the README's `$ ...` text block is
run with the built pacheck (and --json), the console rows shown under it must be in its output, and the
fault matrix between the README's `<!-- fault-matrix -->` markers is rendered from its report.

    python3 ci/readme-figure.py --pacheck BUILD/cli/pacheck (--check | --write) [README.md]

--check exits 1 when a shown row is not printed or the matrix differs from the rendered one (ctest
readme.figure); --write replaces the matrix in the README. The command must start with
build/default/cli/pacheck (the README's set-up commands build it there), which is replaced by --pacheck.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

BEGIN, END = "<!-- fault-matrix: ci/readme-figure.py writes this table from a real run -->", "<!-- /fault-matrix -->"
README_BINARY = "build/default/cli/pacheck"


def shown_run(readme):
    """(command words, console lines) of the README's text block that starts with `$ `."""
    blocks = re.findall(r"^```text\n\$ (.*?)\n(.*?)^```$", readme, re.S | re.M)
    if len(blocks) != 1:
        sys.exit(f"readme-figure: expected one ```text block starting with '$ ', found {len(blocks)}")
    command, rows = blocks[0]
    words = shlex.split(command)
    if words[0] != README_BINARY:
        sys.exit(f"readme-figure: the shown command must start with {README_BINARY}: {command}")
    return words, rows.rstrip("\n").split("\n")


def run(pacheck, words):
    """Runs the shown command with the built binary; returns (stdout, report.json)."""
    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "report.json")
        p = subprocess.run([pacheck, *words[1:], "--color", "never", "--json", json_path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if not os.path.exists(json_path):
            sys.exit(f"readme-figure: the run wrote no report (exit {p.returncode}):\n{p.stdout[-3000:]}")
        with open(json_path) as f:
            return p.stdout, json.load(f)


def cell_text(result):
    """One matrix entry: the verdict, and for a non-finite output how much of it."""
    verdict = result["verdict"]
    if verdict == "pass":
        return "pass"
    m = result.get("metrics") or {}
    bad = [f"{m[k]} {name}" for k, name in (("nan", "NaN"), ("inf", "Inf")) if m.get(k)]
    return f"**{verdict}**: {' and '.join(bad)} of {m.get('elements', 0)} outputs" if bad else f"**{verdict}**"


def matrix(report):
    """The fault x (kernel, length) table of the report's results, as Markdown lines."""
    kernels = list(dict.fromkeys(r["kernel"] for r in report["results"]))
    lengths = list(dict.fromkeys(re.search(r" ctx(\d+) ", r["cell"]).group(1) for r in report["results"]))
    faults = list(dict.fromkeys(r["fault"] for r in report["results"]))
    entry = {(r["kernel"], re.search(r" ctx(\d+) ", r["cell"]).group(1), r["fault"]): r for r in report["results"]}
    straddles = {re.search(r" ctx(\d+) ", r["cell"]).group(1): r["straddle"] for r in report["results"]}
    head = ["fault"] + [f"`{k}` at {n} ({'straddles' if straddles[n] else 'aligned'})" for k in kernels for n in lengths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fault in faults:
        row = [f"`{fault}`"] + [cell_text(entry[(k, n, fault)]) if (k, n, fault) in entry else "-"
                                for k in kernels for n in lengths]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pacheck", required=True)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    ap.add_argument("readme", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "README.md"))
    args = ap.parse_args()
    with open(args.readme) as f:
        readme = f.read()
    words, rows = shown_run(readme)
    out, report = run(args.pacheck, words)
    printed = out.split("\n")
    missing = [r for r in rows if r not in printed]
    table = "\n".join([BEGIN, *matrix(report), END])
    current = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), readme, re.S)
    if not current:
        sys.exit(f"readme-figure: no fault-matrix markers in {args.readme}")
    if args.write:
        with open(args.readme, "w") as f:
            f.write(readme.replace(current.group(0), table))
        print(f"readme-figure: wrote the matrix ({len(report['results'])} results)")
    elif current.group(0) != table:
        print(f"readme-figure: the README's matrix is not this run's; the run gives:\n{table}")
        return 1
    for r in missing:
        print(f"readme-figure: the README shows a console row its command does not print:\n{r}")
    if missing:
        print("readme-figure: the command printed:\n" + out[-4000:])
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
