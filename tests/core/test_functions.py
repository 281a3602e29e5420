"""@onnx_function: calls become FunctionProto calls, deduplicated, self-contained, exact."""

from __future__ import annotations

import gc
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

from jax2onnx_nn import onnx_function, to_onnx
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.functions import DOMAIN
from jax2onnx_nn.testing import assert_exports_match
from jax2onnx_nn.testing.assertions import op_types


@onnx_function
def smooth(x: Any) -> Any:
    return jnp.tanh(x) * 0.5 + 1.0


@onnx_function(name="Outer")
def outer(x: Any) -> Any:
    return smooth(smooth(x) * 2.0)


class Affine:
    """A plain class with weights; decorated below, so each call is a function call."""

    def __init__(self, seed: int, n: int = 4) -> None:
        rng = np.random.default_rng(seed)
        self.w = jnp.asarray(rng.standard_normal((n, n)).astype(np.float32))
        self.b = jnp.asarray(rng.standard_normal(n).astype(np.float32))

    def __call__(self, x: Any) -> Any:
        return x @ self.w + self.b


onnx_function(Affine)


def _calls(graph: Any) -> list[str]:
    return [n.op_type for n in graph.node if n.domain == DOMAIN]


def test_outside_exports_nothing_changes() -> None:
    x = np.linspace(-2, 2, 5, dtype=np.float32)
    np.testing.assert_allclose(smooth(x), np.tanh(x) * 0.5 + 1.0, rtol=1e-6)
    assert "onnx_function_call" not in str(jax.make_jaxpr(smooth)(x))


def test_two_calls_one_function() -> None:
    model = assert_exports_match(
        lambda x: smooth(x) + smooth(x * 3.0), [("B", 5)], sizes={"B": [1, 4]}
    )
    assert [f.name for f in model.functions] == ["smooth"]
    assert _calls(model.graph) == ["smooth", "smooth"]
    assert any(o.domain == DOMAIN for o in model.opset_import)


@given(
    shape_a=array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
    shape_b=array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
)
def test_one_function_per_input_type(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    model = assert_exports_match(lambda a, b: (smooth(a), smooth(b)), [shape_a, shape_b])
    assert len(model.functions) == (1 if shape_a == shape_b else 2)
    assert len({f.name for f in model.functions}) == len(model.functions)


def test_nested_functions() -> None:
    model = assert_exports_match(lambda x: outer(x) - outer(x + 1.0), [("B", 3)], sizes={"B": [2]})
    assert sorted(f.name for f in model.functions) == ["Outer", "smooth"]
    body = next(f for f in model.functions if f.name == "Outer")
    assert _calls(body) == ["smooth", "smooth"]
    assert _calls(model.graph) == ["Outer", "Outer"]


def test_weights_stay_initializers_of_the_main_graph() -> None:
    first, second = Affine(0), Affine(1)
    model = assert_exports_match(
        lambda x: second(jax.nn.relu(first(x))), [("B", 4)], sizes={"B": [1, 3]}
    )
    assert [f.name for f in model.functions] == ["Affine"]
    (function,) = model.functions
    assert len(function.input) == 3  # x, w, b
    assert len(model.graph.initializer) >= 4
    assert not any(
        n.op_type == "Constant" and n.attribute[0].t.dims == [4, 4] for n in function.node
    )


def test_function_bodies_are_self_contained() -> None:
    @onnx_function
    def with_constants(x: Any) -> Any:
        return x * jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3) + 0.25

    model = assert_exports_match(lambda x: with_constants(x), [("B", 2, 3)], sizes={"B": [1, 3]})
    (function,) = model.functions
    assert "Constant" in [n.op_type for n in function.node]
    produced = {o for n in function.node for o in n.output} | set(function.input)
    assert all(i in produced for n in function.node for i in n.input if i)


def test_symbolic_dims_from_the_function_inputs() -> None:
    @onnx_function
    def flatten_rows(x: Any) -> Any:
        return jnp.reshape(x, (x.shape[0], -1)) * 2.0

    model = assert_exports_match(lambda x: flatten_rows(x), [("B", 3, 4)], sizes={"B": [1, 5]})
    (function,) = model.functions
    assert list(function.input) == ["x"]


def test_dims_not_readable_from_inputs_are_passed_in() -> None:
    @onnx_function
    def unflatten(flat: Any, n: int) -> Any:
        return jnp.broadcast_to(jnp.sum(flat), (n, 2))

    def fn(x: Any) -> Any:
        return unflatten(jnp.reshape(x, (-1,)), x.shape[0])

    model = assert_exports_match(fn, [("B", 3)], sizes={"B": [1, 4]})
    (function,) = model.functions
    assert list(function.input) == ["flat", "dim_B"]


def test_outputs_that_are_inputs_or_repeated() -> None:
    @onnx_function
    def passthrough(x: Any, y: Any) -> Any:
        z = x + y
        return x, z, z

    model = assert_exports_match(lambda a, b: passthrough(a, b), [(2, 3), (2, 3)])
    (function,) = model.functions
    assert len(set(function.output)) == 3
    onnx.checker.check_model(model, full_check=True)


def test_control_flow_inside_a_function() -> None:
    @onnx_function
    def branchy(x: Any) -> Any:
        return jax.lax.cond(jnp.sum(x) > 0, lambda v: v * 2.0 + 1.0, lambda v: v - 3.0, x)

    model = assert_exports_match(
        lambda x: branchy(x), [(4,)], input_values=[np.arange(4, dtype=np.float32)]
    )
    assert_exports_match(
        lambda x: branchy(x), [(4,)], input_values=[-np.arange(4, dtype=np.float32) - 1]
    )
    assert "If" in [n.op_type for f in model.functions for n in f.node]


def test_functions_under_transformations() -> None:
    def fn(x: Any) -> Any:
        return jax.vmap(smooth)(x) + jax.grad(lambda v: jnp.sum(smooth(v)))(x)

    assert_exports_match(fn, [(3, 2)])


@given(n_calls=st.integers(1, 4), b=st.integers(0, 3))
def test_call_count_matches_uses(n_calls: int, b: int) -> None:
    def fn(x: Any) -> Any:
        for _ in range(n_calls):
            x = smooth(x)
        return x

    model = assert_exports_match(fn, [(b, 2)])
    assert op_types(model).count("smooth") == n_calls
    assert len(model.functions) == 1


def test_deterministic_bytes() -> None:
    def fn(x: Any) -> Any:  # one callable: node doc_strings carry its source line
        return outer(x)

    first = to_onnx(fn, [("B", 3)]).SerializeToString()
    second = to_onnx(fn, [("B", 3)]).SerializeToString()
    assert first == second


def test_a_body_is_printed_once_while_it_lives() -> None:
    """The text that tells function bodies apart is remembered per body object (equal layers
    share one traced body) and forgotten with it."""
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0)
    text = jxi.jaxpr_text(closed)
    key = id(closed)
    assert text == str(closed.jaxpr) and jxi._JAXPR_TEXTS[key][1] == text
    assert jxi.jaxpr_text(closed) is text
    other = jax.make_jaxpr(lambda x: jnp.cos(x) * 2)(1.0)
    assert jxi.jaxpr_text(other) != text
    del closed
    gc.collect()
    assert key not in jxi._JAXPR_TEXTS
