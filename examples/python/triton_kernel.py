"""A paged decode-attention kernel in Triton (written for Triton 3.6 and torch 2.11 on an H200), as a
pacheck.Kernel on CUDA. test_triton_kernel.py tests it with the pytest plugin; run_h200.sh runs that over
gate and sweep on the GPU machine.

One program per (sequence, query head): it walks the sequence's blocks through block_tables, loads K and V
slots of the block with a mask that stops at seq_lens[s] (so nothing pacheck poisons past it is ever read),
and keeps an online softmax in fp32. Products are elementwise fp32 (no tl.dot), so no TF32 is declared.
Every layout is read through its strides: vllm's key [blocks, kv_heads, head_size/x, block_size, x] by
splitting d into d // x and d % x. fp8 caches (e4m3fn, e5m2) are dequantised with the per-KV-head scale;
e4m3fnuz (AMD's encoding, no NVIDIA type in Triton) is declined by the descriptor's kv_dtypes list.

The buffers are pacheck's own device memory, seen by torch through __cuda_array_interface__ (Buffer.torch(),
no copy), and the launch goes on pacheck's stream (Inputs.torch_stream()), which pacheck synchronises after
the call.
"""
import torch
import triton
import triton.language as tl

import pacheck


@triton.jit
def _paged_decode(q_ptr, k_ptr, v_ptr, bt_ptr, sl_ptr, out_ptr, ks_ptr, vs_ptr, scale,
                  q_ss, q_sh, o_ss, o_sh, bt_ss,
                  k_sb, k_sslot, k_sg, k_sdhi, k_sdlo,
                  v_sb, v_sslot, v_sg, v_sd,
                  RATIO: tl.constexpr, HEAD: tl.constexpr, BLOCK: tl.constexpr, X: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_B: tl.constexpr):
    s = tl.program_id(0)
    h = tl.program_id(1)
    g = h // RATIO
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD
    slot = tl.arange(0, BLOCK_B)
    smask = slot < BLOCK
    seq_len = tl.load(sl_ptr + s)
    q = tl.load(q_ptr + s * q_ss + h * q_sh + d, mask=dmask, other=0.0).to(tl.float32)
    k_scale = tl.load(ks_ptr + g)
    v_scale = tl.load(vs_ptr + g)
    k_doff = (d // X) * k_sdhi + (d % X) * k_sdlo
    m_i = tl.max(tl.full([BLOCK_B], float("-inf"), tl.float32), axis=0)
    l_i = tl.sum(tl.zeros([BLOCK_B], tl.float32), axis=0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    num_blocks = tl.cdiv(seq_len, BLOCK)
    for j in range(0, num_blocks):
        phys = tl.load(bt_ptr + s * bt_ss + j).to(tl.int64)
        tok = j * BLOCK + slot
        valid = smask & (tok < seq_len)  # the mask that keeps the unwritten tail out of every load
        m2 = valid[:, None] & dmask[None, :]
        k = tl.load(k_ptr + phys * k_sb + slot[:, None] * k_sslot + g * k_sg + k_doff[None, :], mask=m2, other=0.0)
        k = k.to(tl.float32) * k_scale
        logits = tl.sum(k * q[None, :], axis=1) * scale
        logits = tl.where(valid, logits, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(logits, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.where(valid, tl.exp(logits - m_new), 0.0)
        v = tl.load(v_ptr + phys * v_sb + slot[:, None] * v_sslot + g * v_sg + d[None, :] * v_sd, mask=m2, other=0.0)
        v = v.to(tl.float32) * v_scale
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(out_ptr + s * o_ss + h * o_sh + d, out.to(out_ptr.dtype.element_ty), mask=dmask)


def _strides(inp, buf, which):
    """(block, slot, kv_head, d_hi, d_lo) element strides of a cache, and x (the vllm key's vector width)."""
    st = buf.strides
    if inp.layout == "nhd":  # [blocks, B, G, D]
        return (st[0], st[1], st[2], st[3], 0), 1
    if inp.layout == "hnd":  # [blocks, G, B, D]
        return (st[0], st[2], st[1], st[3], 0), 1
    if which == "k":  # vllm key [blocks, G, D/x, B, x]
        return (st[0], st[3], st[1], st[2], st[4]), buf.shape[4]
    return (st[0], st[3], st[1], st[2], 0), 1  # vllm value [blocks, G, D, B]


def triton_decode(inp: pacheck.Inputs) -> None:
    """Launches _paged_decode on pacheck's buffers, on pacheck's stream."""
    with torch.cuda.stream(inp.torch_stream()):
        q, kc, vc = inp.query.torch(), inp.key_cache.torch(), inp.value_cache.torch()
        bt, sl, out = inp.block_tables.torch(), inp.seq_lens.torch(), inp.out.torch()
        G = inp.num_kv_heads
        ks = (inp.k_scales_per_head.torch() if inp.k_scales_per_head is not None
              else torch.full((G,), inp.k_scale, dtype=torch.float32, device=q.device))
        vs = (inp.v_scales_per_head.torch() if inp.v_scales_per_head is not None
              else torch.full((G,), inp.v_scale, dtype=torch.float32, device=q.device))
        (k_sb, k_sslot, k_sg, k_sdhi, k_sdlo), x = _strides(inp, inp.key_cache, "k")
        (v_sb, v_sslot, v_sg, v_sd, _), _ = _strides(inp, inp.value_cache, "v")
        grid = (inp.num_seqs, inp.num_heads)
        _paged_decode[grid](q, kc, vc, bt, sl, out, ks, vs, inp.scale,
                            inp.query.strides[0], inp.query.strides[1], inp.out.strides[0], inp.out.strides[1],
                            inp.block_tables.strides[0],
                            k_sb, k_sslot, k_sg, k_sdhi, k_sdlo, v_sb, v_sslot, v_sg, v_sd,
                            RATIO=inp.num_heads // G, HEAD=inp.head_size, BLOCK=inp.block_size, X=x,
                            BLOCK_D=triton.next_power_of_2(inp.head_size),
                            BLOCK_B=triton.next_power_of_2(inp.block_size), num_warps=4)


triton_paged = pacheck.Kernel(
    "py.triton_paged", triton_decode, device="cuda", layouts=("nhd", "hnd", "vllm"),
    kv_dtypes=("f32", "f16", "bf16", "fp8_e4m3fn", "fp8_e5m2"), sparse_pools=True,  # reads only block_tables' blocks
    description="Triton paged decode, one program per (seq, head), masked loads, online softmax in fp32")
