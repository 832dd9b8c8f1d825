#!/usr/bin/env python3
"""Aggregates `pacheck run --json` reports into the tables of docs/TOLERANCE.md.

Usage: ci/margins.py REPORT.json [REPORT.json ...] [--markdown] [--dump ROWS.json]
       (ci/trust-run.py imports it)

For every (kernel, output dtype) it prints the cells judged, the verdict counts, the worst margin
(rel_linf / limit) among cells that are not non-finite, the largest rel_linf and the cell that has it, and
the signed rounding bias (metrics.bias_ulp) of largest magnitude (0 for f32 outputs; docs/TOLERANCE.md "Bias"). A
report's cells come from any suite and seed (`pacheck run --seed N`); pass as many reports as were run.
The output dtype of a cell is the `o=` token of its id, else its KV dtype (the dtype token after bsN).
--dump writes the table's rows as JSON; a file ending in `.rows.json` given as a report is read as such rows
and merged (per-cell reports are large: a machine lent for a while sends back its rows, not its reports).
Exit status: 0; 2 when a report cannot be read (the message names the file).
"""
import argparse
import collections
import json
import math
import os
import sys

DTYPES = {"f32", "f16", "bf16", "fp8e4m3", "fp8e4m3fnuz", "fp8e5m2"}


def out_dtype(case_id):
    """The output dtype of a case id: its o= token, else the KV dtype token."""
    kv = None
    for tok in case_id.split():
        if tok.startswith("o="):
            return tok[2:]
        if kv is None and tok in DTYPES:
            kv = tok
    return kv or "?"


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"margins.py: {path}: {e}", file=sys.stderr)
        sys.exit(2)


def new_row():
    return {"cells": 0, "verdicts": collections.Counter(), "margin": 0.0, "margin_cell": "", "rel_linf": 0.0,
            "seeds": set(), "bias": 0.0, "bias_cell": ""}


def merge(rows, row_list):
    """Adds rows read from a --dump file (a list of {"kernel", "out", ...row}) into `rows`."""
    for saved in row_list:
        row = rows[(saved["kernel"], saved["out"])]
        row["cells"] += saved["cells"]
        row["verdicts"].update(saved["verdicts"])
        if saved["margin"] > row["margin"]:
            row["margin"], row["margin_cell"] = saved["margin"], saved["margin_cell"]
        row["rel_linf"] = max(row["rel_linf"], saved["rel_linf"])
        if abs(saved["bias"]) > abs(row["bias"]):
            row["bias"], row["bias_cell"] = saved["bias"], saved["bias_cell"]
        row["seeds"].update(saved["seeds"])


def dump(rows, path):
    """Writes `rows` to `path` as JSON that merge() (and a `.rows.json` argument) reads back."""
    out = [{"kernel": k, "out": dt, **{**row, "verdicts": dict(row["verdicts"]), "seeds": sorted(row["seeds"])}}
           for (k, dt), row in sorted(rows.items())]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


def collect(paths):
    """{(kernel, out dtype): row} over every result of the reports at `paths` (see the module docstring)."""
    rows = collections.defaultdict(new_row)
    seen = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:  # the same file twice would count its cells twice
            print(f"margins.py: {path}: given more than once, read once", file=sys.stderr)
            continue
        seen.add(real)
        report = load(path)
        try:
            add(rows, report, str(path).endswith(".rows.json"))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            print(f"margins.py: {path}: not a pacheck --json report or a --dump rows file ({type(e).__name__}: {e})",
                  file=sys.stderr)
            sys.exit(2)
    return rows


def add(rows, report, is_rows):
    """Adds one loaded report (or --dump rows when `is_rows`) to `rows`."""
    if is_rows:
        merge(rows, report)
        return
    for r in report.get("results", []):
        row = rows[(r["kernel"], out_dtype(r["case"]))]
        row["cells"] += 1
        row["verdicts"][r["verdict"]] += 1
        rel = r.get("metrics", {}).get("rel_linf")
        margin = r.get("margin")
        if isinstance(margin, (int, float)) and math.isfinite(margin) and margin > row["margin"]:
            row["margin"], row["margin_cell"] = margin, r["cell"]
        if isinstance(rel, (int, float)) and math.isfinite(rel):
            row["rel_linf"] = max(row["rel_linf"], rel)
        # Signed rounding bias (bf16/f16 outputs): the largest |bias_ulp| of a cell with an output to judge.
        bias = r.get("metrics", {}).get("bias_ulp")
        if r["verdict"] in ("pass", "fail", "biased") and isinstance(bias, (int, float)) \
                and abs(bias) > abs(row["bias"]):
            row["bias"], row["bias_cell"] = bias, r["cell"]
        row["seeds"].update(tok for tok in r["case"].split() if tok.startswith("seed"))


def table(rows, markdown=False):
    """The rows as text lines: one per (kernel, output dtype), sorted."""
    lines = []
    if markdown:
        lines += ["| kernel | out | cells | seeds | verdicts | worst margin | max rel_linf | worst cell | bias ULP |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (kernel, dt), row in sorted(rows.items()):
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(row["verdicts"].items()))
        if markdown:
            lines.append(f"| {kernel} | {dt} | {row['cells']} | {len(row['seeds'])} | {verdicts} | "
                         f"{row['margin']:.3f} | {row['rel_linf']:.3g} | `{row['margin_cell']}` | {row['bias']:+.3f} |")
        else:
            lines.append(f"{kernel:28} {dt:6} cells {row['cells']:6} seeds {len(row['seeds']):3} worst margin "
                         f"{row['margin']:.3f} max rel_linf {row['rel_linf']:.3g} bias {row['bias']:+.3f}  [{verdicts}]  "
                         f"{row['margin_cell']}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--dump", help="also write the rows as JSON to this file (name it *.rows.json to merge it later)")
    args = ap.parse_args()
    rows = collect(args.reports)
    if args.dump:
        dump(rows, args.dump)
    print("\n".join(table(rows, args.markdown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
