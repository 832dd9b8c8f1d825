"""The NumPy MLA kernels of numpy_mla_kernels.py through the pacheck pytest plugin, one test per cell of suite mla:

    PYTHONPATH=python:examples/python python3 -m pytest -p pacheck.pytest_plugin examples/python/test_numpy_mla_kernel.py

test_numpy_mla_decode must pass every cell. test_numpy_mla_v_tail is the planted 0 x NaN fault: it runs only with
PACHECK_PLANTED=1 and must then fail exactly the cells that put NaN or Inf into the V part of a straddling
sequence's tail (tests/python checks that).
"""
import os

import pytest

import pacheck.pytest_plugin as pp
from numpy_mla_kernels import numpy_mla_decode, numpy_mla_v_tail


@pp.cells("mla", numpy_mla_decode)
def test_numpy_mla_decode(pacheck_cell):
    pacheck_cell.check()


@pytest.mark.skipif(os.environ.get("PACHECK_PLANTED") != "1", reason="the planted fault: set PACHECK_PLANTED=1")
@pp.cells("mla", numpy_mla_v_tail)
def test_numpy_mla_v_tail(pacheck_cell):
    pacheck_cell.check()
