#!/usr/bin/env python3
"""Checks a pacheck wheel (issue 42 item 1) as auditwheel would, with binutils' readelf only:

  - its tag is py3-none-linux_x86_64 (pure ctypes module, native files inside the package folder);
  - it holds the module, pacheck/lib/libpacheck_cells_c.so, an executable pacheck/bin/pacheck, the suites and the
    pytest11 entry point and `pacheck` script;
  - every ELF file needs only glibc's libraries (libc, libm, libpthread, libdl, librt, the loader): libstdc++,
    libgcc_s and every dependency are linked in; prints the newest GLIBC_ symbol version each asks for;
  - libpacheck_cells_c.so exports pacheck_cells_* and nothing else.

Usage: check-wheel.py WHEEL [--max-glibc 2.36]. Exit 0 when it holds, 1 with one PROBLEM line per finding.
"""
import argparse
import os
import re
import stat
import subprocess
import sys
import tempfile
import zipfile

GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}


def elf_needed(path):
    out = subprocess.run(["readelf", "-d", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def glibc_versions(path):
    out = subprocess.run(["readelf", "-V", "-W", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    return sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out)})


def exported(path):
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    names = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[4] in ("GLOBAL", "WEAK") and f[6] != "UND":
            names.append(f[7].split("@")[0])
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel")
    ap.add_argument("--max-glibc", default="2.36", help="the newest GLIBC_ version the binaries may ask for")
    a = ap.parse_args()
    problems = []
    name = os.path.basename(a.wheel)
    if not name.endswith("-py3-none-linux_x86_64.whl"):
        problems.append(f"tag: {name} is not py3-none-linux_x86_64")
    limit = tuple(int(x) for x in a.max_glibc.split("."))
    with zipfile.ZipFile(a.wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        for want in ("pacheck/__init__.py", "pacheck/_native.py", "pacheck/pytest_plugin.py", "pacheck/__main__.py",
                     "pacheck/lib/libpacheck_cells_c.so", "pacheck/bin/pacheck", "pacheck/share/pacheck/suites/gate.toml"):
            if want not in names:
                problems.append(f"missing {want}")
        entry = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        text = z.read(entry).decode() if entry else ""
        if "pacheck.pytest_plugin" not in text or "pacheck = pacheck.__main__:main" not in text:
            problems.append("entry_points.txt lacks the pytest11 plugin or the pacheck script")
        if "pacheck/bin/pacheck" in names:
            mode = z.getinfo("pacheck/bin/pacheck").external_attr >> 16
            if not mode & stat.S_IXUSR:
                problems.append(f"pacheck/bin/pacheck is not executable in the wheel (mode {oct(mode)})")
        z.extractall(tmp)
        for n in names:
            path = os.path.join(tmp, n)
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            needed = elf_needed(path)
            extra = [lib for lib in needed if lib not in GLIBC_LIBS]
            vers = glibc_versions(path)
            newest = ".".join(map(str, vers[-1])) if vers else "none"
            print(f"{n}: NEEDED {', '.join(needed)}; newest GLIBC_ {newest}")
            if extra:
                problems.append(f"{n} needs {', '.join(extra)} (not glibc's: link it statically)")
            if vers and vers[-1] > limit:
                problems.append(f"{n} asks for GLIBC_{newest}, newer than {a.max_glibc}")
            if n.endswith("libpacheck_cells_c.so"):
                other = sorted(s for s in exported(path) if not s.startswith("pacheck_cells_"))
                print(f"{n}: exports {len(exported(path)) - len(other)} pacheck_cells_* symbols, {len(other)} others")
                if other:
                    problems.append(f"{n} exports {len(other)} symbols besides pacheck_cells_*: {other[:5]}")
    for p in problems:
        print("PROBLEM:", p)
    print(f"{name}: {'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
