#!/usr/bin/env python3
"""README.md's commands, each run as a newcomer types it (issue 43): every fenced command of the README is
run by one of these scenarios, verbatim, or is one of the two set-up commands, which CI runs itself.

usage: test_readme_cli.py SCENARIO --build BUILD_DIR --source ROOT

The commands run with bash in a scratch folder laid out as a checkout seen from its root: `build/default`
is a link to BUILD_DIR, `examples/` and `python/` are copies of the source tree's (so nothing a command
writes lands in the source tree), HOME is a scratch folder, and `python3` is an interpreter that imports
pytest and NumPy (ci/install-deps.sh installs Debian's).

Scenarios:
  commands      the README's fenced commands: the first two are the set-up commands and .ci/run runs each
                verbatim (they install, build and test the whole tree: CI itself is their test); every other
                `sh` block is claimed by exactly one scenario below; the `yaml` block is a verbatim part of
                ci/github-actions-gate.yml, which ctest ci_template.kernel_repo runs
  figure        the `$ ...` command of "Reading a result" prints the rows shown under it, and the fault
                matrix under "What it finds" is what ci/readme-figure.py renders from that run
  cpp_route     the C/C++ route: install the package, build examples/kernel-repo against it, ctest it
  python_route  the Python route: a venv, the wheel built from a copy of the tracked tree and installed into it,
                pytest over the example kernel (a whole CPU build: ctest label wheel)
  casefiles_route  the case-file route: export, the NumPy runner, score
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from test_reports_cli import check, fail

# Which scenario runs each README `sh` block after the two set-up commands: a block belongs to the scenario
# whose marker it contains.
ROUTES = {"cpp_route": "cmake --install", "python_route": "pytest", "casefiles_route": "pacheck export"}


def fenced_blocks(text):
    """(info string, body) of every fenced block of a Markdown text, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def readme(args):
    with open(os.path.join(args.source, "README.md")) as f:
        return f.read()


def sh_commands(args):
    """The README's `sh` blocks, each one command (one line)."""
    blocks = [body.strip() for info, body in fenced_blocks(readme(args)) if info == "sh"]
    for b in blocks:
        check("\n" not in b, f"a README sh block holds more than one line (one command per block):\n{b}")
    return blocks


def route_command(args, scenario):
    """The README command the scenario runs."""
    mine = [c for c in sh_commands(args)[2:] if ROUTES[scenario] in c]
    check(len(mine) == 1, f"{scenario}: expected one README sh block containing '{ROUTES[scenario]}', found {mine}")
    return mine[0]


def scratch_checkout(args, tmp, whole=False):
    """A folder laid out as a checkout's root for the README's commands; returns (folder, env). With whole, every
    file git tracks is copied (`pip install .` builds the tree), else examples/ and python/ only."""
    work = os.path.join(tmp, "checkout")
    os.makedirs(os.path.join(work, "build"))
    os.symlink(os.path.abspath(args.build), os.path.join(work, "build", "default"))
    if whole:
        copy_tracked_files(args.source, work)
    else:
        ignore = shutil.ignore_patterns("build*", "__pycache__", "*.egg-info", ".pytest_cache")
        for folder in ("examples", "python"):
            shutil.copytree(os.path.join(args.source, folder), os.path.join(work, folder), ignore=ignore)
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    os.symlink(python_with_pytest(), os.path.join(bin_dir, "python3"))
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = dict(os.environ, HOME=home, PATH=bin_dir + os.pathsep + os.environ["PATH"], PYTHONDONTWRITEBYTECODE="1")
    for var in ("PACHECK_LIB", "PACHECK_SUITES_DIR", "PYTHONPATH", "RC_PARAMS"):
        env.pop(var, None)
    return work, env


def copy_tracked_files(source, dest):
    """Copies the files git tracks in SOURCE (its working-tree contents) to DEST, as a fresh clone holds them."""
    listed = subprocess.run(["git", "-C", source, "ls-files", "-z"], check=True, stdout=subprocess.PIPE).stdout
    for rel in filter(None, listed.decode().split("\0")):
        src = os.path.join(source, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def python_with_pytest():
    """The first of this interpreter, python3 on PATH and Debian's that imports pytest and NumPy."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if candidate and subprocess.run([candidate, "-c", "import pytest, numpy"],
                                        stderr=subprocess.DEVNULL).returncode == 0:
            return candidate
    fail("no python3 imports pytest and NumPy (ci/install-deps.sh installs python3-pytest and python3-numpy)")


def run_readme_command(command, work, env):
    """Runs one README command verbatim in the scratch checkout; returns its output (it must exit 0)."""
    print(f"+ {command}", flush=True)
    p = subprocess.run(["bash", "-c", command], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print(p.stdout[-6000:])
    check(p.returncode == 0, f"README command exited {p.returncode}: {command}")
    return p.stdout


def scenario_commands(args, tmp):
    cmds = sh_commands(args)
    check(len(cmds) >= 2, "the README opens with the two set-up commands")
    with open(os.path.join(args.source, ".ci", "run")) as f:
        ci_lines = [line.strip() for line in f]
    for setup in cmds[:2]:
        check(setup in ci_lines, f".ci/run does not run the set-up command verbatim: {setup}")
    check(cmds[0].endswith("build/default/cli/pacheck run") and cmds[1].endswith("ctest --preset default"),
          "the set-up commands are: build and run the main job; build and pass the tests")
    for c in cmds[2:]:
        owners = [s for s, marker in ROUTES.items() if marker in c]
        check(len(owners) == 1, f"README command run by {len(owners)} scenarios of this test (expected 1): {c}")
    for s in ROUTES:
        route_command(args, s)
    with open(os.path.join(args.source, "ci", "github-actions-gate.yml")) as f:
        template = f.read()
    yaml_blocks = [body for info, body in fenced_blocks(readme(args)) if info == "yaml"]
    check(len(yaml_blocks) == 1, f"expected one yaml block (the CI step), found {len(yaml_blocks)}")
    check(yaml_blocks[0] in template, f"the README's CI step is not verbatim in ci/github-actions-gate.yml:\n{yaml_blocks[0]}")
    print(f"{len(cmds)} sh commands: 2 set-up commands in .ci/run, {len(cmds) - 2} run here; the CI step in the template")


def scenario_figure(args, tmp):
    figure = os.path.join(args.source, "ci", "readme-figure.py")
    p = subprocess.run([sys.executable, figure, "--check", "--pacheck", os.path.join(args.build, "cli", "pacheck"),
                        os.path.join(args.source, "README.md")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print(p.stdout)
    check(p.returncode == 0, "the README's console rows or fault matrix are not what their run prints "
                             "(python3 ci/readme-figure.py --pacheck BIN --write rewrites the matrix)")


def scenario_cpp_route(args, tmp):
    work, env = scratch_checkout(args, tmp)
    out = run_readme_command(route_command(args, "cpp_route"), work, env)
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", out)
    check(m and m.group(2) == "0" and int(m.group(3)) >= 4, "ctest of the kernel repository ran no or failing tests")


def scenario_python_route(args, tmp):
    work, env = scratch_checkout(args, tmp, whole=True)
    if shutil.which("ccache"):
        # CMake takes its compiler launchers' defaults from these variables: the wheel's build reuses this
        # machine's objects; the command itself is the README's, verbatim.
        env.update(CMAKE_CXX_COMPILER_LAUNCHER="ccache", CMAKE_C_COMPILER_LAUNCHER="ccache")
    out = run_readme_command(route_command(args, "python_route"), work, env)
    m = re.search(r"(\d+) passed", out)
    check(m and int(m.group(1)) > 0 and " failed" not in out, "pytest passed no cell, or failed some")


def scenario_casefiles_route(args, tmp):
    work, env = scratch_checkout(args, tmp)
    out = run_readme_command(route_command(args, "casefiles_route"), work, env)
    check(re.search(r"\b(\d+) passed", out) and "0 failed" in out, "score passed no cell, or failed some")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["commands", "figure", *ROUTES])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pacheck_readme_") as tmp:
        globals()["scenario_" + args.scenario](args, tmp)
    print(f"ok: {args.scenario}")


if __name__ == "__main__":
    main()
