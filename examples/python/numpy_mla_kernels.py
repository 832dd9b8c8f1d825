"""Two paged MLA decode kernels in NumPy (multi-head latent attention, the DeepSeek-V2/V3 family's decode with the
up-projections absorbed), as pacheck.Kernel objects with mla=True (test_numpy_mla_kernel.py runs them over suite
`mla`). runner.py, the case-file runner, hands decode_mla / decode_mla_v_tail the MLA case files (format_version
5) as the Inputs they read, so both routes run this one decode.

The call (pacheck.Inputs, "MLA decode"): one latent row per token of R = kv_lora_rank + qk_rope_head_dim values
(512 + 64 = 576 for DeepSeek-V3: c_kv, then k_pe) shared by every query head; latent_cache [num_blocks,
block_size, R]; query [num_query_tokens, num_heads, R]; out [num_query_tokens, num_heads, v_head_dim] with

    out[t, h] = sum_j softmax_j(scale * q[t, h] . row_j) * row_j[:v_head_dim]

over the keys j the query row sees: the first seq_len of its sequence, and j <= p for the row at position
p = seq_len - query_len + i when a sequence has several query tokens. V is the first v_head_dim values of the
same rows, and `scale` is the model's own (not 1/sqrt(R)). An fp8 latent cache has one per-tensor scale,
Inputs.k_scale, for the whole row.

numpy_mla_decode: correct. It follows block_tables into the pool, reads only the first seq_len rows of each
sequence, takes the logits over the whole row and the softmax in float64, and the weighted sum of the rows' V
prefix, so nothing pacheck poisons past seq_len can reach the output.

numpy_mla_v_tail: a PLANTED fault, the MLA form of vLLM issue 641 (pacheck's cpu.mla_v_tail): the logits and the
softmax are the same (the weights past the row's keys are exactly 0), but V is read over the whole final block
of the sequence and multiplied by those zero weights, so a NaN or Inf that pacheck put into the V part of an
unwritten tail slot gives 0 x NaN = NaN. It must fail exactly the cells whose fault puts a non-finite value into
the V part (target V or K+V) of the tail of a straddling sequence (pacheck.CellInfo.poisons_v_tail) and pass
every other: poison in the rope part only (target K) is never read past the keys, and an aligned length has no
tail.
"""
import numpy as np

import pacheck
from pacheck.dtypes import from_float32, to_float32


def _rows(inp, blocks, count):
    """Latent rows 0..count-1 of one sequence whose physical blocks are `blocks` (in logical order), as float64
    [count, R], dequantised (code x k_scale in float32 for fp8; k_scale is 1 otherwise). Reads exactly those rows
    of the pool: the blocks are gathered, never the whole pool."""
    gathered = inp.latent_cache.numpy()[blocks]  # [len(blocks), block_size, R]
    raw = gathered.reshape(-1, gathered.shape[-1])[:count]
    return (to_float32(raw, inp.kv_dtype) * np.float32(inp.k_scale)).astype(np.float64)


def _mla_decode(inp, v_whole_block):
    """Writes inp.out for every query row (see the module docstring); v_whole_block plants the 0 x NaN fault."""
    H, V, B = inp.num_heads, inp.v_head_dim, inp.block_size
    q_all = to_float32(inp.query.numpy(), inp.q_dtype)  # [num_query_tokens, H, R]
    tables = inp.block_tables.numpy()
    out = np.empty((inp.num_query_tokens, H, V), np.float32)
    for s, seq_len in enumerate(inp.seq_lens_host):
        nblocks = -(-seq_len // B)
        rows = _rows(inp, tables[s, :nblocks], nblocks * B if v_whole_block else seq_len)
        for i in range(inp.query_lens[s]):
            t = inp.query_start_loc_host[s] + i
            keys = seq_len - inp.query_lens[s] + i + 1  # keys 0..p of the row at position p (causal)
            logits = (q_all[t].astype(np.float64) @ rows[:keys].T) * np.float64(inp.scale)  # [H, keys]
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            if v_whole_block:  # the planted fault: weights 0 past the keys, V read over the whole final block
                p = np.concatenate([p, np.zeros((H, len(rows) - keys))], axis=-1)
            out[t] = p @ rows[: p.shape[-1], :V]
    inp.out.numpy()[...] = from_float32(out, inp.out_dtype)


def decode_mla(inp: pacheck.Inputs) -> None:
    """One paged MLA decode step, correct: reads only the rows of the keys each query row sees."""
    _mla_decode(inp, v_whole_block=False)


def decode_mla_v_tail(inp: pacheck.Inputs) -> None:
    """The planted fault: V read over the whole final block, its zero weights included (0 x NaN = NaN)."""
    _mla_decode(inp, v_whole_block=True)


# mla=True: MLA cells only (layout nhd, per-tensor fp8 scale: the defaults of an MLA kernel). "query_lens": several
# query tokens per sequence, the one attention variant MLA cells have. sparse_pools=True: _rows gathers only the
# blocks block_tables names.
numpy_mla_decode = pacheck.Kernel("py.numpy_mla_decode", decode_mla, mla=True, variants=("query_lens",),
                                  sparse_pools=True, description="NumPy paged MLA decode, reads only seq_lens[s] rows")
numpy_mla_v_tail = pacheck.Kernel("py.numpy_mla_v_tail", decode_mla_v_tail, mla=True, variants=("query_lens",),
                                  sparse_pools=True,
                                  description="NumPy paged MLA decode with V read over the whole final block (planted)")
