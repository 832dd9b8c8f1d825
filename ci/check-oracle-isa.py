#!/usr/bin/env python3
"""Checks that AVX code in pacheck's oracle cannot leak into its baseline path (oracle/products.cpp).

usage: check-oracle-isa.py OBJECT_OR_ARCHIVE [...]

The oracle compiles its products for AVX2 and AVX-512 with __attribute__((target(...))) inside a file built
with the project's ordinary flags. That is safe only while every function that holds AVX instructions
(a VEX/EVEX-encoded instruction: a mnemonic starting with 'v' on xmm/ymm/zmm registers, or any ymm/zmm/k
register) is
  - a local symbol (internal linkage: the linker cannot pick it in place of another file's copy), and
  - in one of the per-ISA namespaces (pacheck::detail::isa_avx2 / isa_avx512).
A weak or global function with AVX code would be the ODR hazard: an inline function (an Eigen or standard
library template) compiled for AVX2 here, which the linker may keep instead of the SSE2 copy every other
file uses, so that the baseline path executes AVX2 on a CPU without it (SIGILL).

Every function of the given objects is checked (archives: every member). Exit 0 when all hold, 1 naming each
offender, 2 when objdump is missing or gives nothing. A self-test plants an offender:
  check-oracle-isa.py --self-test   (compiles a weak inline AVX2 function with c++ and expects exit 1)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ALLOWED = ("pacheck::detail::isa_avx2::", "pacheck::detail::isa_avx512::")
VEC_REG = re.compile(r"%(ymm|zmm)\d+|%k[0-7]\b")
XMM = re.compile(r"%xmm\d+")
HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
# Not AVX despite the leading 'v': virtualisation and segment-verify instructions.
NOT_AVX = {"verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmxon", "vmread", "vmwrite",
           "vmptrld", "vmptrst", "vmclear", "vmfunc", "vmrun", "vmload", "vmsave", "vmmcall"}


def is_avx(mnemonic, operands):
    if VEC_REG.search(operands):
        return True
    return mnemonic.startswith("v") and mnemonic not in NOT_AVX and bool(XMM.search(operands))


def symbol_bindings(path):
    """{mangled name: binding letter from objdump -t ('l', 'g', 'w' / 'u')} of the function symbols."""
    out = subprocess.run(["objdump", "-t", path], capture_output=True, text=True, check=True).stdout
    binds = {}
    for line in out.splitlines():
        # e.g. "0000000000000000 l     F .text\t0000000000000123 _ZN..."
        m = re.match(r"^[0-9a-f]+ (.)(.)(.)(.)(.)(.)(.) (\S+)\s+[0-9a-f]+\s+(.*)$", line)
        if not m or m.group(7) != "F":
            continue
        flag = m.group(1)
        name = m.group(9).split()[-1]
        binds[name] = "w" if m.group(2) == "w" or flag == "w" else flag
    return binds


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def avx_functions(path):
    """Mangled names of the functions in `path` that hold at least one AVX instruction."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    found, current = set(), None
    for line in out.splitlines():
        h = HEADER.match(line)
        if h:
            current = h.group(2)
            continue
        parts = line.split("\t")
        if current is None or len(parts) < 2:
            continue
        ins = parts[-1].strip().split(None, 1)
        if ins and is_avx(ins[0], ins[1] if len(ins) > 1 else ""):
            found.add(current)
    return found, out


def members(path, tmp):
    if not path.endswith(".a"):
        return [path]
    d = tempfile.mkdtemp(dir=tmp)
    subprocess.run(["ar", "x", os.path.abspath(path)], cwd=d, check=True)
    return [os.path.join(d, f) for f in sorted(os.listdir(d))]


def check(paths):
    if not shutil.which("objdump") or not shutil.which("c++filt"):
        print("check-oracle-isa: objdump / c++filt not found (binutils)")
        return 2
    bad, checked, avx_total = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            for obj in members(path, tmp):
                found, text = avx_functions(obj)
                if not text.strip():
                    print(f"check-oracle-isa: objdump gave nothing for {obj}")
                    return 2
                binds = symbol_bindings(obj)
                names = demangle(sorted(found))
                checked += 1
                avx_total += len(found)
                for mangled in sorted(found):
                    pretty = names.get(mangled, mangled)
                    bind = binds.get(mangled, "?")
                    # The qualified name, past a template function's return type ("void pacheck::...").
                    qualified = pretty.split("(")[0]
                    if bind != "l" or not any(a in qualified for a in ALLOWED):
                        bad.append(f"{os.path.basename(path)}:{os.path.basename(obj)}: {pretty} "
                                   f"(binding {bind!r}) holds AVX instructions")
    for b in bad:
        print("check-oracle-isa: " + b)
    if bad:
        print(f"check-oracle-isa: FAIL: {len(bad)} function(s) with AVX code outside the local per-ISA namespaces")
        return 1
    print(f"check-oracle-isa: ok: {checked} object(s), {avx_total} function(s) with AVX code, all local and "
          f"in {' / '.join(a.rstrip(':') for a in ALLOWED)}")
    return 0


def self_test():
    """The check must fail on a planted weak inline function compiled for AVX2."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "planted.cpp")
        with open(src, "w") as f:
            f.write("#include <immintrin.h>\n"
                    "inline __m256 twice(__m256 x) { return _mm256_add_ps(x, x); }\n"
                    "float use(const float* p) { float o[8]; _mm256_storeu_ps(o, twice(_mm256_loadu_ps(p)));"
                    " return o[0]; }\n")
        obj = os.path.join(tmp, "planted.o")
        subprocess.run(["c++", "-O0", "-mavx2", "-c", src, "-o", obj], check=True)
        rc = check([obj])
        if rc != 1:
            print(f"check-oracle-isa: self-test FAILED: a planted weak AVX2 function gave exit {rc}, not 1")
            return 1
        print("check-oracle-isa: self-test ok: the planted weak AVX2 function was found")
        return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(check(sys.argv[1:]))
