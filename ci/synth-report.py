#!/usr/bin/env python3
"""Make a large report JSON from a real one, for the browser check of report.html's figures at sizes a CI
run cannot afford to produce for real (ci/check-report-browser.sh).

Every result written is a result of the input report, with the real schema, changed only where said here:
  --kernels N   each result is copied for N kernels: the input's kernels, then kernels named
                "<first input kernel>.synthNN"; a copy's error metrics (rel_linf, max_abs, mean_abs, margin,
                nmse) are scaled by a factor in [0.25, 1.6] drawn from a hash of (kernel, cell), and a passing
                clean cell whose margin then exceeds 1 becomes `fail` (so some failures show);
  --controls C  the last C synthetic kernels are negative controls: their straddling V and K+V cells with a
                NaN/Inf tail poison are expected to fail and do (`poisoned`, as cpu.vector_v's are);
  --seeds S     each cell is copied for S seeds (seedN, seedN+1, ...); with --spread-lengths, the copies of
                odd index also move every single-sequence context length L > 1 to L + index (more distinct
                lengths, as a sweep over context has);
  --long-batch  one clean cell per kernel is copied with a batch of 64 sequences (ctx8192,8192,...), as the
                bandwidth suite's cells are.
The summary, kernel table and exit code are not copied: `pacheck report` re-judges the results.

Usage: ci/synth-report.py IN.json OUT.json [--kernels N] [--controls C] [--seeds S] [--spread-lengths] [--long-batch]
Exit: 0 written, 2 bad input (named).
"""
import argparse
import copy
import json
import re
import sys
import zlib


def factor(kernel, cell):
    h = zlib.crc32(f"{kernel}\n{cell}".encode())
    return 0.25 + 1.35 * (h % 10007) / 10006.0


def with_ids(r, case):
    """r with its case id replaced (and the cell id, which is the case id and the fault)."""
    out = copy.deepcopy(r)
    out["case"] = case
    out["cell"] = f"{case} {r['fault']}"
    return out


def scaled(r, kernel, control):
    out = copy.deepcopy(r)
    out["kernel"] = kernel
    m = out["metrics"]
    f = factor(kernel, out["cell"])
    for k in ("rel_linf", "max_abs", "mean_abs"):
        if isinstance(m.get(k), (int, float)):
            m[k] = m[k] * f
    if isinstance(m.get("nmse"), (int, float)):
        m["nmse"] = m["nmse"] * f * f
    if isinstance(out.get("margin"), (int, float)):
        out["margin"] = out["margin"] * f
        if out["verdict"] == "pass" and out["fault"] == "clean" and out["margin"] > 1:
            out["verdict"] = "fail"
            out["detail"] = f"rel_linf {m['rel_linf']:.3e} > limit {out['limit']:.3e} (synthetic copy)"
    fault = out["fault"]
    poison_tail = re.match(r"^(V|K\+V):([+-]?inf|nan)@tail$", fault)
    if control and out.get("straddle") and poison_tail:
        out["expected_fail"] = True
        out["verdict"] = "poisoned"
        out["margin"] = None
        m.update({"rel_linf": None, "nmse": None, "nan": m.get("elements", 0), "max_abs": 0.0, "mean_abs": 0.0,
                  "bitwise_equal_pct": 0.0})
        out["detail"] = f"{m.get('elements', 0)} NaN of {m.get('elements', 0)} elements where the oracle is finite (synthetic copy)"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--kernels", type=int, default=0)
    ap.add_argument("--controls", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--spread-lengths", action="store_true")
    ap.add_argument("--long-batch", action="store_true")
    a = ap.parse_args()
    try:
        with open(a.input, encoding="utf-8") as f:
            report = json.load(f)
        results = report["results"]
        kernels_in = [k["kernel"] for k in report["kernels"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"synth-report: input {a.input}: not a pacheck report JSON ({e})", file=sys.stderr)
        return 2
    if not results or not kernels_in:
        print(f"synth-report: input {a.input}: the report has no results", file=sys.stderr)
        return 2
    n = max(a.kernels, len(kernels_in))
    if a.seeds < 1 or a.controls < 0 or a.controls > n - len(kernels_in):
        print("synth-report: --seeds must be >= 1 and --controls at most the number of synthetic kernels", file=sys.stderr)
        return 2

    # Cells: the input's, copied per seed (and per spread length).
    cells = []
    for r in results:
        if r["kernel"] != kernels_in[0]:
            continue
        seed = re.search(r"\bseed(\d+)\b", r["case"])
        for i in range(a.seeds):
            case = r["case"]
            if seed:
                case = re.sub(r"\bseed\d+\b", f"seed{int(seed.group(1)) + i}", case)
            if a.spread_lengths and i % 2 == 1:
                def move(mt):
                    n_ = int(mt.group(1))
                    return f"ctx{n_ + i if n_ > 1 else n_}"
                case = re.sub(r"\bctx(\d+)\b(?!,)", move, case)
            cells.append(with_ids(r, case))
    if a.long_batch:
        clean = next((c for c in cells if c["fault"] == "clean"), None)
        if clean:
            batch = ",".join(["8192"] * 64)
            cells.append(with_ids(clean, re.sub(r"\bctx[\d,]+", f"ctx{batch}", clean["case"])))

    names = list(kernels_in) + [f"{kernels_in[0]}.synth{j:02d}" for j in range(1, n - len(kernels_in) + 1)]
    controls = set(names[len(names) - a.controls:]) if a.controls else set()
    out_results = []
    by_kernel = {}
    for r in results:
        by_kernel.setdefault(r["kernel"], {})[r["cell"]] = r
    for k in names:
        for c in cells:
            if k in kernels_in and k != kernels_in[0] and a.seeds == 1 and c["cell"] in by_kernel.get(k, {}):
                out_results.append(by_kernel[k][c["cell"]])  # a real result of that kernel
            elif k == kernels_in[0]:
                out_results.append(c)
            else:
                out_results.append(scaled(c, k, k in controls))
    for i, r in enumerate(out_results):
        r["index"] = i
    kernels = []
    for k in names:
        src = next((x for x in report["kernels"] if x["kernel"] == k), None)
        kernels.append({"kernel": k, "negative_control": (src["negative_control"] if src else ("caught" if k in controls else "-"))})
    out = {key: report[key] for key in ("device", "environment", "pacheck", "selftest", "suite") if key in report}
    out["run"] = dict(report.get("run", {}), kernels=names, synthetic=True)
    out["kernels"] = kernels
    out["results"] = out_results
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"synth-report: {len(out_results)} results ({len(cells)} cells x {len(names)} kernels) -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
