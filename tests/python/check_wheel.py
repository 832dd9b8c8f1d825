#!/usr/bin/env python3
"""ctest python.wheel (issue 42 item 1): the wheel built from the source tree as a user builds it, checked and
installed into a fresh venv, used there with no environment variable:

  1. `pip wheel SRC` (scikit-build-core from PyPI; CPU; ccache when installed; the build folder WORK/build kept
     between runs) gives dist/pacheck-*-py3-none-linux_x86_64.whl;
  2. ci/check-wheel.py: the tag, the files, every ELF file needing only glibc, the exported symbols;
  3. a fresh venv (no system site packages, NumPy and pytest from PyPI) installs it from the file with
     --no-index, then, outside the source tree and with PACHECK_LIB, PACHECK_BINARY and PYTHONPATH unset:
     `import pacheck` finds its own library, `python -m pacheck list suites` and `pacheck run` work, and
     pytest runs the NumPy example over a part of gate through the entry-point plugin.

Usage: check_wheel.py --source SRC --work DIR
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    dist = os.path.join(a.work, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    builder = os.path.join(a.work, "builder")
    if not os.path.isfile(os.path.join(builder, "bin", "python")):
        run([sys.executable, "-m", "venv", builder])
        # Debian's venv brings pip 23.0, whose `pip wheel` lacks -C; a user's fresh venv upgrades pip the same way.
        run([os.path.join(builder, "bin", "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    # The long spelling: --config-settings is understood by every pip since 22.1, -C only since 23.1.
    opts = [f"--config-settings=build-dir={os.path.join(a.work, 'build')}"]
    if shutil.which("ccache"):
        opts += [f"--config-settings=cmake.define.CMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in ("CXX", "C")]
    run([os.path.join(builder, "bin", "pip"), "wheel", "--no-deps", "-w", dist, a.source, *opts])
    wheels = glob.glob(os.path.join(dist, "pacheck-*.whl"))
    assert len(wheels) == 1, wheels
    run([sys.executable, os.path.join(a.source, "ci", "check-wheel.py"), wheels[0]])

    user = os.path.join(a.work, "user")
    shutil.rmtree(user, ignore_errors=True)
    run([sys.executable, "-m", "venv", user])
    py = os.path.join(user, "bin", "python")
    run([py, "-m", "pip", "install", "-q", "numpy", "pytest"])
    run([py, "-m", "pip", "install", "--no-index", "--no-deps", wheels[0]])
    env = {k: v for k, v in os.environ.items() if k not in ("PACHECK_LIB", "PACHECK_BINARY", "PYTHONPATH")}
    env["PACHECK_CACHE_DIR"] = os.path.join(a.work, "cache")
    away = os.path.join(a.work, "elsewhere")
    os.makedirs(away, exist_ok=True)
    out = run([py, "-c", "import pacheck, os; p = pacheck.info()['path']; print(p); "
               "assert '/site-packages/pacheck/lib/libpacheck_cells_c.so' in p, p; "
               "assert pacheck.info()['suites_dir'].endswith('pacheck/share/pacheck/suites')"],
              cwd=away, env=env, stdout=subprocess.PIPE, text=True).stdout
    print(out)
    suites = run([py, "-m", "pacheck", "list", "suites"], cwd=away, env=env, stdout=subprocess.PIPE, text=True).stdout
    assert "gate" in suites, suites
    run([os.path.join(user, "bin", "pacheck"), "run", "--kernel", "cpu.reference", "--filter", "ctx1000,37 .*bf16"],
        cwd=away, env=env, stdout=subprocess.DEVNULL)
    example = os.path.join(a.source, "examples", "python", "test_numpy_kernel.py")
    run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", example, "-k", "ctx1000 and bf16 and not fp8"], cwd=away,
        env=env)
    print("check_wheel: the wheel builds, holds only glibc dependencies, installs into a fresh venv and runs there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
