"""The framework-free coarse-op mechanism: patches, sessions, primitives with a body."""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core import patching
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    coarse_lowering,
    coarse_wrapper,
    patch,
)
from jax2onnx_nn.testing import assert_exports_match
from jax2onnx_nn.testing.assertions import op_types


class Scale:
    """A framework-free 'layer': y = x * w + b, with an optional keyword it does not model."""

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.w = jnp.asarray(w)
        self.b = jnp.asarray(b)

    def __call__(self, x: Any, *, shift: float = 0.0) -> Any:
        return x * self.w + self.b + shift


def _scale_handler(module: Scale, x: Any, **kwargs: Any) -> Any:
    if kwargs:
        return NotApplicable
    return CoarseCall(
        "test_scale",
        inputs={"x": x},
        weights={"w": module.w, "b": module.b},
        params={"fused": True},
    )


@coarse_lowering("test_scale", onnx_ops=("Mul", "Add"))
def _scale(ctx: Any, ops: patching.Operands, *, fused: bool) -> Any:
    if ops.aval("x").dtype != np.float32:
        return NotApplicable  # exercised: the body is lowered instead
    return ctx.op.Add(ctx.op.Mul(ops["x"], ops["w"]), ops["b"])


@pytest.fixture
def patched_scale() -> Any:
    with patch(Scale, "__call__", coarse_wrapper(_scale_handler)):
        yield


def _layer(n: int = 4) -> Scale:
    rng = np.random.default_rng(0)
    return Scale(
        rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    )


def test_patch_restores_on_exception() -> None:
    original = Scale.__call__
    with pytest.raises(RuntimeError), patch(Scale, "__call__", lambda f: lambda *a, **k: 0):
        assert Scale.__call__ is not original
        raise RuntimeError("boom")
    assert Scale.__call__ is original


def test_patch_of_inherited_attribute_is_removed_again() -> None:
    class Sub(Scale):
        pass

    with patch(Sub, "__call__", lambda f: lambda *a, **k: "patched"):
        assert "__call__" in vars(Sub)
    assert "__call__" not in vars(Sub)
    assert Sub.__call__ is Scale.__call__


def test_patches_restore_in_reverse_order_also_when_one_fails() -> None:
    """A table of patches is one context: an attribute patched twice ends as it began, and a
    ``make_wrapper`` that raises leaves no earlier patch of the table applied."""
    from jax2onnx_nn.core.session import patches

    class Sub(Scale):
        pass

    original = Scale.__call__
    with patches(
        [(Sub, "__call__", lambda f: "first"), (Sub, "__call__", lambda f: f + " second")]
    ):
        assert vars(Sub)["__call__"] == "first second"
    assert "__call__" not in vars(Sub) and Sub.__call__ is original

    def broken(f: Any) -> Any:
        raise RuntimeError("boom")

    with (
        pytest.raises(RuntimeError, match="boom"),
        patches([(Scale, "__call__", lambda f: "patched"), (Sub, "__call__", broken)]),
    ):
        pass
    assert Scale.__call__ is original and "__call__" not in vars(Sub)


def test_outside_exports_the_original_runs(patched_scale: Any) -> None:
    layer = _layer()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(layer(x), x * layer.w + layer.b)
    jaxpr = jax.make_jaxpr(layer)(x)
    assert "test_scale" not in str(jaxpr)


@given(batch=st.integers(0, 5))
def test_coarse_op_replaces_the_traced_ops(batch: int) -> None:
    layer = _layer()
    with patch(Scale, "__call__", coarse_wrapper(_scale_handler)):
        model = assert_exports_match(lambda x: layer(x), [(batch, 4)])
    assert op_types(model) == ["Mul", "Add"]


def test_symbolic_batch_and_names(patched_scale: Any) -> None:
    layer = _layer()
    model = assert_exports_match(lambda x: jnp.tanh(layer(x)), [("B", 4)], sizes={"B": [1, 6]})
    assert op_types(model) == ["Mul", "Add", "Tanh"]


def test_handler_not_applicable_runs_the_original(patched_scale: Any) -> None:
    layer = _layer()
    model = assert_exports_match(lambda x: layer(x, shift=2.0), [(3, 4)])
    assert "test_scale" not in str(model)
    assert op_types(model).count("Add") == 2


def test_rule_not_applicable_lowers_the_body(patched_scale: Any) -> None:
    rng = np.random.default_rng(1)
    layer = Scale(rng.standard_normal(4), rng.standard_normal(4))  # float64 weights
    with jax.enable_x64(True):
        layer.w, layer.b = jnp.asarray(layer.w, jnp.float64), jnp.asarray(layer.b, jnp.float64)
        assert_exports_match(
            lambda x: layer(x), [((2, 4), "float64")], enable_double_precision=True
        )


def test_raising_handler_falls_back() -> None:
    def bad(*_: Any, **__: Any) -> Any:
        raise ValueError("handler bug")

    layer = _layer()
    with patch(Scale, "__call__", coarse_wrapper(bad)):
        assert_exports_match(lambda x: layer(x), [(2, 4)])


def test_transformations_of_coarse_calls(patched_scale: Any) -> None:
    layer = _layer()

    def loss(x: Any) -> Any:
        return jax.grad(lambda v: jnp.sum(layer(v) ** 2))(x) + jax.vmap(layer)(x)

    assert_exports_match(loss, [(3, 4)])


def test_coarse_primitive_under_jit_and_eager(patched_scale: Any) -> None:
    layer = _layer()
    x = np.arange(4, dtype=np.float32)
    with patching.export_session(lambda v: v):
        traced = jax.make_jaxpr(lambda v: layer(v))(x)
        assert "test_scale" in str(traced)
        jitted = jax.jit(lambda v: layer(v))(x)
    np.testing.assert_allclose(jitted, x * layer.w + layer.b, rtol=1e-6)


def test_sessions_serialise_and_restore_state() -> None:
    assert patching.active_options() is None
    seen: list[Any] = []

    def worker() -> None:
        with patching.export_session(lambda v: v, patching.ExportOptions(auto_functions=True)):
            seen.append(patching.active_options())

    with patching.export_session(lambda v: v) as prepared:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(timeout=0.2)
        assert thread.is_alive()  # blocked by the lock while this export runs
        assert prepared.fn(3) == 3
        assert patching.active_options() == patching.ExportOptions()
    thread.join()
    assert seen == [patching.ExportOptions(auto_functions=True)]
    assert patching.active_options() is None


def test_session_state_reset_after_failed_export() -> None:
    with pytest.raises(AttributeError):
        to_onnx(lambda x: x.undefined_attribute, [(2,)])
    assert patching.active_options() is None


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_during_an_export_and_restored_after(enabled: bool) -> None:
    """An export runs with Python's cyclic collector off (its allocations would trigger
    collections that scan its live graph again and again); afterwards the collector is as the
    caller had it, also after a failed export."""
    import gc

    seen: list[bool] = []

    def f(x: jax.Array) -> jax.Array:
        seen.append(gc.isenabled())
        return jnp.tanh(x)

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        model = to_onnx(f, [("B", 3)])
        assert op_types(model) == ["Tanh"]
        assert gc.isenabled() is enabled
        with pytest.raises(AttributeError):
            to_onnx(lambda x: x.undefined_attribute, [(2,)])
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False]
