#!/usr/bin/env python3
"""Runs ci/github-actions-gate.yml as GitHub Actions would, on this machine, on a kernel repository laid out
as examples/kernel-repo, then checks what it left: the merged report passes with the repository's kernels
and the device's negative controls in it.

    python3 ci/check-gate-template.py --work DIR [--kernel-repo DIR] [--seed-cache PATH=PREFIX]
                                      [--skip-step TEXT]... [--expect-fail]

Jobs run in `needs` order, matrix jobs one after the other, each in a workspace of its own. Every `run:`
step runs as written (bash -e -o pipefail, in the workspace, with GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and
GITHUB_WORKSPACE); a later step is skipped after a failure unless its `if:` says always(). The actions the
template uses are emulated:
  actions/checkout          with `repository:` pacheck: a git snapshot of this checkout (working tree
                            included); without it: the kernel repository
  actions/cache             restore (output cache-hit) and, after a job that passed, save
  actions/cache/restore     restore only; fail-on-cache-miss fails the step
  actions/upload-artifact, actions/download-artifact (name / pattern, path)
  mikepenz/action-junit-report, marocchino/sticky-pull-request-comment: not run (they talk to GitHub);
                            the files they would read must exist
Expressions: ${{ matrix.K }}, env.K, steps.ID.outputs.K, needs.JOB.outputs.K, runner.os, github.event_name;
`if:` takes always(), success() and `A == 'v'` / `A != 'v'` joined by &&. Anything else stops the check
with exit 2 naming it, so the template cannot drift into something this check does not run.

--seed-cache PATH=PREFIX fills the cache entry of PATH from PREFIX (an installed pacheck, or a build directory,
which is installed) before the first job, as an earlier workflow run would have: the install job restores it
and skips its build. --skip-step TEXT skips the
run steps whose command contains TEXT (dependency installation the caller has done), saying so.
--expect-fail: the workflow must fail (a kernel repository with a planted fault), and the merged report
must show the failure.
Exit 0 when the outcome is the expected one, 1 otherwise, 2 for a template or option this cannot run.
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "ci", "github-actions-gate.yml")
NOT_RUN_ACTIONS = {"mikepenz/action-junit-report": "report_paths", "marocchino/sticky-pull-request-comment": "path"}


class TemplateError(Exception):
    """The template uses something this emulation does not run."""


def say(msg):
    print(f"[gate-template] {msg}", flush=True)


# ---- expressions ---------------------------------------------------------------------------------------

def lookup(name, ctx):
    """The value of one context reference (matrix.shard, steps.cache.outputs.cache-hit, ...)."""
    parts = name.split(".")
    value = ctx
    for p in parts:
        if not isinstance(value, dict) or p not in value:
            if parts[0] in ("steps", "needs") and isinstance(value, dict):
                return ""  # an output never set reads as empty, as on GitHub
            raise TemplateError(f"unknown expression '{name}'")
        value = value[p]
    return str(value)


def substitute(text, ctx):
    """`text` with every ${{ ... }} replaced by its value."""
    return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", lambda m: lookup(m.group(1), ctx), str(text))


def condition(expr, ctx, failed):
    """Whether a step or job with `if: expr` runs, given whether an earlier step or job failed."""
    if expr is None:
        return not failed
    expr = str(expr).strip()
    expr = expr[3:-2].strip() if expr.startswith("${{") else expr
    terms = [t.strip() for t in expr.split("&&")]
    result = not failed if "always()" not in terms else True
    for t in terms:
        if t in ("always()", "success()"):
            result = result and (t == "always()" or not failed)
            continue
        m = re.fullmatch(r"([\w.\-]+)\s*(==|!=)\s*'([^']*)'", t)
        if not m:
            raise TemplateError(f"unsupported if: '{t}'")
        equal = lookup(m.group(1), ctx) == m.group(3)
        result = result and (equal if m.group(2) == "==" else not equal)
    return result


# ---- actions -------------------------------------------------------------------------------------------

def copy_tree(src, dst):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


def pacheck_snapshot(work):
    """A git repository holding this checkout's files as they are now (tracked and untracked, ignored left
    out), committed: what actions/checkout of pacheck gives. Returns (path, commit)."""
    snap = os.path.join(work, "pacheck-snapshot")
    if not os.path.isdir(snap):
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "-co", "--exclude-standard"], check=True,
                               stdout=subprocess.PIPE).stdout.decode().split("\0")
        for f in filter(None, files):
            src = os.path.join(ROOT, f)
            if os.path.isfile(src):
                os.makedirs(os.path.dirname(os.path.join(snap, f)), exist_ok=True)
                shutil.copy2(src, os.path.join(snap, f))
        git = ["git", "-C", snap, "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
        subprocess.run(git[:3] + ["init", "-q"], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", "snapshot"], check=True)
    head = subprocess.run(["git", "-C", snap, "rev-parse", "HEAD"], check=True, stdout=subprocess.PIPE, text=True)
    return snap, head.stdout.strip()


def act_checkout(step, job, run):
    path = os.path.join(job["ws"], step.get("path", "."))
    if "repository" not in step:
        copy_tree(run.args.kernel_repo, path)
        return True
    snap, commit = pacheck_snapshot(run.args.work)
    if step.get("ref") not in ("main", commit):
        raise TemplateError(f"checkout of pacheck at ref '{step.get('ref')}': expected main or {commit}")
    copy_tree(snap, path)
    return True


def cache_entry(run, key):
    return os.path.join(run.args.work, "cache", re.sub(r"[^\w.\-]", "_", key))


def act_cache(step, job, run, save=True):
    path, key = step["path"], step["key"]
    entry = cache_entry(run, key)
    hit = os.path.isdir(entry)
    job["outputs_of_step"]["cache-hit"] = "true" if hit else "false"
    if hit:
        copy_tree(entry, os.path.join(job["ws"], path))
        say(f"cache hit: {key} -> {path}")
    elif save:
        job["post"].append(lambda: copy_tree(os.path.join(job["ws"], path), entry))
        say(f"cache miss: {key} (saved after the job)")
    else:
        say(f"cache miss: {key}")
        return str(step.get("fail-on-cache-miss", "false")).lower() != "true"
    return True


def act_upload(step, job, run):
    src = os.path.join(job["ws"], step["path"])
    if not os.path.exists(src):
        say(f"upload-artifact: nothing at {step['path']}")
        return step.get("if-no-files-found", "warn") != "error"
    copy_tree(src, os.path.join(run.args.work, "artifacts", step["name"]))
    return True


def act_download(step, job, run):
    store = os.path.join(run.args.work, "artifacts")
    pattern = step.get("pattern", step.get("name", "*"))
    for name in sorted(os.listdir(store)) if os.path.isdir(store) else []:
        if fnmatch.fnmatch(name, pattern):
            copy_tree(os.path.join(store, name), os.path.join(job["ws"], step.get("path", "."), name))
    return True


def act_not_run(step, job, run, action):
    wanted = os.path.join(job["ws"], step[NOT_RUN_ACTIONS[action]])
    say(f"{action}: not run here (it talks to GitHub); its input {os.path.relpath(wanted, job['ws'])} "
        f"{'exists' if os.path.exists(wanted) else 'is MISSING'}")
    return os.path.exists(wanted)


def run_action(uses, inputs, job, run):
    action = uses.split("@")[0]
    handlers = {"actions/checkout": act_checkout, "actions/cache": act_cache,
                "actions/cache/restore": lambda s, j, r: act_cache(s, j, r, save=False),
                "actions/upload-artifact": act_upload, "actions/download-artifact": act_download}
    if action in handlers:
        return handlers[action](inputs, job, run)
    if action in NOT_RUN_ACTIONS:
        return act_not_run(inputs, job, run, action)
    raise TemplateError(f"action '{uses}' is not emulated")


# ---- steps and jobs -------------------------------------------------------------------------------------

def run_shell(command, job, run):
    if any(text in command for text in run.args.skip_step):
        say(f"skipped (--skip-step): {command.strip()}")
        return True
    out_file = os.path.join(job["ws"], ".github_output")
    open(out_file, "w").close()
    # A runner has no PACHECK_SUITES_DIR: the installed CLI must find its suites from its own path, in
    # whatever folder the cache restored the prefix to.
    env = {k: v for k, v in os.environ.items() if k != "PACHECK_SUITES_DIR"}
    env.update(GITHUB_WORKSPACE=job["ws"], GITHUB_OUTPUT=out_file,
               GITHUB_STEP_SUMMARY=os.path.join(job["ws"], ".step_summary.md"), **job["env"])
    say(f"$ {command.strip()}")
    rc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command], cwd=job["ws"],
                        env=env).returncode
    for line in open(out_file):
        key, sep, value = line.rstrip("\n").partition("=")
        if sep:
            job["outputs_of_step"][key] = value
    say(f"exit {rc}")
    return rc == 0


def run_step(step, job, run, ctx):
    """Runs one step; returns whether it passed (None when its `if:` skipped it)."""
    if not condition(step.get("if"), ctx, job["failed"]):
        return None
    job["outputs_of_step"] = {}
    name = substitute(step.get("name", step.get("uses", step.get("run", ""))), ctx).splitlines()[0]
    say(f"step: {name}")
    if "uses" in step:
        inputs = {k: substitute(v, ctx) for k, v in (step.get("with") or {}).items()}
        ok = run_action(step["uses"], inputs, job, run)
    elif "run" in step:
        ok = run_shell(substitute(step["run"], ctx), job, run)
    else:
        raise TemplateError(f"step '{name}' has neither uses nor run")
    if "id" in step:
        ctx["steps"][step["id"]] = {"outputs": job["outputs_of_step"]}
    return ok


def run_job(name, spec, matrix, run):
    """Runs one job (one matrix entry); returns (passed, outputs)."""
    label = name + "".join(f" {k}={v}" for k, v in matrix.items())
    ws = os.path.join(run.args.work, "jobs", re.sub(r"\W", "_", label))
    if os.path.exists(ws):
        shutil.rmtree(ws)
    os.makedirs(ws)
    ctx = {"matrix": matrix, "env": run.env, "steps": {}, "needs": run.needs_ctx(spec),
           "runner": {"os": "Linux"}, "github": {"event_name": run.args.event}}
    job = {"ws": ws, "env": {k: substitute(v, ctx) for k, v in run.env.items()}, "failed": False, "post": []}
    say(f"==== job {label}")
    for step in spec.get("steps", []):
        ok = run_step(step, job, run, ctx)
        if ok is False:
            job["failed"] = True
    if not job["failed"]:
        for post in job["post"]:
            post()
    outputs = {k: substitute(v, ctx) for k, v in (spec.get("outputs") or {}).items()}
    say(f"==== job {label}: {'failed' if job['failed'] else 'passed'}")
    return not job["failed"], outputs


class Run:
    """One emulated workflow run: its options, env, jobs' results and outputs."""

    def __init__(self, args, workflow):
        self.args, self.workflow = args, workflow
        self.env = {k: str(v) for k, v in (workflow.get("env") or {}).items()}
        self.results, self.outputs = {}, {}

    def needs_ctx(self, spec):
        return {n: {"outputs": self.outputs.get(n, {}), "result": self.results.get(n, "skipped")}
                for n in needs_of(spec)}


def needs_of(spec):
    needs = spec.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def job_order(jobs):
    """Job names, each after every job it needs."""
    order, pending = [], dict(jobs)
    while pending:
        ready = [n for n, s in pending.items() if all(d in order for d in needs_of(s))]
        if not ready:
            raise TemplateError(f"jobs with unmet or circular needs: {sorted(pending)}")
        order += ready
        for n in ready:
            del pending[n]
    return order


def matrix_entries(spec):
    matrix = (spec.get("strategy") or {}).get("matrix") or {}
    if not matrix:
        return [{}]
    if len(matrix) != 1:
        raise TemplateError("only a one-key matrix is emulated")
    (key, values), = matrix.items()
    return [{key: v} for v in values]


def run_workflow(run):
    """Runs every job; returns whether all passed."""
    for name in job_order(run.workflow["jobs"]):
        spec = run.workflow["jobs"][name]
        upstream_failed = any(run.results.get(n) != "success" for n in needs_of(spec))
        if not condition(spec.get("if"), {"github": {"event_name": run.args.event}}, upstream_failed):
            say(f"==== job {name}: skipped (a job it needs failed)")
            run.results[name] = "skipped"
            continue
        passed = True
        for matrix in matrix_entries(spec):
            ok, outputs = run_job(name, spec, matrix, run)
            passed = passed and ok
            run.outputs[name] = outputs
        run.results[name] = "success" if passed else "failure"
    return all(r == "success" for r in run.results.values())


# ---- what the run must have left ------------------------------------------------------------------------

def merged_report(work):
    jobs = os.path.join(work, "jobs")
    report_dirs = [d for d in os.listdir(jobs) if d.startswith("report")]
    path = os.path.join(jobs, report_dirs[0], "merged", "report.json") if report_dirs else ""
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def check_outcome(run, passed):
    """The merged report of a passing template run holds the kernel repository's kernels and the device's
    negative controls, caught; a failing one (--expect-fail) must fail."""
    report = merged_report(run.args.work)
    if report is None:
        say("FAIL: the report job left no merged/report.json")
        return False
    under_test = [k["kernel"] for k in report["kernels"] if k["negative_control"] == "-"]
    caught = [k["kernel"] for k in report["kernels"] if k["negative_control"] == "caught"]
    say(f"merged report: {len(report['results'])} results; kernels under test {under_test}; negative controls "
        f"caught: {caught}; exit code {report.get('exit_code')}")
    problems = []
    if not under_test:
        problems.append("no kernel of the kernel repository in the merged report")
    if not caught:
        problems.append("no negative control ran and was caught (the template must pass --with-controls)")
    if run.args.expect_fail == passed:
        problems.append(f"the workflow {'passed' if passed else 'failed'}, expected it to "
                        f"{'fail' if run.args.expect_fail else 'pass'}")
    for p in problems:
        say(f"FAIL: {p}")
    if not problems:
        say("the template works: " + ("it failed the planted fault" if run.args.expect_fail else "it passed"))
    return not problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="scratch directory (emptied first)")
    ap.add_argument("--kernel-repo", default=os.path.join(ROOT, "examples", "kernel-repo"))
    ap.add_argument("--seed-cache", action="append", default=[], metavar="PATH=PREFIX")
    ap.add_argument("--skip-step", action="append", default=[], metavar="TEXT")
    ap.add_argument("--event", default="pull_request")
    ap.add_argument("--expect-fail", action="store_true")
    args = ap.parse_args()
    if os.path.exists(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    with open(TEMPLATE) as f:
        workflow = yaml.safe_load(f)
    run = Run(args, workflow)
    try:
        seed_caches(run)
        passed = run_workflow(run)
    except TemplateError as e:
        say(f"cannot run the template: {e}")
        return 2
    return 0 if check_outcome(run, passed) else 1


def seed_caches(run):
    """Fills the cache entries --seed-cache names, under the key the install job will compute."""
    for item in run.args.seed_cache:
        path, sep, prefix = item.partition("=")
        if not sep or not os.path.isdir(prefix):
            raise TemplateError(f"--seed-cache '{item}': expected PATH=an existing directory")
        if os.path.isfile(os.path.join(prefix, "CMakeCache.txt")):  # a build directory: install it first
            installed = os.path.join(run.args.work, "seed-prefix")
            subprocess.run(["cmake", "--install", prefix, "--prefix", installed], check=True, stdout=subprocess.DEVNULL)
            prefix = installed
        _, commit = pacheck_snapshot(run.args.work)
        for spec in run.workflow["jobs"].values():
            for step in spec.get("steps", []):
                inputs = step.get("with") or {}
                if step.get("uses", "").startswith("actions/cache@") and inputs.get("path") == path:
                    key = inputs["key"].replace("${{ runner.os }}", "Linux")
                    key = re.sub(r"\$\{\{\s*steps\.\w+\.outputs\.commit\s*\}\}", commit, key)
                    copy_tree(prefix, cache_entry(run, key))
                    say(f"cache seeded: {key} from {prefix}")


if __name__ == "__main__":
    sys.exit(main())
