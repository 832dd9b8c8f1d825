#!/usr/bin/env python3
"""A stand-in for the pacheck binary that ci/trust-run.py drives, for tests/trust/test_trust_run.py.

FAKE_PACHECK_PLANT selects what it plants: "none" (every honest cell passes, every planted fault fails),
"false_alarm" (cpu.honest fails one cell), "blind" (runs exit 3), "uncaught" (planted.drop_last_token passes
every cell), "fuzz" (fuzz of cpu.honest finds a counterexample). FAKE_PACHECK_SLEEP: seconds each run and
fuzz call takes (for --deadline). FAKE_PACHECK_TOLERANCE: the --tolerance every run and fuzz call must
be given (exit 2 otherwise).
"""
import json
import os
import sys
import time

time.sleep(float(os.environ.get("FAKE_PACHECK_SLEEP", "0")))
plant = os.environ.get("FAKE_PACHECK_PLANT", "none")
args = sys.argv[1:]
if args[:2] == ["list", "kernels"]:
    print("cpu.honest               cpu   an honest design")
    print("cpu.control              cpu   a negative control [negative control]")
    sys.exit(0)
if args[:2] == ["list", "suites"]:
    for name in ("gate", "boundary", "models", "sweep"):
        print(f"{name:<16} 1 cells  /fake/{name}.toml")
    sys.exit(0)
want = os.environ.get("FAKE_PACHECK_TOLERANCE")
if want and args[0] in ("run", "fuzz") and ("--tolerance" not in args or args[args.index("--tolerance") + 1] != want):
    print(f"fake pacheck: expected --tolerance {want}", file=sys.stderr)
    sys.exit(2)
if args[0] == "fuzz":
    if plant == "fuzz":
        print("    agreement does not hold for cpu.honest: fail: rel_linf 1e-1 > limit 9.8e-3")
        sys.exit(1)
    print("every property held")
    sys.exit(0)
if args[0] == "run":
    kernels = [args[i + 1] for i, a in enumerate(args) if a == "--kernel"]
    seed = args[args.index("--seed") + 1]
    results = []
    for k in kernels:
        bad = (k.startswith("planted.") and not (plant == "uncaught" and k == "planted.drop_last_token")) or \
              (plant == "false_alarm" and k == "cpu.honest")
        results.append({"kernel": k, "case": f"h1/1 d32 bs16 bf16 ctx17 vllm seed{seed}",
                        "cell": f"h1/1 d32 bs16 bf16 ctx17 vllm seed{seed} clean", "verdict": "fail" if bad else "pass",
                        "detail": "planted" if bad else "", "margin": 2.0 if bad else 0.25,
                        "metrics": {"rel_linf": 2e-2 if bad else 2.4e-3}})
    with open(args[args.index("--json") + 1], "w") as f:
        json.dump({"results": results}, f)
    sys.exit(3 if plant == "blind" else 1)
sys.exit(2)
