"""Loop-invariant work moved out of loop bodies."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types


def _body_nodes(model):
    return [
        n for node in model.graph.node for a in node.attribute if a.HasField("g") for n in a.g.node
    ]


@given(steps=st.integers(0, 4), size=st.integers(1, 4), use_while=st.booleans())
def test_loop_invariant_work_runs_before_the_loop(steps, size, use_while):
    """Work on values from outside a loop body (here on the weights and an outer input) moves
    in front of the loop; values match for every trip count, zero included."""
    from jax import lax

    w = np.linspace(0.5, 1.5, size).astype(np.float32)

    def f(x, y):
        def body(i, u):
            return (
                u * jnp.exp(y)
                + jnp.concatenate([jnp.zeros((1,), u.dtype), jnp.asarray(w)[1:]]) * 2.0
            )

        if use_while:
            return lax.while_loop(
                lambda s: s[0] < steps, lambda s: (s[0] + 1, body(s[0], s[1])), (0, x)
            )[1]
        return lax.fori_loop(0, steps, body, x)

    model = assert_exports_match(f, [(size,), (size,)])
    body = _body_nodes(model)
    assert not {"Exp", "Concat", "Unsqueeze"} & {n.op_type for n in body}, [n.op_type for n in body]


@given(steps=st.integers(0, 3), rows=st.integers(1, 3), seed=st.integers(0, 100))
def test_loop_invariant_work_leaves_every_loop_around_it(steps, rows, seed):
    """Work in an inner loop on values from outside both loops (``exp(y)`` of an input; the
    shift amounts of jax.random's kernels, which are then folded) moves out of both, into the
    main graph; values match for every trip count, zero included."""
    from jax import lax

    def f(xs, n, y):
        def row(x):
            return lax.while_loop(
                lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * jnp.exp(y) + 1.0), (0, x)
            )[1]

        return lax.map(row, xs)

    xs = np.random.default_rng(seed).standard_normal(rows).astype(np.float32)
    model = assert_exports_match_on(f, xs, np.int32(steps), np.float32(-0.5))
    scan_body = _body_nodes(model)
    loop_body = [
        n for scan in scan_body for a in scan.attribute if a.HasField("g") for n in a.g.node
    ]
    assert "Loop" in [n.op_type for n in scan_body] and "Exp" not in [
        n.op_type for n in scan_body + loop_body
    ], loop_body
    assert "Exp" in [n.op_type for n in model.graph.node]


@given(then=st.sampled_from(["none", "flatten", "expand", "transpose"]), seed=st.integers(0, 100))
def test_the_reshape_restoring_a_loops_stacked_outputs_stays(then, seed):
    """After no trip onnxruntime gives a Loop's stacked outputs as (0, 0, ...): the Reshape
    control_flow marks as required restores (0, B, 2) though its declared shape is the Loop's,
    so the chain pass neither drops it nor merges a following layout op through it."""
    from jax import lax

    def f(h, xs):
        ys = lax.scan(lambda c, x: (c + x, c * x), h, xs)[1]
        if then == "flatten":
            return ys.reshape(ys.shape[0] * ys.shape[1], 2)
        if then == "expand":
            return jnp.expand_dims(ys, 1)
        if then == "transpose":
            return jnp.transpose(ys, (1, 0, 2))
        return ys

    model = assert_exports_match(
        f, [("B", 2), ("T", "B", 2)], sizes={"T": [0, 1, 3], "B": [1, 2]}, seed=seed
    )
    producers = {out: node.op_type for node in model.graph.node for out in node.output}
    assert any(
        n.op_type == "Reshape" and producers.get(n.input[0]) == "Loop" for n in model.graph.node
    ), op_types(model)
