"""The NumPy kernels of numpy_kernels.py through the pacheck pytest plugin, one test per cell of gate:

    PYTHONPATH=python:examples/python python3 -m pytest -p pacheck.pytest_plugin examples/python/test_numpy_kernel.py

test_numpy_decode must pass every cell. test_numpy_tail_fault is the planted fault: it runs only with
PACHECK_PLANTED=1 and must then fail exactly the straddling V-poison cells (tests/python checks that).
"""
import os

import pytest

import pacheck.pytest_plugin as pp
from numpy_kernels import numpy_decode, numpy_tail_fault


@pp.cells("gate", numpy_decode)
def test_numpy_decode(pacheck_cell):
    pacheck_cell.check()


@pytest.mark.skipif(os.environ.get("PACHECK_PLANTED") != "1", reason="the planted fault: set PACHECK_PLANTED=1")
@pp.cells("gate", numpy_tail_fault)
def test_numpy_tail_fault(pacheck_cell):
    pacheck_cell.check()
