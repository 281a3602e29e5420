"""Value-range facts: indices an iota, an argmax, a sort of an iota or lu's permutation makes
are gathered without a clamp, comparisons they settle are constants, and indices of unknown
range are still clamped as JAX clamps them."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types

CLAMPS = ("Min", "Max", "Less")


def _take_rows(x, rows):
    return jnp.take(x, rows, axis=0, mode="clip")


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("iota", lambda x: _take_rows(x, jnp.arange(5)[::-1])),
        ("argsort", lambda x: _take_rows(x, jnp.argsort(x[:, 0]))),
        ("argmax", lambda x: _take_rows(x, jnp.argmax(x, axis=0))),
        # JAX's own normalization of negative indices (x[i] with an int array) folds away too
        ("negative-normalized", lambda x: x[jnp.argsort(-x[:, 1])]),
    ],
)
def test_indices_in_range_are_not_clamped(name, fn):
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    model = assert_exports_match_on(fn, x)
    assert not set(op_types(model)) & set(CLAMPS), op_types(model)


def test_solve_permutation_is_gathered_without_normalization():
    """jnp.linalg.solve gathers b by lu's permutation after JAX's ``i < 0 ? i + n : i``."""
    a = np.random.default_rng(1).normal(size=(2, 4, 4)).astype(np.float32) + 4 * np.eye(
        4, dtype=np.float32
    )
    b = np.ones((2, 4, 1), np.float32)
    model = assert_exports_match_on(jnp.linalg.solve, a, b, rtol=1e-5, atol=1e-5)
    assert not {"Less", "Min", "Max"} & set(op_types(model))
    assert_exports_match(
        jnp.linalg.solve, [("B", 4, 4), ("B", 4, 1)], input_values=[a, b], rtol=1e-5, atol=1e-5
    )


def test_unknown_indices_are_still_clamped():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([-7, -1, 0, 3, 9], np.int32)
    model = assert_exports_match_on(lambda x, i: x[i], x, idx)
    assert "Min" in op_types(model)
    # a range in [2, 4] keeps the upper clamp only: argmax + 2 can pass the end
    model = assert_exports_match_on(
        lambda x: jnp.take(x, jnp.argmax(x, axis=1) + 2, axis=1, mode="clip"), x
    )
    assert "Min" in op_types(model) and "Max" not in op_types(model)


def test_decided_comparisons_fold():
    """lt/ge of an iota against bounds it cannot cross are constants (select_n picks its case)."""

    def fn(x):
        return jnp.where(lax.iota(jnp.int32, 4) >= 0, x, -x) + jnp.where(
            lax.iota(jnp.int32, 4) < 4, 1.0, 2.0
        )

    model = assert_exports_match_on(fn, np.arange(4, dtype=np.float32))
    assert not {"Less", "GreaterOrEqual", "Where", "Neg"} & set(op_types(model)), op_types(model)


def test_slogdet_parity_folds():
    """slogdet's sign: a remainder of a count of pivots (>= 0) by 2 needs no sign fix-up (no
    And, no Less but the diagonal's < 0), and ``x != False`` is x. Values as JAX: a negative
    and a singular matrix."""
    a = np.random.default_rng(2).normal(size=(3, 4, 4)).astype(np.float32)
    a[1, :, 2] = 0.0
    a[2] = a[2, ::-1]
    model = assert_exports_match_on(jnp.linalg.slogdet, a, rtol=1e-5, atol=1e-5)
    assert "And" not in op_types(model) and op_types(model).count("Less") == 1, op_types(model)
    assert_exports_match_on(jnp.linalg.det, a, rtol=1e-5, atol=1e-5)
