#!/usr/bin/env python3
"""Checks that the source folders follow the pipeline: a folder includes only from itself and from folders
earlier in STAGES, never from a later one, and no two folders include each other (no cycle).

    python3 ci/check-layering.py [--root DIR] [--graph]

Exit 0 when every #include "..." of every source file under a stage folder points to the same or an earlier
stage; exit 1 listing each offending include (file:line, the include, both stages); exit 2 for a missing
root or a stage folder that does not exist. --graph prints the folder dependency graph that was found.

The order is the data flow of docs/DESIGN.md (case -> pre-paging tensors -> paged cache -> faults -> kernel ->
output -> comparator vs oracle -> verdict -> report), with the entry points last. docs/DESIGN.md explains
each stage; keep the two in step when a folder is added.
"""
import argparse
import os
import re
import sys

# Pipeline order. `include/` (the public C ABI) may be included by anyone and includes nothing of ours.
STAGES = [
    "core",        # dtypes, fp8 codecs, the case, fault specs, the cell and their ids
    "suites",      # suite files -> cells
    "oracle",      # pre-paging tensors, the oracle
    "paging",      # the pager: paged cache, block tables, slot map
    "faults",      # injection into the paged cache
    "kernels",     # kernel interface, backends, built-in kernels, plugins
    "judge",       # comparator, tolerance, verdicts, run summary
    "exec",        # prepare, guarded run, execute_cell, scheduling, isolation
    "figures",     # report.html's figures and the SVG writer (the html format of report/ draws them)
    "report",      # report formats, report directories, merge
    "verify",      # evidence.json and `pacheck verify` (read what report/ wrote)
    "interop",     # safetensors case files: export, score
    "bench",       # timing
    "properties",  # generators, metamorphic properties, planted kernels
    "cells",       # one cell at a time for test frameworks: pacheck::cells, pacheck::gtest
    "cli",         # the pacheck command
]
# Folders outside the pipeline that may include any stage (they test or demonstrate it).
FREE = {"tests", "examples", "include", "build", ".git", "ci", "docs", "cmake"}
SOURCE = re.compile(r"\.(c|cc|cpp|cu|cuh|h|hpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def stage_of(path):
    top = path.split("/", 1)[0]
    return top if top in STAGES else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--graph", action="store_true", help="print the folder dependency graph")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isdir(root):
        print(f"check-layering: no such directory: {root}", file=sys.stderr)
        return 2
    missing = [s for s in STAGES if not os.path.isdir(os.path.join(root, s))]
    if missing:
        print(f"check-layering: stage folder(s) missing: {', '.join(missing)} (update STAGES)", file=sys.stderr)
        return 2
    rank = {s: i for i, s in enumerate(STAGES)}
    edges = {}
    bad = []
    files = 0
    for stage in STAGES:
        for dirpath, _, names in os.walk(os.path.join(root, stage)):
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = stage_of(m.group(1))
                        if target is None or target == stage:
                            continue
                        edges.setdefault(stage, set()).add(target)
                        if rank[target] > rank[stage]:
                            bad.append(f"{rel}:{lineno}: includes \"{m.group(1)}\": {stage}/ may not include from "
                                       f"the later stage {target}/")
    if args.graph:
        for s in STAGES:
            print(f"{s:<11} -> {', '.join(sorted(edges.get(s, ()), key=rank.get)) or '(nothing)'}")
    # With every edge pointing to an earlier stage there can be no cycle; say so explicitly when there is one.
    cycles = sorted({f"{a}/ <-> {b}/" for a in edges for b in edges[a] if a in edges.get(b, ()) and a < b})
    for c in cycles:
        bad.append(f"cycle between folders: {c}")
    if bad:
        print("\n".join(bad))
        print(f"check-layering: {len(bad)} include(s) against the pipeline order ({files} files read)")
        return 1
    print(f"check-layering: {files} files in {len(STAGES)} stage folders, every include points to the same or an "
          f"earlier stage, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
