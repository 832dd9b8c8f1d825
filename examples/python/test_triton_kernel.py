"""The Triton kernel of triton_kernel.py through the pacheck pytest plugin, one test per cell (CUDA only):

    PYTHONPATH=python:examples/python python3 -m pytest -p pacheck.pytest_plugin examples/python/test_triton_kernel.py
    ... --pacheck-suite sweep                      # the same test over another suite

Skipped where torch, Triton or a CUDA device is missing (CI has none; examples/python/run_h200.sh runs it).
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import pacheck.pytest_plugin as pp  # noqa: E402
from triton_kernel import triton_paged  # noqa: E402


@pp.cells("gate", triton_paged, device="cuda")
def test_triton_paged(pacheck_cell):
    pacheck_cell.check()
