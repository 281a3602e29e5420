"""verify(runtime=...) runs the exported model in each runtime users deploy to, against JAX."""

from __future__ import annotations

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
        pytest.param(r, marks=pytest.mark.skipif(missing_reason(r) is not None, reason=str(missing_reason(r))))
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
    (out,) = run_model(model.SerializeToString(), [np.ones(3, np.float32), np.full(2, 3.0, np.float32)], runtime)
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0] if read == 0 else [6.0, 6.0])


def test_unknown_runtime_names_the_choices() -> None:
    with pytest.raises(ValueError, match="onnxruntime-web, openvino, tract"):
        missing_reason("tensorflow")


def test_missing_runtime_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("JAX2ONNX_NN_ORT_WEB", str(tmp_path))
    assert "npm" in str(missing_reason("onnxruntime-web"))
    with pytest.raises(RuntimeUnavailable, match="onnxruntime-web is not installed"):
        open_session(to_onnx(jnp.sin, [(2,)]), "onnxruntime-web")
