"""ctypes view of pacheck's C interfaces: the kernel ABI (include/pacheck/kernel_abi.h, version 4) and the
cells C API (include/pacheck/cells_c.h), and the loading of libpacheck_cells.

No compiled extension: the structs are laid out here with ctypes and checked field by field against the
library's own offsetof() answers when it is loaded (abi_mismatches), so one pacheck build serves any Python 3
(Debian's python3 in CI, the GPU machine's Python 3.12). The case fields (the case field table of
core/case_fields.cpp: names, kinds, ABI fields, PACHECK_VARIANT_* bits) come from the library too:
case_fields().
"""
import ctypes
import glob
import json
import os

ABI_VERSION = 4
C_API_VERSION = 1

PACHECK_OK, PACHECK_DECLINED, PACHECK_ERROR = 0, 1, 2
DEVICE_CPU, DEVICE_CUDA, DEVICE_HIP = 0, 1, 2
KERNEL_NOT_THREAD_SAFE, KERNEL_BATCH_VARIANT, KERNEL_TF32, KERNEL_MLA = 0x1, 0x2, 0x4, 0x8

# Enum values of kernel_abi.h, by the names pacheck's ids use.
DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "fp8_e4m3fn": 3, "fp8_e4m3fnuz": 4, "fp8_e5m2": 5}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
LAYOUTS = {"vllm": 0, "nhd": 1, "hnd": 2, "aiter": 3}
LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}
DEVICES = {"cpu": DEVICE_CPU, "cuda": DEVICE_CUDA, "hip": DEVICE_HIP}
SCALE_FORMS = {0: "none", 1: "per_tensor", 2: "per_kv_head", 3: "per_slot"}
# The fp8 scale forms a Kernel can declare (Kernel(scale_forms=...)), by name: their pacheck_scale_form values;
# pacheck_kernel_desc::scale_forms holds PACHECK_SCALE_FORM_BIT(value) = 1 << value of each.
SCALE_FORM_VALUES = {name: value for value, name in SCALE_FORMS.items() if value != 0}

_i32, _u32, _i64, _f32, _p = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_enum = ctypes.c_int


class KernelArgs(ctypes.Structure):
    """pacheck_kernel_args (kernel_abi.h): one decode call's shapes, pointers and strides."""

    _fields_ = [
        ("struct_size", _u32),
        ("num_seqs", _i32), ("num_heads", _i32), ("num_kv_heads", _i32), ("head_size", _i32),
        ("block_size", _i32), ("num_blocks", _i32), ("max_blocks_per_seq", _i32),
        ("layout", _enum), ("q_dtype", _enum), ("kv_dtype", _enum), ("out_dtype", _enum),
        ("query", _p), ("q_stride_seq", _i64), ("q_stride_head", _i64),
        ("key_cache", _p), ("value_cache", _p), ("k_strides", _i64 * 5), ("v_strides", _i64 * 5),
        ("block_tables", _p), ("block_tables_stride", _i64),
        ("seq_lens", _p),
        ("out", _p), ("out_stride_seq", _i64), ("out_stride_head", _i64),
        ("scale", _f32), ("k_scale", _f32), ("v_scale", _f32),
        ("k_scales_per_head", _p), ("v_scales_per_head", _p),
        ("stream", _p),
        # version 2
        ("max_seq_len", _i32), ("seq_lens_host", _p),
        ("max_query_len", _i32), ("num_query_tokens", _i32),
        ("query_start_loc", _p), ("query_start_loc_host", _p),
        ("sliding_window", _i32), ("logits_soft_cap", _f32),
        ("alibi_slopes", _p), ("sinks", _p),
        # version 3
        ("k_scales_per_slot", _p), ("v_scales_per_slot", _p),
        ("kv_lora_rank", _i32), ("qk_rope_head_dim", _i32), ("v_head_dim", _i32),  # version 4: MLA
    ]


class CaseInfo(ctypes.Structure):
    """pacheck_case_info (kernel_abi.h): one case as supports() sees it (shapes only)."""

    _fields_ = [
        ("struct_size", _u32),
        ("num_seqs", _i32), ("num_heads", _i32), ("num_kv_heads", _i32), ("head_size", _i32), ("block_size", _i32),
        ("layout", _enum), ("q_dtype", _enum), ("kv_dtype", _enum), ("out_dtype", _enum),
        ("seq_lens", ctypes.POINTER(_i32)), ("max_seq_len", _i32), ("scale", _f32),
        # version 2
        ("k_scale_form", _enum), ("v_scale_form", _enum), ("k_scale", _f32), ("v_scale", _f32),
        ("k_scales_per_head", ctypes.POINTER(_f32)), ("v_scales_per_head", ctypes.POINTER(_f32)),
        ("max_query_len", _i32), ("query_lens", ctypes.POINTER(_i32)),
        ("sliding_window", _i32), ("logits_soft_cap", _f32), ("has_alibi", _i32), ("has_sinks", _i32),
        ("kv_lora_rank", _i32), ("qk_rope_head_dim", _i32), ("v_head_dim", _i32),  # version 4: MLA
    ]


SUPPORTS_FN = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.POINTER(CaseInfo), _p, ctypes.c_size_t)
RUN_FN = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.POINTER(KernelArgs), _p, ctypes.c_size_t)


class KernelDesc(ctypes.Structure):
    """pacheck_kernel_desc (kernel_abi.h): what a kernel takes; pacheck copies it during add_kernel."""

    _fields_ = [
        ("struct_size", _u32), ("name", ctypes.c_char_p), ("description", ctypes.c_char_p),
        ("device", _enum), ("flags", _u32),
        ("layouts", ctypes.POINTER(_enum)), ("num_layouts", _u32),
        ("q_dtypes", ctypes.POINTER(_enum)), ("num_q_dtypes", _u32),
        ("kv_dtypes", ctypes.POINTER(_enum)), ("num_kv_dtypes", _u32),
        ("out_dtypes", ctypes.POINTER(_enum)), ("num_out_dtypes", _u32),
        ("head_sizes", ctypes.POINTER(_i32)), ("num_head_sizes", _u32),
        ("block_sizes", ctypes.POINTER(_i32)), ("num_block_sizes", _u32),
        ("gqa_ratios", ctypes.POINTER(_i32)), ("num_gqa_ratios", _u32),
        ("supports", SUPPORTS_FN), ("run", RUN_FN), ("user_data", _p),
        # version 2
        ("variants", _u32), ("scale_forms", _u32),
    ]


class Registrar(ctypes.Structure):
    pass


ADD_KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Registrar), ctypes.POINTER(KernelDesc))
Registrar._fields_ = [
    ("struct_size", _u32), ("abi_version", _u32), ("add_kernel", ADD_KERNEL_FN),
    ("error", _p), ("error_size", ctypes.c_size_t), ("host", _p),
]
REGISTER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Registrar))


# The structs above by their C names. Library() checks each against the library's own layout field by field
# (pacheck_cells_info's "abi_fields": the offsetof of every field, from core/abi_fields.cpp's table).
MIRRORS = {"pacheck_kernel_args": KernelArgs, "pacheck_case_info": CaseInfo, "pacheck_kernel_desc": KernelDesc,
           "pacheck_registrar": Registrar}


def abi_mismatches(info):
    """Every difference between the ctypes structs of MIRRORS and the library's (info: pacheck_cells_info's
    answer): a struct of another size, a field at another offset, a field one side lacks; as lines of text in
    field order, empty when the layouts agree."""
    out = []
    for cname, struct in MIRRORS.items():
        if info.get("sizeof", {}).get(cname) != ctypes.sizeof(struct):
            out.append(f"sizeof({cname}) is {info.get('sizeof', {}).get(cname)} bytes there, {ctypes.sizeof(struct)} here")
        theirs = {f["name"]: f["offset"] for f in info.get("abi_fields", {}).get(cname, [])}
        mine = {name: getattr(struct, name).offset for name, *_ in struct._fields_}
        for name, offset in mine.items():
            if name not in theirs:
                out.append(f"{cname}.{name}: at offset {offset} here, no such field there")
            elif theirs[name] != offset:
                out.append(f"{cname}.{name}: at offset {theirs[name]} there, {offset} here")
        out.extend(f"{cname}.{name}: at offset {offset} there, no such field here"
                   for name, offset in theirs.items() if name not in mine)
    return out


class PacheckError(RuntimeError):
    """pacheck refused a call: a suite that does not load, a kernel not registered, an id not in the suite,
    a descriptor it rejects, or a library that cannot be found or does not match this module."""


def write_message(buf, size, text):
    """Writes `text` (cut to size - 1 bytes) and a NUL into a C buffer pacheck passed to a callback."""
    if not buf or size == 0:
        return
    data = text.encode("utf-8", "replace")[: size - 1]
    ctypes.memmove(buf, data + b"\0", len(data) + 1)


# The libraries that export the C API, preferred first: libpacheck_cells_c.so (the C API alone, libstdc++ linked
# statically, with the properties for pacheck.fuzz; the wheel's) and libpacheck_cells.so (with the C++ API).
LIBRARY_NAMES = ("libpacheck_cells_c.so", "libpacheck_cells.so")


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    # The wheel's lib/ (and a CMake build that copied a library into the package), then the source tree's
    # build folders (python/pacheck -> the checkout root), then an installed prefix.
    for name in LIBRARY_NAMES:
        yield os.path.join(here, "lib", name)
        yield from sorted(glob.glob(os.path.join(here, name + "*")))
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "CMakeLists.txt")) and os.path.isfile(os.path.join(root, "include", "pacheck",
                                                                                             "cells_c.h")):
        for build in ["build/default"] + sorted(glob.glob(os.path.join(root, "build*", "*"))) + sorted(
                glob.glob(os.path.join(root, "build*"))):
            for name in LIBRARY_NAMES:
                yield os.path.join(root, build, "cells", name)
    import sys

    for prefix in dict.fromkeys([sys.prefix, "/usr/local", "/usr"]):
        for lib in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            for name in LIBRARY_NAMES:
                yield os.path.join(prefix, lib, name)


def find_library():
    """The path of the C API's library: $PACHECK_LIB when set (a file, or a folder holding libpacheck_cells_c.so
    or libpacheck_cells.so), else the first found of the package's lib/ (an installed wheel), the source tree's
    build folders (build/default first) and the installed prefixes. Raises PacheckError naming PACHECK_LIB
    when there is none."""
    env = os.environ.get("PACHECK_LIB", "")
    if env:
        path = env
        if os.path.isdir(env):
            path = next((os.path.join(env, n) for n in LIBRARY_NAMES if os.path.isfile(os.path.join(env, n))),
                        os.path.join(env, LIBRARY_NAMES[0]))
        if not os.path.isfile(path):
            raise PacheckError(f"PACHECK_LIB={env!r}: no such file (expected the path of libpacheck_cells_c.so)")
        return path
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise PacheckError("libpacheck_cells_c.so not found: pip install the pacheck wheel (pip install . in the checkout; "
                       "docs/PYTHON.md), build it (cmake --build --preset default) or set PACHECK_LIB to its path; "
                       "looked in " + ", ".join(tried[:4]) + ", ...")


# The C API's calls that take one JSON object (cells_c.h).
JSON_CALLS = ("pacheck_cells_run", "pacheck_cells_kernel_options", "pacheck_cells_batch_open", "pacheck_cells_instrument",
              "pacheck_cells_fuzz", "pacheck_cells_set_command")

# How lines printed from Python invoke the pacheck command: `python -m pacheck` runs the wheel's bundled command
# (or the build tree's) wherever this module imports, which a bare `pacheck` on PATH may not be.
COMMAND = "python -m pacheck"


class Library:
    """libpacheck_cells loaded once, its C API wrapped into calls that return parsed JSON."""

    def __init__(self, path, check_abi=True):
        """Loads the library at `path`; with check_abi (the default) refuses it unless its C API and kernel ABI
        versions are this module's and every ctypes struct here lays its fields out at the library's offsets."""
        self.path = path
        try:
            self.dll = ctypes.CDLL(path)
        except OSError as e:
            raise PacheckError(f"cannot load {path}: {e}") from None
        d = self.dll
        for name, args in {
            "pacheck_cells_info": [ctypes.POINTER(_p)],
            "pacheck_cells_add_linked_kernels": [REGISTER_FN, _u32, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_p)],
            "pacheck_cells_add_plugin": [ctypes.c_char_p, ctypes.POINTER(_p)],
            "pacheck_cells_kernels": [ctypes.POINTER(_p)],
            "pacheck_cells_list_cells": [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_p)],
            "pacheck_cells_run_cell": [ctypes.c_char_p] * 4 + [ctypes.POINTER(_p)],
            "pacheck_cells_check_instrument": [ctypes.c_char_p, ctypes.POINTER(_p)],
            # The calls that take one JSON request (call_json).
            **{name: [ctypes.c_char_p, ctypes.POINTER(_p)] for name in JSON_CALLS},
            "pacheck_cells_batch_next": [ctypes.c_int, ctypes.POINTER(_p)],
            "pacheck_cells_batch_close": [ctypes.c_int, ctypes.POINTER(_p)],
        }.items():
            try:
                fn = getattr(d, name)
            except AttributeError:
                raise PacheckError(f"{path} has no {name}: a pacheck older than this module") from None
            fn.argtypes = args
            fn.restype = ctypes.c_int
        d.pacheck_cells_free.argtypes = [_p]
        d.pacheck_cells_free.restype = None
        self.info = self.call("pacheck_cells_info")
        self.call_json("pacheck_cells_set_command", {"command": COMMAND})
        if check_abi and (self.info.get("api_version") != C_API_VERSION or self.info.get("abi_version") != ABI_VERSION):
            raise PacheckError(f"{path}: C API {self.info.get('api_version')} / kernel ABI "
                               f"{self.info.get('abi_version')}, this module speaks {C_API_VERSION} / {ABI_VERSION}")
        bad = abi_mismatches(self.info) if check_abi else []
        if bad:
            raise PacheckError(f"{path}: {'; '.join(bad[:4])}{f' (and {len(bad) - 4} more)' if len(bad) > 4 else ''}: "
                               "the module and the library disagree on the ABI")

    def call_json(self, name, request):
        """Calls pacheck_cells_NAME(json.dumps(request), &json) (the calls of JSON_CALLS)."""
        return self.call(name, json.dumps(request).encode())

    def call(self, name, *args):
        """Calls pacheck_cells_NAME(args..., &json) and returns the parsed answer; PacheckError on an error."""
        buf = _p()
        rc = getattr(self.dll, name)(*args, ctypes.byref(buf))
        text = ctypes.string_at(buf.value).decode("utf-8", "replace") if buf.value else "{}"
        self.dll.pacheck_cells_free(buf)
        answer = json.loads(text)
        if rc != 0:
            raise PacheckError(answer.get("error", f"{name} failed (code {rc})"))
        return answer


_library = None


def library():
    """The process's libpacheck_cells (loaded on first use, from find_library())."""
    global _library
    if _library is None:
        _library = Library(find_library())
    return _library


def case_fields():
    """The case field table (core/case_fields.cpp, `pacheck list fields --json`) as the library describes it:
    a list of dicts {"name", "kind", "token", "token_form", "example", "suite_key", "bounds", "abi_version",
    "abi_args", "abi_info", "variant_bit", "casefile", "casefile_version", "casefile_scalar", "gates"}."""
    return library().info["case_fields"]
