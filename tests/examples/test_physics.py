"""The physics example: a CFL-limited float64 heat-equation stepper, symbolic grid size."""

import sys
from pathlib import Path

import jax
import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.runtimes import missing_reason, run_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.heat_equation import heat_solve, initial_condition

SPECS = [(("N",), "float64"), ((), "float64"), ((), "float64")]


@pytest.fixture(scope="module")
def model():
    return to_onnx(heat_solve, SPECS, enable_double_precision=True, constraints=("N >= 3",))


def test_graph_is_float64_with_symbolic_grid(model):
    x = model.graph.input[0].type.tensor_type
    assert x.elem_type == onnx.TensorProto.DOUBLE
    assert x.shape.dim[0].dim_param == "N"
    assert [n.op_type for n in model.graph.node].count("Loop") == 1
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    floats = {
        vi.type.tensor_type.elem_type
        for vi in list(body.input) + list(body.output)
        if vi.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
    }
    assert floats == {onnx.TensorProto.DOUBLE}  # no silent downcast in the loop body


@pytest.mark.parametrize("n", [5, 11, 33])
@pytest.mark.parametrize("t_end", [0.0, 0.003, 0.02])
def test_matches_jax_to_1e12(model, n, t_end):
    with jxi.x64(True):
        u0 = np.asarray(initial_condition(n))
        values = [u0, np.float64(0.7), np.float64(t_end)]
        report = verify(
            heat_solve,
            model,
            SPECS,
            input_values=values,
            enable_double_precision=True,
            rtol=1e-12,
            atol=1e-12,
        )
        assert report.ok, str(report)
        u, steps = jax.jit(heat_solve)(*values)
    # the data-dependent trip count really varies with the grid (CFL: dt ~ dx^2)
    assert int(steps) == (
        0 if t_end == 0.0 else int(np.ceil(t_end / (0.4 / (n - 1) ** 2 / 0.7) - 1e-9))
    )


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@given(n=st.sampled_from([5, 11, 41]), extra=st.integers(-3, 3))
def test_runs_on_tract_with_loop_bound(n, extra):
    # tract has no Loop: the CFL loop is a Scan of loop_bound steps; a bound below the steps
    # needed gives a NaN field (and the step count after the last step, with a warning)
    with jxi.x64(True):
        values = [np.asarray(initial_condition(n)), np.float64(0.7), np.float64(0.02)]
        u, steps = (np.asarray(v) for v in jax.jit(heat_solve)(*values))
    bound = max(1, int(steps) + extra)
    with pytest.warns(
        UserWarning,
        match=r"integer or bool results of the while_loop at "
        r"\S*heat_equation.py:\d+:\d+ \(heat_solve\)",
    ):
        model = to_onnx(
            heat_solve,
            SPECS,
            enable_double_precision=True,
            constraints=("N >= 3",),
            target="tract",
            loop_bound=bound,
        )
    tract_u, tract_steps = run_model(model, values, "tract")
    if bound >= steps:
        np.testing.assert_allclose(tract_u, u, rtol=1e-12, atol=1e-12)
        assert tract_steps == steps
    else:
        assert np.isnan(tract_u).all() and tract_steps == bound
