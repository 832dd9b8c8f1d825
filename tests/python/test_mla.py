"""MLA decode in the Python module: a Kernel(mla=True) is registered with PACHECK_KERNEL_MLA and
handed the MLA cells of a suite and nothing else, a multi-head Kernel never an MLA cell; Inputs and CaseInfo carry
kv_lora_rank, qk_rope_head_dim, v_head_dim and the latent cache in the layout kernel_abi.h's "MLA decode" gives
(the row is c_kv then k_pe: a fault's target lands in the part it names); a declaration no MLA case can meet is
refused naming the field. The NumPy example's whole route over suite mla is python.numpy_mla(_planted).

Run by ctest as python.mla (tests/python/CMakeLists.txt) with PACHECK_LIB and PYTHONPATH set.
"""
import numpy as np
import pytest

import numpy_kernels
import numpy_mla_kernels
import pacheck
from pacheck.dtypes import to_float32


def _gate_mla(fault):
    """gate's MLA cell with `fault` (DeepSeek-V3 at 16 heads, 16-token pages, ctx 100,5)."""
    ids = [c.id for c in pacheck.cells("gate", "cpu.mla_reference") if c.id.endswith(" " + fault)]
    assert len(ids) == 1, ids
    return ids[0]


def _mla_cell(*fragments):
    """The first cell of suite mla whose id holds every fragment."""
    ids = [c.id for c in pacheck.cells("mla", "cpu.mla_reference") if all(f in f" {c.id} " for f in fragments)]
    assert ids, fragments
    return ids[0]


def _capture(seen):
    """An MLA run() that records what it was handed, then computes the honest output."""

    def look(inp):
        lat = inp.latent_cache
        seen.update(mla=(inp.is_mla, inp.kv_lora_rank, inp.qk_rope_head_dim, inp.v_head_dim, inp.head_size,
                         inp.num_kv_heads, inp.layout), latent=(lat.shape, lat.strides, lat.dtype),
                    same_memory=lat.ptr == inp.key_cache.ptr == inp.value_cache.ptr,
                    kv_caches=(inp.key_cache.shape, inp.value_cache.shape,
                               inp.key_cache.strides == inp.value_cache.strides),
                    query=inp.query.shape, out=inp.out.shape, scales=(inp.k_scale, inp.v_scale), kv_dtype=inp.kv_dtype,
                    geometry=(inp.num_blocks, inp.block_size), readonly=not lat.numpy().flags.writeable,
                    rows=lat.numpy().copy(), tables=inp.block_tables.numpy().copy(), lens=list(inp.seq_lens_host))
        numpy_mla_kernels.decode_mla(inp)

    return look


def _tail_slots(seen):
    """(physical block, slot) of every unwritten slot in the sequences' final blocks."""
    B = seen["geometry"][1]
    out = []
    for s, n in enumerate(seen["lens"]):
        last = seen["tables"][s, (n - 1) // B]
        out += [(last, p) for p in range(n % B, B)] if n % B else []
    return out


@pytest.mark.parametrize("fault, poisoned, clean", [("V:nan@tail", slice(0, 512), slice(512, 576)),
                                                    ("K:nan@tail", slice(512, 576), slice(0, 512))])
def test_inputs_give_the_latent_cache_in_its_documented_layout(fault, poisoned, clean):
    seen = {}
    kern = pacheck.Kernel(f"t.mla_look_{fault[0]}", _capture(seen), mla=True, variants=("query_lens",))
    r = pacheck.run_cell("gate", kern, _gate_mla(fault))
    assert r.verdict == "pass", r.message()
    N, B = seen["geometry"]
    assert seen["mla"] == (True, 512, 64, 512, 576, 1, "nhd")
    assert seen["latent"][0] == (N, B, 576) and seen["latent"][2] == "bf16" and seen["latent"][1][2] == 1
    assert seen["same_memory"] and seen["kv_caches"] == ((N, B, 1, 576), (N, B, 1, 576), True)
    assert seen["query"] == (2, 16, 576) and seen["out"] == (2, 16, 512)
    assert seen["scales"] == (1.0, 1.0) and seen["readonly"]
    rows, tail = np.isnan(to_float32(seen["rows"], "bf16")), _tail_slots(seen)
    assert len(tail) == (16 - 100 % 16) + (16 - 5)
    # The fault's target names a part of the row: V the first kv_lora_rank values (c_kv), K the rope part (k_pe).
    for b, p in tail:
        assert rows[b, p, poisoned].all() and not rows[b, p, clean].any(), (b, p)
    for s, n in enumerate(seen["lens"]):  # the written rows hold no NaN
        assert not rows[seen["tables"][s, : -(-n // B)]].reshape(-1, 576)[:n].any()


def test_case_info_and_the_v256_and_fp8_shapes():
    infos, seen = [], {}
    kern = pacheck.Kernel("t.mla_info", _capture(seen), mla=True, supports=infos.append)
    r = pacheck.run_cell("mla", kern, _mla_cell(",v256", " V:nan@tail"))
    assert r.verdict == "pass", r.message()
    assert seen["mla"][:4] == (True, 512, 64, 256) and seen["out"] == (1, 16, 256)
    i = infos[-1]
    assert (i.is_mla, i.kv_lora_rank, i.qk_rope_head_dim, i.v_head_dim) == (True, 512, 64, 256)
    assert (i.num_kv_heads, i.head_size, i.layout, i.k_scale_form) == (1, 576, "nhd", "none")
    r = pacheck.run_cell("mla", kern, _mla_cell(" fp8_e5m2 ", " K+V:nan@all"))
    assert r.verdict == "pass", r.message()
    # An fp8 latent cache: one per-tensor scale for the whole row (k_scale; v_scale the same value).
    assert seen["kv_dtype"] == "fp8_e5m2" and seen["latent"][2] == "fp8_e5m2" and seen["scales"] == (0.5, 0.5)
    assert (infos[-1].k_scale_form, infos[-1].kv_dtype) == ("per_tensor", "fp8_e5m2")


def _counting(mla, name=None):
    calls = {"run": 0, "supports": 0}

    def run(inp):
        calls["run"] += 1
        (numpy_mla_kernels.decode_mla if mla else numpy_kernels.decode)(inp)

    def supports(info):
        calls["supports"] += 1

    return calls, pacheck.Kernel(name or f"t.count_{'mla' if mla else 'mha'}", run, supports=supports, mla=mla)


def test_an_mla_kernel_gets_only_mla_cells_and_a_multi_head_kernel_none():
    mla_ids = {c.id for c in pacheck.cells("gate", numpy_mla_kernels.numpy_mla_decode)}
    mha_ids = {c.id for c in pacheck.cells("gate", numpy_kernels.numpy_decode)}
    assert mla_ids == {c.id for c in pacheck.cells("gate", "cpu.mla_reference")} and len(mla_ids) == 4
    assert all(" mla=512+64" in i for i in mla_ids) and not any(" mla=" in i for i in mha_ids) and len(mha_ids) > 300
    mla_calls, mla_kernel = _counting(True)
    mha_calls, mha_kernel = _counting(False)
    mha_cell = sorted(mha_ids)[0]
    r = pacheck.run_cell("gate", mla_kernel, mha_cell)
    assert r.verdict == "declined" and "kv_lora_rank 0: t.count_mla is an MLA decode kernel" in r.detail, r.message()
    r = pacheck.run_cell("gate", mha_kernel, _gate_mla("V:nan@tail"))
    assert r.verdict == "declined", r.message()
    assert "kv_lora_rank 512: t.count_mha reads multi-head K/V caches" in r.detail, r.message()
    assert mla_calls == mha_calls == {"run": 0, "supports": 0}
    # Each on its own kind: asked, called (a faulted cell twice: its clean twin too), and passing.
    assert pacheck.run_cell("gate", mla_kernel, _gate_mla("V:nan@tail")).verdict == "pass"
    assert pacheck.run_cell("gate", mha_kernel, mha_cell).verdict == "pass"
    assert mla_calls["supports"] == mha_calls["supports"] == 1 and mla_calls["run"] >= 1 and mha_calls["run"] >= 1


def test_the_planted_twin_fails_exactly_gates_mla_v_tail_cells():
    cells = pacheck.cells("gate", numpy_mla_kernels.numpy_mla_v_tail)
    want = {c.id for c in cells if c.poisons_v_tail}
    assert want == {_gate_mla("V:nan@tail"), _gate_mla("V:nan@others")}
    failed = set()
    for c in cells:
        r = pacheck.run_cell("gate", numpy_mla_kernels.numpy_mla_v_tail, c.id)
        assert r.verdict in ("pass", "poisoned"), r.message()
        if r.failed:
            failed.add(c.id)
            assert r.result["metrics"]["nan"] > 0, r.message()
    assert failed == want


MLA_PROPERTIES = ["agreement", "tail-poison", "paging-invariance", "determinism", "batch-invariance"]


def test_fuzz_draws_mla_cases_for_an_mla_kernel():
    # Before: pacheck.fuzz refused an MLA kernel by name ("the generators draw multi-head cases only"). Now the
    # properties that apply to it run on MLA cases, and its run() is handed nothing else.
    seen = set()

    def run(inp):
        seen.add((inp.is_mla, inp.num_kv_heads, inp.head_size == inp.kv_lora_rank + inp.qk_rope_head_dim, inp.layout))
        numpy_mla_kernels.decode_mla(inp)

    kern = pacheck.Kernel("t.fuzz_mla", run, mla=True, variants=("query_lens",), sparse_pools=True)
    res = pacheck.fuzz(kern, cases=8, seed=3, max_size=40)
    assert [p.name for p in res.properties] == MLA_PROPERTIES
    assert res.passed, res.report()
    assert all("mla 100%" in p.coverage for p in res.properties), res.report()
    assert seen == {(True, 1, True, "nhd")}, seen


def test_fuzz_catches_the_planted_mla_v_tail_and_refuses_a_property_that_does_not_apply():
    res = pacheck.fuzz(numpy_mla_kernels.numpy_mla_v_tail, properties=["tail-poison"], cases=100, seed=5)
    p = res.properties[0]
    assert not p.passed and " mla=512+64" in p.cell_id, res.report()
    assert pacheck.run_cell(None, numpy_mla_kernels.numpy_mla_v_tail, p.cell_id).verdict == "poisoned"
    with pytest.raises(pacheck.PacheckError, match="property 'gqa-expansion' does not apply to py.numpy_mla_decode, "
                                                   "an MLA decode kernel"):
        pacheck.fuzz(numpy_mla_kernels.numpy_mla_decode, properties=["gqa-expansion"], cases=1)


@pytest.mark.parametrize("kw, error, says", [
    (dict(mla="yes"), TypeError, "mla: True (an MLA decode kernel, handed MLA cells only) or False, not str 'yes'"),
    (dict(mla=1), TypeError, "mla: True (an MLA decode kernel, handed MLA cells only) or False, not int 1"),
    (dict(mla=True, layouts=("vllm",)), ValueError, "layouts: 'vllm': an MLA kernel (mla=True) reads one latent cache"),
    (dict(mla=True, layouts=("nhd", "hnd")), ValueError, "layouts: 'hnd': an MLA kernel (mla=True)"),
    (dict(mla=True, scale_forms=("per_tensor", "per_slot")), ValueError,
     "scale_forms: 'per_slot': an fp8 MLA latent cache has one per-tensor scale"),
    (dict(mla=True, scale_forms=("per_kv_head",)), ValueError, "scale_forms: 'per_kv_head': an fp8 MLA latent cache"),
])
def test_a_declaration_no_mla_case_meets_is_refused_naming_the_field(kw, error, says):
    with pytest.raises(error) as e:
        pacheck.Kernel("t.bad_mla", numpy_mla_kernels.decode_mla, **kw)
    assert f"pacheck.Kernel('t.bad_mla'): {says}" in str(e.value)


def test_register_checks_the_mla_declaration_again():
    k = pacheck.Kernel("t.mla_changed", numpy_mla_kernels.decode_mla, mla=True)
    assert (k.layouts, k.scale_forms) == (pacheck.MLA_LAYOUTS, pacheck.MLA_SCALE_FORMS)
    k.layouts = ("nhd", "vllm")
    with pytest.raises(ValueError, match=r"pacheck.Kernel\('t.mla_changed'\): layouts: 'vllm': an MLA kernel"):
        k.register()
    k.layouts, k.mla = ("nhd",), "no"
    with pytest.raises(TypeError, match=r"pacheck.Kernel\('t.mla_changed'\): mla: True"):
        k.register()
    # A multi-head kernel keeps its defaults.
    m = pacheck.Kernel("t.mha_defaults", numpy_kernels.decode)
    assert (m.mla, m.layouts, m.scale_forms) == (False, ("nhd", "hnd", "vllm"), ("per_tensor", "per_kv_head"))
