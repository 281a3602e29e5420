"""Shape plumbing: identity arithmetic, broadcast axes, copied dims."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize(
    "op", ["x + 0", "0 + x", "x + -0.0", "x - 0", "x - -0.0", "x * 1", "1 * x", "x / 1"]
)
def test_arithmetic_with_the_identity_is_no_node_where_exact(dtype, op):
    """``x * 1``, ``x / 1`` and integer ``x +- 0`` compute ``x``; a float ``x + 0.0`` does not
    (``-0.0 + 0.0`` is ``+0.0``) and stays, as does ``x - -0.0``. Signs of zeros are compared."""
    import onnxruntime as ort

    x = np.array(
        [-0.0, 0.0, 1.5, -2.0, np.nan, np.inf] if dtype == np.float32 else [0, 1, -7, 2**31 - 1],
        dtype,
    )
    zero, one = dtype(0), dtype(1)
    negzero = dtype(-0.0) if dtype == np.float32 else zero
    fn = {
        "x + 0": lambda x: x + zero,
        "0 + x": lambda x: zero + x,
        "x + -0.0": lambda x: x + negzero,
        "x - 0": lambda x: x - zero,
        "x - -0.0": lambda x: x - negzero,
        "x * 1": lambda x: x * one,
        "1 * x": lambda x: one * x,
        "x / 1": lambda x: x / one if dtype == np.float32 else x // one,
    }[op]
    model = assert_exports_match_on(lambda x: jnp.stack([fn(x), x]), x)
    (got,) = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {model.graph.input[0].name: x})
    want = np.asarray(jnp.stack([fn(x), x]))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    float_kept = dtype == np.float32 and op in ("x + 0", "0 + x", "x - -0.0")
    integer_div = dtype != np.float32 and op == "x / 1"  # floor division: its own nodes
    if not (float_kept or integer_div):
        assert not {"Add", "Sub", "Mul", "Div"} & set(op_types(model)), op_types(model)


@given(
    lead=st.integers(1, 2),
    rank=st.integers(1, 3),
    op=st.sampled_from(["add", "mul", "max"]),
    seed=st.integers(0, 100),
)
def test_leading_broadcast_axes_are_left_to_the_op(lead, rank, op, seed):
    """``x[None, ...] + y`` needs no Unsqueeze: ONNX broadcasting adds leading axes itself."""

    def f(x, y):
        grown = x.reshape((1,) * lead + x.shape)
        if op == "add":
            return grown + y
        if op == "max":
            return jnp.maximum(grown, y)
        return grown * y

    small = tuple(range(2, 2 + rank))
    model = assert_exports_match(
        f, [small, (("B",) * lead + small)], sizes={"B": [1, 3]}, seed=seed
    )
    assert not {"Unsqueeze", "Reshape"} & set(op_types(model)), op_types(model)


@given(t=st.integers(1, 3), seed=st.integers(0, 100))
def test_reshape_of_a_symbolic_batch_copies_its_dims(t, seed):
    """``(B, T, C) -> (B, T, N, H)`` and back have constant shapes (0 copies a dim): no
    Shape/Concat computing them."""

    def f(x):
        b = x.shape[0]
        heads = (x * 2).reshape(b, t, 2, 3)
        return jnp.tanh(heads).reshape(b, t, 6)

    model = assert_exports_match(f, [(("B", t, 6), "float32")], sizes={"B": [1, 2, 3]}, seed=seed)
    assert not {"Shape", "Concat", "Gather"} & set(op_types(model)), op_types(model)


def test_an_embedding_of_positions_checks_only_the_upper_bound():
    """``wpe(arange(T))``: the positions are a Range from 0, so only ``position < rows`` is
    checked at run time; a T past the table's rows gives JAX's NaN rows."""
    from flax import nnx

    embed = nnx.Embed(5, 3, rngs=nnx.Rngs(0))
    model = assert_exports_match(
        lambda x: embed(jnp.arange(x.shape[0])) + x, [(("T", 3), "float32")], sizes={"T": [1, 5, 7]}
    )
    ops = op_types(model)
    assert "GreaterOrEqual" not in ops and "And" not in ops and ops.count("Less") == 1, ops
