#!/usr/bin/env python3
"""The trust run (issue 16; docs/TOLERANCE.md, "Trust run"): can pacheck's verdicts be believed?

Every built-in CPU kernel (the honest designs and the negative controls) and the planted accumulation
faults run through the fixed suites at many seeds (`pacheck run --seed N`), then `pacheck fuzz` runs every
property on every honest design at several seeds. The run holds when
  - no honest kernel fails a single cell or property (0 false alarms),
  - every negative control is caught (no run exits 3, "instrument blind"),
  - every planted fault fails cells at every seed (in at least one of the suites run at that seed).

  ci/trust-run.py [--pacheck BIN] [--out DIR] [--seeds N] [--first-seed S] [--suites gate,models,...]
                  [--fuzz-seeds M] [--first-fuzz-seed F] [--fuzz-budget SECONDS] [--jobs P] [--device cuda:0] [--short]
                  [--kernels K1,K2,...] [--no-planted] [--no-controls] [--deadline SECONDS] [--threads T]

--kernels keeps only the named built-in kernels (measurement runs split over machines: the GPU kernels on
the GPU machine, the CPU designs elsewhere); --no-planted leaves the planted faults out. --deadline stops
starting runs once that many seconds have passed (a machine lent for a fixed time): the runs not started
are listed, and the run cannot hold (exit 4), however clean the runs that finished.

With --device cuda:0 (or hip:0) the GPU kernels of that kind join the CPU ones: honest GPU designs are held
to the same bar, GPU negative controls must be caught.

Output in DIR (default build/trust-run): one --json report and log per (suite, seed), one log per fuzz run
and summary.txt (worst margin per kernel and output dtype, ci/margins.py, and the findings).
Exit status: 0 the run holds; 1 a false alarm, a blind control or an uncaught planted fault; 2 bad usage, or
a pacheck run that ended in error (exit status 2, 4 or a signal); 4 no finding, but --deadline left runs
undone.
"""
import argparse
import concurrent.futures
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import margins  # noqa: E402  (ci/margins.py)

FAULTY = ["planted.bf16_accumulator", "planted.f16_accumulator", "planted.drop_last_token", "planted.exp2_no_log2e",
          "planted.truncating_output"]
# Left out of --short, whose boundary suite cannot show it: an f16 sum of <= 1,040 tokens into a bf16 output
# loses less than the output's own rounding (gate's 4096-token f16 cells catch it at every seed).
# Faults that only some suites can show: left out (and said so) when none of those suites is run.
SHOWN_ONLY_BY = {"planted.f16_accumulator": ({"gate", "models"},
                                             "boundary's and sweep's bf16 outputs cannot show an f16 sum")}
# What the run writes into --out; only these are removed from an earlier run there.
OWN_FILES = re.compile(r"^(?:[\w.-]+-seed\d+\.(?:json|log)|fuzz-[\w.-]+-seed\d+\.log|summary\.txt|summary\.rows\.json)$")
PASSING = {"pass", "declined"}


def fail_usage(msg):
    print(f"trust-run: {msg}", file=sys.stderr)
    sys.exit(2)


def positive_int(flag, least=0):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} '{text}' is not a whole number")
        if v < least:
            raise argparse.ArgumentTypeError(f"{flag} {v} must be >= {least}")
        return v
    return parse


def parse_args():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pacheck", default=str(here.parent / "build/default/cli/pacheck"))
    ap.add_argument("--out", default=str(here.parent / "build/trust-run"))
    ap.add_argument("--seeds", type=positive_int("--seeds"), default=None, help="seeds per suite (default 10)")
    ap.add_argument("--first-seed", type=positive_int("--first-seed"), default=1)
    ap.add_argument("--suites", default=None, help="comma-separated suite names (default gate,boundary,models,sweep)")
    ap.add_argument("--fuzz-seeds", type=positive_int("--fuzz-seeds"), default=None,
                    help="fuzz every honest kernel at M seeds from --first-fuzz-seed (0: no fuzzing)")
    ap.add_argument("--first-fuzz-seed", type=positive_int("--first-fuzz-seed", 1), default=1,
                    help="the first fuzz seed (default 1): a 10-seed fuzz run split over two machines or calls")
    ap.add_argument("--fuzz-budget", type=float, default=None, help="wall seconds per fuzz run (default 60)")
    ap.add_argument("--jobs", type=positive_int("--jobs", 1), default=os.cpu_count() or 2,
                    help="pacheck processes at once, each with --threads workers (default: the number of cores)")
    ap.add_argument("--threads", type=positive_int("--threads", 1), default=1,
                    help="worker threads of each pacheck run (-j; default 1): fewer, shorter runs under --deadline")
    ap.add_argument("--no-controls", action="store_true",
                    help="leave the negative controls out (measurement runs that only need honest and planted kernels)")
    ap.add_argument("--kernels", default=None,
                    help="comma-separated kernels to keep: built-in ones and planted faults (default: every CPU kernel, "
                         "the device's and every planted fault)")
    ap.add_argument("--no-planted", action="store_true", help="leave the planted faults out")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="start no run after this many seconds (0: no deadline); runs not started are listed")
    ap.add_argument("--tolerance", choices=("fixed", "calibrated"), default="fixed",
                    help="tolerance policy of every run and fuzz (default fixed, pacheck's default)")
    ap.add_argument("--device", default="cpu", help="cpu (default), or cuda[:N] / hip[:N] to add that kind's kernels")
    ap.add_argument("--short", action="store_true",
                    help="the ctest form: boundary at 2 seeds, fuzz 1 seed x 3 s")
    a = ap.parse_args()
    given = [f for f, v in (("--seeds", a.seeds), ("--suites", a.suites), ("--fuzz-seeds", a.fuzz_seeds),
                            ("--fuzz-budget", a.fuzz_budget)) if v is not None]
    if a.short and given:
        fail_usage(f"--short fixes {', '.join(given)} (boundary at 2 seeds, fuzz 1 seed x 3 s): give one or the other")
    short = a.short
    a.seeds = (2 if short else 10) if a.seeds is None else a.seeds
    a.suites = ("boundary" if short else "gate,boundary,models,sweep") if a.suites is None else a.suites
    a.fuzz_seeds = (1 if short else 10) if a.fuzz_seeds is None else a.fuzz_seeds
    a.fuzz_budget = (3.0 if short else 60.0) if a.fuzz_budget is None else a.fuzz_budget
    if not (a.deadline >= 0):
        fail_usage(f"--deadline {a.deadline} must be >= 0 seconds")
    if not (a.fuzz_budget > 0) or not math.isfinite(a.fuzz_budget):
        fail_usage(f"--fuzz-budget {a.fuzz_budget} must be > 0 and finite seconds")
    if a.kernels is not None and not [k for k in a.kernels.split(",") if k]:
        fail_usage("--kernels names no kernel (leave it out for every kernel)")
    a.suites = [s for s in a.suites.split(",") if s]
    if (not a.suites or a.seeds == 0) and a.fuzz_seeds == 0:
        fail_usage("nothing to run: --suites is empty or --seeds is 0, and --fuzz-seeds is 0")
    if not a.suites:
        a.seeds = 0
    if not os.path.isfile(a.pacheck) or not os.access(a.pacheck, os.X_OK):
        fail_usage(f"--pacheck {a.pacheck} is not an executable file")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        fail_usage(f"--out {a.out} exists and is not a directory")
    known = suites_of(a.pacheck)
    unknown = [s for s in a.suites if s not in known and not (s.endswith(".toml") and os.path.isfile(s))]
    if unknown:
        fail_usage(f"--suites: {', '.join(unknown)} not among pacheck's suites ({' '.join(sorted(known))}) "
                   "nor a .toml file")
    return a


def suites_of(pacheck):
    """The suite names `pacheck list suites` prints (the first word of each line)."""
    p = subprocess.run([pacheck, "list", "suites"], capture_output=True, text=True)
    if p.returncode != 0:
        fail_usage(f"--pacheck {pacheck}: `list suites` exited {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}")
    return {line.split()[0] for line in p.stdout.splitlines() if line.split()}


def kernels(pacheck, device):
    """(every built-in kernel of the CPU and of `device`'s kind, the honest ones) from `pacheck list kernels`."""
    p = subprocess.run([pacheck, "list", "kernels"], capture_output=True, text=True)
    if p.returncode != 0:
        fail_usage(f"--pacheck {pacheck}: `list kernels` exited {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}")
    out = p.stdout
    kinds = {"cpu", device.split(":")[0]}
    every, honest = [], []
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] in kinds:
            every.append(words[0])
            if "[negative control]" not in line:
                honest.append(words[0])
    return every, honest


NOT_STARTED = "not started"


def run(cmd, log, stop_at=None):
    """cmd's exit status, its output in `log`; NOT_STARTED when the clock has passed `stop_at`."""
    if stop_at is not None and time.monotonic() >= stop_at:
        return NOT_STARTED
    with open(log, "w", encoding="utf-8") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode


def main():
    a = parse_args()
    out = pathlib.Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".trust-run-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        fail_usage(f"--out {a.out}: cannot write there: {e.strerror or e}")
    for old in out.iterdir():
        if old.is_file() and OWN_FILES.match(old.name):
            old.unlink()
    cpu, honest = kernels(a.pacheck, a.device)
    faulty = [] if a.no_planted else list(FAULTY)
    if a.kernels is not None:
        keep = [k for k in a.kernels.split(",") if k]
        unknown = [k for k in keep if k not in cpu and k not in FAULTY]
        if unknown:
            kinds = "cpu" if a.device == "cpu" else f"cpu and {a.device}"
            fail_usage(f"--kernels: {', '.join(unknown)} not among the built-in kernels of {kinds} "
                       f"({' '.join(cpu)}) or the planted faults ({' '.join(FAULTY)})")
        cpu, honest = [k for k in cpu if k in keep], [k for k in honest if k in keep]
        faulty = [k for k in faulty if k in keep]
    for k, (suites, why) in SHOWN_ONLY_BY.items():
        if k in faulty and not suites & set(a.suites):
            faulty.remove(k)
            print(f"trust-run: leaves out {k}, shown only by {'/'.join(sorted(suites))}: {why}")
    if not honest:
        fail_usage("no honest kernel to run (`pacheck list kernels`, --kernels)")
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    controls = [] if a.no_controls else [k for k in cpu if k not in honest]
    print(f"trust-run: honest {' '.join(honest)}; controls {' '.join(controls) or '(none)'}; "
          f"faulty {' '.join(faulty) or '(none)'}", flush=True)
    print(f"trust-run: suites {','.join(a.suites)} x seeds {seeds.start}..{seeds.stop - 1}; fuzz {a.fuzz_seeds} "
          f"seeds x {a.fuzz_budget:g} s; {a.jobs} jobs; tolerance {a.tolerance}", flush=True)

    chosen = honest if a.no_controls else cpu
    kernel_args = [arg for k in chosen + faulty for arg in ("--kernel", k)]
    dev = ["--device", a.device]
    suite_jobs = {(suite, seed): [a.pacheck, "run", "--suite", suite, "--seed", str(seed), "-j", str(a.threads), *dev,
                                  *kernel_args, "--tolerance", a.tolerance, "--only-failures", "--json", str(out / f"{suite}-seed{seed}.json")]
                  for suite in a.suites for seed in seeds}
    fuzz_jobs = {(k, seed): [a.pacheck, "fuzz", "--kernel", k, "--seed", str(seed), "--budget", f"{a.fuzz_budget:g}",
                             "--tolerance", a.tolerance, *([] if k.startswith("cpu.") else dev)]
                 for k in honest for seed in range(a.first_fuzz_seed, a.first_fuzz_seed + a.fuzz_seeds)}
    t0 = time.monotonic()
    stop_at = t0 + a.deadline if a.deadline else None
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        # Seed by seed, so that a deadline leaves the highest seeds undone rather than one whole suite.
        order = sorted(suite_jobs, key=lambda key: (key[1], a.suites.index(key[0])))
        suite_rc = {key: pool.submit(run, suite_jobs[key], out / f"{key[0]}-seed{key[1]}.log", stop_at) for key in order}
        fuzz_rc = {key: pool.submit(run, cmd, out / f"fuzz-{key[0]}-seed{key[1]}.log", stop_at)
                   for key, cmd in fuzz_jobs.items()}
        suite_rc = {k: f.result() for k, f in suite_rc.items()}
        fuzz_rc = {k: f.result() for k, f in fuzz_rc.items()}
    seconds = time.monotonic() - t0
    undone = [f"{suite} --seed {seed}" for (suite, seed), rc in sorted(suite_rc.items()) if rc == NOT_STARTED]
    undone += [f"fuzz --kernel {k} --seed {seed}" for (k, seed), rc in sorted(fuzz_rc.items()) if rc == NOT_STARTED]
    suite_rc = {k: rc for k, rc in suite_rc.items() if rc != NOT_STARTED}
    fuzz_rc = {k: rc for k, rc in fuzz_rc.items() if rc != NOT_STARTED}

    findings, errors = [], []
    reports = []
    caught = {(k, seed): 0 for k in faulty for seed in seeds}  # failing cells per planted fault and seed
    for (suite, seed), rc in sorted(suite_rc.items()):
        name = f"{suite} --seed {seed}"
        if rc == 3:
            findings.append(f"{name}: instrument blind (exit 3): a negative control was not caught")
        elif rc not in (0, 1):
            errors.append(f"{name}: pacheck run exited {rc} (see {suite}-seed{seed}.log)")
            continue
        path = out / f"{suite}-seed{seed}.json"
        reports.append(path)
        results = json.loads(path.read_text(encoding="utf-8")).get("results", [])
        for r in results:
            if r["kernel"] in honest and r["verdict"] not in PASSING:
                findings.append(f"false alarm: {r['kernel']} {r['verdict']} on '{r['cell']}' ({name}): {r['detail']}")
        for r in results:
            if r["kernel"] in faulty and r["verdict"] not in PASSING:
                caught[(r["kernel"], seed)] += 1
    for (k, seed), n in sorted(caught.items()):
        if n == 0 and all(suite_rc.get((suite, seed)) in (0, 1, 3) for suite in a.suites):
            findings.append(f"uncaught: {k} passes every cell of {', '.join(a.suites)} at --seed {seed}")
    for (k, seed), rc in sorted(fuzz_rc.items()):
        if rc == 1:
            log = (out / f"fuzz-{k}-seed{seed}.log").read_text(encoding="utf-8", errors="replace")
            why = next((l.strip() for l in log.splitlines() if "does not hold" in l), "a property failed")
            findings.append(f"false alarm: fuzz --kernel {k} --seed {seed}: {why}")
        elif rc != 0:
            errors.append(f"fuzz --kernel {k} --seed {seed}: exited {rc} (see fuzz-{k}-seed{seed}.log)")

    ran_seeds = sorted({seed for (_, seed) in suite_rc})
    rows = margins.collect(reports)
    cells = sum(r["cells"] for (k, _), r in rows.items() if k in honest)
    lines = [f"trust run: {len(suite_jobs)} suite runs ({', '.join(a.suites)} x {a.seeds} seeds), "
             f"{len(fuzz_jobs)} fuzz runs ({a.fuzz_seeds} seeds x {a.fuzz_budget:g} s), {seconds:.0f} s, {a.jobs} jobs, "
             f"tolerance {a.tolerance}",
             f"honest kernels: {len(honest)}, honest cells judged: {cells}",
             "planted faults, failing cells per seed (min..max): " + ", ".join(
                 f"{k} {min(caught[(k, s)] for s in ran_seeds)}..{max(caught[(k, s)] for s in ran_seeds)}"
                 for k in faulty if ran_seeds), ""]
    if undone:
        lines.insert(1, f"--deadline {a.deadline:g} s: {len(undone)} run(s) not started; suites ran at seeds "
                        f"{', '.join(map(str, ran_seeds)) or 'none'}")
    lines += margins.table(rows) + [""]
    lines += findings + errors + [f"not started (--deadline): {u}" for u in undone]
    ok = not findings and not errors
    if ok and undone:
        lines.append(f"TRUST INCOMPLETE: 0 findings in the runs that finished, {len(undone)} run(s) not started")
    else:
        held = ["0 false alarms"] + [f"every control caught ({len(controls)})" if controls else "no control run"]
        held.append(f"every planted fault caught ({len(faulty)})" if faulty else "no planted fault run")
        lines.append(f"TRUST HOLDS: {', '.join(held)}" if ok else
                     f"TRUST BROKEN: {len(findings)} finding(s), {len(errors)} error(s)")
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text, encoding="utf-8")
    margins.dump(rows, out / "summary.rows.json")
    print(text, end="")
    return (4 if undone else 0) if ok else (2 if errors and not findings else 1)


if __name__ == "__main__":
    sys.exit(main())
