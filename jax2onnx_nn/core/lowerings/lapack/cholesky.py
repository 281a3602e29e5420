"""lax.linalg ``cholesky``: LAPACK's ``potrf``, unrolled, blocked or one Loop step per column."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.lowerings.lapack import steps
from jax2onnx_nn.core.lowerings.lapack.steps import (
    Index,
    at_index,
    index_range,
    iterate,
    lower_as_jax,
    mT,
    refuse_half_precision,
    rows_of_blocks,
    sum_keepdims,
    where,
)
from jax2onnx_nn.core.registry import lowering


# -- cholesky ----------------------------------------------------------------------------------
def cholesky(a: jax.Array) -> jax.Array:
    """Right-looking Cholesky of the lower triangle: column j is the trailing matrix's column j
    over the square root of its pivot; the trailing matrix loses that column's outer product.

    Unrolled (a static n up to ``UNROLL_LIMIT``), blocked (a larger static n: a Loop over
    blocks of columns) or one Loop step per column (a symbolic n)."""
    n = a.shape[-1]
    if jxi.is_symbolic_dim(n):
        return _cholesky_columns(a)
    if n == 0:
        return a
    if n <= steps.UNROLL_LIMIT:
        factor, pivots = _cholesky_panel(a, n)
    else:
        factor, pivots = _cholesky_blocked(a)
    ids = index_range(n)
    factor = where(ids[:, None] >= ids[None, :], factor, a)
    # NaN where a pivot <= 0 (not PD): a sum over the pivots is one ReduceSum (jnp.any is five
    # nodes), +0 or NaN; subtracting +0 keeps every number, -0 and inf included
    failed = sum_keepdims(
        where(pivots <= 0, jnp.asarray(np.nan, a.dtype), jnp.zeros((), a.dtype)), -1
    )
    return factor - failed


def _cholesky_panel(panel: jax.Array, b: int) -> tuple[jax.Array, jax.Array]:
    """The first ``b`` columns of L from ``panel`` (..., r, b), the trailing matrix's first
    ``b`` columns (its diagonal block on top), unrolled: (those columns (..., r, b), their
    pivots (..., 1, b)). A step takes the trailing column c and its pivot p and removes
    c (c^T / p) from the panel; the columns are divided by sqrt(p) once, all together, at
    the end (LAPACK's L column c / sqrt(p), and its update L L^T, differ from this only by
    rounding). Rows above each column's diagonal are not zeroed: what they hold only ever
    reaches rows and columns already done, and the caller keeps the lower triangle."""
    r = panel.shape[-2]
    columns, step_pivots = [], []
    for j in range(b):
        col = panel[..., :, j : j + 1]
        pivot = col[..., j : j + 1, :]
        columns.append(col)
        step_pivots.append(pivot)
        if j + 1 < b:
            panel = panel - col * (mT(col if r == b else col[..., :b, :]) / pivot)
    pivots = jnp.concatenate(step_pivots, axis=-1)
    return jnp.concatenate(columns, axis=-1) / jnp.sqrt(pivots), pivots


def _cholesky_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Blocked right-looking Cholesky of a static n > BLOCK: a Loop over blocks of b columns
    (the matrix padded with I to a multiple of b). Each trip factors the trailing matrix's
    first b columns (``_cholesky_panel``) and shrinks it to its trailing part less one MatMul,
    padded with zeros at the end back to the Loop's fixed shape, so block k's rows start at
    row k*b of L."""
    n = int(a.shape[-1])
    blocks = -(-n // steps.BLOCK)
    b = -(-n // blocks)
    size = blocks * b
    batch = [(0, 0, 0)] * (a.ndim - 2)
    if size != n:  # [[a, 0], [0, I]]: its factor is [[L, 0], [0, I]]
        a = lax.pad(a, jnp.zeros((), a.dtype), [*batch, (0, size - n, 0), (0, size - n, 0)])
        a = a + jnp.asarray(np.diag(np.arange(size) >= n), a.dtype)

    def trip(work: jax.Array, _: Any) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        columns, pivots = _cholesky_panel(work[..., :, :b], b)
        below = columns[..., b:, :]
        work = work[..., b:, b:] - below @ mT(below)
        work = lax.pad(work, jnp.zeros((), a.dtype), [*batch, (0, b, 0), (0, b, 0)])
        return work, (columns, pivots)

    _, (columns, pivots) = lax.scan(
        trip, a, jnp.arange(blocks, dtype=jnp.int32)
    )  # xs: an ONNX Scan, not a Loop
    # block k's row i is L's row k*b + i: shift each block down by k*b (rows wrapped to the
    # top land in the upper triangle, which the caller does not keep)
    shifted = rows_of_blocks(
        jnp.moveaxis(columns, 0, -3), (np.arange(size) - b * np.arange(blocks)[:, None]) % size
    )
    factor = jnp.swapaxes(shifted, -3, -2).reshape((*shifted.shape[:-3], size, size))
    pivots = jnp.moveaxis(pivots, 0, -2).reshape((*pivots.shape[1:-2], 1, size))
    return factor[..., :n, :n], pivots[..., :n]


def _cholesky_columns(a: jax.Array) -> jax.Array:
    """One Loop step per column, for a symbolic n."""
    n = a.shape[-1]
    ids = index_range(n)

    def step(j: Index, carry: tuple) -> tuple:
        work, factor, failed = carry
        col = at_index(work, j, -1)  # (..., n, 1)
        pivot = at_index(col, j, -2)  # (..., 1, 1)
        lcol = where(ids[:, None] >= j, col / jnp.sqrt(pivot), jnp.zeros((), a.dtype))
        work = work - lcol * mT(lcol)
        factor = where(ids[None, :] == j, lcol, factor)
        return work, factor, failed | (pivot <= 0)

    failed = jnp.zeros((*a.shape[:-2], 1, 1), bool)
    _, factor, failed = iterate(n, step, (a, jnp.zeros_like(a), failed))
    factor = where(ids[:, None] >= ids[None, :], factor, a)
    return where(failed, jnp.asarray(np.nan, a.dtype), factor)


@lowering(
    "cholesky",
    onnx_ops=(
        "Slice",
        "Sqrt",
        "Div",
        "Mul",
        "Sub",
        "Transpose",
        "Concat",
        "Reshape",
        "Gather",
        "MatMul",
        "Pad",
        "LessOrEqual",
        "Or",
        "Equal",
        "ReduceSum",
        "Where",
        "Scan",
        "Loop",
        "Add",
        "Cast",
        "ConstantOfShape",
        "Expand",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "Max",
        "Min",
        "Range",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _cholesky(ctx: LoweringContext, a: ir.Value, **params: Any) -> list[ir.Value]:
    del params  # none today (symmetrize_input is applied before the primitive)
    refuse_half_precision(ctx, "cholesky", "jnp.linalg.cholesky(a.astype(jnp.float32))")
    return lower_as_jax(ctx, cholesky, [a], cache_key=("cholesky", steps.UNROLL_LIMIT))
