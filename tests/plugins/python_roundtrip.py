#!/usr/bin/env python3
"""ctest driver: export -> examples/python/runner.py -> score, against `pacheck run --kernel cpu.reference`.

Passes when (1) the NumPy runner's outputs score exactly the verdicts cpu.reference gets on every exported
cell, (2) declining the fp8_e4m3fnuz files (runner.py --decline-kv-dtype) makes exactly their cells
`declined` with the runner's reason, and (3) the same runner with the planted V-tail fault, scored as a negative control, is caught on
exactly the cells that fault must poison and passes the rest (score exit 0; exit 3 would be blind).
With --variants (the `variants` suite, case-file format_version 3), step (2) declines the sinks files
instead (runner.py --decline-variant sinks), and three more planted runners must fail exactly their cells:
--bug no-window the cells whose window hides some key of some sequence (a seq_len above W), --bug
softcap-ratio exactly the cells pacheck's own control of that fault, cpu.softcap_ratio, fails in `pacheck
run` (vLLM #56578: |logit| > 88.7 x cap), --bug no-causal exactly those cpu.qlen_no_causal fails (every
query row of a sequence computed as its last).
With --per-slot (the `aiter` suite, case-file format_version 4), the export must hold cells with per-slot fp8
scale tables (scored as cpu.reference's in step 1, the `scales` poison cells among them), and the planted
runner --bug slot-scale-unmasked (V codes masked past seq_len, the final block's per-slot V scales applied
before the probabilities mask it) must fail exactly the cells pacheck's own control of that fault,
cpu.slot_scale_unmasked, fails in `pacheck run`, and pass every other one.
The reference run is `pacheck run` on cpu.reference and, for MLA cells, cpu.mla_reference: an export with MLA cells
(gate's MLA group; case-file format_version 5) scores those through the runner's NumPy MLA decode
(numpy_mla_kernels.py) as cpu.mla_reference's, and step (3)'s planted runner reads their V over the whole final
block too (decode_mla_v_tail).
With --mla (the `mla` suite, optionally --filter REGEX to keep a part of it), the export must hold MLA cells only,
and (4) --bug v-tail must fail exactly the cells pacheck's own MLA control of that fault, cpu.mla_v_tail, fails
in `pacheck run` (the straddling V-tail cells: CellInfo.poisons_v_tail's), with score exit 1; (5) an export at
--format-version 4 leaves every MLA cell out with its reason (exit 2: none can be written); (6) a manifest whose
entry of an MLA file restates kv_lora_rank, qk_rope_head_dim or v_head_dim wrongly is refused, exit 2, naming the
field.
Exits 77 (ctest: skipped) with the reason when NumPy is missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy  # noqa: F401
except ImportError:
    print("SKIPPED: NumPy is not installed for", sys.executable, "(pip install numpy)", file=sys.stderr)
    sys.exit(77)


def run(cmd, expect):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail = "\n".join(p.stdout.splitlines()[-6:])
    print(tail)
    if p.returncode != expect:
        sys.exit(f"FAILED: exit code {p.returncode}, expected {expect}\n{p.stdout[-4000:]}")
    return p.stdout


def verdicts(path):
    with open(path) as f:
        return {r["cell"]: r["verdict"] for r in json.load(f)["results"]}


NOT_FAILURES = ("pass", "declined", "not_run")  # every other verdict fails a cell (pacheck list verdicts)


def failing(path):
    return {c for c, v in verdicts(path).items() if v not in NOT_FAILURES}


def window_hides_a_key(cell):
    """The cell's case has a sliding window W and some sequence is longer than W (ids: 'ctx4096,37', 'win=128')."""
    tokens = cell.split()
    lens = [int(x) for t in tokens if t.startswith("ctx") for x in t[3:].split(",")]
    wins = [int(t[4:]) for t in tokens if t.startswith("win=")]
    return bool(wins) and max(lens) > wins[0]


def check_planted_variants(a, py, cases, scored):
    """The planted variant runners fail exactly their cells (score exit 1) and pass every other one."""
    ctrl = os.path.join(a.work, "softcap_ratio.json")
    run([a.pacheck, "run", "--suite", a.suite, "--kernel", "cpu.softcap_ratio", "--only-failures", "--json", ctrl], 0)
    qctrl = os.path.join(a.work, "qlen_no_causal.json")
    run([a.pacheck, "run", "--suite", a.suite, "--kernel", "cpu.qlen_no_causal", "--only-failures", "--json", qctrl], 0)
    expected = {"no-window": {c for c in scored if window_hides_a_key(c)}, "softcap-ratio": failing(ctrl),
                "no-causal": failing(qctrl)}
    for bug, want in expected.items():
        outs = os.path.join(a.work, f"outputs-{bug}")
        report = os.path.join(a.work, f"score-{bug}.json")
        run([py, a.runner, "--cases", cases, "--outputs", outs, "--bug", bug], 0)
        run([a.pacheck, "score", "--cases", cases, "--outputs", outs, "--only-failures", "--json", report], 1)
        got = failing(report)
        print(f"--bug {bug}: {len(got)} cells failed, {len(want)} expected")
        if not want or got != want:
            sys.exit(f"FAILED: --bug {bug} failed {len(got)} cells, expected {len(want)}; unexpected: "
                     f"{sorted(got - want)[:3]}, missed: {sorted(want - got)[:3]}")


def check_planted_per_slot(a, py, cases, scored):
    """The per-slot cells were exported and scored, and --bug slot-scale-unmasked fails exactly the cells
    cpu.slot_scale_unmasked fails (score exit 1)."""
    per_slot = [c for c in scored if " ks=slot" in f" {c}" or " vs=slot" in f" {c}"]
    scales = [c for c in per_slot if c.endswith("@scales")]
    print(f"{len(per_slot)} cells with per-slot scale tables ({len(scales)} with poison in their entries) scored as "
          "cpu.reference's")
    if not scales:
        sys.exit("FAILED: no cell with poison in a per-slot scale table was exported")
    ctrl = os.path.join(a.work, "slot_scale_unmasked.json")
    run([a.pacheck, "run", "--suite", a.suite, "--kernel", "cpu.slot_scale_unmasked", "--only-failures", "--json", ctrl], 0)
    want = failing(ctrl)
    outs = os.path.join(a.work, "outputs-slot-scale-unmasked")
    report = os.path.join(a.work, "score-slot-scale-unmasked.json")
    run([py, a.runner, "--cases", cases, "--outputs", outs, "--bug", "slot-scale-unmasked"], 0)
    run([a.pacheck, "score", "--cases", cases, "--outputs", outs, "--only-failures", "--json", report], 1)
    got = failing(report)
    print(f"--bug slot-scale-unmasked: {len(got)} cells failed, {len(want)} expected (all @scales: "
          f"{all(c.endswith('@scales') for c in got)})")
    if not want or got != want:
        sys.exit(f"FAILED: --bug slot-scale-unmasked failed {len(got)} cells, expected {len(want)}; unexpected: "
                 f"{sorted(got - want)[:3]}, missed: {sorted(want - got)[:3]}")


def check_mla(a, py, cases, scored, flt):
    """Steps (4) to (6) of --mla: the planted V-tail runner against cpu.mla_v_tail, the format_version 4 export,
    and the manifest edits of the MLA scalars."""
    mla_cells = [c for c in scored if " mla=" in c]
    print(f"{len(mla_cells)} MLA cells scored as cpu.mla_reference's")
    if not mla_cells or len(mla_cells) != len(scored):
        sys.exit(f"FAILED: {len(mla_cells)} MLA cells of {len(scored)} scored")
    ctrl = os.path.join(a.work, "mla_v_tail.json")
    run([a.pacheck, "run", "--suite", a.suite, *flt, "--kernel", "cpu.mla_v_tail", "--only-failures", "--json", ctrl], 0)
    want = failing(ctrl)
    outs = os.path.join(a.work, "outputs-mla-v-tail")
    report = os.path.join(a.work, "score-mla-v-tail.json")
    run([py, a.runner, "--cases", cases, "--outputs", outs, "--bug", "v-tail"], 0)
    run([a.pacheck, "score", "--cases", cases, "--outputs", outs, "--only-failures", "--json", report], 1)
    got = failing(report)
    print(f"--bug v-tail on MLA files: {len(got)} cells failed, {len(want)} expected (cpu.mla_v_tail's)")
    if not want or got != want:
        sys.exit(f"FAILED: --bug v-tail failed {len(got)} MLA cells, expected {len(want)}; unexpected: "
                 f"{sorted(got - want)[:3]}, missed: {sorted(want - got)[:3]}")

    old = os.path.join(a.work, "cases-v4")
    out = run([a.pacheck, "export", "--suite", a.suite, *flt, "--format-version", "4", "--out", old], 2)
    reason = "a format_version 4 export carries no latent cache; format_version 5 added it"
    if f"{len(scored)} MLA cells" not in out or reason not in out:
        sys.exit(f"FAILED: the format_version 4 export did not leave the {len(scored)} MLA cells out with its reason")

    with open(os.path.join(cases, "manifest.json")) as f:
        manifest = json.load(f)
    for field in ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
        edited = os.path.join(a.work, f"cases-{field}")
        shutil.rmtree(edited, ignore_errors=True)
        os.makedirs(edited)
        for name in os.listdir(cases):
            os.symlink(os.path.join(cases, name), os.path.join(edited, name))
        m = json.loads(json.dumps(manifest))
        m["files"][0][field] += 16
        os.remove(os.path.join(edited, "manifest.json"))
        with open(os.path.join(edited, "manifest.json"), "w") as f:
            json.dump(m, f)
        out = run([a.pacheck, "score", "--cases", edited, "--outputs", os.path.join(a.work, "outputs")], 2)
        want_text = f"field '{field}' is {m['files'][0][field]} but its file holds {manifest['files'][0][field]}"
        if want_text not in out:
            sys.exit(f"FAILED: the edit of {field} was not refused naming it ({want_text!r})")
        print(f"manifest edit of {field}: refused, exit 2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--runner", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--suite", default="gate")
    ap.add_argument("--variants", action="store_true", help="the attention-variant checks (use with --suite variants)")
    ap.add_argument("--per-slot", action="store_true", help="the per-slot scale-table checks (use with --suite aiter)")
    ap.add_argument("--mla", action="store_true", help="the MLA checks (use with --suite mla)")
    ap.add_argument("--filter", help="export, run and score only the cells whose id matches (pacheck's --filter)")
    a = ap.parse_args()
    flt = ["--filter", a.filter] if a.filter else []
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cases, outs, bug = (os.path.join(a.work, d) for d in ("cases", "outputs", "outputs-bug"))
    py = sys.executable

    run([a.pacheck, "export", "--suite", a.suite, *flt, "--out", cases], 0)
    run([py, a.runner, "--cases", cases, "--outputs", outs], 0)
    run([a.pacheck, "score", "--cases", cases, "--outputs", outs, "--only-failures", "--json",
         os.path.join(a.work, "score.json")], 0)
    # The reference kernel of each kind of cell the export holds (multi-head, MLA), each paired with its own kind's.
    scored = verdicts(os.path.join(a.work, "score.json"))
    kinds = {" mla=" in c for c in scored}
    refs = [arg for mla, k in ((False, "cpu.reference"), (True, "cpu.mla_reference")) if mla in kinds
            for arg in ("--kernel", k)]
    run([a.pacheck, "run", "--suite", a.suite, *flt, *refs, "--only-failures", "--json",
         os.path.join(a.work, "reference.json")], 0)
    ref = verdicts(os.path.join(a.work, "reference.json"))
    missing = [c for c in scored if c not in ref]
    differ = [(c, scored[c], ref[c]) for c in scored if c in ref and scored[c] != ref[c]]
    poisoned_cells = [c for c in scored if "clean" not in c.split()[-1]]
    print(f"compared {len(scored)} cells ({len(poisoned_cells)} with a fault) with {' and '.join(refs[1::2])}; "
          f"{len(ref) - len(scored)} of their cells not exported")
    if missing or differ or not poisoned_cells:
        sys.exit(f"FAILED: cells not in the reference run: {missing[:5]}; verdicts differ: {differ[:5]}")

    if a.variants:
        variant_cells = [c for c in scored if any(f" {t}=" in f" {c}" for t in ("win", "cap", "alibi", "sinks", "qlen"))]
        qlen_cells = [c for c in scored if " qlen=" in c]
        print(f"{len(variant_cells)} cells with an attention variant ({len(qlen_cells)} with several query tokens) "
              "scored as cpu.reference's")
        if not variant_cells or not qlen_cells:
            sys.exit("FAILED: no cell with an attention variant (or none with several query tokens) was exported")
        check_planted_variants(a, py, cases, scored)
    if a.per_slot:
        check_planted_per_slot(a, py, cases, scored)
    if a.mla:
        check_mla(a, py, cases, scored, flt)
        shutil.rmtree(a.work, ignore_errors=True)
        return

    # The decline channel: a runner that cannot take fp8_e4m3fnuz (or, with --variants, sinks) declines those
    # files; score reports their cells as declined with the runner's reason, every other verdict unchanged,
    # exit 0.
    dec = os.path.join(a.work, "outputs-decline")
    shutil.copytree(outs, dec)
    what, reason = ("sinks", "declined by the runner: sinks: this kernel does not implement it") if a.variants else \
        ("fp8_e4m3fnuz", "declined by the runner: kv_dtype fp8_e4m3fnuz is not supported")
    run([py, a.runner, "--cases", cases, "--outputs", dec,
         "--decline-variant" if a.variants else "--decline-kv-dtype", what], 0)
    run([a.pacheck, "score", "--cases", cases, "--outputs", dec, "--only-failures", "--json",
         os.path.join(a.work, "declined.json")], 0)
    with open(os.path.join(a.work, "declined.json")) as f:
        rows = {r["cell"]: r for r in json.load(f)["results"]}
    fnuz = [c for c in rows if (" sinks=" in c if a.variants else "fp8_e4m3fnuz" in c)]
    bad = [c for c in fnuz if rows[c]["verdict"] != "declined" or reason not in rows[c].get("detail", "")]
    changed = [c for c in rows if c not in fnuz and rows[c]["verdict"] != scored[c]]
    print(f"decline channel: {len(fnuz)} {what} cells declined, {len(rows) - len(fnuz)} others unchanged")
    if not fnuz or bad or changed:
        sys.exit(f"FAILED: declined cells wrong: {bad[:3]} {[rows[c] for c in bad[:1]]}; others changed: {changed[:3]}")

    run([py, a.runner, "--cases", cases, "--outputs", bug, "--bug", "v-tail"], 0)
    out = run([a.pacheck, "score", "--cases", cases, "--outputs", bug, "--negative-control", "--only-failures"], 0)
    if " 0 caught" in out:
        sys.exit("FAILED: the planted V-tail fault was not exercised by any cell")
    shutil.rmtree(a.work, ignore_errors=True)  # ~1 GB of case files


if __name__ == "__main__":
    main()
