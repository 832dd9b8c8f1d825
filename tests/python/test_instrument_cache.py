"""The instrument check's on-disk cache (issue 42 item 3): kept per library build, suite and device, reused by a
rerun, forced by recheck / --pacheck-recheck / PACHECK_RECHECK=1, never kept when blind, and shared by the pytest
plugin's sessions.

Run by ctest as python.instrument_cache with PACHECK_LIB and PYTHONPATH set.
"""
import json
import os
import subprocess
import sys

import numpy_kernels  # noqa: F401
import pacheck

pytest_plugins = ["pytester"]

SUITE = "boundary"  # small, and it plants the tail-read controls' faults


def test_second_check_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PACHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PACHECK_RECHECK", raising=False)
    first = pacheck.check_instrument(SUITE)
    assert not first.blind and not first.cached and first.cache_file.startswith(str(tmp_path)), first
    kept = json.loads(open(first.cache_file).read())
    assert kept["key"]["suite"] == SUITE and len(kept["key"]["library_sha256"]) == 64 and kept["key"]["device"] == "cpu"
    again = pacheck.check_instrument(SUITE)
    assert again.cached and again.cache_file == first.cache_file and not again.blind
    assert again.summary.startswith(first.summary) and "(cached " in again.summary
    # Another device, another suite: other keys.
    assert not pacheck.check_instrument(SUITE, device="cuda").cached
    assert not pacheck.check_instrument("gate").cached
    # Forced: run again and rewritten.
    assert not pacheck.check_instrument(SUITE, recheck=True).cached
    monkeypatch.setenv("PACHECK_RECHECK", "1")
    assert not pacheck.check_instrument(SUITE).cached


def test_a_tampered_or_other_key_file_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("PACHECK_CACHE_DIR", str(tmp_path))
    first = pacheck.check_instrument(SUITE)
    kept = json.loads(open(first.cache_file).read())
    kept["key"]["library_sha256"] = "0" * 64  # as an older build's answer would be
    open(first.cache_file, "w").write(json.dumps(kept))
    assert not pacheck.check_instrument(SUITE).cached
    open(first.cache_file, "w").write("not json")
    assert not pacheck.check_instrument(SUITE).cached


def test_a_blind_answer_is_never_kept(tmp_path, monkeypatch):
    # The cache file of a blind check would be {"blind": true}: one written by hand is not believed either.
    monkeypatch.setenv("PACHECK_CACHE_DIR", str(tmp_path))
    first = pacheck.check_instrument(SUITE)
    kept = json.loads(open(first.cache_file).read())
    kept["blind"] = True
    open(first.cache_file, "w").write(json.dumps(kept))
    c = pacheck.check_instrument(SUITE)
    assert not c.cached and not c.blind


def test_pytest_rerun_reuses_the_check_and_recheck_forces_it(tmp_path):
    test = tmp_path / "test_inner.py"
    test.write_text("""
import pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode

@pp.cells("boundary", numpy_decode)
def test_k(pacheck_cell):
    pacheck_cell.check()
""")
    env = dict(os.environ, PACHECK_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PACHECK_RECHECK", None)

    def run(*extra):
        p = subprocess.run([sys.executable, "-m", "pytest", "-p", "pacheck.pytest_plugin", "-p", "no:cacheprovider", "-q",
                            "-k", "bs16 and ctx17 and clean", str(test), *extra], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert p.returncode == 0, p.stdout
        return p.stdout

    assert "(cached " not in run()
    assert "(cached " in run()
    assert "(cached " not in run("--pacheck-recheck")
