"""Two paged decode-attention kernels in NumPy, as pacheck.Kernel objects (test_numpy_kernel.py tests them).

numpy_decode: correct. It follows block_tables into the paged pool exactly as a kernel does and reads the
first seq_lens[s] tokens of each sequence only, so nothing pacheck poisons past them can reach the output.

numpy_tail_fault: a PLANTED fault, the bug of vLLM issue 641 (pacheck's cpu.vector_v): the logits past
seq_len are masked (p = 0 exactly), but V is read across the whole final block and multiplied by p, so a
NaN or Inf that pacheck put into the block's unwritten tail gives 0 * NaN = NaN in the output. It must fail
exactly the cells whose fault is a non-finite V poison in the tail of a straddling length (or in the
per-slot V scale entries of the tail's slots, region `scales`, which it multiplies in with the codes).

numpy_slot_scale_unmasked: a PLANTED fault of per-slot fp8 scale tables (seed 002, pacheck's
cpu.slot_scale_unmasked): the V codes past seq_len are masked to 0, but the whole final block is multiplied by
its per-slot V scales before the probabilities mask it, so an unwritten slot's scale entry of NaN gives
0 x NaN = NaN. It must fail exactly the cells cpu.slot_scale_unmasked must fail (tests/python).

All three read every fp8 scale form (scale_forms=ALL_SCALE_FORMS): per tensor, per KV head, and per slot
(Inputs.k_scales_per_slot / v_scales_per_slot [num_blocks, num_kv_heads, block_size], the entry of a token's
PHYSICAL slot: block block_tables[s, p // block_size], slot p % block_size).

Both implement the attention variants (pacheck.Kernel(variants=ALL_VARIANTS)), in the order of
include/pacheck/kernel_abi.h's "Attention variants": logit s = scale * q.k, then the soft cap
c * tanh(s / c), then + alibi_slopes[h] * (j - p), then the sliding window (only keys j > p - W take part:
they are the only ones read), then the softmax whose denominator also holds exp(sinks[h] - m); and several
query tokens per sequence ("query_lens"): row i of sequence s is the token at position
p = seq_len - query_lens[s] + i and sees keys j <= p only (p = seq_len - 1 for plain decode). A kernel that
lacks one leaves it out of `variants`, and pacheck declines its cells naming the field and the kernel.
"""
import numpy as np

import pacheck
from pacheck.dtypes import from_float32, to_float32


def _scales(inp, which):
    """Dequantisation scale of each KV head, [num_kv_heads] float32 (1 for non-fp8 caches)."""
    per_head = inp.k_scales_per_head if which == "k" else inp.v_scales_per_head
    if per_head is not None:
        return per_head.numpy().astype(np.float32)
    return np.full(inp.num_kv_heads, inp.k_scale if which == "k" else inp.v_scale, np.float32)


def _token_scales(inp, which, blocks):
    """Dequantisation scale of every slot of the physical blocks `blocks` (one sequence's, in logical order), as
    float32 [len(blocks) * block_size, num_kv_heads, 1], row i for token i: the per-slot table's entry of the
    token's physical slot, or its KV head's scale."""
    G, B = inp.num_kv_heads, inp.block_size
    table = inp.k_scales_per_slot if which == "k" else inp.v_scales_per_slot
    if table is not None:  # [num_blocks, G, B] -> the sequence's blocks -> [n, B, G] -> token-major
        return table.numpy()[blocks].transpose(0, 2, 1).reshape(len(blocks) * B, G, 1)
    return np.broadcast_to(_scales(inp, which)[None, :, None], (len(blocks) * B, G, 1))


def _tokens(inp, cache, which, blocks, count, codes_until=None):
    """Tokens 0..count-1 of the blocks `blocks` of one sequence, as [count, num_kv_heads, head_size] float32,
    dequantised (code x scale in fp32). Reads exactly those `count` slots from the paged pool. codes_until
    (the planted slot-scale fault only): codes of tokens from it on are taken as 0, their scales still applied."""
    raw = cache.numpy()[blocks]  # the blocks in logical order: a gather from the pool
    G, D, B = inp.num_kv_heads, inp.head_size, inp.block_size
    if inp.layout == "nhd":  # [n, B, G, D]
        t = raw.reshape(len(blocks) * B, G, D)
    elif inp.layout == "hnd":  # [n, G, B, D]
        t = raw.transpose(0, 2, 1, 3).reshape(len(blocks) * B, G, D)
    elif which == "k":  # vllm key [n, G, D/x, B, x] (the aiter layout's key too)
        t = raw.transpose(0, 3, 1, 2, 4).reshape(len(blocks) * B, G, D)
    elif inp.layout == "aiter":  # aiter value [n, G, B/16, D, 16]: slot = group * 16 + i
        t = raw.transpose(0, 2, 4, 1, 3).reshape(len(blocks) * B, G, D)
    else:  # vllm value [n, G, D, B]
        t = raw.transpose(0, 3, 1, 2).reshape(len(blocks) * B, G, D)
    values = to_float32(t[:count], inp.kv_dtype)
    if codes_until is not None:
        values = np.where((np.arange(count) < codes_until)[:, None, None], values, np.float32(0))
    return values * _token_scales(inp, which, blocks)[:count]


ALL_VARIANTS = ("sliding_window", "logits_soft_cap", "alibi_slopes", "sinks", "query_lens")
ALL_SCALE_FORMS = ("per_tensor", "per_kv_head", "per_slot")


def _decode(inp, v_whole_block, slot_scale_unmasked=False):
    S, H, G, D, B = inp.num_seqs, inp.num_heads, inp.num_kv_heads, inp.head_size, inp.block_size
    r = H // G
    q_all = to_float32(inp.query.numpy(), inp.q_dtype)
    tables = inp.block_tables.numpy()
    cap, window = float(inp.logits_soft_cap), int(inp.sliding_window)  # 0 = none
    # [G, r, 1] per query head h = g * r + i, or None when the case has none.
    slopes = None if inp.alibi_slopes is None else inp.alibi_slopes.numpy().astype(np.float64).reshape(G, r, 1)
    sinks = None if inp.sinks is None else inp.sinks.numpy().astype(np.float64).reshape(G, r, 1)
    out = np.empty((inp.num_query_tokens, H, D), np.float32)
    for s, seq_len in enumerate(inp.seq_lens_host):
        nblocks = -(-seq_len // B)
        blocks = tables[s, :nblocks]
        k_seq = _tokens(inp, inp.key_cache, "k", blocks, seq_len)
        if slot_scale_unmasked:  # the whole final block: its codes masked past seq_len, its scales not
            v_seq = _tokens(inp, inp.value_cache, "v", blocks, nblocks * B, codes_until=seq_len)
        else:
            v_seq = _tokens(inp, inp.value_cache, "v", blocks, nblocks * B if v_whole_block else seq_len)
        v_whole_block = v_whole_block or slot_scale_unmasked
        for i in range(inp.query_lens[s]):
            row = inp.query_start_loc_host[s] + i
            length = seq_len - inp.query_lens[s] + i + 1  # keys 0..p of the row at position p (causal)
            first = max(0, length - window) if window > 0 else 0  # the window's first key: keys before it unused
            k = k_seq[first:length].astype(np.float64)  # [L - first, G, D]
            v = v_seq[first:nblocks * B if v_whole_block else length].astype(np.float64)
            q = q_all[row].astype(np.float64).reshape(G, r, D)  # query head h reads KV head h // (H / G)
            logits = np.einsum("grd,tgd->grt", q, k) * np.float64(inp.scale)
            if cap > 0:
                logits = cap * np.tanh(logits / cap)
            if slopes is not None:
                logits = logits + slopes * (np.arange(first, length) - (length - 1))
            m = logits.max(axis=-1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks)
            p = np.exp(logits - m)
            denom = p.sum(axis=-1, keepdims=True) + (np.exp(sinks - m) if sinks is not None else 0.0)
            p /= denom
            if v_whole_block:  # the planted fault: p is 0 past the row's keys, but the whole final block is read
                p = np.concatenate([p, np.zeros(p.shape[:-1] + (nblocks * B - length,))], axis=-1)
            out[row] = np.einsum("grt,tgd->grd", p, v).reshape(H, D)
    inp.out.numpy()[...] = from_float32(out, inp.out_dtype)


def decode(inp: pacheck.Inputs) -> None:
    """One paged decode step over the pool, correct: reads only the first seq_lens[s] tokens."""
    _decode(inp, v_whole_block=False)


def decode_tail_fault(inp: pacheck.Inputs) -> None:
    """The planted tail fault: V read over the whole final block (0 * NaN = NaN)."""
    _decode(inp, v_whole_block=True)


def decode_slot_scale_unmasked(inp: pacheck.Inputs) -> None:
    """The planted per-slot scale fault: the final block's V scales applied to every slot before masking."""
    _decode(inp, v_whole_block=False, slot_scale_unmasked=True)


# sparse_pools=True: _tokens gathers only the blocks block_tables names (cache.numpy()[blocks]), never the whole
# pool, so gate's high-block-id cells (sparse pools of 2^31 elements and more) are run, not declined.
numpy_decode = pacheck.Kernel("py.numpy_decode", decode, layouts=("nhd", "hnd", "vllm", "aiter"), variants=ALL_VARIANTS,
                              scale_forms=ALL_SCALE_FORMS, sparse_pools=True,
                              description="NumPy paged decode, reads only seq_lens[s] tokens")
numpy_tail_fault = pacheck.Kernel("py.numpy_tail_fault", decode_tail_fault, layouts=("nhd", "hnd", "vllm", "aiter"),
                                  variants=ALL_VARIANTS, scale_forms=ALL_SCALE_FORMS, sparse_pools=True,
                                  description="NumPy paged decode with V read over the whole final block (planted)")
numpy_slot_scale_unmasked = pacheck.Kernel(
    "py.numpy_slot_scale_unmasked", decode_slot_scale_unmasked, layouts=("nhd", "hnd", "vllm", "aiter"),
    variants=ALL_VARIANTS, scale_forms=ALL_SCALE_FORMS, sparse_pools=True,
    description="NumPy paged decode with the final block's per-slot V scales applied before masking (planted)")
