"""The Gaussian-process example: cholesky, cho_solve and slogdet in float64, symbolic test
points."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from jax2onnx_nn import to_onnx, verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.gaussian_process import SPECS, gp_posterior, training_data


@pytest.fixture(scope="module")
def model():
    return to_onnx(gp_posterior, SPECS, enable_double_precision=True)


def test_graph_is_float64_with_symbolic_test_points(model):
    x_test = model.graph.input[2].type.tensor_type
    assert x_test.elem_type == onnx.TensorProto.DOUBLE and x_test.shape.dim[0].dim_param == "M"
    # 32 points: cholesky, lu (slogdet) and the triangular solves are Loops, not unrolled
    assert (
        sum(n.op_type in ("Loop", "Scan") for n in model.graph.node) >= 4
        and len(model.graph.node) < 200
    )


@pytest.mark.parametrize("m", [1, 64])
@pytest.mark.parametrize(("length_scale", "noise"), [(0.7, 0.01), (0.3, 1e-4)])
def test_matches_jax_in_float64(model, m, length_scale, noise):
    x, y = training_data()
    values = [
        x,
        y,
        np.linspace(-2.5, 2.5, m)[:, None],
        np.float64(length_scale),
        np.float64(1.0),
        np.float64(noise),
    ]
    report = verify(
        gp_posterior,
        model,
        SPECS,
        input_values=values,
        enable_double_precision=True,
        rtol=1e-10,
        atol=1e-10,
    )
    assert report.ok, str(report)
