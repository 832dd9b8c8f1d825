"""PyTorch's FlexAttention (torch.nn.attention.flex_attention, public API) as a paged decode kernel: an adapter
that hands pacheck's paged cache to flex_attention unchanged and lets a block mask do the paging.

How the paging is expressed. The cache (layout nhd: [num_blocks, block_size, num_kv_heads, head_size]) is seen,
without a copy, as one key/value sequence of num_blocks x block_size physical slots per KV head ([1,
num_kv_heads, num_blocks * block_size, head_size]; the permute and reshape are a view). Query row r (one per
sequence for plain decode, query_lens[s] rows for sequence s otherwise) is query position r of a batch of one.
The mask keeps physical slot k for row r when the block k // block_size belongs to row r's sequence s (read
from block_tables: entries past ceil(seq_lens[s] / block_size) are padding and own nothing), and its logical
position j = logical_block * block_size + k % block_size is a key the row may see: j <= p, with p =
seq_lens[s] - query_lens[s] + i the row's position (so j < seq_lens[s] for plain decode), and p - j <
sliding_window when there is one. Nothing pacheck poisons outside those slots (unwritten tails, unused blocks,
other sequences' slots, padding targets) is selected by the mask.

The attention variants (include/pacheck/kernel_abi.h's order): the soft cap and ALiBi in score_mod (flex
applies it to scale * q.k), the window in the mask, and the sinks after the call from the log-sum-exp flex
returns: out * sum / (sum + exp(sink)) = out * sigmoid(lse - sink).

What it declines (each with the reason): a cache dtype other than the query's (flex_attention takes one dtype;
fp8 caches would need a dequantised copy of the pool), layouts other than nhd (hnd's [num_blocks, num_kv_heads,
block_size, head_size] has no such view), and sparse pools (high block ids: the mask would be evaluated over
2^31 slots), which it does not declare (Kernel(sparse_pools=False)).

On CUDA flex_attention is compiled (torch.compile, dynamic shapes; FLEX_COMPILE=0 runs it eagerly): the first
cells of a shape pay the compilation (timeout 600 s a cell). On the CPU it runs eagerly (the unfused reference
path, which materialises the scores and multiplies every value row by its probability).

What pacheck finds (docs/PYTHON.md, "FlexAttention"): on the CPU with torch 2.15's eager path, every cell with
a NaN or Inf anywhere in the value pool outside the sequences (unwritten tails, unused blocks, padding targets,
other sequences' slots, keys outside the window) is `poisoned`, and every other cell passes: masked slots get
probability 0, and 0 x NaN = NaN. Finite poisons and K-only poisons pass (masked scores never reach exp).
"""
import contextlib
import os

import torch
from torch.nn.attention import flex_attention as fa

import pacheck

_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_COMPILED = {}


def _flex():
    """flex_attention, compiled on CUDA unless FLEX_COMPILE=0."""
    if os.environ.get("FLEX_COMPILE", "1") == "0" or not torch.cuda.is_available():
        return fa.flex_attention
    if "fn" not in _COMPILED:
        # Shapes change from case to case: compile for dynamic shapes, and let a suite's few dozen shapes
        # recompile rather than fall back to the eager (unfused) path after dynamo's default 8.
        # `import torch._dynamo` here would make `torch` a local name of this function (unbound above it).
        import torch._dynamo as dynamo

        dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 256)
        _COMPILED["fn"] = torch.compile(fa.flex_attention, dynamic=True)
    return _COMPILED["fn"]


def supports(info: pacheck.CaseInfo):
    if info.kv_dtype != info.q_dtype:
        return (f"kv_dtype {info.kv_dtype} with q_dtype {info.q_dtype}: flex_attention takes one dtype for query, key "
                "and value (a dequantised copy of the pool is not made)")
    return None


def _row_tables(inp, device):
    """Per query row: its sequence and its position p; per physical block: its sequence (-1 for none) and its
    logical index within it."""
    B = inp.block_size
    tables = inp.block_tables.torch().to("cpu")
    owner = torch.full((inp.num_blocks,), -1, dtype=torch.int32)
    logical = torch.zeros((inp.num_blocks,), dtype=torch.int32)
    row_seq, row_pos = [], []
    for s, seq_len in enumerate(inp.seq_lens_host):
        nblocks = -(-seq_len // B)
        blocks = tables[s, :nblocks].long()
        owner[blocks] = s
        logical[blocks] = torch.arange(nblocks, dtype=torch.int32)
        qlen = inp.query_lens[s]
        for i in range(qlen):
            row_seq.append(s)
            row_pos.append(seq_len - qlen + i)
    as_dev = lambda t: t.to(device)  # noqa: E731
    return (as_dev(torch.tensor(row_seq, dtype=torch.int32)), as_dev(torch.tensor(row_pos, dtype=torch.int32)),
            as_dev(owner), as_dev(logical))


def _score_mod(inp, device, B, logical, row_pos):
    """The soft cap and ALiBi as a score_mod, or None when the case has neither. It captures tensors and ints
    only: flex_attention traces score_mod, and a captured Python float becomes a SymFloat it refuses once a
    second value has been seen (torch 2.15 on the CPU)."""
    has_cap, slopes = inp.logits_soft_cap > 0, None if inp.alibi_slopes is None else inp.alibi_slopes.torch()
    if not has_cap and slopes is None:
        return None
    cap = torch.tensor(float(inp.logits_soft_cap) if has_cap else 1.0, dtype=torch.float32, device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        if has_cap:
            score = (cap * torch.tanh(score.float() / cap)).to(score.dtype)
        if slopes is not None:
            key_pos = logical[kv_idx // B] * B + kv_idx % B
            score = score + slopes[h] * (key_pos - row_pos[q_idx]).to(score.dtype)
        return score

    return score_mod


def flex_decode(inp: pacheck.Inputs) -> None:
    """One paged decode step through flex_attention over the whole pool, the paging in its block mask."""
    dev = "cuda" if inp.device == "cuda" else "cpu"
    stream = torch.cuda.stream(inp.torch_stream()) if dev == "cuda" else contextlib.nullcontext()
    with stream:
        q = inp.query.torch()                      # [T, H, D]
        kc, vc = inp.key_cache.torch(), inp.value_cache.torch()  # [N, B, G, D]
        N, B, G, D = kc.shape
        H, T = inp.num_heads, inp.num_query_tokens
        k = kc.permute(2, 0, 1, 3).reshape(1, G, N * B, D)  # a view: no copy of the pool
        v = vc.permute(2, 0, 1, 3).reshape(1, G, N * B, D)
        query = q.permute(1, 0, 2).unsqueeze(0)    # [1, H, T, D]
        row_seq, row_pos, owner, logical = _row_tables(inp, q.device)
        window = int(inp.sliding_window)

        def mask_mod(b, h, q_idx, kv_idx):
            blk = kv_idx // B
            key_pos = logical[blk] * B + kv_idx % B
            keep = (owner[blk] == row_seq[q_idx]) & (key_pos <= row_pos[q_idx])
            if window > 0:
                keep = keep & (row_pos[q_idx] - key_pos < window)
            return keep

        score_mod = _score_mod(inp, q.device, B, logical, row_pos)

        block_mask = fa.create_block_mask(mask_mod, None, None, T, N * B, device=q.device)
        want_lse = inp.sinks is not None
        out = _flex()(query, k, v, score_mod=score_mod, block_mask=block_mask, scale=float(inp.scale), enable_gqa=G != H,
                      return_lse=want_lse)
        if want_lse:
            out, lse = out
            sinks = inp.sinks.torch().float().view(1, H, 1)
            out = (out.float() * torch.sigmoid(lse.float() - sinks).unsqueeze(-1))
        inp.out.torch().copy_(out[0].permute(1, 0, 2).to(_TORCH[inp.out_dtype]))


flex_paged = pacheck.Kernel(
    "py.flex_attention", flex_decode, supports=supports, device="cuda" if torch.cuda.is_available() else "cpu",
    layouts=("nhd",), kv_dtypes=("f32", "f16", "bf16"),
    variants=("sliding_window", "logits_soft_cap", "alibi_slopes", "sinks", "query_lens"),
    timeout=600, description=f"torch {torch.__version__} FlexAttention over the whole pool, paging in its block mask")
# The same adapter on the CPU (eager flex_attention), where a CUDA device is present too.
flex_paged_cpu = flex_paged if flex_paged.device == "cpu" else pacheck.Kernel(
    "py.flex_attention_cpu", flex_decode, supports=supports, device="cpu", layouts=("nhd",),
    kv_dtypes=("f32", "f16", "bf16"), variants=("sliding_window", "logits_soft_cap", "alibi_slopes", "sinks", "query_lens"),
    timeout=600, description=f"torch {torch.__version__} FlexAttention (eager, CPU)")
