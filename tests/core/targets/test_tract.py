"""tract's rewrites: each model runs on tract and matches JAX with the rewrite, not without it.

Rewrites whose direct case also matched without them on tract 0.23 (each docstring says so):
isnan_as_not_equal, gemm_as_matmul, expand_full_rank, counter_scan_as_state, scan_outputs_unread.
uint32_matmul_as_int32 and float_sum_over_empty_last_axis are not run without their rewrite
here: tract aborts the process (a Rust panic Python cannot catch)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_nn.core.targets import common, tract
from tests.core.targets.rewrite_check import assert_needed, exported, needs, op_counts

pytestmark = needs("tract")


def test_bool_equal_as_xor() -> None:
    a, b = np.array([True, False, True, False]), np.array([True, True, False, False])
    assert_needed(
        "tract",
        tract.bool_equal_as_xor,
        lambda a, b: a == b,
        [((4,), "bool"), ((4,), "bool")],
        [a, b],
    )


def test_vector_dot_as_matrix_product() -> None:
    a, b = np.arange(4, dtype=np.float32), np.linspace(-1, 1, 4, dtype=np.float32)
    assert_needed("tract", tract.vector_dot_as_matrix_product, jnp.dot, [(4,), (4,)], [a, b])


def test_strided_slice_as_gather() -> None:
    assert_needed(
        "tract",
        tract.strided_slice_as_gather,
        lambda x: x.reshape(4, 6)[:, ::2],
        [(24,)],
        [np.arange(24, dtype=np.float32)],
    )


def test_runtime_slice_as_gather() -> None:
    x = np.linspace(0, 1, 6, dtype=np.float32)
    assert_needed(
        "tract",
        tract.runtime_slice_as_gather,
        lambda x, i: lax.dynamic_slice(x.reshape(2, 3), (0, i), (2, 2)),
        [(6,), ((), "int32")],
        [x, np.int32(1)],
    )


def test_range_as_cumsum() -> None:
    assert_needed(
        "tract",
        tract.range_as_cumsum,
        lambda x: jnp.tril(jnp.ones((x.shape[0], x.shape[0]))) @ x,
        [("T", 3)],
        [np.ones((4, 3), np.float32)],
    )


def test_counted_loop_as_scan() -> None:
    x = np.linspace(0, 1, 6, dtype=np.float32)
    assert_needed(
        "tract",
        tract.counted_loop_as_scan,
        lambda x, n: lax.fori_loop(0, n, lambda i, u: u * 1.5 + i, x),
        [(6,), ((), "int32")],
        [x, np.int32(3)],
    )


def test_uint32_extremes_on_halves() -> None:
    u = np.array([[4294967295, 2**31 + 1, 7], [1, 2, 3]], np.uint32)
    assert_needed(
        "tract",
        tract.uint32_extremes_on_halves,
        lambda x: jnp.max(x, axis=-1),
        [((2, 3), "uint32")],
        [u],
    )


def test_nan_propagating_max_min() -> None:
    a = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    b = np.array([0.5, np.nan, np.nan, 1.0], np.float32)
    assert_needed("tract", common.nan_propagating_max_min, jnp.maximum, [(4,), (4,)], [a, b])


def test_reduce_extremes_of_infinities() -> None:
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], np.float32)
    assert_needed(
        "tract",
        common.reduce_extremes_of_infinities,
        lambda x: jnp.max(x, axis=-1),
        [("B", 3)],
        [x],
    )


@pytest.mark.parametrize(
    ("dtype", "x"), [("int32", [100000, -7, 2**31 - 1]), ("int8", [100, -100, 12])]
)
def test_integer_square_as_product(dtype: str, x: list[int]) -> None:
    assert_needed(
        "tract",
        tract.integer_square_as_product,
        lambda x: x * x,
        [(("B",), dtype)],
        [np.array(x, dtype)],
    )


def test_int64_cast_as_castlike() -> None:
    x = np.linspace(0, 1, 6, dtype=np.float32)
    assert_needed(
        "tract",
        tract.int64_cast_as_castlike,
        lambda x: (x > 0.5).astype(jnp.int64),
        [(6,)],
        [x],
        enable_double_precision=True,
    )


def test_scan_inputs_read() -> None:
    assert_needed(
        "tract",
        common.scan_inputs_read,
        lambda xs: lax.scan(lambda c, x: (c * 2.0, c), 1.0, xs)[1],
        [(5,)],
        [np.arange(5, dtype=np.float32)],
    )


def test_scan_of_no_steps_keeps_states() -> None:
    assert_needed(
        "tract",
        tract.scan_of_no_steps_keeps_states,
        lambda x: lax.scan(lambda c, r: (c * r, c), jnp.ones(()), x)[0],
        [("T",)],
        [np.zeros((0,), np.float32)],
    )


def _dropped_rows(x: jax.Array, rows: jax.Array, values: jax.Array) -> jax.Array:
    # the scatter drops out-of-bounds updates with a Compress of the rows in bounds
    return x.at[rows].set(values, mode="drop")


def test_compress_as_gather() -> None:
    specs = [(5,), ((3,), "int32"), (3,)]
    before = op_counts(exported("tract", (tract.compress_as_gather,), _dropped_rows, specs).graph)
    after = op_counts(exported("tract", (), _dropped_rows, specs).graph)
    assert before["Compress"] == 2 and after["Compress"] == 0, (before, after)
    assert after["NonZero"] == 1 and after["Gather"] == before["Gather"] + 2
    x = np.arange(5, dtype=np.float32)
    rows = np.array([4, 9, -7], np.int32)  # in bounds, above, below (both dropped)
    values = np.array([10.0, 20.0, 30.0], np.float32)
    assert_needed("tract", tract.compress_as_gather, _dropped_rows, specs, [x, rows, values])


def _quantized_dense(dtype: str, block: int | None):
    """``x @ (q * scale)`` with q int4 / int8 weights (32 x 8), scales per output column or
    per tile of ``block`` rows: exported as one DequantizeLinear feeding the MatMul."""
    rng = np.random.default_rng(0)
    low, high = (-8, 8) if dtype == "int4" else (-128, 128)
    q = jnp.asarray(rng.integers(low, high, (32, 8)), getattr(jnp, dtype))
    rows = 1 if block is None else 32 // block
    scale = jnp.asarray(rng.random((rows, 8)) * 0.02 + 0.001, jnp.float32)

    def dense(x):
        w = q.astype(jnp.float32)
        if block is None:
            return x @ (w * scale)
        return x @ (w.reshape(rows, block, 8) * scale.reshape(rows, 1, 8)).reshape(32, 8)

    return dense


def test_four_bit_as_eight_bit() -> None:
    from jax2onnx_nn.core.quant import dequantize

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    assert_needed(
        "tract", dequantize.four_bit_as_eight_bit, _quantized_dense("int4", None), [(2, 32)], [x]
    )


def test_blocked_as_arithmetic() -> None:
    from jax2onnx_nn.core.quant import dequantize

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    assert_needed(
        "tract", dequantize.blocked_as_arithmetic, _quantized_dense("int8", 16), [(2, 32)], [x]
    )
