"""pacheck in process: paged-attention decode kernels written in Python (NumPy, PyTorch, Triton) checked cell
by cell through pacheck's own pipeline, with no files between the cell and the kernel.

    import pacheck

    def my_decode(inp: pacheck.Inputs) -> None:      # writes inp.out, reads the rest
        ...

    k = pacheck.Kernel("py.mine", my_decode, layouts=["nhd"])
    for cell in pacheck.cells("gate", k):
        r = pacheck.run_cell("gate", k, cell.id)     # verdict, metrics, detail, repro line
        assert not r.failed, r.message()

A Kernel is registered with libpacheck_cells as an ABI-v4 kernel (include/pacheck/kernel_abi.h) whose run()
is a ctypes callback. run_cell then does exactly what `pacheck run` does for the cell (exec/'s pipeline:
the oracle from the pre-paging tensors, the paged cache, the fault injected, the output NaN-filled between
guard regions, the input checksums, the clean twin, the judge) and calls the kernel in this process, on this
thread, handing it the buffers pacheck placed, without a copy: NumPy views on the CPU, objects with
__cuda_array_interface__ (and .torch() views) on CUDA. Python kernels are never called in a forked process;
the cause of an output that differs from its clean twin is named from re-runs in this process.

The pytest plugin (pacheck.pytest_plugin) turns a suite's cells into parametrised tests.
"""
import ctypes
import dataclasses
import operator
import re
import sys
import traceback

from . import _native
from ._native import PacheckError
from ._watchdog import CellTimeout, Watchdog

__all__ = ["VARIANTS", "SCALE_FORMS", "MLA_LAYOUTS", "MLA_SCALE_FORMS", "Kernel", "Inputs", "Buffer", "CaseInfo",
           "Decline", "CellInfo", "CellResult", "InstrumentCheck",
           "PacheckError", "CellTimeout", "cells", "run_cell", "check_instrument", "kernels", "load_plugin", "info",
           "run_suite", "SuiteRun", "fuzz", "FuzzResult", "PropertyResult", "properties", "pytest_id", "DEFAULT_TIMEOUT"]

#: Seconds a Python kernel's run() may take on one cell when its Kernel names no timeout (as `pacheck run
#: --cell-timeout`'s default); the pytest plugin's --pacheck-timeout sets it for a session. 0 = no limit.
DEFAULT_TIMEOUT = 60.0
# Characters of a cell's detail and of a kernel's traceback that CellResult.message() shows; the rest is in
# the report directory's file (CellResult.full_text), or in CellResult.traceback.
MESSAGE_DETAIL_MAX = 600
MESSAGE_TRACEBACK_MAX = 2500

_ELEM = {"f32": 4, "f16": 2, "bf16": 2, "fp8_e4m3fn": 1, "fp8_e4m3fnuz": 1, "fp8_e5m2": 1, "i32": 4}
# __cuda_array_interface__ typestr of each dtype's storage: bf16/f16 as int16 and fp8 as uint8 (the types
# every consumer takes), then viewed as the real dtype by Buffer.torch().
_CAI = {"f32": "<f4", "f16": "<i2", "bf16": "<i2", "fp8_e4m3fn": "|u1", "fp8_e4m3fnuz": "|u1",
        "fp8_e5m2": "|u1", "i32": "<i4"}


class Decline(Exception):
    """Raised by a kernel's `supports` (or returned as a string) to decline a cell: the reason should name the
    field ("head_size 96: only 64 and 128"). The cell is reported `declined`, a pytest skip."""


class Buffer:
    """One buffer of a kernel call, owned by pacheck and valid during the call only.

    ptr: its address (host, or device for a CUDA kernel); shape and strides in elements of its own dtype;
    dtype: pacheck's name ("bf16", "fp8_e4m3fn", "i32", ...); device: "cpu" or "cuda"; writable: only `out`.
    """

    def __init__(self, name, ptr, shape, strides, dtype, device, writable=False):
        self.name, self.ptr, self.shape, self.strides = name, ptr, tuple(shape), tuple(strides)
        self.dtype, self.device, self.writable = dtype, device, writable

    @property
    def itemsize(self):
        return _ELEM[self.dtype]

    @property
    def nbytes(self):
        """Bytes from the first element to one past the last (the extent the strides span)."""
        if any(n == 0 for n in self.shape):
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1) * self.itemsize

    def __repr__(self):
        return f"Buffer({self.name}, {self.dtype}{list(self.shape)}, strides={list(self.strides)}, {self.device})"

    def numpy(self):
        """A NumPy view of the buffer (CPU only; no copy): float32 and int32 as they are, f16 and bf16 as raw
        uint16, fp8 as raw uint8 (pacheck.dtypes.to_float32 decodes them). Read-only except for `out`."""
        import numpy as np

        from .dtypes import STORAGE

        if self.device != "cpu":
            raise PacheckError(f"{self.name}: a {self.device} buffer has no NumPy view (use .torch() or "
                               "__cuda_array_interface__)")
        if not self.ptr or self.nbytes == 0:
            return np.zeros(self.shape, STORAGE[self.dtype])
        base = np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.ptr))
        flat = base.view(STORAGE[self.dtype])
        return np.lib.stride_tricks.as_strided(flat, self.shape, [s * self.itemsize for s in self.strides],
                                               writeable=self.writable)

    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface v3 (CUDA buffers only): bf16/f16 as int16, fp8 as uint8; strides in bytes."""
        if self.device != "cuda":
            raise AttributeError("__cuda_array_interface__: a CPU buffer")
        return {"shape": self.shape, "typestr": _CAI[self.dtype], "data": (self.ptr or 0, False), "version": 3,
                "strides": tuple(s * self.itemsize for s in self.strides), "stream": None}

    def torch(self):
        """A torch tensor over the same memory (no copy) in the real dtype (torch.bfloat16,
        torch.float8_e4m3fn, ...), on the CPU or the current CUDA device."""
        import torch

        real = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
                "fp8_e4m3fn": torch.float8_e4m3fn, "fp8_e4m3fnuz": torch.float8_e4m3fnuz,
                "fp8_e5m2": torch.float8_e5m2}[self.dtype]
        if self.device == "cuda":
            t = torch.as_tensor(self, device="cuda")
        else:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # read-only inputs: torch warns, pacheck checksums them anyway
                arr = self.numpy()
                if self.dtype in ("f16", "bf16"):
                    arr = arr.view("int16")
                t = torch.from_numpy(arr)
        return t.view(real) if t.dtype != real else t


@dataclasses.dataclass
class CaseInfo:
    """What supports() sees of a case (kernel_abi.h's pacheck_case_info), before anything is generated."""

    num_seqs: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    layout: str
    q_dtype: str
    kv_dtype: str
    out_dtype: str
    seq_lens: list
    max_seq_len: int
    scale: float
    k_scale_form: str
    v_scale_form: str
    # Attention variants (kernel_abi.h, "Attention variants"): 0 / False when the case has none. supports()
    # is asked only about variants the Kernel declares (Kernel(variants=...)); pacheck declines the others.
    sliding_window: int = 0
    logits_soft_cap: float = 0.0
    has_alibi: bool = False
    has_sinks: bool = False
    # Query tokens per sequence (max_query_len 1 and query_lens all 1 for plain decode); above 1 only for a
    # Kernel that declares "query_lens".
    max_query_len: int = 1
    query_lens: list = None
    # MLA decode (kernel_abi.h, "MLA decode"; only for a Kernel(mla=True)): the latent row is head_size =
    # kv_lora_rank + qk_rope_head_dim values, V its first v_head_dim; 0, 0, 0 for a multi-head case.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def is_mla(self):
        """True for an MLA case (kv_lora_rank > 0): handed only to a Kernel(mla=True), and it only these."""
        return self.kv_lora_rank > 0


# The attention variants a Kernel can declare (Kernel(variants=...)), each the name of its Inputs field, and
# its PACHECK_VARIANT_* bit (kernel_abi.h): "query_lens" is several query tokens per sequence
# (PACHECK_VARIANT_MULTI_QUERY; Inputs.query_lens / query_start_loc).
VARIANTS = {"sliding_window": 0x1, "alibi_slopes": 0x2, "logits_soft_cap": 0x4, "sinks": 0x8, "query_lens": 0x10}

# The fp8 scale forms a Kernel can declare (Kernel(scale_forms=...); kernel_abi.h's pacheck_scale_form), each
# the name CaseInfo.k_scale_form / v_scale_form gives it: "per_tensor" (Inputs.k_scale / v_scale),
# "per_kv_head" (Inputs.k_scales_per_head / v_scales_per_head), "per_slot" (Inputs.k_scales_per_slot /
# v_scales_per_slot, seed 002's per-slot tables). pacheck declines an fp8 cell whose form a Kernel does not
# list, the reason naming k_scale or v_scale and the forms it lists.
SCALE_FORMS = tuple(_native.SCALE_FORM_VALUES)

# What an MLA kernel (Kernel(mla=True)) may declare of layouts and fp8 scale forms: the latent cache is one nhd
# cache of one KV head ([num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim]) with one per-tensor scale
# (kernel_abi.h, "MLA decode"; core/mla.hpp's check_mla_case refuses an MLA case of any other).
MLA_LAYOUTS = ("nhd",)
MLA_SCALE_FORMS = ("per_tensor",)
# A multi-head Kernel's defaults; an MLA kernel left at them (the same objects) gets MLA_LAYOUTS / MLA_SCALE_FORMS.
_DEFAULT_LAYOUTS = ("nhd", "hnd", "vllm")
_DEFAULT_SCALE_FORMS = ("per_tensor", "per_kv_head")


class Inputs:
    """The arguments of one decode call (kernel_abi.h's pacheck_kernel_args), with every pointer as a Buffer.

    Shapes: query [num_query_tokens, num_heads, head_size] (num_query_tokens = num_seqs for plain decode, one
    query row per sequence; see query_lens below); key_cache / value_cache per `layout` (vllm: key
    [num_blocks, num_kv_heads, head_size/x, block_size, x] with x = 16 bytes / element, value
    [num_blocks, num_kv_heads, head_size, block_size]; nhd: [num_blocks, block_size, num_kv_heads,
    head_size]; hnd: [num_blocks, num_kv_heads, block_size, head_size]; aiter: key as vllm, value
    [num_blocks, num_kv_heads, block_size/16, head_size, 16]); block_tables [num_seqs,
    max_blocks_per_seq] i32; seq_lens [num_seqs] i32 (seq_lens_host: a host copy as a Python list); out like
    query in out_dtype, NaN-filled: write every element. k_scales_per_head / v_scales_per_head: [num_kv_heads]
    f32 Buffers for per-head fp8 scales (k_scale / v_scale are then NaN), else None. k_scales_per_slot /
    v_scales_per_slot: [num_blocks, num_kv_heads, block_size] f32 Buffers for per-slot fp8 scale tables (seed
    002, AMD AITER's asm decode; only for a Kernel declaring scale_forms "per_slot"; k_scale / v_scale are then
    NaN), else None: the scale of key element d of token p of sequence s, KV head g, is the entry
    [b, g, p % block_size] of the PHYSICAL block b = block_tables[s, p // block_size], and the entries of slots
    no sequence wrote hold whatever pacheck put there (NaN, Inf, garbage: fault region `scales`), as in the
    cache's own unwritten slots. stream: the CUDA stream
    (an int, 0 = default) to launch on; torch_stream() gives it as a torch stream.

    Attention variants (kernel_abi.h, "Attention variants", gives the formulas and their order: soft cap,
    then ALiBi, then the window mask, then sinks in the denominator): sliding_window (int, 0 = none: W > 0
    keeps keys j with p - j < W for a query at position p: seq_len - 1, or seq_len - query_len + i for query
    token i), logits_soft_cap (float, 0 = none: s = c tanh(s / c)),
    alibi_slopes and sinks ([num_heads] f32 Buffers with the exact bytes pacheck placed, or None when the
    case has none). A kernel sees non-default values only for the variants its Kernel declares.

    Several query tokens per sequence (speculative decoding; only for a Kernel declaring "query_lens"):
    query_lens (a host list [num_seqs] of ints 1 to 8; all 1 for plain decode), max_query_len,
    num_query_tokens (their sum: the rows of query and out), query_start_loc ([num_seqs + 1] i32 Buffer on the
    kernel's device, their prefix sums from 0; None for plain decode, as kernel_abi.h's NULL) and
    query_start_loc_host (the same as a list). Sequence s owns rows query_start_loc[s] ..
    query_start_loc[s+1] - 1; its row i is the token at position p = seq_len - query_len + i and sees keys
    j <= p only (causal among the new tokens; the window and ALiBi use that p).

    MLA decode (multi-head latent attention; only for a Kernel(mla=True), and such a kernel gets nothing else;
    kernel_abi.h, "MLA decode"): kv_lora_rank, qk_rope_head_dim, v_head_dim (ints; 0, 0, 0 in a multi-head call)
    and is_mla (kv_lora_rank > 0). One latent row of R = head_size = kv_lora_rank + qk_rope_head_dim values per
    token (576 for DeepSeek-V3: c_kv, 512 values, then k_pe, 64) is shared by every query head: num_kv_heads 1,
    layout "nhd". latent_cache: the cache as [num_blocks, block_size, R] (vLLM's MLA cache); key_cache and
    value_cache are the same memory as [num_blocks, block_size, 1, R] (FlashMLA's shape; the same pointer and
    strides), None in a multi-head call. query [num_query_tokens, num_heads, R]: each head's absorbed latent query,
    then its rope part. out [num_query_tokens, num_heads, v_head_dim], NaN-filled: row t, head h is
    sum_j softmax_j(scale * q[t, h] . row_j) * row_j[:v_head_dim] over the keys j the row sees (the first seq_len
    of its sequence, j <= p with several query tokens), V being the first v_head_dim values of the same rows.
    scale is the model's own (DeepSeek-V3 0.1352338: qk_head_dim^-0.5 with YaRN), not 1/sqrt(R). An fp8 latent
    cache has one per-tensor scale for the whole row: k_scale (v_scale is the same value). The tail slots of each
    sequence's final block hold pacheck's poison in the rope part, the V part or both: a weight of exactly 0
    times a NaN there is NaN, so a kernel must not read V past the keys a row sees.
    """

    def __init__(self, a, device):
        self.device = device
        for f in ("num_seqs", "num_heads", "num_kv_heads", "head_size", "block_size", "num_blocks",
                  "max_blocks_per_seq", "max_seq_len", "scale", "k_scale", "v_scale"):
            setattr(self, f, getattr(a, f))
        S = a.num_seqs
        if a.query_start_loc_host:
            loc = ctypes.cast(a.query_start_loc_host, ctypes.POINTER(ctypes.c_int32))
            self.query_start_loc_host = [loc[i] for i in range(S + 1)]
            self.query_start_loc = Buffer("query_start_loc", a.query_start_loc, (S + 1,), (1,), "i32", device)
        else:
            self.query_start_loc_host = list(range(S + 1))
            self.query_start_loc = None
        self.query_lens = [self.query_start_loc_host[s + 1] - self.query_start_loc_host[s] for s in range(S)]
        self.num_query_tokens = self.query_start_loc_host[S]
        self.max_query_len = max(self.query_lens, default=1)
        self.layout = _native.LAYOUT_NAMES[a.layout]
        self.q_dtype, self.kv_dtype = _native.DTYPE_NAMES[a.q_dtype], _native.DTYPE_NAMES[a.kv_dtype]
        self.out_dtype = _native.DTYPE_NAMES[a.out_dtype]
        self.stream = a.stream or 0
        S, H, G, D, B, N = a.num_seqs, a.num_heads, a.num_kv_heads, a.head_size, a.block_size, a.num_blocks
        T = self.num_query_tokens
        self.query = Buffer("query", a.query, (T, H, D), (a.q_stride_seq, a.q_stride_head, 1), self.q_dtype, device)
        self.kv_lora_rank, self.qk_rope_head_dim, self.v_head_dim = a.kv_lora_rank, a.qk_rope_head_dim, a.v_head_dim
        self.is_mla = a.kv_lora_rank > 0
        self.out = Buffer("out", a.out, (T, H, a.v_head_dim if self.is_mla else D),
                          (a.out_stride_seq, a.out_stride_head, 1), self.out_dtype, device, writable=True)
        if self.layout == "vllm":
            x = 16 // _ELEM[self.kv_dtype]
            kshape, vshape = (N, G, D // x, B, x), (N, G, D, B)
        elif self.layout == "aiter":  # K as vllm, V shuffled in groups of 16 slots (kernel_abi.h)
            x = 16 // _ELEM[self.kv_dtype]
            kshape, vshape = (N, G, D // x, B, x), (N, G, B // 16, D, 16)
        elif self.layout == "nhd":
            kshape = vshape = (N, B, G, D)
        else:
            kshape = vshape = (N, G, B, D)
        self.key_cache = Buffer("key_cache", a.key_cache, kshape, list(a.k_strides)[: len(kshape)], self.kv_dtype,
                                device)
        self.value_cache = Buffer("value_cache", a.value_cache, vshape, list(a.v_strides)[: len(vshape)],
                                  self.kv_dtype, device)
        # MLA: the nhd cache of its one KV head without that axis (dims 0, 1 and 3 of key_cache).
        self.latent_cache = (Buffer("latent_cache", a.key_cache, (N, B, D), (a.k_strides[0], a.k_strides[1],
                                                                               a.k_strides[3]), self.kv_dtype, device)
                             if self.is_mla else None)
        self.block_tables = Buffer("block_tables", a.block_tables, (S, a.max_blocks_per_seq),
                                   (a.block_tables_stride, 1), "i32", device)
        self.seq_lens = Buffer("seq_lens", a.seq_lens, (S,), (1,), "i32", device)
        host = ctypes.cast(a.seq_lens_host, ctypes.POINTER(ctypes.c_int32))
        self.seq_lens_host = [host[i] for i in range(S)]
        self.k_scales_per_head = (Buffer("k_scales_per_head", a.k_scales_per_head, (G,), (1,), "f32", device)
                                  if a.k_scales_per_head else None)
        self.v_scales_per_head = (Buffer("v_scales_per_head", a.v_scales_per_head, (G,), (1,), "f32", device)
                                  if a.v_scales_per_head else None)
        # Per-slot tables (ABI version 3), row-major [num_blocks, num_kv_heads, block_size], pacheck's own memory.
        self.k_scales_per_slot = (Buffer("k_scales_per_slot", a.k_scales_per_slot, (N, G, B), (G * B, B, 1), "f32",
                                         device) if a.k_scales_per_slot else None)
        self.v_scales_per_slot = (Buffer("v_scales_per_slot", a.v_scales_per_slot, (N, G, B), (G * B, B, 1), "f32",
                                         device) if a.v_scales_per_slot else None)
        self.sliding_window, self.logits_soft_cap = a.sliding_window, a.logits_soft_cap
        self.alibi_slopes = Buffer("alibi_slopes", a.alibi_slopes, (H,), (1,), "f32", device) if a.alibi_slopes else None
        self.sinks = Buffer("sinks", a.sinks, (H,), (1,), "f32", device) if a.sinks else None

    def buffers(self):
        """Every Buffer of the call, by name."""
        return {k: v for k, v in vars(self).items() if isinstance(v, Buffer)}

    def torch_stream(self):
        """The call's CUDA stream as a torch stream (torch.cuda.ExternalStream, or the default stream for 0):
        launch inside `with torch.cuda.stream(inputs.torch_stream()):` so pacheck's synchronisation covers it."""
        import torch

        return torch.cuda.ExternalStream(self.stream) if self.stream else torch.cuda.default_stream()


# What kernels/plugin.cpp accepts of a descriptor (its checks stay the backstop): a name of 1..64 ASCII
# characters of [A-Za-z0-9._-], at most 4096 entries a list, sizes as int32 > 0.
_NAME_MAX = 64
_LIST_MAX = 4096
_INT32_MAX = 2**31 - 1


def _check_name(where, name):
    """Raises TypeError/ValueError naming `where` and the field unless `name` is a valid kernel name."""
    if not isinstance(name, str):
        raise TypeError(f"{where}: name: a str, not {type(name).__name__}")
    if not name:
        raise ValueError(f"{where}: name: empty (1 to {_NAME_MAX} characters of letters, digits, '.', '_', '-')")
    if not name.isascii():
        bad = next(c for c in name if not c.isascii())
        raise ValueError(f"{where}: name: character {bad!r} (U+{ord(bad):04X}) is not ASCII (allowed: letters, "
                         "digits, '.', '_', '-')")
    if len(name) > _NAME_MAX:
        raise ValueError(f"{where}: name: {len(name)} characters, longer than {_NAME_MAX}")
    bad = [c for c in name if not (c.isalnum() or c in "._-")]
    if bad:
        raise ValueError(f"{where}: name: character {bad[0]!r} (allowed: letters, digits, '.', '_', '-')")


def _check_list(where, field, values):
    """`values` as a list: any iterable but a str/bytes (each of whose characters would be read as an entry) or a
    mapping (a dict of flags: its keys would be read as the entries, the False ones too)."""
    import collections.abc

    if isinstance(values, collections.abc.Mapping):
        raise TypeError(f"{where}: {field}: a list or tuple of names, not a {type(values).__name__} {values!r} (its "
                        f"keys would be read as entries, whatever their values)")
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{where}: {field}: a list or tuple, not the {type(values).__name__} {values!r} (write "
                        f"{field}=({values!r},) for one entry)")
    try:
        out = list(values)
    except TypeError:
        raise TypeError(f"{where}: {field}: a list or tuple, not {type(values).__name__} {values!r}") from None
    if len(out) > _LIST_MAX:
        raise ValueError(f"{where}: {field}: {len(out)} entries, more than {_LIST_MAX}")
    return out


def _check_names(where, field, values, table):
    """A non-empty list of distinct names of `table` (layouts, dtypes), as a tuple."""
    out = _check_list(where, field, values)
    if not out:
        raise ValueError(f"{where}: {field}: empty (list at least one of {', '.join(table)})")
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise TypeError(f"{where}: {field}: entry {v!r} is a {type(v).__name__}, not a str (known: "
                            f"{', '.join(table)})")
        if v not in table:
            raise ValueError(f"{where}: {field}: {v!r} is not known (known: {', '.join(table)})")
        if v in out[:i]:
            raise ValueError(f"{where}: {field}: {v} listed twice")
    return tuple(out)


def _check_sizes(where, field, values):
    """A list (empty: any) of distinct ints in [1, 2^31-1] (head_sizes, block_sizes, gqa_ratios), as a tuple:
    checked here because ctypes' c_int32 would wrap 2**32+128 to 128 silently."""
    out = _check_list(where, field, values)
    for i, v in enumerate(out):
        if isinstance(v, bool) or not hasattr(type(v), "__index__"):
            raise TypeError(f"{where}: {field}: entry {v!r} is a {type(v).__name__}, not an int")
        v = out[i] = operator.index(v)  # NumPy integers are ints; floats, strs and bools are not
        if not 1 <= v <= _INT32_MAX:
            raise ValueError(f"{where}: {field}: {v} is out of range [1, {_INT32_MAX}]")
        if v in out[:i]:
            raise ValueError(f"{where}: {field}: {v} listed twice")
    return tuple(out)


def _check_variants(where, values):
    """A list (empty: plain decode only) of distinct names of VARIANTS, as a tuple. A mapping (a dict of
    flags: its keys would be read as the names) and anything that is not a list of names raise TypeError
    naming `variants` and the names it takes."""
    import collections.abc

    known = ", ".join(VARIANTS)
    if isinstance(values, (collections.abc.Mapping, type)) or values is None:
        raise TypeError(f"{where}: variants: a list or tuple of names (known: {known}), not "
                        f"{type(values).__name__} {values!r}")
    try:
        out = _check_list(where, "variants", values)
    except TypeError as e:
        raise TypeError(f"{e} (known: {known})") from None
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise TypeError(f"{where}: variants: entry {v!r} is a {type(v).__name__}, not a str (known: "
                            f"{', '.join(VARIANTS)})")
        if v not in VARIANTS:
            raise ValueError(f"{where}: variants: {v!r} is not known (known: {', '.join(VARIANTS)})")
        if v in out[:i]:
            raise ValueError(f"{where}: variants: {v} listed twice")
    return tuple(out)


def _check_mla(where, mla, layouts, scale_forms):
    """Raises TypeError unless `mla` is a bool, and for an MLA kernel ValueError naming the first entry of
    `layouts` or `scale_forms` (already checked lists of names) that no MLA case has: MLA_LAYOUTS and
    MLA_SCALE_FORMS say what its latent cache is."""
    if not isinstance(mla, bool):
        raise TypeError(f"{where}: mla: True (an MLA decode kernel, handed MLA cells only) or False, not "
                        f"{type(mla).__name__} {mla!r}")
    if not mla:
        return
    layout = next((v for v in layouts if v not in MLA_LAYOUTS), None)
    if layout is not None:
        raise ValueError(f"{where}: layouts: {layout!r}: an MLA kernel (mla=True) reads one latent cache "
                         "[num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim], layout 'nhd' only: list "
                         "layouts=('nhd',) or leave layouts out")
    form = next((v for v in scale_forms if v not in MLA_SCALE_FORMS), None)
    if form is not None:
        raise ValueError(f"{where}: scale_forms: {form!r}: an fp8 MLA latent cache has one per-tensor scale "
                         "(Inputs.k_scale, for the whole row): list scale_forms=('per_tensor',) or leave scale_forms "
                         "out")


class Kernel:
    """A decode kernel written in Python, registered with pacheck on first use.

    name: 1..64 chars of [A-Za-z0-9._-], unique in the process. run(inputs: Inputs) writes inputs.out and
    returns nothing; an exception makes the cell `error` with its message (the traceback is kept in
    last_error). supports(info: CaseInfo) is optional: return None/True to take the case, or a reason string
    (or raise Decline(reason)) to decline it. device: "cpu" or "cuda". layouts: the cache layouts it reads,
    preferred first (suite cells that do not pin a layout run in the first). q_dtypes / kv_dtypes / out_dtypes
    / head_sizes / block_sizes / gqa_ratios: what it takes (empty size lists: any). tf32: its f32 dots read
    TF32 (Triton's default tl.dot), judged against the TF32 limit. batch_variant: a sequence's output may
    depend on the rest of its batch. repro_label: what printed `pacheck repro` lines give as --plugin.
    variants: the attention variants run() implements, by their Inputs field names ("sliding_window",
    "logits_soft_cap", "alibi_slopes", "sinks", and "query_lens" for several query tokens per sequence; a
    list or tuple, default none): pacheck declines every cell that needs another one, the reason naming the
    field and the kernel ("sliding_window 128: ... does not implement a sliding window", "query_len 4:
    py.mine ... takes one query token per sequence"), as it does for a plugin's descriptor. scale_forms: the
    fp8 scale forms run() reads, by the names of SCALE_FORMS (default ("per_tensor", "per_kv_head"); add
    "per_slot" for Inputs.k_scales_per_slot / v_scales_per_slot): pacheck declines an fp8 cell of another
    form, the reason naming k_scale or v_scale ("k_scale: per-slot scales; the plugin's scale_forms list
    per-tensor, per-KV-head").

    mla: True for an MLA decode kernel (multi-head latent attention, DeepSeek-V2/V3 family; Inputs describes the
    latent cache): pacheck hands it the MLA cells of a suite and nothing else, and hands a kernel without it no
    MLA cell (a cell of the other kind given by id is `declined`, the reason naming kv_lora_rank). Its layouts and
    scale_forms default to MLA_LAYOUTS and MLA_SCALE_FORMS ("nhd", "per_tensor") and may list nothing else
    (ValueError naming the field); head_sizes, when given, lists latent rows (576), not V widths.

    sparse_pools: run() reads only the blocks block_tables names, so it may be handed a sparse pool (a cell with
    high block ids: a pool of 2^31 or more elements whose untouched blocks take no memory). False (the default):
    such cells are declined, the reason naming the pool's size, because a kernel that copies or converts a
    whole pool (`to_float32(inp.key_cache.numpy())`) would make it dense: 8 to 32 GiB. Whatever it declares, a
    Python kernel may make one float32 copy of each input (the query and both pools as handed): pacheck counts
    it in the memory budget and refuses up front a cell that would not fit (docs/PYTHON.md).
    timeout: seconds run() may take on one cell (None: DEFAULT_TIMEOUT; 0: no limit); past it the cell is
    `timeout` (pacheck raises CellTimeout inside run(): pacheck._watchdog says what that can stop).

    Every argument is checked here, before anything reaches pacheck: a bad one raises TypeError (wrong type:
    a str or None where a list is expected, a non-int size, a run that is not callable) or ValueError (a
    name outside the rule or not ASCII, an unknown or repeated layout/dtype/variant, a size outside [1, 2^31-1]),
    the message starting "pacheck.Kernel('NAME'): FIELD: ".
    """

    def __init__(self, name, run, *, supports=None, device="cpu", layouts=_DEFAULT_LAYOUTS,
                 q_dtypes=("f32", "f16", "bf16"), kv_dtypes=("f32", "f16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz",
                                                            "fp8_e5m2"),
                 out_dtypes=("f32", "f16", "bf16"), head_sizes=(), block_sizes=(), gqa_ratios=(), tf32=False,
                 batch_variant=False, description="", repro_label=None, variants=(),
                 scale_forms=_DEFAULT_SCALE_FORMS, sparse_pools=False, timeout=None, mla=False):
        where = f"pacheck.Kernel({name!r})"
        _check_name(where, name)
        if not callable(run):
            raise TypeError(f"{where}: run: a callable taking pacheck.Inputs, not {type(run).__name__} {run!r}")
        if supports is not None and not callable(supports):
            raise TypeError(f"{where}: supports: None or a callable taking pacheck.CaseInfo, not "
                            f"{type(supports).__name__} {supports!r}")
        if not isinstance(device, str) or device not in ("cpu", "cuda"):
            raise (ValueError if isinstance(device, str) else TypeError)(
                f"{where}: device: {device!r}: 'cpu' or 'cuda'")
        for field, value in (("description", description), ("repro_label", repro_label)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{where}: {field}: a str, not {type(value).__name__} {value!r}")
        self.name, self.run, self.supports, self.device = name, run, supports, device
        if mla is True:  # an MLA kernel's defaults
            layouts = MLA_LAYOUTS if layouts is _DEFAULT_LAYOUTS else layouts
            scale_forms = MLA_SCALE_FORMS if scale_forms is _DEFAULT_SCALE_FORMS else scale_forms
        self.layouts = _check_names(where, "layouts", layouts, _native.LAYOUTS)
        self.q_dtypes = _check_names(where, "q_dtypes", q_dtypes, _native.DTYPES)
        self.kv_dtypes = _check_names(where, "kv_dtypes", kv_dtypes, _native.DTYPES)
        self.out_dtypes = _check_names(where, "out_dtypes", out_dtypes, _native.DTYPES)
        self.head_sizes = _check_sizes(where, "head_sizes", head_sizes)
        self.block_sizes = _check_sizes(where, "block_sizes", block_sizes)
        self.gqa_ratios = _check_sizes(where, "gqa_ratios", gqa_ratios)
        self.variants = _check_variants(where, variants)
        self.scale_forms = _check_names(where, "scale_forms", scale_forms, _native.SCALE_FORM_VALUES)
        _check_mla(where, mla, self.layouts, self.scale_forms)
        self.mla = mla
        self.tf32, self.batch_variant, self.description = tf32, batch_variant, description
        if not isinstance(sparse_pools, bool):
            raise TypeError(f"{where}: sparse_pools: True or False, not {type(sparse_pools).__name__} {sparse_pools!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not 0 <= timeout < float("inf")):
            raise (TypeError if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) else ValueError)(
                f"{where}: timeout: None or seconds >= 0 (0: no limit), not {timeout!r}")
        self.sparse_pools, self.timeout = sparse_pools, timeout
        self.report_dir = None  # where the whole text of an error goes (set by run_suite and the pytest plugin)
        # Without a repro_label no `pacheck repro` line can load this kernel: run_cell's repro is then the
        # Python call (and the pytest plugin prints the test's rerun command).
        self.repro_label = repro_label or f"<python kernel {name}: rerun its pytest test>"
        self._label_given = repro_label is not None
        self.last_error = None  # traceback text of the last exception run() or supports() raised
        self._registered = False

    def __repr__(self):
        return f"pacheck.Kernel({self.name!r}, device={self.device!r})"

    def register(self):
        """Registers the kernel with pacheck (once; later calls do nothing). Raises TypeError/ValueError as
        __init__ does when an attribute was changed to a bad value since, and PacheckError when pacheck refuses
        the descriptor (a name already registered, ...); every message starts "pacheck.Kernel('NAME'): FIELD"."""
        if self._registered:
            return self
        # Checked again here (the attributes may have been changed since __init__), in Python: the C side's
        # checks stay the backstop, but name a Python kernel as a plugin library and dtypes by their values.
        where = f"pacheck.Kernel({self.name!r})"
        _check_name(where, self.name)
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"{where}: device: {self.device!r}: 'cpu' or 'cuda'")

        def enums(field, table):
            values = _check_names(where, field, getattr(self, field), table)
            return (ctypes.c_int * len(values))(*[table[v] for v in values]), len(values)

        def ints(field):
            values = _check_sizes(where, field, getattr(self, field))
            return (ctypes.c_int32 * max(1, len(values)))(*values), len(values)

        arrays = {"layouts": enums("layouts", _native.LAYOUTS), "q_dtypes": enums("q_dtypes", _native.DTYPES),
                  "kv_dtypes": enums("kv_dtypes", _native.DTYPES), "out_dtypes": enums("out_dtypes", _native.DTYPES),
                  "head_sizes": ints("head_sizes"), "block_sizes": ints("block_sizes"),
                  "gqa_ratios": ints("gqa_ratios")}
        d = _native.KernelDesc()
        d.struct_size = ctypes.sizeof(_native.KernelDesc)
        name_b, desc_b = self.name.encode(), (self.description or f"Python kernel {self.name}").encode()
        d.name, d.description = name_b, desc_b
        d.device = _native.DEVICES[self.device]
        # One call at a time: the callbacks run Python (and pacheck_cells calls them from one thread anyway).
        _check_mla(where, self.mla, _check_names(where, "layouts", self.layouts, _native.LAYOUTS),
                   _check_names(where, "scale_forms", self.scale_forms, _native.SCALE_FORM_VALUES))
        d.flags = (_native.KERNEL_NOT_THREAD_SAFE | (_native.KERNEL_TF32 if self.tf32 else 0)
                   | (_native.KERNEL_BATCH_VARIANT if self.batch_variant else 0)
                   | (_native.KERNEL_MLA if self.mla else 0))
        for field, (arr, n) in arrays.items():
            setattr(d, field, ctypes.cast(arr, ctypes.POINTER(arr._type_)))
            setattr(d, "num_" + field, n)
        d.variants = sum(VARIANTS[v] for v in _check_variants(where, self.variants))
        # PACHECK_SCALE_FORM_BIT of each declared form; never 0, which would mean "every form".
        d.scale_forms = sum(1 << _native.SCALE_FORM_VALUES[f]
                            for f in _check_names(where, "scale_forms", self.scale_forms, _native.SCALE_FORM_VALUES))
        # Kept for the life of the process: pacheck calls them until it exits.
        self._run_cb = _native.RUN_FN(self._run_trampoline)
        self._supports_cb = _native.SUPPORTS_FN(self._supports_trampoline) if self.supports else _native.SUPPORTS_FN()
        d.run, d.supports = self._run_cb, self._supports_cb

        def register(registrar):
            return registrar.contents.add_kernel(registrar, ctypes.byref(d))

        reg_cb = _native.REGISTER_FN(register)
        lib = _native.library()
        try:
            lib.call("pacheck_cells_add_linked_kernels", reg_cb, _native.ABI_VERSION, self.repro_label.encode(), 1)
        except PacheckError as e:
            # "plugin '<repro label>': invalid descriptor: kernel #0 ('NAME'): FIELD: ..." -> "pacheck.Kernel(...): FIELD: ..."
            text = re.sub(r"^plugin '.*?': (?:invalid descriptor: )?(?:kernel #\d+(?: \('[^']*'\))?: )?", "", str(e),
                          count=1, flags=re.S)
            text = re.sub(r"plugin '<python kernel ([^:']*): rerun its pytest test>'", r"pacheck.Kernel('\1')", text)
            raise PacheckError(f"{where}: {text}") from None
        self._keep = (arrays, name_b, desc_b, reg_cb, d)
        self._registered = True
        lib.call_json("pacheck_cells_kernel_options", {"kernel": self.name, "sparse_pools": bool(self.sparse_pools),
                                                       "input_copies": 1})
        return self

    # The callbacks. Nothing may escape them: ctypes would print the exception and return 0 (PACHECK_OK).
    def _run_trampoline(self, _user, args, err, err_size):
        limit = DEFAULT_TIMEOUT if self.timeout is None else self.timeout
        watch = Watchdog(limit)
        try:
            watch.start()
            try:
                self.run(Inputs(args.contents, self.device))
            finally:
                watch.stop()
            if watch.over():
                raise CellTimeout()
            return _native.PACHECK_OK
        except CellTimeout:
            self.last_error = None
            how = ("interrupted" if watch.fired else "it returned") + f" after {watch.elapsed():.1f} s"
            _native.write_message(err, err_size, f"{_timeout_marker()}{self.name} ran past its timeout of {limit:g} s "
                                  f"on this cell ({how}; Kernel(timeout=...) or --pacheck-timeout sets it)")
            return _native.PACHECK_ERROR
        except BaseException as e:  # noqa: BLE001 -- KeyboardInterrupt too: the cell is an error, not a pass
            self.last_error = traceback.format_exc()
            _native.write_message(err, err_size, f"python: {type(e).__name__}: {_first_line(e)}")
            return _native.PACHECK_ERROR

    def _supports_trampoline(self, _user, info, reason, reason_size):
        try:
            c = info.contents
            ci = CaseInfo(c.num_seqs, c.num_heads, c.num_kv_heads, c.head_size, c.block_size,
                          _native.LAYOUT_NAMES[c.layout], _native.DTYPE_NAMES[c.q_dtype],
                          _native.DTYPE_NAMES[c.kv_dtype], _native.DTYPE_NAMES[c.out_dtype],
                          [c.seq_lens[i] for i in range(c.num_seqs)], c.max_seq_len, c.scale,
                          _native.SCALE_FORMS.get(c.k_scale_form, "?"), _native.SCALE_FORMS.get(c.v_scale_form, "?"),
                          c.sliding_window, c.logits_soft_cap, bool(c.has_alibi), bool(c.has_sinks),
                          c.max_query_len or 1,
                          [c.query_lens[i] for i in range(c.num_seqs)] if c.query_lens else [1] * c.num_seqs,
                          c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim)
            try:
                answer = self.supports(ci)
            except Decline as d:
                answer = str(d) or "declined"
            if answer is None or answer is True:
                return _native.PACHECK_OK
            _native.write_message(reason, reason_size, answer if isinstance(answer, str) else "declined")
            return _native.PACHECK_DECLINED
        except BaseException as e:  # noqa: BLE001
            self.last_error = traceback.format_exc()
            _native.write_message(reason, reason_size, f"python: {type(e).__name__}: {e}")
            return _native.PACHECK_ERROR


def _timeout_marker():
    return _native.library().info.get("timeout_marker", "pacheck-timeout: ")


def _first_line(e, limit=300):
    """An exception's message as one line of at most `limit` characters (a compiler's several-KB message would
    otherwise be copied into every cell's detail; the whole text is the traceback, CellResult.traceback)."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    more = len(text) - len(first)
    if len(first) > limit:
        more += len(first) - limit
        first = first[:limit]
    return first + (f" [... {more} more characters: see the traceback]" if more > 0 else "")


def _kernel_name(kernel):
    if isinstance(kernel, Kernel):
        kernel.register()
        return kernel.name
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: a pacheck.Kernel or a registered kernel's name, not {type(kernel).__name__}")
    return kernel


@dataclasses.dataclass
class CellInfo:
    """One cell of a suite as a kernel runs it: id (the exact id, fault included), case and fault ids,
    straddles (some seq_len is not a block multiple), poisons_v_tail (a non-finite poison in the V tail that
    a whole-block V read touches), expected_fail (the kernel is a negative control that must fail it)."""

    id: str
    case: str
    fault: str
    straddles: bool
    poisons_v_tail: bool
    expected_fail: bool


@dataclasses.dataclass
class CellResult:
    """What one cell gave: verdict (pass, poisoned, variant, fail, unwritten, declined, error, timeout, ...),
    declined, failed (counts as a failure of a run), detail, metrics (text; "" when no output was judged), repro
    (the `pacheck repro` line; for a Python Kernel without a repro_label, the pacheck.run_cell call) and result
    (the whole result as report.json writes it: metrics, limit, margin, worst element, seconds, ...).
    worst_values: {"out", "ref"}, the output and the oracle at the worst element (floats; NaN and the
    infinities as such), when an output was judged. traceback: a Python kernel's exception, when the cell's
    error came from one. full_text: the file holding the whole detail and traceback when message() cuts them
    (a report directory's errors/ file), else None."""

    cell_id: str
    kernel: str
    verdict: str
    declined: bool
    failed: bool
    detail: str
    metrics: str
    repro: str
    result: dict
    traceback: str = None
    worst_values: dict = None
    full_text: str = None

    @property
    def seconds(self):
        """Wall seconds of the cell (its call, judging and re-runs; the case's preparation excluded)."""
        return self.result.get("seconds", 0.0)

    @property
    def pytest_id(self):
        """The cell id as the pytest plugin's test ids write it (pytest_id())."""
        return pytest_id(self.cell_id)

    @property
    def worst(self):
        """(seq, head, dim) of the element with the largest |out - ref| (a non-finite one wins)."""
        w = self.result.get("metrics", {}).get("worst", {})
        return (w.get("seq"), w.get("head"), w.get("dim"))

    def _cut(self, text, limit):
        if text is None or len(text) <= limit:
            return text
        where = f"whole text in {self.full_text}" if self.full_text else "whole text in CellResult.traceback / .detail"
        return text[:limit].rstrip() + f"\n[... {len(text) - limit} more characters; {where}]"

    def message(self):
        """The failure message: verdict and detail, the worst element with the output and the oracle there and
        the headline metrics (only when an output was judged: not for declined, error, crash or timeout cells),
        the kernel's traceback, the repro. The detail and the traceback are cut to MESSAGE_DETAIL_MAX and
        MESSAGE_TRACEBACK_MAX characters (the traceback keeps its end); the rest is in full_text's file."""
        # self.metrics is "" when pacheck judged no output (cells.hpp's CellRun::metrics): the result's
        # metrics are then all zero and the worst element (seq -1, ...) means nothing.
        m = self.result.get("metrics", {}) if self.metrics else {}
        detail = self._cut(self.detail, MESSAGE_DETAIL_MAX)
        lines = [f"cell '{self.cell_id}' on {self.kernel}: verdict {self.verdict}" + (f" ({detail})" if detail else "")]
        if m:
            s, h, d = self.worst
            # With several query tokens per sequence the result names the query token too (metrics.worst).
            t = m.get("worst", {}).get("query_token")
            where = f"seq {s}, head {h}, dim {d}" if t is None else f"seq {s}, query token {t}, head {h}, dim {d}"
            if self.worst_values:
                where += f": out {self.worst_values['out']!r}, oracle {self.worst_values['ref']!r}"
            rel = m.get("rel_linf")
            rel = "n/a (NaN/Inf in the output)" if rel is None else f"{rel:.3e}"
            lines.append(f"worst element: ({where}); rel_linf {rel} against limit "
                         f"{self.result.get('limit')}; nan {m.get('nan')}, inf {m.get('inf')}")
        if self.traceback:
            tb = self.traceback.rstrip()
            if len(tb) > MESSAGE_TRACEBACK_MAX:
                where = self.full_text or "CellResult.traceback"
                tb = f"[... {len(tb) - MESSAGE_TRACEBACK_MAX} characters; whole traceback in {where}]\n" + \
                    tb[-MESSAGE_TRACEBACK_MAX:]
            lines.append(tb)
        lines.append("repro: " + self.repro)
        return "\n".join(lines)

    def write_full_text(self, folder, name):
        """Writes the whole detail and traceback into folder/errors/NAME.txt when message() would cut them, sets
        full_text to it and returns it (None when nothing is cut)."""
        import os

        if len(self.detail or "") <= MESSAGE_DETAIL_MAX and len(self.traceback or "") <= MESSAGE_TRACEBACK_MAX:
            return None
        path = os.path.join(folder, "errors", name + ".txt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"cell: {self.cell_id}\nkernel: {self.kernel}\nverdict: {self.verdict}\n\ndetail:\n{self.detail}\n")
            if self.traceback:
                f.write(f"\ntraceback:\n{self.traceback}\n")
        self.full_text = path
        return path


def pytest_id(cell_id):
    """A cell id as a pytest test id that `pytest -k` can select: '@' (which -k cannot take) as '_at_', so the
    token of 'V:nan@tail' is 'V:nan_at_tail' (`-k 'V:nan_at_tail and ctx4090'`). The exact id is kept as each
    test's junit property pacheck_cell_id and in every message."""
    return cell_id.replace("@", "_at_")


def _cell_result(ans, kernel, suite):
    """A CellResult from the C API's answer (run_cell, batch_next), with a Python kernel's traceback and repro."""
    wv = ans.pop("worst_values", None)
    if wv:
        wv = {k: float(v) for k, v in wv.items()}
    r = CellResult(**ans, worst_values=wv)
    if isinstance(kernel, Kernel) and kernel.last_error and r.verdict == "error":
        r.traceback = kernel.last_error
    if isinstance(kernel, Kernel) and not getattr(kernel, "_label_given", True):
        # `pacheck repro` cannot load a Python kernel: the line that reruns the cell is this call.
        r.repro = (f"pacheck.run_cell({suite!r}, KERNEL, {r.cell_id!r})  # KERNEL: the pacheck.Kernel "
                   f"{kernel.name!r}")
    return r


@dataclasses.dataclass
class InstrumentCheck:
    """The comparator self-test and pacheck's CPU negative controls on a suite: blind when either failed.
    cached: the answer is the one kept on disk for this library build, suite and device (cache_file)."""

    blind: bool
    summary: str
    cached: bool = False
    cache_file: str = ""


def info():
    """The loaded library: its path, C API and kernel ABI versions, struct sizes, suites_dir and suites."""
    lib = _native.library()
    return dict(lib.info, path=lib.path)


def kernels():
    """Every kernel registered in this process: [{"name", "description", "device", "negative_control"}]."""
    return _native.library().call("pacheck_cells_kernels")["kernels"]


def load_plugin(path):
    """Loads a pacheck plugin library (C ABI) into this process; returns its kernel names. The library is loaded
    in a child process first (as `pacheck run --plugin` does): one that crashes or hangs while registering raises
    PacheckError naming it, and this interpreter lives. TypeError for a path that is not a str or PathLike."""
    import os

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: the plugin library's path (str or PathLike), not {type(path).__name__} {path!r}")
    return _native.library().call("pacheck_cells_add_plugin", os.fspath(path).encode())["kernels"]


def cells(suite, kernel):
    """The cells of `suite` (a name such as "gate", or a .toml path) as `kernel` (a Kernel or a registered
    name) runs them, in suite order: exactly `pacheck list cells --suite SUITE --kernel KERNEL`."""
    ans = _native.library().call("pacheck_cells_list_cells", str(suite).encode(), _kernel_name(kernel).encode())
    return [CellInfo(**c) for c in ans["cells"]]


def _check_run_args(suite, cell_id, device):
    import os

    if suite is not None and not isinstance(suite, (str, os.PathLike)):
        raise TypeError(f"suite: a suite name or .toml path, or None, not {type(suite).__name__} {suite!r}")
    if not isinstance(cell_id, str):
        raise TypeError(f"cell_id: a cell id str (as pacheck.cells() lists them), not {type(cell_id).__name__} "
                        f"{cell_id!r}")
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device: 'cpu', 'cuda' or 'cuda:N', not {type(device).__name__} {device!r}")


def run_cell(suite, kernel, cell_id, device=None, max_memory=None):
    """Runs one cell through pacheck's pipeline on `kernel` in this process and returns its CellResult.

    suite: a name or .toml path, or None to build the cell from its id alone (as `pacheck repro`); device:
    "cpu", "cuda", "cuda:N" (default: the kernel's own device; a CPU kernel runs on the CPU whichever of
    these is given, as in `pacheck run`, but the device named must exist). max_memory: the host memory budget
    in bytes (default: 50% of RAM or of the cgroup limit, as `pacheck run --max-memory`). Raises TypeError for
    an argument of the wrong type (naming it), PacheckError for an id not in the suite, an unknown kernel, a
    device that is none of those spellings ("gpu7") or one this machine lacks ("cuda" without a CUDA device),
    and a cell whose memory (pacheck's, plus a Python kernel's float32 copy of its inputs) would not fit the
    budget, before anything is generated. A kernel's exception is the cell's `error` verdict; a kernel that
    runs past its timeout gives `timeout`; a sparse pool a Kernel did not declare (sparse_pools) is `declined`."""
    _check_run_args(suite, cell_id, device)
    name = _kernel_name(kernel)
    if device is None:
        device = kernel.device if isinstance(kernel, Kernel) else "cpu"
    if isinstance(kernel, Kernel):
        kernel.last_error = None
    request = {"suite": str(suite or ""), "kernel": name, "cell_id": cell_id, "device": device}
    if max_memory:
        request["max_memory"] = float(max_memory)
    ans = _native.library().call_json("pacheck_cells_run", request)
    return _cell_result(ans, kernel, suite)


def check_instrument(suite, device="cpu", recheck=False):
    """The comparator self-test and pacheck's CPU negative controls on the cells of `suite` that plant their
    faults (what every `pacheck run` checks first). Returns InstrumentCheck; blind means checks can't fail.
    A check that passed is kept on disk per library build, suite and device (pacheck/cells.hpp's
    check_instrument says where) and reused; `recheck` (or PACHECK_RECHECK=1) runs it again."""
    ans = _native.library().call_json("pacheck_cells_instrument",
                                      {"suite": str(suite), "device": str(device), "recheck": bool(recheck)})
    return InstrumentCheck(**ans)


if sys.version_info < (3, 8):  # pragma: no cover
    raise ImportError("pacheck needs Python 3.8 or later")

from ._runs import FuzzResult, PropertyResult, SuiteRun, fuzz, properties, run_suite  # noqa: E402 -- they use the names above
