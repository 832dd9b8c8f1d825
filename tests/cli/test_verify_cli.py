#!/usr/bin/env python3
"""CLI-level tests of evidence.json and `pacheck verify` (issue 17 item 6), run by ctest against the built binary.

usage: test_verify_cli.py SCENARIO --pacheck BIN --source ROOT [--plugin LIB] [--example-plugin LIB]

Scenarios:
  verify_real    a real run's report directory (a small suite file, and the built-in tail-poison suite by name)
                 verifies: exit 0 and one line naming the suite, the results, the device, 0 failed, the controls
                 caught and the self-test; evidence.json is the last file written and lists every report file;
                 --device-expect that the description lacks is exit 17; a missing DIR is exit 2
  verify_tamper  one byte changed in results.jsonl or report.json (exit 11) or in evidence.json (exit 10), a
                 result line deleted or added (11; 13 when the manifest is rewritten to match), a file added
                 (11), evidence.json removed (10), results.jsonl a link or FIFO (11), another suite claimed
                 (--suite tail-poison, an edited suite file: 12), a filtered run (12), a run without negative
                 controls (15), a control's caught cell turned into a pass and every count rewritten (15), a
                 failed self-test written into report.json and the manifest (16)
  verify_plugin  a plugin run with --with-controls verifies with --plugin LIB (exit 0) and without it (the hash
                 reported, not checked); another library, the library with one byte appended, and --plugin on a
                 run that loaded none are exit 14; a plugin run without --with-controls has no control (15)
  verify_require_pass  --require-pass: a run whose plugin kernel failed a cell verifies (0) without it and is exit 18
                 naming the first failed cell with it; a passing run is 0 with it; --device-expect '' is exit 2
  resume_rebuilt_plugin  --resume with the plugin library rebuilt (same path and kernel names, other bytes) since
                 the stop is refused (exit 2, naming plugin_sha256), so one report never mixes two builds
  repro_isolated  the repro line of a crashing plugin cell reports verdict crash (exit 1) instead of killing pacheck;
                 a hanging one is timeout under --cell-timeout; the all-NaN output of a tail fault prints
                 max_abs nan, not 0
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports_cli import check, numpy_python, run  # noqa: E402

SMALL_SUITE = """name = "evidence-small"
description = "a few cells for the evidence tests: V tail NaN caught by cpu.vector_v at the straddling length"

[[cells]]
heads = "4/2"
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [17, 32]
faults = ["clean", "K:nan@tail", "V:nan@tail", "K+V:nan@tail"]
"""

KERNELS = ["--kernel", "cpu.reference", "--kernel", "cpu.vector_v"]

# SMALL_SUITE's cells and two MLA cells (DeepSeek-V3's latent row and scale): a mixed suite, as gate is.
MIXED_SUITE = SMALL_SUITE.replace('"evidence-small"', '"evidence-mixed"') + """
[[cells]]
mla = "512+64"
heads = "4/1"
head_sizes = 576
block_sizes = 16
layouts = "nhd"
dtypes = "bf16"
seq_lens = [17]
scales = [0.1352338]
faults = ["clean", "V:nan@tail"]
"""


def dump(obj):
    """JSON text as pacheck writes evidence.json (nlohmann's dump(1): sorted keys, one space of indent)."""
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def forge(d, edit=None):
    """What a forger with the directory can do: rewrite evidence.json so that it lists the files as they are now
    (after `edit(evidence)`, if given), with a matching evidence_sha256."""
    path = os.path.join(d, "evidence.json")
    ev = json.loads(read(path))
    for f in ev["files"]:
        data = read(os.path.join(d, f["name"]))
        f["bytes"], f["sha256"] = len(data), sha256(data)
    if edit:
        edit(ev)
    ev.pop("evidence_sha256")
    ev["evidence_sha256"] = sha256(dump(ev).encode())
    write(path, (dump(ev) + "\n").encode())


def suite_file(tmp, text=SMALL_SUITE, name="small.toml"):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def real_run(args, d, *sel, expect=0):
    run(args, "run", "--device", "cpu", *sel, "-j2", "--report-dir", d, expect=expect, timeout=600)
    check(os.path.exists(os.path.join(d, "evidence.json")), f"{d} holds no evidence.json: {sorted(os.listdir(d))}")


def verify(args, d, *extra, expect, says=()):
    p = run(args, "verify", d, *extra, expect=expect)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    check(len(lines) == 1, f"verify printed {len(lines)} lines, want one:\n{p.stdout}")
    for want in (says if isinstance(says, (list, tuple)) else [says]):
        check(want in p.stdout, f"verify {d} {' '.join(extra)}: {want!r} not in {p.stdout!r}")
    return lines[0]


def copy(src, tmp, name):
    dst = os.path.join(tmp, name)
    shutil.copytree(src, dst, symlinks=True)
    lock = os.path.join(dst, ".pacheck.lock")
    if os.path.exists(lock):
        os.remove(lock)
    return dst


def scenario_verify_real(args, tmp):
    suite = suite_file(tmp)
    d = os.path.join(tmp, "small")
    real_run(args, d, "--suite", suite, *KERNELS)
    ev_path = os.path.join(d, "evidence.json")
    text = read(ev_path).decode()
    ev = json.loads(text)
    check(text == dump(ev) + "\n", "evidence.json is not nlohmann's dump(1): the forger of verify_tamper would be wrong")
    listed = [f["name"] for f in ev["files"]]
    check(set(listed) == set(os.listdir(d)) - {"evidence.json", ".pacheck.lock"},
          f"evidence.json lists {listed}, the directory holds {sorted(os.listdir(d))}")
    newest = max(listed, key=lambda f: os.stat(os.path.join(d, f)).st_mtime_ns)
    check(os.stat(ev_path).st_mtime_ns >= os.stat(os.path.join(d, newest)).st_mtime_ns,
          "evidence.json was not written last")
    check(ev["suite"]["name"] == "evidence-small" and ev["suite"]["cells"] == 8 and ev["results"] == 16, str(ev["suite"]))
    ctl = {c["kernel"]: c for c in ev["controls"]}
    check(list(ctl) == ["cpu.vector_v"] and ctl["cpu.vector_v"]["planted"] == 2 and ctl["cpu.vector_v"]["caught"] == 2
          and ctl["cpu.vector_v"]["devices"] == ["cpu"], f"controls: {ev['controls']}")
    check(ev["selftest"]["passed"] is True and ev["device"]["spec"] == "cpu" and ev["pacheck"]["version"], str(ev))
    desc = ev["device"]["description"]
    line = verify(args, d, "--suite", suite, expect=0,
                  says=["verified: suite evidence-small (8 cells, sha256 " + ev["suite"]["sha256"][:8],
                        "16 results", "no plugin", f"on {desc} (cpu)", ": 0 failed, controls 2/2 caught, self-test passed"])
    print(line)
    verify(args, d, "--suite", suite, "--device-expect", desc[: max(3, len(desc) // 2)], expect=0, says="verified:")
    verify(args, d, "--suite", suite, "--device-expect", "NVIDIA H200", expect=17,
           says=["device.description", "does not contain --device-expect 'NVIDIA H200'"])
    # Without --suite, the suite the evidence names: this one is a file, not a built-in suite.
    verify(args, d, expect=12, says="'evidence-small' is no suite this pacheck knows")
    verify(args, os.path.join(tmp, "nosuch"), expect=2, says="not a directory")
    # A built-in suite by name, as docs/VALIDATING.md's exchange uses it.
    t = os.path.join(tmp, "tail")
    real_run(args, t, "--suite", "tail-poison", *KERNELS)
    verify(args, t, expect=0, says=["verified: suite tail-poison (32 cells", "64 results", "controls 8/8 caught"])
    verify(args, t, "--suite", "tail-poison", expect=0, says="verified:")
    verify_mixed(args, tmp)


def verify_mixed(args, tmp):
    """A mixed suite pairs each kernel with its own kind's cells (8 multi-head x 1 + 2 MLA x 2 = 12 results):
    verify expects those pairs, from the evidence's takes_mla, and no others."""
    suite = suite_file(tmp, MIXED_SUITE, "mixed.toml")
    m = os.path.join(tmp, "mixed")
    real_run(args, m, "--suite", suite, "--kernel", "cpu.reference", "--kernel", "cpu.mla_reference", "--kernel",
             "cpu.mla_v_tail")
    ev = json.loads(read(os.path.join(m, "evidence.json")))
    check([(k["name"], k["takes_mla"]) for k in ev["kernels"]] ==
          [("cpu.reference", False), ("cpu.mla_reference", True), ("cpu.mla_v_tail", True)], str(ev["kernels"]))
    verify(args, m, "--suite", suite, expect=0, says=["verified: suite evidence-mixed (10 cells", "12 results"])
    # An MLA kernel recorded as multi-head would have had the 8 multi-head cells, not the 2 MLA ones.
    forged = copy(m, tmp, "mixed-forged")
    forge(forged, lambda e: e["kernels"][1].update(takes_mla=False))
    verify(args, forged, "--suite", suite, expect=13, says="is not a cell of suite 'evidence-mixed'")


def scenario_verify_tamper(args, tmp):
    suite = suite_file(tmp)
    base = os.path.join(tmp, "base")
    real_run(args, base, "--suite", suite, *KERNELS)
    S = ["--suite", suite]
    verify(args, base, *S, expect=0, says="verified:")
    n = [0]

    def fresh():
        n[0] += 1
        return copy(base, tmp, f"t{n[0]}")

    # One byte of results.jsonl, report.json.
    d = fresh()
    p = os.path.join(d, "results.jsonl")
    data = read(p)
    i = data.index(b'"verdict":"pass"') + len(b'"verdict":"')
    write(p, data[:i] + b"f" + data[i + 1:])
    verify(args, d, *S, expect=11, says=["results.jsonl: sha256", "changed after the run"])
    d = fresh()
    p = os.path.join(d, "report.json")
    data = read(p)
    write(p, data.replace(b'"passed": ', b'"passed": 9', 1))
    verify(args, d, *S, expect=11, says=["report.json:", "bytes, evidence.json lists", "changed after the run"])
    d = fresh()
    p = os.path.join(d, "report.json")
    data = bytearray(read(p))
    data[len(data) // 2] ^= 0x01
    write(p, bytes(data))
    verify(args, d, *S, expect=11, says=["report.json: sha256"])
    # One byte of evidence.json: a digit of a listed hash, a count, white space.
    for old, new, why in ((b'"sha256": "', b'"sha256": "0', "evidence_sha256 does not match"),
                          (b'"results": 16', b'"results": 15', "evidence_sha256 does not match"),
                          (b'"files": [', b'"files":  [', "not byte for byte")):
        d = fresh()
        p = os.path.join(d, "evidence.json")
        data = read(p)
        check(old in data, f"{old!r} not in evidence.json")
        if new.startswith(b'"sha256": "0'):
            i = data.index(old) + len(old)
            data = data[:i] + (b"1" if data[i:i + 1] == b"0" else b"0") + data[i + 1:]
        else:
            data = data.replace(old, new, 1)
        write(p, data)
        verify(args, d, *S, expect=10, says=["evidence.json", why])
    d = fresh()
    write(os.path.join(d, "evidence.json"), b"{")
    verify(args, d, *S, expect=10, says="not valid JSON")
    d = fresh()
    os.remove(os.path.join(d, "evidence.json"))
    verify(args, d, *S, expect=10, says=["evidence.json: missing"])

    # A result line deleted, then the same with the manifest rewritten to match.
    lines_of = lambda d: read(os.path.join(d, "results.jsonl")).splitlines(keepends=True)
    d = fresh()
    lines = lines_of(d)
    write(os.path.join(d, "results.jsonl"), b"".join(lines[:3] + lines[4:]))
    verify(args, d, *S, expect=11, says="results.jsonl: ")
    forge(d)
    verify(args, d, *S, expect=13, says=["results.jsonl: no result for", "1 of 16 results missing"])
    # A line added: a second result for a cell, a cell the suite does not hold.
    d = fresh()
    lines = lines_of(d)
    write(os.path.join(d, "results.jsonl"), b"".join(lines + [lines[0]]))
    verify(args, d, *S, expect=11, says="results.jsonl: ")
    forge(d)
    verify(args, d, *S, expect=13, says=["results.jsonl:17: a second result for", "(the first is line 1)"])
    d = fresh()
    lines = lines_of(d)
    extra = json.loads(lines[0])
    extra["cell"] = extra["cell"].replace("ctx17", "ctx18")
    write(os.path.join(d, "results.jsonl"), b"".join(lines + [(json.dumps(extra) + "\n").encode()]))
    forge(d)
    verify(args, d, *S, expect=13, says=["results.jsonl:17:", "ctx18", "is not a cell of suite 'evidence-small'"])
    # A file the evidence does not list.
    d = fresh()
    write(os.path.join(d, "extra.jsonl"), b"{}\n")
    verify(args, d, *S, expect=11, says=["extra.jsonl: not listed in evidence.json"])
    # results.jsonl a link (to an identical copy) or a FIFO: refused by the capped reader, not followed.
    d = fresh()
    p = os.path.join(d, "results.jsonl")
    shutil.copy(p, os.path.join(tmp, "outside.jsonl"))
    os.remove(p)
    os.symlink(os.path.join(tmp, "outside.jsonl"), p)
    verify(args, d, *S, expect=11, says=["results.jsonl", "symbolic link"])
    d = fresh()
    p = os.path.join(d, "results.jsonl")
    os.remove(p)
    os.mkfifo(p)
    verify(args, d, *S, expect=11, says=["results.jsonl", "not a regular file (a FIFO)"])

    # Another suite claimed: a built-in one, and this suite's file with one cell fewer.
    verify(args, base, "--suite", "tail-poison", expect=12,
           says=["the run is of suite 'evidence-small' (8 cells", "--suite tail-poison resolves to 'tail-poison' (32 cells",
                 "not the same cells"])
    fewer = suite_file(tmp, SMALL_SUITE.replace('"K+V:nan@tail"', ""), "fewer.toml")
    verify(args, base, "--suite", fewer, expect=12, says=["(6 cells", "not the same cells"])
    verify(args, base, "--suite", os.path.join(tmp, "nosuch.toml"), expect=2, says="--suite:")
    # A filtered run, a run without a negative control.
    d = os.path.join(tmp, "filtered")
    real_run(args, d, "--suite", suite, *KERNELS, "--filter", "ctx17 ")
    verify(args, d, *S, expect=12, says=["run.json: filter 'ctx17 '", "leaves cells of the suite out"])
    d = os.path.join(tmp, "nocontrol")
    real_run(args, d, "--suite", suite, "--kernel", "cpu.reference")
    verify(args, d, *S, expect=15, says=["no negative control was caught on the run's device cpu (none ran)",
                                         "--with-controls"])

    # A forger who turns a caught cell of the control into a pass and rewrites every count: blind, exit 15.
    d = fresh()
    lines = lines_of(d)
    for k, l in enumerate(lines):
        r = json.loads(l)
        if r["kernel"] == "cpu.vector_v" and r["expected_fail"]:
            r["verdict"] = "pass"
            lines[k] = (json.dumps(r) + "\n").encode()
            break
    write(os.path.join(d, "results.jsonl"), b"".join(lines))
    rp = os.path.join(d, "report.json")
    report = json.loads(read(rp))
    report["summary"]["caught"] -= 1
    write(rp, dump(report).encode())

    def fewer_caught(ev):
        ev["summary"]["caught"] -= 1
    forge(d, fewer_caught)
    verify(args, d, *S, expect=15, says=["negative control cpu.vector_v caught 1 of its 2 planted cells", "blind"])
    # A planted cell the control declined (as gpu.paged_v1_tail_fault declines gate's cells of shapes it
    # does not take) is no planted cell: the run counts planted = caught + missed, and so must verify
    # (it said "caught 79 of its 84 planted cells: blind" of an H100 run whose summary had 0 missed).
    # evidence_version of the wrong type, signed: named, not a raw JSON library error (fuzz_evidence_json).
    for version in ("", "1", 1.5, None):
        d = fresh()
        forge(d, lambda ev, v=version: ev.__setitem__("evidence_version", v))
        line = verify(args, d, *S, expect=10, says=[f"evidence.json: evidence_version {json.dumps(version)}"])
        check("json.exception" not in line, line)
    d = fresh()
    lines = lines_of(d)
    for k, l in enumerate(lines):
        r = json.loads(l)
        if r["kernel"] == "cpu.vector_v" and r["expected_fail"]:
            r["verdict"] = "declined"
            r["detail"] = "head_size 128: only 64 (a planted decline)"
            lines[k] = (json.dumps(r) + "\n").encode()
            break
    write(os.path.join(d, "results.jsonl"), b"".join(lines))
    rp = os.path.join(d, "report.json")
    report = json.loads(read(rp))
    report["summary"]["caught"] -= 1
    report["summary"]["declined"] += 1
    write(rp, dump(report).encode())

    def one_declined(ev):
        ev["summary"]["caught"] -= 1
        ev["summary"]["declined"] += 1
    forge(d, one_declined)
    verify(args, d, *S, expect=0, says=["verified:", "controls 1/1 caught"])
    # A control's planted cell turned into not_run (as if its fault could not show there), counts forged to
    # match: only a control's cells outside its expected failures may be left unrun (exit 13). The same for a
    # cell of cpu.reference, which is no control.
    for kernel, expected, why in (("cpu.vector_v", True, "it is one of the control's planted cells"),
                                  ("cpu.reference", False, "the kernel is no negative control")):
        d = fresh()
        lines = lines_of(d)
        for k, l in enumerate(lines):
            r = json.loads(l)
            if r["kernel"] == kernel and r["expected_fail"] == expected and r["verdict"] != "not_run":
                was_caught = expected
                r["verdict"] = "not_run"
                r["detail"] = "not run: fault cannot show on this cell (a forged one)"
                lines[k] = (json.dumps(r) + "\n").encode()
                break
        write(os.path.join(d, "results.jsonl"), b"".join(lines))

        def unrun(summary, was_caught=was_caught):
            summary["caught" if was_caught else "passed"] -= 1
            summary["not_run"] = summary.get("not_run", 0) + 1
        rp = os.path.join(d, "report.json")
        report = json.loads(read(rp))
        unrun(report["summary"])
        write(rp, dump(report).encode())
        forge(d, lambda ev: unrun(ev["summary"]))
        verify(args, d, *S, expect=13, says=["is not_run, but", why])
    # A failed self-test written into report.json and the manifest: exit 16.
    d = fresh()
    rp = os.path.join(d, "report.json")
    report = json.loads(read(rp))
    report["selftest"]["passed"] = False
    write(rp, dump(report).encode())

    def failed_selftest(ev):
        ev["selftest"]["passed"] = False
    forge(d, failed_selftest)
    verify(args, d, *S, expect=16, says="the comparator self-test failed")
    # The forger's rewrite alone (no edit) verifies: hashes show consistency, not authenticity.
    d = fresh()
    forge(d)
    verify(args, d, *S, expect=0, says="verified:")


def scenario_verify_plugin(args, tmp):
    check(args.example_plugin and os.path.exists(args.example_plugin), f"--example-plugin {args.example_plugin}")
    suite = suite_file(tmp)
    S = ["--suite", suite]
    d = os.path.join(tmp, "plugin")
    real_run(args, d, *S, "--plugin", args.example_plugin, "--with-controls")
    ev = json.loads(read(os.path.join(d, "evidence.json")))
    lib_sha = sha256(read(args.example_plugin))
    check([p["sha256"] for p in ev["plugins"]] == [lib_sha], f"plugins: {ev['plugins']}")
    names = [k["name"] for k in ev["kernels"]]
    check(any(k["negative_control"] for k in ev["kernels"]) and len(names) >= 2, f"kernels: {ev['kernels']}")
    verify(args, d, *S, "--plugin", args.example_plugin, expect=0,
           says=[f"plugin sha256 {lib_sha[:8]}.. (= --plugin)", "controls "])
    verify(args, d, *S, expect=0, says=f"plugin sha256 {lib_sha[:8]}.. (not checked: no --plugin)")
    verify(args, d, *S, "--plugin", args.plugin, expect=14, says=["--plugin", "not the library that ran"])
    changed = os.path.join(tmp, "changed.so")
    write(changed, read(args.example_plugin) + b"\0")
    verify(args, d, *S, "--plugin", changed, expect=14, says=["not the library that ran", lib_sha[:8]])
    verify(args, d, *S, "--plugin", os.path.join(tmp, "nosuch.so"), expect=2, says="--plugin:")
    # The plugin's kernels alone: no control ran, so nothing shows the checks can fail on this device.
    d2 = os.path.join(tmp, "plugin_only")
    real_run(args, d2, *S, "--plugin", args.example_plugin)
    verify(args, d2, *S, "--plugin", args.example_plugin, expect=15, says="no negative control")
    # --plugin against a run that loaded none.
    d3 = os.path.join(tmp, "builtin")
    real_run(args, d3, *S, *KERNELS)
    verify(args, d3, *S, "--plugin", args.example_plugin, expect=14, says="the run loaded no plugin")


def isolation_suite(args):
    return os.path.join(args.source, "tests", "cli", "isolation.toml")


def scenario_verify_require_pass(args, tmp):
    S = ["--suite", isolation_suite(args)]
    d = os.path.join(tmp, "failing")
    # planted.oob_write writes past its output on the ctx33 cell: one failed cell; cpu.vector_v (added by
    # --with-controls) is caught on the V:nan@tail cells at 17 tokens.
    real_run(args, d, *S, "--plugin", args.plugin, "--kernel", "planted.oob_write", "--with-controls", expect=1)
    verify(args, d, *S, "--plugin", args.plugin, expect=0, says="1 failed")
    p = run(args, "verify", d, *S, "--plugin", args.plugin, "--require-pass", expect=18)
    check("--require-pass" in p.stdout and "planted.oob_write" in p.stdout and "ctx33" in p.stdout,
          f"--require-pass does not name the failed cell:\n{p.stdout}")
    ok = os.path.join(tmp, "passing")
    real_run(args, ok, *S, "--plugin", args.plugin, "--kernel", "planted.ok", "--with-controls")
    verify(args, ok, *S, "--plugin", args.plugin, "--require-pass", expect=0, says="0 failed")
    p = run(args, "verify", ok, *S, "--device-expect", "", expect=2)
    check("--device-expect" in p.stdout, f"an empty --device-expect is not refused by name:\n{p.stdout}")


def scenario_resume_rebuilt_plugin(args, tmp):
    lib = os.path.join(tmp, "libkernel.so")
    shutil.copy(args.example_plugin, lib)
    S = ["--suite", suite_file(tmp), "--plugin", lib, "--device", "cpu", "-j2"]
    d = os.path.join(tmp, "run")
    run(args, "run", *S, "--report-dir", d, expect=0)
    run(args, "run", *S, "--resume", d, expect=0)  # the same build resumes (nothing left to run)
    write(lib, read(args.example_plugin) + b"\0")  # rebuilt: other bytes under the same path and names
    p = run(args, "run", *S, "--resume", d, expect=2)
    check("plugin_sha256" in p.stdout and "plugin builds" in p.stdout,
          f"a rebuilt plugin is not named as the reason:\n{p.stdout}")


def scenario_repro_isolated(args, tmp):
    crash_cell = "h4/2 d32 bs16 f32 ctx33 nhd seed7 clean"
    p = run(args, "repro", crash_cell, "--kernel", "planted.segfault", "--plugin", args.plugin, expect=1)
    check("verdict   crash" in p.stdout and "SIGSEGV" in p.stdout, f"repro of a crashing plugin cell:\n{p.stdout}")
    p = run(args, "repro", crash_cell, "--kernel", "planted.hang", "--plugin", args.plugin, "--cell-timeout", "1", expect=1)
    check("verdict   timeout" in p.stdout, f"repro of a hanging plugin cell:\n{p.stdout}")
    # An isolated repro prints what an in-process one does.
    ok_cell = "h4/2 d32 bs16 f32 ctx17 nhd seed7 clean"
    a = run(args, "repro", ok_cell, "--kernel", "planted.ok", "--plugin", args.plugin, expect=0).stdout
    b = run(args, "repro", ok_cell, "--kernel", "planted.ok", "--plugin", args.plugin, "--no-isolate", expect=0).stdout
    check(a == b and "verdict   pass" in a, f"isolated and in-process repro differ:\n{a}\n---\n{b}")
    # A tail fault's NaN output: the metrics over finite pairs read "nan", never a small number.
    p = run(args, "repro", "h4/2 d32 bs16 f32 ctx17 nhd seed7 V:nan@tail", "--kernel", "cpu.vector_v", expect=1)
    check("max_abs   nan" in p.stdout and "rel_linf  nan" in p.stdout, f"all-NaN metrics:\n{p.stdout}")


def scenario_verify_score(args, tmp):
    """A case-file kernel validated remotely (issue 43): `score --report-dir` writes evidence.json, with the planted
    runner's outputs (--control-outputs) as the negative control; `verify DIR --cases EXPORT` checks it against the
    author's copy of the export. Refused: no --cases (2), --cases on a run's evidence (2), another export (12), a
    score of part of the export (--cell: 12), a score without the control (15), an edited result (11); a failing
    runner verifies and --require-pass turns it into 18."""
    py = numpy_python()
    if not py:
        print("skip: no Python 3 with NumPy for examples/python/runner.py")
        sys.exit(77)
    suite = suite_file(tmp)
    cases, other = os.path.join(tmp, "cases"), os.path.join(tmp, "other")
    run(args, "export", "--suite", suite, "--out", cases, expect=0)
    run(args, "export", "--suite", suite, "--filter", "ctx17 ", "--out", other, expect=0)
    runner = os.path.join(args.source, "examples", "python", "runner.py")
    outs, planted = os.path.join(tmp, "outs"), os.path.join(tmp, "planted")
    for out, bug in ((outs, "none"), (planted, "v-tail")):
        subprocess.run([py, runner, "--cases", cases, "--outputs", out, "--bug", bug], check=True, capture_output=True)

    def score(name, *extra, expect=0):
        d = os.path.join(tmp, name)
        run(args, "score", "--cases", cases, *extra, "--report-dir", d, expect=expect)
        check(os.path.exists(os.path.join(d, "evidence.json")), f"{d}: no evidence.json: {sorted(os.listdir(d))}")
        return d

    d = score("rep", "--outputs", outs, "--control-outputs", planted)
    verify(args, d, "--cases", cases, expect=0,
           says=["verified: suite evidence-small (8 cells", "16 results", "a case-file runner's outputs",
                 "cpu (replayed outputs)", "0 failed, controls 2/2 caught"])
    verify(args, d, expect=2, says=["the evidence of `pacheck score`: give --cases DIR"])
    verify(args, d, "--cases", cases, "--suite", "gate", expect=2, says="a score's cells are those of --cases")
    verify(args, d, "--cases", other, expect=12, says=["score.manifest_sha256", "not the same case files"])
    verify(args, d, "--cases", os.path.join(tmp, "nosuch"), expect=2, says="--cases: cannot read")
    tampered = copy(d, tmp, "tampered")
    results = os.path.join(tampered, "results.jsonl")
    write(results, read(results).replace(b'"verdict":"poisoned"', b'"verdict":"pass"', 1))
    verify(args, tampered, "--cases", cases, expect=11, says=["results.jsonl", "changed after the run"])
    verify(args, score("alone", "--outputs", outs), "--cases", cases, expect=15,
           says=["no negative control was caught", "score with --control-outputs DIR"])
    cell = json.loads(read(os.path.join(cases, "manifest.json")))["cells"][0]["id"]
    verify(args, score("part", "--outputs", outs, "--control-outputs", planted, "--cell", cell), "--cases", cases,
           expect=12, says=["the score judged 1 cells, not the 8 cells", "--cell"])
    failing = score("failing", "--outputs", planted, "--control-outputs", planted, expect=1)
    verify(args, failing, "--cases", cases, expect=0, says=["verified:", "2 failed, controls 2/2 caught"])
    verify(args, failing, "--cases", cases, "--require-pass", expect=18, says="failed 2 cells")
    # A run's evidence is verified against a suite, never an export.
    r = os.path.join(tmp, "run")
    real_run(args, r, "--suite", suite, *KERNELS)
    verify(args, r, "--suite", suite, "--cases", cases, expect=2, says="is of `pacheck run`, not of `pacheck score`")


def main():
    scenarios = ["verify_real", "verify_tamper", "verify_plugin", "verify_require_pass", "resume_rebuilt_plugin",
                 "repro_isolated", "verify_score"]
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=scenarios)
    ap.add_argument("--pacheck", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--plugin")
    ap.add_argument("--example-plugin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_verify_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
