"""tract's rewrites: each model runs on tract and matches JAX with the rewrite, not without it.

Rewrites whose direct case also matched without them on tract 0.23 (each docstring says so):
nan_propagating_max_min, reduce_extremes_of_infinities, isnan_as_not_equal,
integer_square_as_product, gemm_as_matmul, expand_full_rank, counter_scan_as_state.
uint32_matmul_as_int32 and float_sum_over_empty_last_axis are not run without their rewrite
here: tract aborts the process (a Rust panic Python cannot catch)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.targets import tract
from tests.core.targets.rewrite_check import assert_needed, needs

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
