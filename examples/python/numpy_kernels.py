"""Two paged decode-attention kernels in NumPy, as pacheck.Kernel objects (test_numpy_kernel.py tests them).

numpy_decode: correct. It follows block_tables into the paged pool exactly as a kernel does and reads the
first seq_lens[s] tokens of each sequence only, so nothing pacheck poisons past them can reach the output.

numpy_tail_fault: a PLANTED fault, the bug of vLLM issue 641 (pacheck's cpu.vector_v): the logits past
seq_len are masked (p = 0 exactly), but V is read across the whole final block and multiplied by p, so a
NaN or Inf that pacheck put into the block's unwritten tail gives 0 * NaN = NaN in the output. It must fail
exactly the cells whose fault is a non-finite V poison in the tail of a straddling length.
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


def _tokens(inp, cache, which, blocks, count):
    """Tokens 0..count-1 of the blocks `blocks` of one sequence, as [count, num_kv_heads, head_size] float32,
    dequantised. Reads exactly those `count` slots from the paged pool."""
    raw = cache.numpy()[blocks]  # the blocks in logical order: a gather from the pool
    G, D, B = inp.num_kv_heads, inp.head_size, inp.block_size
    if inp.layout == "nhd":  # [n, B, G, D]
        t = raw.reshape(len(blocks) * B, G, D)
    elif inp.layout == "hnd":  # [n, G, B, D]
        t = raw.transpose(0, 2, 1, 3).reshape(len(blocks) * B, G, D)
    elif which == "k":  # vllm key [n, G, D/x, B, x]
        t = raw.transpose(0, 3, 1, 2, 4).reshape(len(blocks) * B, G, D)
    else:  # vllm value [n, G, D, B]
        t = raw.transpose(0, 3, 1, 2).reshape(len(blocks) * B, G, D)
    t = t[:count]
    return to_float32(t, inp.kv_dtype) * _scales(inp, which)[None, :, None]


def _decode(inp, v_whole_block):
    S, H, G, D, B = inp.num_seqs, inp.num_heads, inp.num_kv_heads, inp.head_size, inp.block_size
    q_all = to_float32(inp.query.numpy(), inp.q_dtype)
    tables = inp.block_tables.numpy()
    out = np.empty((S, H, D), np.float32)
    for s, length in enumerate(inp.seq_lens_host):
        nblocks = -(-length // B)
        blocks = tables[s, :nblocks]
        k = _tokens(inp, inp.key_cache, "k", blocks, length).astype(np.float64)  # [L, G, D]
        v = _tokens(inp, inp.value_cache, "v", blocks, nblocks * B if v_whole_block else length).astype(np.float64)
        q = q_all[s].astype(np.float64).reshape(G, H // G, D)  # query head h reads KV head h // (H / G)
        logits = np.einsum("grd,tgd->grt", q, k) * np.float64(inp.scale)
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        if v_whole_block:  # the planted fault: p is 0 past seq_len, but the whole final block is multiplied
            p = np.concatenate([p, np.zeros(p.shape[:-1] + (nblocks * B - length,))], axis=-1)
        out[s] = np.einsum("grt,tgd->grd", p, v).reshape(H, D)
    inp.out.numpy()[...] = from_float32(out, inp.out_dtype)


def decode(inp: pacheck.Inputs) -> None:
    """One paged decode step over the pool, correct: reads only the first seq_lens[s] tokens."""
    _decode(inp, v_whole_block=False)


def decode_tail_fault(inp: pacheck.Inputs) -> None:
    """The planted tail fault: V read over the whole final block (0 * NaN = NaN)."""
    _decode(inp, v_whole_block=True)


numpy_decode = pacheck.Kernel("py.numpy_decode", decode, layouts=("nhd", "hnd", "vllm"),
                              description="NumPy paged decode, reads only seq_lens[s] tokens")
numpy_tail_fault = pacheck.Kernel("py.numpy_tail_fault", decode_tail_fault, layouts=("nhd", "hnd", "vllm"),
                                  description="NumPy paged decode with V read over the whole final block (planted)")
