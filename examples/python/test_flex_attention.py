"""PyTorch's FlexAttention through the paged-decode adapter of flex_attention_kernel.py, one test per cell:

    python -m pytest examples/python/test_flex_attention.py --pacheck-suite tail-poison

On CUDA when a device is present (torch.compile'd flex_attention), else on the CPU (eager); skipped where torch
is missing. ci/gpu-python.sh runs it on gate, tail-poison and boundary on the GPU host.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")

import pacheck.pytest_plugin as pp  # noqa: E402
from flex_attention_kernel import flex_paged  # noqa: E402


@pp.cells("gate", flex_paged)
def test_flex_attention(pacheck_cell):
    pacheck_cell.check()
