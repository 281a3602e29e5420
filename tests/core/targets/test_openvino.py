"""OpenVINO's rewrites: each model runs on OpenVINO and matches JAX with the rewrite, not
without it.

Rewrites whose direct case also matched without them on OpenVINO 2026.4 (each docstring says
so): dft_on_axis_one, real_dft_reshaped, scan_of_no_steps_runs_one (a map over rows of 0
columns). uint32_bits is a smaller form only: without it uint32_as_int32 computes the same bits.
dft_in_float32 is not checked here: OpenVINO computes float64 in float32, so a float64 FFT misses
float64's tolerance with it or without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.targets import common, openvino, openvino_loops, openvino_uint32
from tests.core.targets.rewrite_check import assert_needed, exported, needs, scan_node

pytestmark = needs("openvino")


def test_expand_after_arithmetic() -> None:
    assert_needed(
        "openvino",
        openvino.expand_after_arithmetic,
        lambda x: jnp.zeros((x.shape[0], 4)) + 0.5,
        [("B", 4)],
        [np.zeros((0, 4), np.float32)],
    )


NAN_A = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
NAN_B = np.array([0.5, np.nan, np.nan, 1.0], np.float32)
U32_A = np.array([4294967295, 2**31 + 12345, 16777217, 7], np.uint32)
U32_B = np.array([1, 2**31, 16777217, 2**32 - 2], np.uint32)
I32 = np.array([[2**31 - 1, 5, 0, 2**24 + 1], [2**24 + 1, 2**24, 0, -1]], np.int32)


def test_nan_propagating_max_min() -> None:
    assert_needed(
        "openvino", common.nan_propagating_max_min, jnp.maximum, [(4,), (4,)], [NAN_A, NAN_B]
    )


def test_greater_as_less() -> None:
    assert_needed(
        "openvino", openvino.greater_as_less, lambda a, b: a > b, [(4,), (4,)], [NAN_A, NAN_B]
    )


def test_reduce_extremes_of_infinities() -> None:
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], np.float32)
    assert_needed(
        "openvino",
        common.reduce_extremes_of_infinities,
        lambda x: jnp.max(x, axis=-1),
        [("B", 3)],
        [x],
    )


def test_uint32_as_int32() -> None:
    assert_needed(
        "openvino",
        openvino_uint32.uint32_as_int32,
        lambda a, b: (a + b, a > b, a % b),
        [((4,), "uint32"), ((4,), "uint32")],
        [U32_A, U32_B],
    )


def test_float_to_uint32_via_int32() -> None:
    x = np.array([3e9, 1.5, 4e9, 2**31 + 256.0], np.float32)
    assert_needed(
        "openvino", openvino.float_to_uint32_via_int32, lambda x: x.astype(jnp.uint32), [(4,)], [x]
    )


def test_int32_extremes_on_halves() -> None:
    assert_needed(
        "openvino",
        openvino.int32_extremes_on_halves,
        lambda x: jnp.max(x, axis=-1),
        [((2, 4), "int32")],
        [I32],
    )


def test_integer_sum_as_cumsum() -> None:
    assert_needed(
        "openvino",
        openvino.integer_sum_as_cumsum,
        lambda x: jnp.sum(x, axis=-1),
        [((2, 4), "int32")],
        [I32],
    )


def test_integer_matmul_as_cumsum() -> None:
    assert_needed(
        "openvino",
        openvino.integer_matmul_as_cumsum,
        lambda x, y: x @ y,
        [((2, 4), "int32"), ((4, 2), "int32")],
        [I32, I32.T.copy()],
    )


def test_scan_inputs_read() -> None:
    assert_needed(
        "openvino",
        common.scan_inputs_read,
        lambda xs: lax.scan(lambda c, x: (c * 2.0, c), 1.0, xs)[1],
        [(5,)],
        [np.arange(5, dtype=np.float32)],
    )


def _nested(x: jax.Array) -> jax.Array:
    def row_sum(c: jax.Array, row: jax.Array) -> tuple[jax.Array, jax.Array]:
        inner = lax.scan(lambda d, v: (d * v + 1.0, d), 0.0, row)[1]
        return c + inner.sum(), c

    return lax.scan(row_sum, 0.0, x)[1]


def test_nested_scans_as_loops() -> None:
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    assert_needed("openvino", openvino_loops.nested_scans_as_loops, _nested, [(3, 4)], [x])


def test_empty_constants_as_constant_of_shape() -> None:
    assert_needed(
        "openvino",
        common.empty_constants_as_constant_of_shape,
        lambda x: lax.scan(lambda c, r: (c + r, r * 2), x, jnp.zeros((0, 3)))[1],
        [(3,)],
        [np.ones(3, np.float32)],
    )


def _scaled_rows(xs: jax.Array, y: jax.Array) -> jax.Array:
    # a map whose body reads a model input (not a constant) of the enclosing graph
    return lax.map(lambda r: r * y + jnp.sin(r), xs)


def test_scan_captures_as_states() -> None:
    specs = [(4, 3), (3,)]
    left_out = (openvino_loops.scan_captures_as_states,)
    before = scan_node(exported("openvino", left_out, _scaled_rows, specs).graph)
    after = scan_node(exported("openvino", (), _scaled_rows, specs).graph)
    # y is a state of the Scan now, passed on by an Identity in the body
    assert len(after.input) == len(before.input) + 1
    body = next(a.g for a in after.attribute if a.name == "body")
    assert [n.op_type for n in body.node].count("Identity") == 1
    xs = np.linspace(-2.0, 2.0, 12, dtype=np.float32).reshape(4, 3)
    y = np.array([0.5, -1.0, 2.0], np.float32)
    assert_needed("openvino", left_out[0], _scaled_rows, specs, [xs, y])
