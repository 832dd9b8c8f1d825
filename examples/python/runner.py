#!/usr/bin/env python3
"""Foreign runner for pacheck case files: the template for testing a kernel written in Python or Triton.

    pacheck export --suite gate --out cases            # kernel inputs, as laid out in the paged pool
    python3 runner.py --cases cases --outputs outs     # this script: one output file per case file
    pacheck score --cases cases --outputs outs         # verdicts, report and exit code, as `pacheck run`

For every entry of manifest.json "files" this reads the case file (safetensors: query, key_cache,
value_cache, block_tables, seq_lens, out, scale, k_scale, v_scale, the fp8 scale arrays k_scales_per_head /
v_scales_per_head or k_scales_per_slot / v_scales_per_slot, the attention variants sliding_window,
logits_soft_cap, alibi_slopes, sinks, and query_lens / query_start_loc; interop/casefiles.hpp documents
shapes, layouts and strides), computes one paged decode-attention step over the PAGED cache -- it follows
block_tables into the pool exactly as a kernel does, and reads nothing past seq_lens[s] -- and writes
OUTPUTS/<same file name> holding one tensor "out" [num_query_tokens, num_heads, head_size] in the case's
out dtype (num_query_tokens = num_seqs unless some sequence has several query tokens).
A call the kernel cannot take is declined instead: OUTPUTS/<same file name>.declined holding the reason as
one line of text (`--decline-kv-dtype` shows it); `pacheck score` then reports the case's cells as declined.

Backends: NumPy (always), PyTorch (`--backend torch`, on CUDA when available). To test your own kernel,
replace `decode_attention` (see `triton_template` at the bottom): it receives the inputs as arrays and must
return the output. Start from the file's `out` tensor as your output buffer: it holds pacheck's "never
written" bit pattern, so elements your kernel skips are reported as `unwritten`.

Several query tokens per sequence (format_version 3; speculative decoding): query_lens [num_seqs] I32 (1 to
8 each) and query_start_loc [num_seqs + 1] I32 (their prefix sums from 0). Sequence s owns query and out
rows query_start_loc[s] .. query_start_loc[s+1] - 1; its row i is the token at position
p = seq_lens[s] - query_lens[s] + i (the query tokens are the LAST query_lens[s] tokens of the context, as in
vLLM) and sees keys j <= p only (causal among the new tokens). Plain decode: query_lens all 1, p = L - 1.
`--decline-variant query_lens` declines the files with a sequence of several query tokens.

fp8 scales: the code c of a key (value) element of KV head g is worth decode(c) * its scale, the product in
fp32. The scale is the scalar k_scale (v_scale), or with per-KV-head scales k_scales_per_head[g] (the scalar
is then NaN), or with per-slot scale tables (format_version 4; seed 002, AMD AITER's asm decode)
k_scales_per_slot[b, g, slot]: [num_blocks, num_kv_heads, block_size] F32 indexed by the PHYSICAL block b =
block_tables[s, p // block_size] of token p and its slot p % block_size (the scalar is NaN too). The entries
of slots no sequence wrote hold whatever pacheck put there (NaN, Inf, garbage: region `scales`), exactly like
the cache's own unwritten slots: a kernel must not let them reach the output. The file's __metadata__ and the
manifest entry name each cache's form (k_scale_form / v_scale_form: none, per_tensor, per_kv_head, per_slot).

Attention variants (case-file format_version 2; include/pacheck/kernel_abi.h, "Attention variants", is the
definition): for query head h of a query row at position p of sequence s (p = seq_lens[s] - 1 for the only
query token of a decode row) and a key at position j, the logit is built in this order, and a kernel must
keep it:
  1. s_j = scale * (q . k_j)                       (k dequantised for fp8 caches)
  2. soft cap c > 0 (logits_soft_cap):  s_j = c * tanh(s_j / c)
  3. ALiBi (alibi_slopes [num_heads]):  s_j = s_j + alibi_slopes[h] * (j - p)
  4. mask: j <= p, and with a sliding window W > 0 (sliding_window) also p - j < W: the row sees its last W
     positions, its own included (vLLM's sliding_window; FlashAttention's window_size_left = W - 1)
  5. sinks (sinks [num_heads]): exp(sinks[h] - m) joins the softmax denominator only (no value row):
     out = sum_j e^(s_j - m) v_j / (e^(sinks[h] - m) + sum_j e^(s_j - m)),  m = max(sinks[h], max_j s_j)
sliding_window and logits_soft_cap are scalars, 0 = none; alibi_slopes and sinks are absent when unused.
`variant_logits` and `softmax_rows` below do steps 2-5; a kernel that lacks a variant should decline the
files that use it (`--decline-variant` shows how) rather than compute plain attention. Which variants a file
uses comes from the manifest's "case_fields" (pacheck's case field table, `pacheck list fields`): a variant
this runner does not implement, from a newer pacheck, declines its files instead of being ignored.

MLA cells (format_version 5; multi-head latent attention, DeepSeek-V2/V3 and Kimi-K2 decode with the
up-projections absorbed; include/pacheck/kernel_abi.h, "MLA decode"): the manifest entry and the file's I32
scalars give kv_lora_rank, qk_rope_head_dim and v_head_dim (0, 0, 0 in a multi-head file). Such a file holds
one latent cache, latent_cache [num_blocks, block_size, R] with R = kv_lora_rank + qk_rope_head_dim (each row
c_kv then k_pe, shared by every query head), instead of key_cache and value_cache; query is [num_query_tokens,
num_heads, R] and out [num_query_tokens, num_heads, v_head_dim]: V is the first v_head_dim values of the same
rows, the logits run over the whole row, and `scale` is the model's own. This runner computes MLA files with the
NumPy MLA kernel of the Python module route (numpy_mla_kernels.py beside it: `decode_mla`, on both backends),
handed the file as the pacheck.Inputs it reads; that module imports the pacheck package (an installed wheel,
or this checkout's python/ directory, found from here), and without it MLA files are declined with the reason.

`--bug v-tail` plants the fault of pacheck's cpu.vector_v negative control (probabilities masked past
seq_len, but V multiplied over the whole final block, so 0 * NaN poisons the output): `pacheck score
--negative-control` must then catch it. It exists to prove the round trip can fail. `--bug no-window`
ignores the sliding window (attends to the whole context); `--bug softcap-ratio` computes the soft cap as
c * (e^x - e^-x) / (e^x + e^-x) in fp32, as vLLM #56578 did (inf / inf = NaN once |s| > 88.7 c); `--bug
no-causal` computes every query row of a sequence as its last (no causal mask among several query tokens,
pacheck's cpu.qlen_no_causal); `--bug slot-scale-unmasked` masks the V codes past seq_len but multiplies the
whole final block by its per-slot V scales before the probabilities do their masking (pacheck's
cpu.slot_scale_unmasked: 0 x NaN from an unwritten slot's scale entry): `pacheck score` must fail exactly the
cells those faults change. On MLA files `--bug v-tail` runs numpy_mla_kernels' `decode_mla_v_tail` (the same
weights, V read over the whole final block: pacheck's cpu.mla_v_tail); the other bugs leave MLA files honest.

Needs Python 3.8+ and NumPy (and for MLA files the pacheck package, above); nothing else (the safetensors
format is read and written here directly).
"""
import argparse
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # the ctest driver turns this exit code into a skip with the reason printed
    sys.stderr.write("runner.py: NumPy is not installed (pip install numpy)\n")
    sys.exit(77)

# safetensors dtype tag -> (numpy storage type, bytes per element). BF16 and FP8 are kept as raw bits.
STORAGE = {
    "F32": (np.float32, 4),
    "F16": (np.float16, 2),
    "BF16": (np.uint16, 2),
    "F8_E4M3": (np.uint8, 1),
    "F8_E5M2": (np.uint8, 1),
    "I32": (np.int32, 4),
    "U8": (np.uint8, 1),  # raw codes of an encoding safetensors cannot tag: fp8_e4m3fnuz caches
}
MAX_HEADER = 100 << 20


class CaseFileError(Exception):
    pass


# The tensors every case file carries, whatever its variant (interop/casefiles.hpp's case-file layout); an MLA
# file (format_version 5) holds its one latent cache instead of the two caches.
REQUIRED_TENSORS = ("query", "key_cache", "value_cache", "block_tables", "seq_lens", "scale", "out")
MLA_REQUIRED_TENSORS = ("query", "latent_cache", "block_tables", "seq_lens", "scale", "out", "kv_lora_rank",
                        "qk_rope_head_dim", "v_head_dim")


def read_safetensors(path):
    """Returns {name: (dtype_tag, ndarray)}. Checks the same structure pacheck's reader checks."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise CaseFileError(f"{path}: truncated ({len(raw)} bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or n > len(raw) - 8:
        raise CaseFileError(f"{path}: header length {n} does not fit the file")
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        tag = e["dtype"]
        if tag not in STORAGE:
            raise CaseFileError(f"{path}: tensor '{name}': unknown dtype {tag}")
        np_type, size = STORAGE[tag]
        begin, end = e["data_offsets"]
        count = int(np.prod(e["shape"], dtype=np.int64))
        if not (0 <= begin <= end <= len(data)) or end - begin != count * size:
            raise CaseFileError(f"{path}: tensor '{name}': bad data_offsets {e['data_offsets']}")
        arr = np.frombuffer(data[begin:end], dtype=np.dtype(np_type).newbyteorder("<"), count=count)
        out[name] = (tag, arr.reshape(e["shape"]))
    for name in MLA_REQUIRED_TENSORS if "latent_cache" in out else REQUIRED_TENSORS:
        if name not in out:
            raise CaseFileError(f"{path}: tensor '{name}': missing (every case file has it: export the case again)")
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype_tag, ndarray in that tag's storage type)}; written atomically."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (tag, arr) in tensors.items():
        blob = np.ascontiguousarray(arr, dtype=np.dtype(STORAGE[tag][0]).newbyteorder("<")).tobytes()
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data section to 8 bytes
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def fp8_table(exp_bits, bias, finite_top):
    """float32 value of each of the 256 codes of an OCP fp8 format (sign, exp_bits, 7 - exp_bits mantissa).
    finite_top: E4M3FN has no Inf and uses the top exponent for normals (only S.1111.111 is NaN);
    E5M2 is IEEE-like (top exponent = Inf/NaN)."""
    man_bits = 7 - exp_bits
    table = np.empty(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        top = (1 << exp_bits) - 1
        if e == top and not finite_top:
            table[code] = sign * np.inf if m == 0 else np.nan
        elif e == top and finite_top and m == (1 << man_bits) - 1:
            table[code] = np.nan
        elif e == 0:
            table[code] = sign * m * 2.0 ** (1 - bias - man_bits)
        else:
            table[code] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return table


def fp8_e4m3fnuz_table():
    """float32 value of each e4m3fnuz code (AMD/Graphcore FNUZ: bias 8, no Inf, no -0, NaN only 0x80)."""
    table = np.empty(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 7
        table[code] = sign * (m * 2.0**-10 if e == 0 else (1 + m / 8) * 2.0 ** (e - 8))
    table[0x80] = np.nan
    return table


FP8 = {"F8_E4M3": fp8_table(4, 7, True), "F8_E5M2": fp8_table(5, 15, False), "fp8_e4m3fnuz": fp8_e4m3fnuz_table()}


def cache_tag(entry, tag):
    """The decode key of a cache tensor: its tag, or for U8 (raw codes) the manifest's kv_dtype, which pacheck
    writes for fp8_e4m3fnuz caches (the file's __metadata__ kv_dtype says the same)."""
    if tag == "U8":
        kv = entry.get("kv_dtype")
        if kv not in FP8:
            raise CaseFileError(f"U8 cache with kv_dtype {kv!r}: this runner decodes U8 only as fp8_e4m3fnuz")
        return kv
    return tag


def to_float32(tag, arr):
    if tag in ("F32", "F16"):
        return arr.astype(np.float32)
    if tag == "BF16":  # bf16 is the upper half of an IEEE binary32
        return (arr.astype(np.uint32) << 16).view(np.float32)
    if tag in FP8:
        return FP8[tag][arr]
    raise CaseFileError(f"no float conversion for {tag} in this runner")


def kv_scales(t, which, num_kv_heads):
    """Dequantisation scale of each KV head: the per-head array when the case has one, else the scalar."""
    per_head = t.get(f"{which}_scales_per_head")
    if per_head is not None:
        return per_head[1].astype(np.float32)
    return np.full(num_kv_heads, float(t[f"{which}_scale"][1]), dtype=np.float32)


def slot_table(entry, t, which):
    """The per-slot scale table of cache `which` ("k" or "v"): float32 [num_blocks, num_kv_heads, block_size]
    (format_version 4), or None when the case has none. Checked as pacheck checks it: F32 of that shape."""
    name = f"{which}_scales_per_slot"
    if name not in t:
        return None
    tag, table = t[name]
    want = (entry["num_blocks"], entry["num_kv_heads"], entry["block_size"])
    if tag != "F32" or tuple(table.shape) != want:
        raise CaseFileError(f"tensor '{name}': {tag} {list(table.shape)}, expected F32 {list(want)}")
    return table


def token_scales(entry, t, which, blocks):
    """Dequantisation scale of every slot of the physical blocks `blocks` (one sequence's, in logical order), as
    float32 [len(blocks) * block_size, num_kv_heads, 1]: row i is token i of the sequence (slot i % block_size of
    block blocks[i // block_size]). Per-slot tables give each its own entry; per-head and per-tensor scales
    repeat over the tokens."""
    G, B = entry["num_kv_heads"], entry["block_size"]
    table = slot_table(entry, t, which)
    if table is not None:  # [nb, G, B] -> [nb, B, G] -> token-major
        return table[blocks].transpose(0, 2, 1).reshape(len(blocks) * B, G, 1)
    return np.broadcast_to(kv_scales(t, which, G)[None, :, None], (len(blocks) * B, G, 1))


def from_float32(tag, x):
    """Rounds float32 values to the storage of `tag`, round to nearest even (as pacheck and GPUs do)."""
    x = np.asarray(x, dtype=np.float32)
    if tag == "F32":
        return x
    if tag == "F16":
        return x.astype(np.float16)
    if tag == "BF16":
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)
    raise CaseFileError(f"cannot write outputs of dtype {tag}")


def pool_view(tensors, name, strides):
    """The pool tensor as a strided view over its bytes, using the manifest's strides (elements)."""
    tag, arr = tensors[name]
    flat = arr.reshape(-1)
    return tag, np.lib.stride_tricks.as_strided(
        flat, shape=arr.shape, strides=[s * flat.itemsize for s in strides], writeable=False
    )


def blocks_as_nbgd(phys, layout, is_key):
    """Physical blocks [nb, ...layout dims...] -> [nb, block_size, num_kv_heads, head_size]."""
    if layout == "nhd":
        return phys
    if layout == "hnd":
        return phys.transpose(0, 2, 1, 3)
    if is_key:  # vllm and aiter key [nb, G, D/x, B, x]
        nb, g, dx, b, x = phys.shape
        return phys.transpose(0, 3, 1, 2, 4).reshape(nb, b, g, dx * x)
    if layout == "aiter":  # aiter value [nb, G, B/16, D, 16]: slot = group * 16 + lane
        nb, g, groups, d, lanes = phys.shape
        return phys.transpose(0, 2, 4, 1, 3).reshape(nb, groups * lanes, g, d)
    return phys.transpose(0, 3, 1, 2)  # vllm value [nb, G, D, B]


# The attention variants decode_attention computes (steps 2-5 above and several query tokens). A case file may
# use others, from a newer pacheck: variant_fields() finds them in the manifest and main() declines their files.
IMPLEMENTED_VARIANTS = ("sliding_window", "logits_soft_cap", "alibi_slopes", "sinks", "query_lens")


def variant_fields(manifest):
    """The attention-variant fields of an export, in the order of pacheck's case field table: [(name, tensor,
    kind)], from the manifest's "case_fields" (core/case_fields.cpp's rows; `pacheck list fields` prints them):
    the rows with a PACHECK_VARIANT_* bit, each with the case-file tensor that carries it and its kind (a
    "scalar" is used when not 0, a "per_head" tensor when present, a "per_sequence" one when some entry is
    above 1)."""
    fields = manifest.get("case_fields")
    if fields is None:
        raise CaseFileError("manifest.json has no case_fields (written by a pacheck older than this runner): export "
                            "again")
    return [(f["name"], f["casefile"][0], f["kind"]) for f in fields if f["variant_bit"]]


def variants_of(t, num_heads):
    """The call's attention variants from its case file: (window, cap, slopes, sinks). window: int, 0 = none;
    cap: float, 0 = none; slopes / sinks: float64 [num_heads] arrays or None. A format_version 1 file has none
    of the tensors and means no variant."""
    window = int(np.asarray(t["sliding_window"][1]).reshape(-1)[0]) if "sliding_window" in t else 0
    cap = float(np.asarray(t["logits_soft_cap"][1]).reshape(-1)[0]) if "logits_soft_cap" in t else 0.0
    slopes = t["alibi_slopes"][1].astype(np.float64).reshape(num_heads) if "alibi_slopes" in t else None
    sinks = t["sinks"][1].astype(np.float64).reshape(num_heads) if "sinks" in t else None
    if window < 0 or not np.isfinite(cap) or cap < 0:
        raise CaseFileError(f"bad variant scalars: sliding_window {window}, logits_soft_cap {cap}")
    return window, cap, slopes, sinks


def query_lens_of(t, num_seqs):
    """query_lens [num_seqs] as ints (1 each for plain decode, and for format_version 1 and 2 files, which have
    no such tensor), checked as pacheck checks them: 1 to 8 each, at most the sequence's seq_len, summing to
    the rows of query, with query_start_loc their prefix sums."""
    if "query_lens" not in t:
        return [1] * num_seqs
    ql = [int(v) for v in t["query_lens"][1].reshape(-1)]
    lens = [int(v) for v in t["seq_lens"][1].reshape(-1)]
    if len(ql) != num_seqs or any(not 1 <= q <= min(8, L) for q, L in zip(ql, lens)):
        raise CaseFileError(f"query_lens {ql}: each must be 1 to 8 and at most its seq_lens entry ({lens})")
    if sum(ql) != t["query"][1].shape[0]:
        raise CaseFileError(f"query_lens {ql} sum to {sum(ql)}, but query has {t['query'][1].shape[0]} rows")
    qsl = [int(v) for v in t["query_start_loc"][1].reshape(-1)]
    if qsl != [sum(ql[:s]) for s in range(num_seqs + 1)]:
        raise CaseFileError(f"query_start_loc {qsl} is not the prefix sums of query_lens {ql}")
    return ql


def variants_used(t, variants):
    """Names of the variant fields of `variants` (variant_fields) this call uses: a non-zero scalar, a present
    per-head tensor, a per-sequence entry above 1; in table order."""
    used = []
    for name, tensor, kind in variants:
        if tensor not in t:
            continue
        values = np.asarray(t[tensor][1]).reshape(-1)
        if kind == "per_head" or (kind == "per_sequence" and int(values.max()) > 1) or \
                (kind == "scalar" and float(values[0]) != 0):
            used.append(name)
    return used


def window_first(L, window):
    """Step 4: the first key position the query row of a sequence of length L sees (0 without a window)."""
    return max(0, L - window) if window > 0 else 0


def variant_logits(logits, positions, L, cap, slopes, bug=None):
    """Steps 2 and 3 on scaled logits [G, r, T] (query head h = g * r + i) of keys at `positions` [T]:
    the soft cap, then the ALiBi bias slope_h * (j - p) with p = L - 1. float64 unless a bug says otherwise."""
    G, r, _ = logits.shape
    if cap > 0:
        if bug == "softcap-ratio":  # the planted fault: tanh as a ratio of fp32 exponentials (vLLM #56578)
            y = (logits / cap).astype(np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                ep, en = np.exp(y), np.exp(-y)
                logits = (np.float32(cap) * ((ep - en) / (ep + en))).astype(np.float64)
        else:
            logits = cap * np.tanh(logits / cap)
    if slopes is not None:
        logits = logits + slopes.reshape(G, r, 1) * (positions - (L - 1)).astype(np.float64)[None, None, :]
    return logits


def softmax_rows(logits, sinks, G, r):
    """Step 5: softmax weights over the last axis of [G, r, T] logits and their denominator [G, r, 1]; with
    sinks, exp(sinks[h] - m) joins the denominator and the running max only. Returns (p, denominator)."""
    m = logits.max(axis=-1, keepdims=True) if logits.shape[-1] else np.full((G, r, 1), -np.inf)
    if sinks is not None:
        m = np.maximum(m, sinks.reshape(G, r, 1))
    p = np.exp(logits - m)
    denom = p.sum(axis=-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(sinks.reshape(G, r, 1) - m)
    return p, denom


def decode_attention(entry, t, bug=None):
    """NumPy reference over the paged cache, attention variants and several query tokens included; returns
    float32 [num_query_tokens, num_heads, head_size]."""
    st = entry["strides"]
    q = to_float32(*t["query"])
    k_tag, k_pool = pool_view(t, "key_cache", st["key_cache"])
    v_tag, v_pool = pool_view(t, "value_cache", st["value_cache"])
    k_tag, v_tag = cache_tag(entry, k_tag), cache_tag(entry, v_tag)
    tables, lens = t["block_tables"][1], t["seq_lens"][1]
    scale = float(np.asarray(t["scale"][1]).reshape(-1)[0])
    T_rows, H, D = q.shape
    S = len(lens)
    G, B = entry["num_kv_heads"], entry["block_size"]
    r = H // G
    window, cap, slopes, sinks = variants_of(t, H)
    query_lens = query_lens_of(t, S)
    out = np.empty((T_rows, H, D), dtype=np.float32)
    row = 0
    for s in range(S):
        nb = (int(lens[s]) + B - 1) // B
        blocks = tables[s, :nb]
        # Read whole blocks as a kernel does (the planted v-tail bug multiplies V over all of them).
        K_all = to_float32(k_tag, blocks_as_nbgd(k_pool[blocks], entry["layout"], True)).reshape(nb * B, G, D)
        V_all = to_float32(v_tag, blocks_as_nbgd(v_pool[blocks], entry["layout"], False)).reshape(nb * B, G, D)
        # fp8 code c of token p, KV head g, means decode(c) * its scale, the product in fp32 (as pacheck's oracle):
        # [nb * B, G, 1] scales of the sequence's slots (per-slot tables: the entry of p's physical slot).
        k_scale, v_scale = token_scales(entry, t, "k", blocks), token_scales(entry, t, "v", blocks)
        for i in range(query_lens[s]):
            # Query row i of the sequence sits at position p = seq_len - query_len + i and sees keys 0..p: as a
            # decode row of a context of L = p + 1 tokens (steps 3 and 4 read p = L - 1).
            L = int(lens[s]) if bug == "no-causal" else int(lens[s]) - query_lens[s] + i + 1
            # Step 4's window: keys before `first` take no part (and, as in a kernel, are not read at all).
            first = 0 if bug == "no-window" else window_first(L, window)
            T = nb * B if bug in ("v-tail", "slot-scale-unmasked") else L
            V_codes = V_all[first:T]
            if bug == "slot-scale-unmasked":  # the codes past the row's keys are masked, their scales are not
                V_codes = np.where((np.arange(first, T) < L)[:, None, None], V_codes, np.float32(0))
            with np.errstate(invalid="ignore", over="ignore"):
                K = (K_all[first:T] * k_scale[first:T]).astype(np.float64)
                V = (V_codes * v_scale[first:T]).astype(np.float64)
            qg = q[row].reshape(G, r, D).astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                logits = np.einsum("grd,tgd->grt", qg, K) * scale                       # step 1
                logits = variant_logits(logits, np.arange(first, T), L, cap, slopes, bug)  # steps 2, 3
                if bug in ("v-tail", "slot-scale-unmasked"):
                    logits[:, :, L - first:] = -np.inf  # the logit mask is right; V's tail is read anyway below
                p, denom = softmax_rows(logits, sinks, G, r)                             # step 5
                o = np.einsum("grt,tgd->grd", p, V) / denom
            out[row] = o.reshape(H, D).astype(np.float32)
            row += 1
    return out


def decode_attention_torch(entry, t, bug=None):
    """The same computation in PyTorch (CUDA when available), attention variants included (the same steps as
    decode_attention, in fp32); a starting point for GPU kernels."""
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    st = entry["strides"]

    def tensor(name):
        tag, arr = t[name]
        return torch.from_numpy(to_float32(tag, np.ascontiguousarray(arr))).to(dev)

    q = tensor("query")
    k_pool = torch.from_numpy(to_float32(cache_tag(entry, t["key_cache"][0]), pool_view(t, "key_cache", st["key_cache"])[1].copy())).to(dev)
    v_pool = torch.from_numpy(to_float32(cache_tag(entry, t["value_cache"][0]), pool_view(t, "value_cache", st["value_cache"])[1].copy())).to(dev)
    # Per-slot scale tables [num_blocks, G, B] (format_version 4), or per-head / per-tensor scales [1, G, 1].
    k_table, v_table = (None if slot_table(entry, t, w) is None else torch.from_numpy(slot_table(entry, t, w).copy()).to(dev)
                        for w in ("k", "v"))
    k_scale = torch.from_numpy(kv_scales(t, "k", entry["num_kv_heads"])).to(dev)[None, :, None]
    v_scale = torch.from_numpy(kv_scales(t, "v", entry["num_kv_heads"])).to(dev)[None, :, None]
    tables = torch.from_numpy(t["block_tables"][1].astype(np.int64)).to(dev)
    lens = t["seq_lens"][1]
    scale = float(np.asarray(t["scale"][1]).reshape(-1)[0])
    T_rows, H, D = q.shape
    S = len(lens)
    G, B = entry["num_kv_heads"], entry["block_size"]
    r = H // G
    window, cap, slopes, sinks = variants_of(t, H)
    query_lens = query_lens_of(t, S)
    slopes = None if slopes is None else torch.from_numpy(slopes.astype(np.float32)).to(dev).reshape(G, r, 1)
    sinks = None if sinks is None else torch.from_numpy(sinks.astype(np.float32)).to(dev).reshape(G, r, 1)
    out = torch.empty((T_rows, H, D), dtype=torch.float32, device=dev)
    # One (sequence, query row) at a time, as decode_attention: row i of sequence s is a decode row of a
    # context of L = seq_len - query_len + i + 1 tokens (causal among the new tokens).
    rows = [(s, int(lens[s]) if bug == "no-causal" else int(lens[s]) - query_lens[s] + i + 1)
            for s in range(S) for i in range(query_lens[s])]
    for row, (s, L) in enumerate(rows):
        first = 0 if bug == "no-window" else window_first(L, window)
        nb = (int(lens[s]) + B - 1) // B
        blocks = tables[s, :nb]
        K = k_pool[blocks]
        V = v_pool[blocks]
        if entry["layout"] == "hnd":
            K, V = K.permute(0, 2, 1, 3), V.permute(0, 2, 1, 3)
        elif entry["layout"] in ("vllm", "aiter"):  # key [nb, G, D/x, B, x] in both
            K = K.permute(0, 3, 1, 2, 4).reshape(nb, B, G, D)
            if entry["layout"] == "vllm":  # value [nb, G, D, B]
                V = V.permute(0, 3, 1, 2)
            else:  # aiter value [nb, G, B/16, D, 16]: slot = group * 16 + lane (as blocks_as_nbgd)
                V = V.permute(0, 2, 4, 1, 3).reshape(nb, B, G, D)
        T = nb * B if bug in ("v-tail", "slot-scale-unmasked") else L
        # The scale of each slot of the sequence's blocks, [nb * B, G, 1] (as token_scales in NumPy).
        ks = k_scale if k_table is None else k_table[blocks].permute(0, 2, 1).reshape(nb * B, G, 1)[first:T]
        vs = v_scale if v_table is None else v_table[blocks].permute(0, 2, 1).reshape(nb * B, G, 1)[first:T]
        K, V = K.reshape(nb * B, G, D)[first:T], V.reshape(nb * B, G, D)[first:T]
        if bug == "slot-scale-unmasked":  # codes past the row's keys masked, their scales applied anyway
            V = torch.where((torch.arange(first, T, device=dev) < L)[:, None, None], V, torch.zeros_like(V))
        K, V = K * ks, V * vs
        qg = q[row].reshape(G, r, D)
        logits = torch.einsum("grd,tgd->grt", qg, K) * scale                 # step 1
        if cap > 0:                                                           # step 2
            if bug == "softcap-ratio":
                y = logits / cap
                logits = cap * ((torch.exp(y) - torch.exp(-y)) / (torch.exp(y) + torch.exp(-y)))
            else:
                logits = cap * torch.tanh(logits / cap)
        if slopes is not None:                                                # step 3
            pos = torch.arange(first, T, device=dev, dtype=torch.float32) - (L - 1)
            logits = logits + slopes * pos
        if bug in ("v-tail", "slot-scale-unmasked"):
            logits[:, :, L - first:] = float("-inf")
        m = logits.amax(dim=-1, keepdim=True)                                 # step 5
        if sinks is not None:
            m = torch.maximum(m, sinks)
        p = torch.exp(logits - m)
        denom = p.sum(dim=-1, keepdim=True) + (torch.exp(sinks - m) if sinks is not None else 0)
        out[row] = (torch.einsum("grt,tgd->grd", p, V) / denom).reshape(H, D)
    return out.cpu().numpy()


def is_mla(entry):
    """True for the file of an MLA call (format_version 5: kv_lora_rank > 0; older manifests have no MLA files)."""
    return entry.get("kv_lora_rank", 0) > 0


def mla_kernels():
    """numpy_mla_kernels (beside this file), the NumPy MLA kernel of the Python module route, or the ImportError
    that keeps it out. It imports the pacheck package, which needs no library to import: an installed one, else
    this checkout's python/ directory (appended to the path, so an installed package wins)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, os.pardir, os.pardir, "python")):
        if d not in sys.path:
            sys.path.append(d)
    try:
        import numpy_mla_kernels
    except ImportError as e:
        return e
    return numpy_mla_kernels


class _Host:
    """A host array as a pacheck.Buffer hands it to a kernel (numpy(): the raw storage)."""

    def __init__(self, arr):
        self._arr = arr

    def numpy(self):
        return self._arr


class MlaCall:
    """An MLA case file as the pacheck.Inputs of its call: the fields numpy_mla_kernels' decode reads (kernel_abi.h,
    "MLA decode"), arrays in pacheck's raw storage (pacheck.dtypes.STORAGE: bf16 and f16 as uint16, fp8 as
    uint8). `out` starts from the file's "never written" pattern. Checks what a kernel relies on: latent_cache
    [num_blocks, block_size, R] in the entry's kv dtype, R = kv_lora_rank + qk_rope_head_dim = the query rows'
    width, and out [num_query_tokens, num_heads, v_head_dim] with v_head_dim in [1, kv_lora_rank]."""

    def __init__(self, entry, t, storage):
        def scalar(name, kind=float):
            return kind(np.asarray(t[name][1]).reshape(-1)[0])

        self.kv_lora_rank, self.qk_rope_head_dim, self.v_head_dim = (
            scalar(n, int) for n in ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim"))
        R, V = self.kv_lora_rank + self.qk_rope_head_dim, self.v_head_dim
        self.num_heads, self.block_size = entry["num_heads"], entry["block_size"]
        self.q_dtype, self.kv_dtype, self.out_dtype = entry["q_dtype"], entry["kv_dtype"], entry["out_dtype"]
        lat, out = t["latent_cache"][1], t["out"][1]
        want = (entry["num_blocks"], self.block_size, R)
        if tuple(lat.shape) != want or t["query"][1].shape[-1] != R or not 1 <= V <= self.kv_lora_rank or \
                tuple(out.shape[1:]) != (self.num_heads, V):
            raise CaseFileError(f"MLA file: latent_cache {list(lat.shape)} (want {list(want)}), query rows of "
                                f"{t['query'][1].shape[-1]}, out {list(out.shape)} for kv_lora_rank "
                                f"{self.kv_lora_rank}, qk_rope_head_dim {self.qk_rope_head_dim}, v_head_dim {V}")
        self.scale, self.k_scale = scalar("scale"), scalar("k_scale")
        self.seq_lens_host = [int(v) for v in t["seq_lens"][1].reshape(-1)]
        self.query_lens = query_lens_of(t, len(self.seq_lens_host))
        self.query_start_loc_host = [sum(self.query_lens[:s]) for s in range(len(self.query_lens) + 1)]
        self.num_query_tokens = self.query_start_loc_host[-1]
        self.query = _Host(np.ascontiguousarray(t["query"][1]).view(storage[self.q_dtype]))
        self.latent_cache = _Host(np.ascontiguousarray(lat).view(storage[self.kv_dtype]))
        self.block_tables = _Host(t["block_tables"][1])
        self.out_buffer = np.array(out)  # the file's storage type; out views it as pacheck's
        self.out = _Host(self.out_buffer.view(storage[self.out_dtype]))


def decode_mla_file(entry, t, bug=None):
    """An MLA case file through numpy_mla_kernels: decode_mla, or with bug "v-tail" decode_mla_v_tail (V read over
    the whole final block). Returns float32 [num_query_tokens, num_heads, v_head_dim]."""
    mk = mla_kernels()
    from pacheck.dtypes import STORAGE  # pacheck's raw storage types: importable once mla_kernels() was

    call = MlaCall(entry, t, STORAGE)
    with np.errstate(invalid="ignore", over="ignore"):  # the planted fault's 0 x NaN, and poison, warn otherwise
        (mk.decode_mla_v_tail if bug == "v-tail" else mk.decode_mla)(call)
    return to_float32(entry["output"]["dtype"], call.out_buffer)


def skip_broken(entry, out_path, err, bad):
    """Reports case file `entry` that could not be read or computed (CaseFileError `err`) by name, records it
    in `bad`, and removes a stale output of an earlier run, so that pacheck score reports it as missing."""
    print(f"runner.py: {entry['file']}: {err}", file=sys.stderr)
    bad.append(entry["file"])
    if os.path.exists(out_path):
        os.remove(out_path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True, help="directory written by `pacheck export`")
    ap.add_argument("--outputs", required=True, help="directory to write one output file per case file into")
    ap.add_argument("--backend", choices=["numpy", "torch", "auto"], default="numpy")
    ap.add_argument("--bug", choices=["none", "v-tail", "no-window", "softcap-ratio", "no-causal", "slot-scale-unmasked"],
                    default="none",
                    help="plant a known kernel fault (see the module docstring)")
    ap.add_argument("--decline-kv-dtype", action="append", default=[], metavar="DTYPE",
                    help="decline case files whose kv_dtype is DTYPE (e.g. fp8_e4m3fnuz), as a kernel that cannot "
                         "take it would: writes OUTPUTS/<file>.declined with the reason instead of an output; "
                         "repeatable")
    ap.add_argument("--decline-variant", action="append", default=[], metavar="FIELD",
                    help="decline case files that use this attention variant (a field of the export's case_fields: "
                         "sliding_window, logits_soft_cap, alibi_slopes, sinks, query_lens; a kernel without it must "
                         "not compute plain attention instead); repeatable")
    args = ap.parse_args(argv)

    backend = args.backend
    if backend in ("torch", "auto"):
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            if args.backend == "torch":
                sys.exit("runner.py: --backend torch but PyTorch is not installed")
            backend = "numpy"
    compute = decode_attention_torch if backend == "torch" else decode_attention

    with open(os.path.join(args.cases, "manifest.json")) as f:
        manifest = json.load(f)
    # Version 2 added the attention variants, version 3 several query tokens per sequence, version 4 per-slot fp8
    # scale tables, version 5 MLA cells; a runner that does not implement them must refuse the version rather than
    # ignore the new fields (this one reads 1 to 5).
    if manifest.get("format") != "pacheck-cases" or manifest.get("format_version") not in (1, 2, 3, 4, 5):
        sys.exit(f"runner.py: {args.cases}/manifest.json is not a pacheck-cases manifest of format_version 1 to 5 "
                 f"(format_version {manifest.get('format_version')!r})")
    try:
        variants = variant_fields(manifest)
    except CaseFileError as e:
        sys.exit(f"runner.py: {args.cases}/manifest.json: {e}")
    names = [name for name, _, _ in variants]
    for v in args.decline_variant:
        if v not in names:
            ap.error(f"--decline-variant: {v!r} is not an attention variant of this export ({', '.join(names)})")
    os.makedirs(args.outputs, exist_ok=True)
    bug = None if args.bug == "none" else args.bug
    declined, bad = 0, []
    # MLA files need numpy_mla_kernels (and the pacheck package it imports): without them they are declined.
    mla = mla_kernels() if any(is_mla(e) for e in manifest["files"]) else None
    for entry in manifest["files"]:
        out_path = os.path.join(args.outputs, entry["output"]["file"])
        try:
            t = read_safetensors(os.path.join(args.cases, entry["file"]))
        except CaseFileError as e:
            # A broken case file is reported by name and skipped: the other files still get their outputs, and
            # pacheck score reports this one's output as missing.
            skip_broken(entry, out_path, e, bad)
            continue
        reason = None
        if entry["kv_dtype"] in args.decline_kv_dtype:
            reason = f"kv_dtype {entry['kv_dtype']} is not supported (runner.py --decline-kv-dtype)"
        elif is_mla(entry) and isinstance(mla, ImportError):
            reason = f"kv_lora_rank {entry['kv_lora_rank']}: runner.py's MLA decode cannot be imported ({mla})"
        for name in variants_used(t, variants):
            if reason is None and name in args.decline_variant:
                reason = f"{name}: this kernel does not implement it (runner.py --decline-variant)"
            elif reason is None and name not in IMPLEMENTED_VARIANTS:
                reason = f"{name}: runner.py does not implement this attention variant"
        if reason:
            # A call this kernel cannot take: say why instead of writing an output, and leave no stale output
            # of an earlier run beside the note (pacheck score refuses both for one file).
            if os.path.exists(out_path):
                os.remove(out_path)
            with open(out_path + ".declined", "w") as f:
                f.write(reason + "\n")
            declined += 1
            continue
        if os.path.exists(out_path + ".declined"):
            os.remove(out_path + ".declined")
        out_tag = entry["output"]["dtype"]
        try:
            result = (decode_mla_file if is_mla(entry) else compute)(entry, t, bug)
        except CaseFileError as e:
            skip_broken(entry, out_path, e, bad)
            continue
        # A real kernel writes into the provided buffer; copying over it keeps that contract visible.
        buf = np.array(t["out"][1])
        buf[...] = from_float32(out_tag, result)
        write_safetensors(out_path, {"out": (out_tag, buf)},
                          {"runner": f"examples/python/runner.py ({backend})", "case": entry["case"]})
    print(f"runner.py: wrote {len(manifest['files']) - declined - len(bad)} outputs to {args.outputs} (backend {backend}"
          f"{', planted bug ' + args.bug if bug else ''}{f', declined {declined} case files' if declined else ''})")
    if bad:
        sys.exit(f"runner.py: {len(bad)} case files could not be read (no output written for them): {', '.join(bad[:5])}")



def triton_template(entry, t):
    """How to put a Triton (or any PyTorch-callable) kernel here. Replace `compute` in main() with this.

        import torch, my_kernels
        dev = "cuda"
        def raw(name):                      # exact bytes, in the dtype pacheck wrote
            tag, arr = t[name]
            x = torch.from_numpy(np.ascontiguousarray(arr).view(np.int16 if tag in ("BF16", "F16") else arr.dtype))
            return (x.view(torch.bfloat16) if tag == "BF16" else x.view(torch.float16) if tag == "F16" else x).to(dev)
        query, key_cache, value_cache = raw("query"), raw("key_cache"), raw("value_cache")
        block_tables, seq_lens = raw("block_tables"), raw("seq_lens")
        out = raw("out").clone()            # pre-filled with the "never written" pattern
        my_kernels.paged_decode(out, query, key_cache, value_cache, block_tables, seq_lens,
                                scale=float(t["scale"][1]), block_size=entry["block_size"])
        return out.float().cpu().numpy()    # main() rounds it back to the out dtype

    Shapes and strides of every tensor are in `entry["shapes"]` and `entry["strides"]` (elements); the
    pool's layout is `entry["layout"]` (vllm, nhd, hnd or aiter; export with --kernel-layout to choose).
    Attention variants: `variants_of(t, num_heads)` gives (sliding_window, logits_soft_cap, alibi_slopes,
    sinks); hand your kernel raw("alibi_slopes") / raw("sinks") when present, or decline the files whose
    variants it lacks (`variants_used(t, variant_fields(manifest))`; main()'s --decline-variant writes the note). Several query tokens
    per sequence: query and out have sum(query_lens) rows; hand your kernel raw("query_start_loc") (vLLM's
    query_start_loc / FlashAttention's cu_seqlens_q) and max(query_lens), or decline "query_lens".
    """
    raise NotImplementedError("a template: see the docstring")


if __name__ == "__main__":
    main()
