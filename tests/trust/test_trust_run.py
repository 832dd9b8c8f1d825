#!/usr/bin/env python3
"""ci/trust-run.py can fail: against tests/trust/fake_pacheck.py it holds when nothing is planted and
breaks, naming the cause, on a false alarm, a blind control, an uncaught planted fault and a fuzz failure.

Usage: test_trust_run.py SOURCE_DIR WORK_DIR
"""
import os
import pathlib
import subprocess
import sys

src, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
fake = src / "tests/trust/fake_pacheck.py"
os.chmod(fake, 0o755)
failures = []
for plant, rc, text in [("none", 0, "TRUST HOLDS"), ("false_alarm", 1, "false alarm: cpu.honest fail"),
                        ("blind", 1, "instrument blind (exit 3)"), ("uncaught", 1, "uncaught: planted.drop_last_token"),
                        ("fuzz", 1, "false alarm: fuzz --kernel cpu.honest --seed 1")]:
    p = subprocess.run([sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake), "--out",
                        str(work / plant), "--seeds", "2", "--suites", "gate", "--fuzz-seeds", "1", "--jobs", "2"],
                       env={**os.environ, "FAKE_PACHECK_PLANT": plant}, capture_output=True, text=True)
    ok = p.returncode == rc and text in p.stdout
    print(f"{'ok    ' if ok else 'FAILED'} plant={plant}: exit {p.returncode} (want {rc}), '{text}' "
          f"{'found' if text in p.stdout else 'missing'}")
    if not ok:
        failures.append(plant)
        print(p.stdout + p.stderr)
# --deadline: with one job and runs of 1 s, a 0.5 s deadline lets the first run start and no other; the
# run then cannot hold (exit 4) and names what it left undone.
p = subprocess.run([sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake), "--out", str(work / "deadline"),
                    "--seeds", "2", "--suites", "gate", "--fuzz-seeds", "1", "--jobs", "1", "--deadline", "0.5"],
                   env={**os.environ, "FAKE_PACHECK_PLANT": "none", "FAKE_PACHECK_SLEEP": "1"}, capture_output=True,
                   text=True)
ok = p.returncode == 4 and "TRUST INCOMPLETE" in p.stdout and "not started (--deadline): gate --seed 2" in p.stdout
print(f"{'ok    ' if ok else 'FAILED'} --deadline 0.5: exit {p.returncode} (want 4), incomplete and naming seed 2")
if not ok:
    failures.append("deadline")
    print(p.stdout + p.stderr)
# --tolerance reaches every run and fuzz call (the fake exits 2 on any other policy) and the summary names it.
p = subprocess.run([sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake), "--out", str(work / "calibrated"),
                    "--seeds", "1", "--suites", "gate", "--fuzz-seeds", "1", "--jobs", "2", "--tolerance", "calibrated"],
                   env={**os.environ, "FAKE_PACHECK_PLANT": "none", "FAKE_PACHECK_TOLERANCE": "calibrated"},
                   capture_output=True, text=True)
ok = p.returncode == 0 and "TRUST HOLDS" in p.stdout and "tolerance calibrated" in p.stdout
print(f"{'ok    ' if ok else 'FAILED'} --tolerance calibrated: exit {p.returncode} (want 0), holds and named")
if not ok:
    failures.append("tolerance")
    print(p.stdout + p.stderr)
p = subprocess.run([sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake), "--out", str(work / "kernels"),
                    "--kernels", "cpu.honest,cpu.bogus"], capture_output=True, text=True)
ok = p.returncode == 2 and "--kernels: cpu.bogus" in p.stderr
print(f"{'ok    ' if ok else 'FAILED'} --kernels cpu.bogus: exit {p.returncode} (want 2): {p.stderr.strip()[-80:]}")
if not ok:
    failures.append("kernels")
p = subprocess.run([sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake), "--seeds", "x"],
                   capture_output=True, text=True)
print(f"{'ok    ' if p.returncode == 2 else 'FAILED'} --seeds x: exit {p.returncode} (want 2): {p.stderr.strip()[-80:]}")
if p.returncode != 2:
    failures.append("usage")
# Inputs refused before any run, each naming the option (a fresh user's trial: --short silently overrode
# these, an unknown suite launched ten failing runs, an unwritable --out ended in a traceback).
for extra, text in [(["--short", "--seeds", "3"], "--short fixes --seeds"),
                    (["--suites", "nosuch", "--fuzz-seeds", "0"], "--suites: nosuch not among pacheck's suites"),
                    (["--out", "/proc/trust-run-cannot-be-here"], "--out /proc/trust-run-cannot-be-here: cannot write")]:
    args = [sys.executable, str(src / "ci/trust-run.py"), "--pacheck", str(fake)]
    if "--out" not in extra:
        args += ["--out", str(work / "usage")]
    p = subprocess.run(args + extra, capture_output=True, text=True)
    ok = p.returncode == 2 and text in p.stderr and "Traceback" not in p.stderr
    print(f"{'ok    ' if ok else 'FAILED'} {' '.join(extra)}: exit {p.returncode} (want 2): {p.stderr.strip()[-90:]}")
    if not ok:
        failures.append(" ".join(extra))
sys.exit(1 if failures else 0)
