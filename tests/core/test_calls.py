"""trace_call: calls traced over their arrays, equal calls traced once, each with its own
weights."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import onnx_function, to_onnx
from jax2onnx_nn.core import calls
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.functions import DOMAIN
from jax2onnx_nn.testing import assert_exports_match

TRACED: list[str] = []  # one entry per time a layer's Python body runs


@jax.tree_util.register_pytree_node_class
class Dense:
    """A pytree layer: weights are leaves, ``activation`` a static field (in the treedef)."""

    def __init__(self, w: Any, b: Any, activation: str = "tanh") -> None:
        self.w, self.b, self.activation = w, b, activation

    def tree_flatten(self) -> tuple[tuple[Any, Any], str]:
        return (self.w, self.b), self.activation

    @classmethod
    def tree_unflatten(cls, activation: str, children: tuple[Any, Any]) -> Dense:
        return cls(*children, activation=activation)

    def __call__(self, x: Any) -> Any:
        TRACED.append(self.activation)
        y = x @ self.w + self.b
        return jnp.tanh(y) if self.activation == "tanh" else jax.nn.relu(y)


onnx_function(Dense)


class Plain:
    """Not a pytree: its weights are not leaves of the call, so its trace is never reused."""

    def __init__(self, w: Any) -> None:
        self.w = w

    def __call__(self, x: Any) -> Any:
        TRACED.append("plain")
        return x @ self.w


onnx_function(Plain)


def _dense(rng: np.random.Generator, n: int, m: int, activation: str = "tanh") -> Dense:
    return Dense(
        jnp.asarray(rng.standard_normal((n, m)), jnp.float32),
        jnp.asarray(rng.standard_normal(m), jnp.float32),
        activation,
    )


def _stack(layers: list[Any]) -> Any:
    def run(x: Any) -> Any:
        for layer in layers:
            x = layer(x)
        return x

    return run


def test_equal_layers_traced_once_each_with_its_own_weights() -> None:
    calls.clear_trace_cache()
    rng = np.random.default_rng(0)
    layers = [_dense(rng, 4, 4) for _ in range(3)]
    TRACED.clear()
    model = to_onnx(_stack(layers), [("B", 4)])
    assert TRACED == ["tanh"]  # the first layer is traced, the others reuse its body
    assert [n.op_type for n in model.graph.node if n.domain == DOMAIN] == ["Dense"] * 3
    assert_exports_match(_stack(layers), [("B", 4)], sizes={"B": [1, 3]})


def test_second_export_reuses_traces_and_sees_new_weights() -> None:
    calls.clear_trace_cache()
    rng = np.random.default_rng(1)
    assert_exports_match(_stack([_dense(rng, 3, 3)]), [("B", 3)])
    fresh = [_dense(rng, 3, 3), _dense(rng, 3, 3)]  # other arrays of the same avals
    TRACED.clear()
    to_onnx(_stack(fresh), [("B", 3)])
    assert TRACED == []
    assert_exports_match(_stack(fresh), [("B", 3)])


def test_options_frozen_once_per_export_and_a_changed_option_traces_again(monkeypatch: Any) -> None:
    calls.clear_trace_cache()
    frozen: list[ExportConfig] = []
    real = calls._frozen
    monkeypatch.setattr(
        calls,
        "_frozen",
        lambda v: (frozen.append(v) if isinstance(v, ExportConfig) else None, real(v))[1],
    )
    rng = np.random.default_rng(3)
    layers = [_dense(rng, 4, 4) for _ in range(3)]
    config = ExportConfig()
    TRACED.clear()
    to_onnx(_stack(layers), [("B", 4)], config)
    assert len(frozen) == 1 and TRACED == ["tanh"]  # three calls, one key of the options
    config.lowerings["no_such_primitive"] = lambda ctx, x: x  # the same config object, changed
    to_onnx(_stack(layers), [("B", 4)], config)
    assert len(frozen) == 2 and TRACED == ["tanh", "tanh"]


def test_static_field_or_shape_change_traces_again() -> None:
    calls.clear_trace_cache()
    rng = np.random.default_rng(2)
    layers = [_dense(rng, 4, 4, "tanh"), _dense(rng, 4, 4, "relu"), _dense(rng, 4, 5, "relu")]
    TRACED.clear()
    to_onnx(_stack(layers), [("B", 4)])
    assert TRACED == ["tanh", "relu", "relu"]
    assert_exports_match(_stack(layers), [("B", 4)])


def test_weights_outside_the_leaves_are_traced_each_call() -> None:
    calls.clear_trace_cache()
    rng = np.random.default_rng(3)
    layers = [Plain(jnp.asarray(rng.standard_normal((3, 3)), jnp.float32)) for _ in range(2)]
    TRACED.clear()
    to_onnx(_stack(layers), [("B", 3)])
    assert TRACED == ["plain", "plain"]
    assert_exports_match(_stack(layers), [("B", 3)])


def test_vmapped_equal_layers_batch_one_body() -> None:
    """Under jax.vmap a function call is re-bound on the batched operands: equal layers share
    their traced body, and so the batched body (traced once)."""
    calls.clear_trace_cache()
    rng = np.random.default_rng(4)
    layers = [_dense(rng, 4, 4) for _ in range(3)]
    TRACED.clear()
    model = to_onnx(jax.vmap(_stack(layers)), [("B", 4)])
    assert TRACED == ["tanh"]
    assert len(jxi._BATCHED) == 1
    assert [n.op_type for n in model.graph.node if n.domain == DOMAIN] == ["Dense"] * 3
    assert_exports_match(jax.vmap(_stack(layers)), [("B", 4)], sizes={"B": [1, 3]})


def test_inlined_bodies_under_vmap_batch_once() -> None:
    """A body primitive that is not re-bound under vmap is inlined batched: one batched
    trace for equal calls, each call with its own operands."""
    calls.clear_trace_cache()
    prim = jxi.body_primitive("test_calls_scaled_sin")
    body = jax.make_jaxpr(lambda w, x: jnp.sin(x) * w)(jnp.float32(0), jnp.zeros(3, jnp.float32))

    def f(x):
        for scale in (2.0, 3.0):
            x = prim.bind(jnp.float32(scale), x, body=body)[0]
        return x

    model = to_onnx(jax.vmap(f), [("B", 3)])
    assert len(jxi._BATCHED) == 1
    assert [n.op_type for n in model.graph.node].count("Sin") == 2
    assert_exports_match(jax.vmap(f), [("B", 3)], sizes={"B": [1, 4]})


@given(
    plan=st.lists(
        st.tuples(st.sampled_from([2, 3]), st.sampled_from(["tanh", "relu"])),
        min_size=1,
        max_size=5,
    ),
    seed=st.integers(0, 2**16),
)
def test_stacks_of_cached_layers_match_jax(plan: list[tuple[int, str]], seed: int) -> None:
    """Random stacks of layers (widths, activations) sharing the cache across examples."""
    rng = np.random.default_rng(seed)
    layers, width = [], 3
    for out, activation in plan:
        layers.append(_dense(rng, width, out, activation))
        width = out
    assert_exports_match(_stack(layers), [("B", 3)], sizes={"B": [2]})
