"""Per-slot fp8 scale tables in the Python module (issue 18 item 5, seed 002: AMD AITER's asm decode reads
[num_blocks, num_kv_heads, block_size] scales): Inputs.k_scales_per_slot / v_scales_per_slot carry pacheck's
tables (the poison of a `scales` fault included) to a Kernel that declares scale_forms "per_slot"; other
kernels decline such cells naming the scale; the honest NumPy example passes every per-slot cell of the aiter
suite and the planted one (the final block's V scales applied before masking) fails exactly the cells
pacheck's own control of that fault, cpu.slot_scale_unmasked, must fail.

Run by ctest as python.per_slot (tests/python/CMakeLists.txt) with PACHECK_LIB and PYTHONPATH set.
"""
import numpy as np
import pytest

import numpy_kernels
import pacheck


def _per_slot(cell_id):
    return " ks=slot" in f" {cell_id}" or " vs=slot" in f" {cell_id}"


def _gate_slot_cell():
    """gate's per-slot cell (h8/2 d128 bs32 e4m3fnuz, ctx 1000,37, aiter, NaN in the V entries of the unwritten
    slots)."""
    ids = [c.id for c in pacheck.cells("gate", "cpu.reference") if _per_slot(c.id) and c.id.endswith("V:nan@scales")]
    assert ids, "gate has no per-slot V:nan@scales cell"
    return ids[0]


def test_inputs_carry_the_tables_with_their_poison():
    seen = {}

    def look(inp):
        t, k = inp.v_scales_per_slot, inp.k_scales_per_slot
        seen["shapes"] = (t.shape, k.shape, t.dtype, t.strides)
        seen["geometry"] = (inp.num_blocks, inp.num_kv_heads, inp.block_size)
        seen["scalars"] = (inp.k_scale, inp.v_scale)
        seen["per_head"] = (inp.k_scales_per_head, inp.v_scales_per_head)
        v, kk = t.numpy(), k.numpy()
        seen["readonly"] = not v.flags.writeable
        seen["v"], seen["k"] = v.copy(), kk.copy()
        seen["tables"] = inp.block_tables.numpy().copy()
        seen["lens"] = list(inp.seq_lens_host)
        numpy_kernels.decode(inp)

    kern = pacheck.Kernel("t.slot_look", look, layouts=("aiter",), scale_forms=("per_slot",),
                          kv_dtypes=("fp8_e4m3fnuz",))
    r = pacheck.run_cell("gate", kern, _gate_slot_cell())
    assert r.verdict == "pass", r.message()
    N, G, B = seen["geometry"]
    assert seen["shapes"] == ((N, G, B), (N, G, B), "f32", (G * B, B, 1))
    assert all(np.isnan(x) for x in seen["scalars"]) and seen["per_head"] == (None, None)
    assert seen["readonly"]
    written = np.zeros((N, B), bool)
    for s, L in enumerate(seen["lens"]):
        for p in range(L):
            written[seen["tables"][s, p // B], p % B] = True
    v, k = seen["v"], seen["k"]
    mask = np.broadcast_to(written[:, None, :], v.shape)
    # Written slots: each token's own scale (suite: V in [0.25, 4], K in [0.5, 2]); the V entries of every
    # other slot hold the cell's NaN, the K table (not poisoned) holds the pager's 1 there.
    assert np.all((v[mask] >= 0.25) & (v[mask] <= 4.0)) and len(np.unique(v[mask])) > 10
    assert np.all(np.isnan(v[~mask])) and (~mask).any()
    assert np.all((k[mask] >= 0.5) & (k[mask] <= 2.0)) and np.all(k[~mask] == 1.0)


def test_a_kernel_without_per_slot_declines_naming_the_scale():
    seen = {}

    def sup(info):
        seen["forms"] = (info.k_scale_form, info.v_scale_form)

    kern = pacheck.Kernel("t.no_slot", numpy_kernels.decode, supports=sup, layouts=("aiter",))
    r = pacheck.run_cell("gate", kern, _gate_slot_cell())
    assert r.verdict == "declined", r.message()
    assert "k_scale: per-slot scales; the plugin's scale_forms list per-tensor, per-KV-head" in r.detail, r.detail
    # Declared, supports() sees the form by its name.
    kern2 = pacheck.Kernel("t.slot_forms", numpy_kernels.decode, supports=sup, layouts=("aiter",),
                           scale_forms=pacheck.SCALE_FORMS)
    assert pacheck.run_cell("gate", kern2, _gate_slot_cell()).verdict == "pass"
    assert seen["forms"] == ("per_slot", "per_slot")


@pytest.mark.parametrize("value, error, says", [
    ("per_slot", TypeError, "scale_forms: a list or tuple"),
    ((), ValueError, "scale_forms: empty"),
    (("per_slot", "bogus"), ValueError, "scale_forms: 'bogus' is not known (known: per_tensor, per_kv_head, per_slot)"),
    (("per_slot", "per_slot"), ValueError, "scale_forms: per_slot listed twice"),
    ((3,), TypeError, "scale_forms: entry 3 is a int"),
    # A dict of flags would declare its False keys too (fresh-user audit): refused, as variants refuses one.
    ({"per_tensor": True, "per_slot": False}, TypeError, "scale_forms: a list or tuple of names, not a dict"),
])
def test_scale_forms_are_checked(value, error, says):
    with pytest.raises(error) as e:
        pacheck.Kernel("t.bad_forms", numpy_kernels.decode, scale_forms=value)
    assert f"pacheck.Kernel('t.bad_forms'): {says}" in str(e.value)


def _aiter_slot_cells():
    cells = [c for c in pacheck.cells("aiter", numpy_kernels.numpy_decode) if _per_slot(c.id)]
    assert len(cells) >= 100, len(cells)  # suites/aiter.toml: 96 + 6 per-slot cells
    return cells


def test_numpy_example_passes_every_per_slot_cell_of_aiter():
    bad = []
    for c in _aiter_slot_cells():
        r = pacheck.run_cell("aiter", numpy_kernels.numpy_decode, c.id)
        if r.verdict != "pass":
            bad.append(r.message())
    assert not bad, f"{len(bad)} cells did not pass:\n" + "\n\n".join(bad[:3])


def test_planted_slot_scale_fault_fails_exactly_the_controls_cells():
    # The cells pacheck's cpu.slot_scale_unmasked must fail: NaN or Inf in the V scale entries of the unwritten
    # slots (region `scales`) at a straddling length.
    want = {c.id for c in pacheck.cells("aiter", "cpu.slot_scale_unmasked") if c.expected_fail and _per_slot(c.id)}
    assert want
    failed, wrong = set(), []
    for c in _aiter_slot_cells():
        r = pacheck.run_cell("aiter", numpy_kernels.numpy_slot_scale_unmasked, c.id)
        if r.failed:
            failed.add(c.id)
        elif r.verdict != "pass":
            wrong.append(r.message())
    assert not wrong, wrong[:2]
    assert failed == want, (f"failed {len(failed)}, expected {len(want)}; unexpected {sorted(failed - want)[:3]}, "
                            f"missed {sorted(want - failed)[:3]}")
