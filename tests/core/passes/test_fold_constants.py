"""Exact constant folding (it must never change a number)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4) / 7.0


@given(start=st.integers(-12, 12), length=st.integers(0, 6))
def test_lookups_at_constant_positions_become_initializers(start, length):
    """An embedding lookup of constant positions (clamped as JAX clamps) folds to its rows."""

    def f(x):
        positions = jnp.arange(length) + start
        return x + jnp.take(jnp.asarray(TABLE), positions, axis=0, mode="clip").sum(axis=0)

    model = assert_exports_match(f, [("B", 4)], sizes={"B": [1, 3]})
    assert not {"Gather", "Clip", "Less", "Where"} & set(op_types(model)), op_types(model)


def test_integer_arithmetic_on_constants_folds():
    model = assert_exports_match(
        lambda x: x + (jnp.arange(5, dtype=jnp.int32) * 3 - 7), [((2, 5), "int32")]
    )
    assert op_types(model) == ["Add"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_arithmetic_on_constants_is_left_to_the_runtime(dtype):
    """Folding float ops would round with numpy, not the runtime: they stay nodes."""
    c = np.linspace(-1, 1, 5).astype(dtype)
    model = assert_exports_match(
        lambda x: x * jnp.exp(jnp.asarray(c)),
        [((5,), dtype)],
        enable_double_precision=dtype == np.float64,
    )
    assert "Exp" in op_types(model)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_mask_cast_to_floats_folds(dtype):
    """jnp.eye is iota comparisons cast to the float type: exact, so it folds; an integer that
    the float cannot hold (2**24 + 1 in float32) stays a Cast."""
    model = assert_exports_match(
        lambda x: x + jnp.eye(4, dtype=dtype),
        [((4, 4), dtype)],
        enable_double_precision=dtype == np.float64,
    )
    assert op_types(model) == ["Add"], op_types(model)
    big = np.array([1, 2**24 + 1], np.int32)
    model = assert_exports_match(
        lambda x: x * jnp.asarray(big).astype(dtype),
        [((2,), dtype)],
        enable_double_precision=dtype == np.float64,
    )
    assert ("Cast" in op_types(model)) == (dtype == np.float32), op_types(model)


def test_constants_of_equal_bytes_and_different_dtypes_stay_apart():
    """float8_e4m3fn, float8_e4m3fnuz, int4 and uint4 share NumPy's dtype.str ('<V1'): equal
    bytes of two of them are different numbers, in one export (small constants are one value
    per key) and across exports (the fold memo)."""
    import ml_dtypes

    bits = np.arange(16, dtype=np.uint8).reshape(4, 4)
    a, b = bits.view(ml_dtypes.float8_e4m3fn), bits.view(ml_dtypes.float8_e4m3fnuz)
    assert_exports_match(
        lambda x: jnp.asarray(a).astype(jnp.float32) + jnp.asarray(b).astype(jnp.float32) + x,
        [(4, 4)],
    )
    for c in (
        a,
        b,
    ):  # a Transpose of the constant folds; the second must not get the first's result
        assert_exports_match(
            lambda x, c=c: jnp.transpose(jnp.asarray(c)).astype(jnp.float32) + x, [(4, 4)]
        )


_CAST_EDGES = {
    "int32": [0, 1, -1, 2**24, 2**24 + 1, -(2**31), 2**31 - 1, 65504, 65520, 70000, 257],
    "int64": [0, -(2**63), 2**63 - 1, 2**53, 2**53 + 1],
    "uint64": [0, 2**64 - 1, 2**63, 2**24 + 1],
    "bool": [True, False],
}


@pytest.mark.parametrize("dst", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("src", sorted(_CAST_EDGES))
@pytest.mark.filterwarnings("error")
def test_a_cast_of_constant_integers_at_the_float_range_edges_matches_jax(src, dst):
    """Values a float cannot hold (rounded, or beyond its range: inf) keep their Cast, without a
    NumPy RuntimeWarning from checking whether they convert back."""
    c = np.array(_CAST_EDGES[src], dtype=src)
    assert_exports_match_on(
        lambda x: (jnp.asarray(c).astype(dst) + x.astype(dst)).astype(jnp.float64),
        np.zeros(c.size, np.float32),
        enable_double_precision=True,
    )


def test_a_fold_that_would_grow_the_file_is_not_made():
    model = to_onnx(
        lambda x: x + jnp.broadcast_to(jnp.arange(3, dtype=jnp.int32), (512, 512, 3)),
        [((512, 512, 3), "int32")],
    )
    assert "Expand" in op_types(model)
    assert sum(i.ByteSize() for i in model.graph.initializer) < 1024


def test_a_large_weight_read_twice_is_not_stored_twice():
    weights = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)  # 128 KiB

    def f(x, i):
        w = jnp.asarray(weights)
        return x @ w.T, w[i]  # a transpose of the weight, and the weight itself

    model = assert_exports_match(f, [(3, 256), ((), "int32")])
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer) < 2 * weights.size


def test_remembered_folds_follow_the_weights_and_the_positions():
    """Folds are remembered across exports by their node and input bytes: a table with other
    values, other positions or another dtype is folded afresh (never a stale result)."""
    rng = np.random.default_rng(1)
    tables = [
        TABLE,
        TABLE + 1.0,
        rng.standard_normal((10, 4)).astype(np.float32),
        TABLE.astype(np.int32),
    ]
    for table in tables:
        for start in (0, 2, 2, -3):

            def f(x, table=table, start=start):
                return x + jnp.take(
                    jnp.asarray(table), jnp.arange(3) + start, axis=0, mode="clip"
                ).sum(axis=0)

            dtype = "int32" if table.dtype == np.int32 else "float32"
            model = assert_exports_match(f, [(("B", 4), dtype)], sizes={"B": [2]})
            assert "Gather" not in op_types(model), op_types(model)


def test_a_split_weight_folds_into_named_parts():
    """A Split of a weight (a cell's gates reordered) folds into initializers named after the
    weight; a Split of an input stays."""
    w = np.arange(24, dtype=np.float32).reshape(2, 12)

    def fn(x):
        a, b, c = jnp.split(jnp.asarray(w), 3, axis=1)
        return x @ jnp.concatenate([b, a, c], axis=1), jnp.split(x, 2, axis=1)[0]

    model = to_onnx(fn, [(3, 2)])
    ops = [n.op_type for n in model.graph.node]
    assert "Concat" not in ops and ops.count("Split") + ops.count("Slice") <= 1, ops
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    verify(fn, model, [x]).raise_if_failed()
