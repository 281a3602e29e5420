"""lax.linalg ``triangular_solve``: LAPACK's ``trsm`` (substitution unrolled, blocked or looped;
``lu``'s unit L by powers of its strict triangle)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
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
    rows_of_blocks,
    sum_keepdims,
    where,
)
from jax2onnx_nn.core.registry import lowering

LU_FACTOR = "jax2onnx_nn.lu_factor"  # on lu's packed result: L's entries are at most 1 in magnitude


# -- triangular_solve --------------------------------------------------------------------------
def substitute(a: jax.Array, b: jax.Array, *, lower: bool, unit_diagonal: bool) -> jax.Array:
    """Solve ``a @ x = b`` for a triangular ``a`` (..., m, m), ``b`` (..., m, k): unrolled
    (a static m up to ``UNROLL_LIMIT``), blocked (a larger static m) or one Loop step per row
    (a symbolic m)."""
    m = a.shape[-1]
    if jxi.is_symbolic_dim(m):
        return _substitute_rows(a, b, lower=lower, unit_diagonal=unit_diagonal)
    if m == 0:
        return b
    if m <= steps.UNROLL_LIMIT:
        return substitute_unrolled(a, b, lower=lower, unit_diagonal=unit_diagonal)
    if not lower:  # backward substitution is forward substitution in reversed order
        x = _forward_blocked(a[..., ::-1, ::-1], b[..., ::-1, :], unit_diagonal=unit_diagonal)
        return x[..., ::-1, :]
    return _forward_blocked(a, b, unit_diagonal=unit_diagonal)


# Largest size whose unrolled substitution with separate pivots divides each solved row by its
# pivot as it goes (trsm's order): a Slice of the right-hand side, a Div, a Mul and a Sub a row
# (4m nodes with the Split and the Concat), where dividing the columns first is 3m + 5.
SMALL_SUBSTITUTION = 5


def substitute_unrolled(
    a: jax.Array | Sequence[jax.Array],
    b: jax.Array,
    *,
    lower: bool = True,
    unit_diagonal: bool,
    diagonal: jax.Array | Sequence[jax.Array] | None = None,
) -> jax.Array:
    """Forward (``lower``) or backward substitution on a triangular ``a`` (..., m, m), given as
    the matrix or as its m columns (..., m, 1), column by column; backward runs its columns
    last to first, so no reversal of ``a``, ``b`` or ``x`` is needed. The rows already solved
    lose their multiple too, harmlessly: the other triangle is never read into the solution.
    ``diagonal``: a's, when the caller has it, as (..., 1, m) (``_diagonal``) or as one
    (..., 1, 1) pivot per row (``solve_by_elimination``).

    With separate pivots, up to ``SMALL_SUBSTITUTION`` rows, in trsm's order: x_i = b_i / a_ii,
    then the rows not yet solved lose a[:, i] x_i. Otherwise the remaining right-hand side's
    row i is b_i and the rows not yet solved lose (a[:, i] / a_ii) b_i, and at the end x = b /
    a's diagonal, one Div: the columns are divided all together, so a step is a Slice, a Mul
    and a Sub (trsm's order would need a Slice of the diagonal a row as well: a 4x4
    triangular_solve 19 nodes instead of 17 and ~6% slower in onnxruntime). Both give LAPACK's
    inf/NaN for a zero a_ii (a_ki / 0 * b_i has the sign and the NaN of a_ki * (b_i / 0)) and
    differ from each other only by rounding (neither is bitwise JAX's: its CPU trsm multiplies
    by the pivot's reciprocal and updates with fused multiply-adds, which ONNX does not have)."""
    m = a.shape[-1] if isinstance(a, jax.Array) else len(a)
    order = range(m) if lower else range(m - 1, -1, -1)
    if (
        not unit_diagonal
        and diagonal is not None
        and not isinstance(diagonal, jax.Array)
        and m <= SMALL_SUBSTITUTION
    ):
        columns = lax.split(a, [1] * m, axis=a.ndim - 1) if isinstance(a, jax.Array) else list(a)
        rows: list[jax.Array] = [b] * m  # each entry set below
        for step, i in enumerate(order):
            rows[i] = b[..., i : i + 1, :] / diagonal[i]
            if step + 1 < m:
                b = b - columns[i] * rows[i]
        return jnp.concatenate(rows, axis=-2)
    if not isinstance(a, jax.Array):
        a = jnp.concatenate(a, axis=-1)
    if unit_diagonal:
        diagonal = None
    elif diagonal is None:
        diagonal = _diagonal(a)
    elif not isinstance(diagonal, jax.Array):
        diagonal = jnp.concatenate(diagonal, axis=-1)
    if diagonal is not None:
        a = a / diagonal
    columns = lax.split(a, [1] * m, axis=a.ndim - 1)
    rows = [b] * m  # each entry set below
    for step, i in enumerate(order):
        rows[i] = b[..., i : i + 1, :]
        if step + 1 < m:
            b = b - columns[i] * rows[i]
    x = jnp.concatenate(rows, axis=-2)
    return x if diagonal is None else x / mT(diagonal)


def _diagonal(a: jax.Array) -> jax.Array:
    """The diagonal of ``a`` (..., m, m) as (..., 1, m), the same of ``a`` and of its transpose:
    a masked sum down the columns (``Where``, ``ReduceSum``), so the solves with a matrix and
    with its transpose (cho_solve's two) share it."""
    return sum_keepdims(where(_eye(a.shape[-1]), a, jnp.zeros((), a.dtype)), -2)


@functools.cache
def _eye(m: int) -> np.ndarray:
    """One boolean identity per size: the export makes one initializer of it, so the masks of
    two equations are one value (and what reads them, one node)."""
    eye = np.eye(m, dtype=bool)
    eye.setflags(write=False)
    return eye


def _forward_blocked(a: jax.Array, b: jax.Array, *, unit_diagonal: bool) -> jax.Array:
    """Forward substitution on a lower ``a`` of static size m > BLOCK: a Loop over blocks of
    rows (``a`` padded with I, ``b`` with zeros, to a multiple of the block). Each trip solves
    its diagonal block unrolled (``substitute_unrolled``) on the right-hand side's first rows,
    then keeps the rows below less one MatMul with the block's column below the diagonal,
    padded with zeros at the end back to the Loop's fixed shape."""
    m = int(a.shape[-1])
    blocks = -(-m // steps.BLOCK)
    size = blocks * (-(-m // blocks))
    bs = size // blocks
    zero = jnp.zeros((), a.dtype)
    a_batch, b_batch = [(0, 0, 0)] * (a.ndim - 2), [(0, 0, 0)] * (b.ndim - 2)
    if size != m:
        a = lax.pad(a, zero, [*a_batch, (0, size - m, 0), (0, size - m, 0)])
        a = a + jnp.asarray(np.diag(np.arange(size) >= m), a.dtype)
        b = lax.pad(b, zero, [*b_batch, (0, size - m, 0), (0, 0, 0)])
    # block k: a's column block k from row k*bs on, wrapped: its diagonal block on top, then
    # the column below it (the rows wrapped past the end only reach rows already solved)
    by_block = jnp.swapaxes(a.reshape((*a.shape[:-1], blocks, bs)), -3, -2)
    by_block = rows_of_blocks(by_block, (np.arange(size) + bs * np.arange(blocks)[:, None]) % size)

    def trip(rhs: jax.Array, block: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = substitute_unrolled(block[..., :bs, :], rhs[..., :bs, :], unit_diagonal=unit_diagonal)
        rhs = lax.pad(
            rhs[..., bs:, :] - block[..., bs:, :] @ x, zero, [*b_batch, (0, bs, 0), (0, 0, 0)]
        )
        return rhs, x

    _, xs = lax.scan(trip, b, jnp.moveaxis(by_block, -3, 0))  # (blocks, ..., bs, k)
    x = jnp.moveaxis(xs, 0, -3).reshape((*xs.shape[1:-2], size, xs.shape[-1]))
    return x[..., :m, :]


def _substitute_rows(a: jax.Array, b: jax.Array, *, lower: bool, unit_diagonal: bool) -> jax.Array:
    """Row by row, one Loop step each: x_i = (b_i - a_i,<i . x_<i) / a_ii, forward for
    ``lower``, backward otherwise."""
    m = a.shape[-1]
    ids = index_range(m)
    strict = ids[:, None] > ids[None, :] if lower else ids[:, None] < ids[None, :]
    off = where(strict, a, jnp.zeros((), a.dtype))  # rows not yet solved are 0 in x

    def step(i: Index, x: jax.Array) -> jax.Array:
        xi = at_index(b, i, -2) - at_index(off, i, -2) @ x  # (..., 1, k)
        if not unit_diagonal:
            xi = xi / at_index(at_index(a, i, -2), i, -1)
        return where(ids[:, None] == i, xi, x)

    return iterate(m, step, jnp.zeros_like(b), reverse=not lower)


def triangular_solve(
    a: jax.Array,
    b: jax.Array,
    *,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    conjugate_a: bool,
    unit_diagonal: bool,
    lu_factor: bool = False,
) -> jax.Array:
    """``op(a) @ x = b`` (left side) or ``x @ op(a) = b``, op = transpose/conjugate as asked;
    ``lu_factor``: ``a`` is ``lu``'s packed result (its unit lower triangle is L)."""
    if conjugate_a:
        a = jnp.conj(a)
    if not left_side:  # x a = b  <=>  a^T x^T = b^T
        b, transpose_a = mT(b), not transpose_a
    l_factor = lu_factor and unit_diagonal and lower  # L or L^T of partial pivoting
    m = a.shape[-1]
    unrolled = not jxi.is_symbolic_dim(m) and 0 < m <= steps.UNROLL_LIMIT
    diagonal = _diagonal(a) if unrolled and not unit_diagonal else None  # before a transpose
    if transpose_a:
        a, lower = mT(a), not lower
    if l_factor and unrolled and m > 1:
        x = _unit_solve_by_powers(a, b, lower=lower)
    elif unrolled:
        x = substitute_unrolled(a, b, lower=lower, unit_diagonal=unit_diagonal, diagonal=diagonal)
    else:
        x = substitute(a, b, lower=lower, unit_diagonal=unit_diagonal)
    return x if left_side else mT(x)


def _unit_solve_by_powers(a: jax.Array, b: jax.Array, *, lower: bool) -> jax.Array:
    """``(I + S)^-1 b`` for ``S`` the strict lower (or upper) triangle of ``a`` (..., m, m):
    ``S`` is nilpotent, so ``(I + S)^-1 = (I - S)(I + S^2)(I + S^4)...`` (ceil(log2 m)
    factors), two MatMuls and an Add a factor where substitution takes a Slice, a Mul and a
    Sub a row (4x4: 6 nodes instead of 12, 16x16: 12 instead of 48). Only for ``lu``'s L:
    partial pivoting keeps its entries at most 1 in magnitude, so the powers stay as small as
    substitution's partial sums. A NaN in L (from a NaN input) or an inf in ``b`` reaches every
    row here, only the rows after it in LAPACK's substitution; lu_solve's backward
    substitution spreads a NaN over the whole column in both (an inf in ``b`` may come out
    NaN where LAPACK keeps +-inf)."""
    ids = index_range(a.shape[-1])
    strict = ids[:, None] > ids[None, :] if lower else ids[:, None] < ids[None, :]
    power = where(strict, a, jnp.zeros((), a.dtype))
    x = b - power @ b
    span = 2
    while span < a.shape[-1]:
        power = power @ power
        x = x + power @ x
        span *= 2
    return x


@lowering(
    "triangular_solve",
    onnx_ops=(
        "Split",
        "Slice",
        "Mul",
        "Sub",
        "Div",
        "Concat",
        "Transpose",
        "Reshape",
        "Gather",
        "MatMul",
        "Pad",
        "Where",
        "ReduceSum",
        "Scan",
        "Loop",
        "Add",
        "Cast",
        "Equal",
        "Expand",
        "GatherND",
        "Greater",
        "Identity",
        "Less",
        "Max",
        "Min",
        "Range",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _triangular_solve(
    ctx: LoweringContext, a: ir.Value, b: ir.Value, **params: Any
) -> list[ir.Value]:
    lu_factor = bool(a.meta.get(LU_FACTOR))
    key = ("triangular_solve", steps.UNROLL_LIMIT, lu_factor, *sorted(params.items()))
    return lower_as_jax(
        ctx,
        lambda a, b: triangular_solve(a, b, **params, lu_factor=lu_factor),
        [a, b],
        cache_key=key,
    )
