"""verify(runtime=...) runs the exported model in each runtime users deploy to, against JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.runtimes import (
    RUNTIMES,
    RuntimeUnavailable,
    missing_reason,
    open_session,
    run_model,
)
from jax2onnx_nn.testing import assert_exports_match


def runtime_params() -> list:
    """One pytest param per runtime, skipped with the reason where it is not installed."""
    return [
        pytest.param(
            r,
            marks=pytest.mark.skipif(missing_reason(r) is not None, reason=str(missing_reason(r))),
        )
        for r in RUNTIMES
    ]


@pytest.mark.parametrize("runtime", runtime_params())
def test_mlp_with_symbolic_batch_matches_jax(runtime: str) -> None:
    w1 = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)

    def mlp(x):
        return jnp.tanh(x @ w1).sum(axis=-1, keepdims=True) * 0.5

    model = to_onnx(mlp, [("B", 6)])
    report = verify(mlp, model, [("B", 6)], sizes={"B": [1, 4]}, runtime=runtime)
    assert report.runtime == runtime and len(report.runs) == 2
    report.raise_if_failed()


@pytest.mark.parametrize("runtime", runtime_params())
@given(n=st.integers(1, 5), dtype=st.sampled_from(["int32", "float32", "bool"]))
def test_dtypes_round_trip_exactly(runtime: str, n: int, dtype: str) -> None:
    def f(x):
        return (jnp.logical_not(x), x) if dtype == "bool" else (x * 2 + 1, jnp.max(x, axis=0))

    assert_exports_match(f, [((n, 3), dtype)], runtime=runtime)


@pytest.mark.parametrize("runtime", runtime_params())
def test_run_model_returns_outputs_in_graph_order(runtime: str) -> None:
    model = to_onnx(lambda x, i: (x + 1.0, i * 3), [(2,), ((3,), "int32")])
    x, i = np.array([1.0, -2.0], np.float32), np.array([1, 2, 3], np.int32)
    y, j = run_model(model, [x, i], runtime)
    np.testing.assert_array_equal(y, x + 1)
    np.testing.assert_array_equal(j, i * 3)
    assert j.dtype == np.int32


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("read", [0, 1])
def test_inputs_the_model_does_not_read_are_fed_by_name(runtime: str, read: int) -> None:
    # OpenVINO drops graph inputs nothing reads: feeding by position gave "vector::_M_range_check"
    def f(a, b):
        return (a, b)[read] * 2.0

    assert_exports_match(f, [(3,), (2,)], target=runtime, runtime=runtime)
    model = to_onnx(f, [(3,), (2,)], target=runtime)
    (out,) = run_model(
        model.SerializeToString(), [np.ones(3, np.float32), np.full(2, 3.0, np.float32)], runtime
    )
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0] if read == 0 else [6.0, 6.0])


def test_unknown_runtime_names_the_choices() -> None:
    with pytest.raises(ValueError, match="onnxruntime-web, openvino, tract"):
        missing_reason("tensorflow")


def test_missing_runtime_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("JAX2ONNX_NN_ORT_WEB", str(tmp_path))
    assert "npm" in str(missing_reason("onnxruntime-web"))
    with pytest.raises(RuntimeUnavailable, match="onnxruntime-web is not installed"):
        open_session(to_onnx(jnp.sin, [(2,)]), "onnxruntime-web")


# -- loops of a run-time trip count over symbolic shapes -----------------------------------------

# fori_loop bodies over a carry of symbolic length N (x is the loop-invariant input, i the step)
_COUNTED_BODIES = {
    "scale": lambda i, c, x: c * 0.5 + jnp.sin(x),
    "cumsum": lambda i, c, x: jnp.cumsum(c) * 0.25 + x,
    "one_hot_of_step": lambda i, c, x: c + (jnp.arange(c.shape[0]) == i) * 1.0,
    "gather_at_step": lambda i, c, x: c + x[i % x.shape[0]],
    "rotate": lambda i, c, x: jnp.concatenate([c[1:], c[:1]]) * 0.5 + x,
    "shift": lambda i, c, x: c.at[1:].set(c[:-1]),
    "mask_below_step": lambda i, c, x: jnp.where(jnp.arange(c.shape[0]) < i, c * 0.5, c + x),
    "matrix": lambda i, c, x: c + jnp.outer(c, x) @ x * 1e-2 - c.mean(),
    "inner_loop_of_step_trips": lambda i, c, x: jax.lax.fori_loop(
        0, i, lambda j, d: d * 0.5 + x, c
    ),
}


@pytest.mark.parametrize("body", sorted(_COUNTED_BODIES))
@pytest.mark.parametrize("runtime", runtime_params())
def test_loops_of_a_run_time_trip_count_over_symbolic_shapes(
    runtime: str, body: str, request: pytest.FixtureRequest
) -> None:
    """``fori_loop(lo, hi, ...)`` with both bounds graph inputs, over a carry of symbolic
    length, exported for the runtime (tract: a Scan over ``Range(0, trips)``) and run there:
    0, 1 and 4 steps on lengths 2 and 5."""
    step = _COUNTED_BODIES[body]

    def f(x, lo, hi):
        return jax.lax.fori_loop(lo, hi, lambda i, c: step(i, c, x), x)

    specs = [("N",), ((), "int32"), ((), "int32")]
    model = to_onnx(f, specs, target=runtime, constraints=("N >= 2",))
    ops = {n.op_type for n in model.graph.node}
    assert ("Scan" in ops and "Loop" not in ops) if runtime == "tract" else "Loop" in ops, ops
    for n, lo, hi in ((2, 0, 0), (5, 1, 2), (5, -1, 3), (2, 0, 4)):
        values = [np.linspace(-1, 1, n, dtype=np.float32), np.int32(lo), np.int32(hi)]
        verify(f, model, specs, input_values=values, runtime=runtime).raise_if_failed()
