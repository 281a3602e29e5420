"""The spectral example: a periodic Poisson solve by FFT in float64 with a symbolic grid size."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.verify import run_onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.spectral_poisson import SPECS, manufactured, poisson_solve


@pytest.fixture(scope="module")
def model():
    return to_onnx(poisson_solve, SPECS, enable_double_precision=True)


def test_graph_is_float64_dft_with_symbolic_grid(model):
    f = model.graph.input[0].type.tensor_type
    assert f.elem_type == onnx.TensorProto.DOUBLE
    assert [d.dim_param for d in f.shape.dim] == ["N", "N"]
    assert [n.op_type for n in model.graph.node].count("DFT") == 4  # fft2 and ifft2, one per axis


@pytest.mark.parametrize("n", [1, 8, 15, 32])
def test_matches_jax_to_1e12(model, n):
    rng = np.random.default_rng(n)
    with jxi.x64(True):
        values = [rng.standard_normal((n, n)), np.float64(rng.uniform(0.5, 3.0))]
        report = verify(
            poisson_solve,
            model,
            SPECS,
            input_values=values,
            enable_double_precision=True,
            rtol=1e-12,
            atol=1e-12,
        )
    assert report.ok, str(report)


def test_solves_the_manufactured_problem(model):
    f, u = manufactured(24)
    (got,) = run_onnx(model, [f, np.float64(2 * np.pi)])
    np.testing.assert_allclose(got, u, atol=1e-12)
