"""Common subexpressions merged in every graph."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on


def _body_nodes(model):
    return [
        n for node in model.graph.node for a in node.attribute if a.HasField("g") for n in a.g.node
    ]


@given(
    steps=st.integers(0, 3),
    size=st.integers(2, 5),
    use_while=st.booleans(),
    seed=st.integers(0, 100),
)
def test_repeated_work_in_a_loop_body_runs_once(steps, size, use_while, seed):
    """A body reading ``u[1:]`` twice and taking its tanh twice does each once per iteration;
    values match JAX for every trip count, zero included (the count is a run-time input)."""
    from jax import lax

    def step(u):
        return jnp.concatenate([u[:1], jnp.tanh(u[1:]) * 0.5 + jnp.tanh(u[1:]) * u[1:]])

    def f(x, n):
        if use_while:
            return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, step(s[1])), (0, x))[1]
        return lax.fori_loop(0, n, lambda i, u: step(u), x)

    x = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    model = assert_exports_match_on(f, x, np.int32(steps))
    body = [n.op_type for n in _body_nodes(model)]
    assert body.count("Tanh") == 1 and body.count("Slice") == 2, body


def test_repeated_work_in_a_function_body_runs_once():
    from jax2onnx_nn import onnx_function

    @onnx_function
    def block(x):
        return jnp.sin(x * 2) + jnp.sin(x * 2) * x

    model = assert_exports_match(
        lambda x: block(block(x)), [(("B", 3), "float32")], sizes={"B": [1, 2]}
    )
    (function,) = model.functions
    assert [n.op_type for n in function.node].count("Sin") == 1, [n.op_type for n in function.node]


# -- fill_missing_types: the table of shape rules agrees with onnx's own inference ----------


def test_merging_leaves_no_unread_node():
    """Merging equal weights and duplicate nodes (main graph, loop body, function body) leaves
    nothing for a removal pass: cleanup relies on it to skip one walk per export."""
    from jax import lax
    from onnx_ir.passes import common

    from jax2onnx_nn import export_model, onnx_function

    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)  # 64 KiB: merged
    copy = w.copy()

    @onnx_function
    def block(x):
        return jnp.sin(x * 2) + jnp.sin(x * 2) * x

    def f(x):
        y = jnp.tanh(x @ w) + jnp.tanh(x @ copy)
        y = lax.fori_loop(0, 3, lambda i, u: jnp.cos(u[::-1]) * jnp.cos(u[::-1]), y)
        return block(y) + jnp.exp(y) * jnp.exp(y)

    model = assert_exports_match(f, [("B", 128)], sizes={"B": [1, 2]})
    assert len([t for t in model.graph.initializer if list(t.dims) == [128, 128]]) == 1
    assert [n.op_type for n in model.functions[0].node].count("Sin") == 1
    assert not common.RemoveUnusedNodesPass()(export_model(f, [("B", 128)])).modified
