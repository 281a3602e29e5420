"""lax.linalg ``lu`` and ``lu_pivots_to_permutation``: LAPACK's ``getrf`` (partial pivoting,
``idamax``'s first largest entry), and ``solve_by_elimination`` (getrf on [a | b])."""

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
    drop_pivot_row,
    exact_cast,
    first_argmax,
    index_range,
    iterate,
    lower_as_jax,
    mT,
    pick_where,
    refuse_half_precision,
    rows_of_blocks,
    step_pivots,
    take_rows,
    where,
)
from jax2onnx_nn.core.lowerings.lapack.triangular import (
    LU_FACTOR,
    SMALL_SUBSTITUTION,
    substitute_unrolled,
)
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.symbolic import same_dim


# -- lu ----------------------------------------------------------------------------------------
def lu(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LU with partial pivoting of ``a`` (..., m, n) as ``getrf``: (lu, pivots, permutation).
    Unrolled for static sizes up to ``UNROLL_LIMIT``, blocked for a larger static square
    matrix, one Loop step per column otherwise."""
    m, n = a.shape[-2], a.shape[-1]
    if jxi.is_symbolic_dim(m) or jxi.is_symbolic_dim(n) or min(m, n) == 0:
        return _lu_columns(a)
    if max(m, n) > steps.UNROLL_LIMIT:
        return _lu_blocked(a) if m == n else _lu_columns(a)
    # the permutation rides along as one more column in front (row ids, exact in a float),
    # so each row swap moves it with the row
    ids = jnp.broadcast_to(np.arange(m, dtype=a.dtype)[:, None], (*a.shape[:-1], 1))
    done, rest, pivots = _lu_panel(jnp.concatenate([ids, a], axis=-1), min(m, n), 1)
    work = jnp.concatenate([done, rest], axis=-2) if rest.shape[-2] else done
    return work[..., 1:], step_pivots(pivots), exact_cast(work[..., 0], jnp.int32)


def _lu_panel(
    work: jax.Array, steps: int, riders: int
) -> tuple[jax.Array, jax.Array, list[jax.Array]]:
    """``steps`` unrolled steps of ``getf2`` on ``work`` (..., m, c): its first ``riders`` columns
    ride along (swapped only), the others are eliminated. Each step takes its pivot row out (one
    Gather), eliminates every row against it in place (the pivot row's own result is discarded),
    then puts the first row where the pivot row was and drops it (``drop_pivot_row``), so no step
    masks a whole matrix and the swap moves the eliminated rows. Returns (the pivot rows (...,
    steps, c), the rows left, each step's pivot row among the rows it had left (..., 1, 1): step j's
    row is that plus j)."""
    done, pivots = [], []
    for j in range(steps):
        if work.shape[-2] == 1:  # one row left: it is its own pivot, nothing below it
            done.append(work)
            pivots.append(jnp.zeros((*work.shape[:-2], 1, 1), jnp.int32))
            work = work[..., 1:, :]
            break
        k = riders + j  # the column eliminated
        col = work[..., :, k : k + 1]
        # the first row of largest magnitude; NaN (-1) only if nothing else is left
        p = first_argmax(where(col == col, jnp.abs(col), -1.0), -2)  # (..., 1, 1)
        pivots.append(p)
        row = take_rows(work, p)
        done.append(row)
        pivot = row[..., k : k + 1]
        multipliers = col / where(pivot == 0, 1.0, pivot)  # getf2 skips a zero pivot
        # column k takes the multipliers, the columns after it lose their multiple of the
        # pivot row, the riders and the L columns before it are kept: Slices and one Concat
        # (two Wheres on static column masks are 3 nodes fewer a step, 66 instead of 74 for
        # a 4x4 lu, but onnxruntime ran them slower: a blocked 64x64 lu 1.5x, unrolled 4x4
        # and 16x16 lu/solve/inv 4-25% in interleaved runs; updating whole rows and slicing
        # after is one Slice fewer a step, 68 nodes for a 4x4 lu, but ran 1-6% slower at 4x4
        # to 16x16 and 5-10% at a blocked 64x64)
        parts = [work[..., :, :k], multipliers]
        if k + 1 < work.shape[-1]:
            parts.append(work[..., :, k + 1 :] - multipliers * row[..., k + 1 :])
        work = jnp.concatenate(parts, axis=-1)
        work = drop_pivot_row(work, p)
    return jnp.concatenate(done, axis=-2), work, pivots


def solve_by_elimination(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a^-1 b`` for ``a`` (..., n, n) of static size n up to ``UNROLL_LIMIT`` and ``b`` (..., n,
    k): what ``lu`` then ``lu_solve`` compute (getf2's pivots, multipliers and updates; U's
    backward substitution), with b's columns riding along in the elimination. Applying each
    step's multipliers to b as the step goes is trsm's forward substitution with L in the same
    order, so neither L, the permutation nor the reordered b is formed, and a step updates the
    whole [a | b] in one Mul and Sub (the eliminated column is left as it comes out: below U's
    diagonal, where the backward substitution only reaches rows already solved).

    The pivot search has no NaN guard: a NaN in the searched column makes every entry of the
    solution NaN whichever row is picked (a NaN row is eliminated into an all-NaN row that
    ends up in U, or a NaN pivot makes every row NaN), as it does in JAX's."""
    n = int(a.shape[-1])
    work = jnp.concatenate([a, b], axis=-1)  # rows leave it as they become U's
    rows, pivots = [], []
    for j in range(n - 1):
        col = work[..., :, j : j + 1]
        p = first_argmax(jnp.abs(col), -2)  # (..., 1, 1)
        row = take_rows(work, p)
        pivot = row[..., j : j + 1]
        work = (
            work - (col / where(pivot == 0, jnp.ones((), a.dtype), pivot)) * row
        )  # getf2 skips a zero pivot
        work = drop_pivot_row(work, p)
        rows.append(row)
        pivots.append(pivot)
    rows.append(work)
    pivots.append(work[..., n - 1 : n])
    u = jnp.concatenate(rows, axis=-2)
    # U's backward substitution with the pivots (trsm's order up to SMALL_SUBSTITUTION rows);
    # U's columns and the right-hand side come out of one Split there
    k = b.shape[-1]
    columns: jax.Array | list[jax.Array]
    if n <= SMALL_SUBSTITUTION:
        *columns, rhs = lax.split(u, [1] * n + [k], axis=a.ndim - 1)
    else:
        columns, rhs = lax.split(u, [n, k], axis=a.ndim - 1)
    return substitute_unrolled(columns, rhs, lower=False, unit_diagonal=False, diagonal=pivots)


def _lu_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Blocked right-looking LU of a square ``a`` of static size n > BLOCK: a Loop over blocks
    of b columns. A trip factors the panel (the trailing matrix's first b columns) unrolled
    (``_lu_panel``), gathers the rest of the rows into the panel's row order, solves the
    block row of U with the panel's unit-lower block (``substitute_unrolled``), and updates
    the trailing matrix with one MatMul. The trailing matrix keeps all columns, rotated so
    the panel comes first: [trailing | the L columns done (later swaps still move them) |
    the permutation]; it loses b rows a trip, padded back with NaN rows at the bottom, which
    a pivot search never picks over a number or an earlier NaN. ``a`` is padded to a
    multiple of b the same way (zero columns, NaN rows): the padding only meets itself."""
    n = int(a.shape[-1])
    blocks = -(-n // steps.BLOCK)
    b = -(-n // blocks)
    size = blocks * b
    batch = [(0, 0, 0)] * (a.ndim - 2)
    nan = jnp.asarray(np.nan, a.dtype)
    a = lax.pad(a, jnp.zeros((), a.dtype), [*batch, (0, 0, 0), (0, size - n, 0)])
    a = lax.pad(a, nan, [*batch, (0, size - n, 0), (0, 0, 0)])
    ids = jnp.broadcast_to(np.arange(size, dtype=a.dtype)[:, None], (*a.shape[:-1], 1))
    rest_cols = index_range(size - b + 1)[None, :]

    def trip(work: jax.Array, k: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        done, below, pivots = _lu_panel(jnp.concatenate([ids, work[..., :b]], axis=-1), b, 1)
        panel = jnp.concatenate(
            [done, below], axis=-2
        )  # (..., size, 1 + b): the trip's row ids first
        rest = take_rows(work[..., b:], exact_cast(panel[..., :1], jnp.int32))
        panel = panel[..., 1:]
        trailing = rest_cols < size - (k + 1) * b  # the columns of U still to come
        u = where(
            trailing,
            substitute_unrolled(panel[..., :b, :b], rest[..., :b, :], unit_diagonal=True),
            rest[..., :b, :],
        )
        below = panel[..., b:, :b]
        rest = where(trailing, rest[..., b:, :] - below @ u, rest[..., b:, :])
        work = jnp.concatenate([rest[..., : size - b], below, rest[..., size - b :]], axis=-1)
        work = lax.pad(work, nan, [*batch, (0, b, 0), (0, 0, 0)])
        done = jnp.concatenate([panel[..., :b, :b], u], axis=-1)  # (..., b, size + 1)
        return work, (done, jnp.concatenate(pivots, axis=-1) + (k * b + index_range(b)))

    work = jnp.concatenate([a, ids], axis=-1)
    _, (done, pivots) = lax.scan(trip, work, jnp.arange(blocks, dtype=jnp.int32))
    done = jnp.moveaxis(done, 0, -3)  # (..., blocks, b, size + 1), block k's columns rotated by k*b
    perm = exact_cast(done[..., size].reshape((*done.shape[:-3], size)), jnp.int32)
    columns = rows_of_blocks(
        mT(done[..., :size]), (np.arange(size) - b * np.arange(blocks)[:, None]) % size
    )
    packed = mT(columns).reshape((*done.shape[:-3], size, size))
    pivots = jnp.moveaxis(pivots, 0, -3).reshape((*done.shape[:-3], size)).astype(jnp.int32)
    return packed[..., :n, :n], pivots[..., :n], perm[..., :n]


def _lu_columns(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LU as one Loop step per column (a symbolic or large size)."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else jxi.min_dim(m, n)
    rows, cols = index_range(m), index_range(n)
    batch = a.shape[:-2]

    def step(j: Index, carry: tuple) -> tuple:
        work, perm, pivots = carry  # perm (..., m, 1), pivots (..., 1, k)
        col = at_index(work, j, -1)
        # first row of largest magnitude at or below j; NaN (-1) only if nothing else is left
        magnitude = where(jnp.isnan(col), jnp.asarray(-1, col.dtype), jnp.abs(col))
        magnitude = where(rows[:, None] >= j, magnitude, jnp.asarray(-2, col.dtype))
        largest = jnp.max(magnitude, axis=-2, keepdims=True)
        p = jnp.min(
            where(magnitude == largest, rows[:, None], m), axis=-2, keepdims=True
        )  # (..., 1, 1)
        is_j, is_p = rows[:, None] == j, rows[:, None] == p
        row_j, row_p = at_index(work, j, -2), pick_where(work, is_p, -2)
        work = where(is_j, row_p, where(is_p, row_j, work))
        perm = where(is_j, pick_where(perm, is_p, -2), where(is_p, at_index(perm, j, -2), perm))
        pivot = at_index(row_p, j, -1)
        col = at_index(work, j, -1)
        multipliers = where(pivot != 0, col / where(pivot != 0, pivot, jnp.ones((), a.dtype)), col)
        under = rows[:, None] > j
        work = where(under & (cols[None, :] > j), work - multipliers * row_p, work)
        work = where(under & (cols[None, :] == j), multipliers, work)
        pivots = where(index_range(k)[None, :] == j, p, pivots)
        return work, perm, pivots

    perm = jnp.broadcast_to(rows[:, None], (*batch, m, 1))
    work, perm, pivots = iterate(k, step, (a, perm, jnp.zeros((*batch, 1, k), jnp.int32)))
    return work, pivots[..., 0, :], perm[..., 0]


@lowering(
    "lu",
    onnx_ops=(
        "Slice",
        "Concat",
        "Equal",
        "Abs",
        "ArgMax",
        "Cast",
        "Expand",
        "GatherElements",
        "GatherND",
        "ScatterElements",
        "Where",
        "Div",
        "Mul",
        "Sub",
        "Split",
        "MatMul",
        "Pad",
        "Reshape",
        "Transpose",
        "Gather",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "Squeeze",
        "Scan",
        "Loop",
        "Add",
        "And",
        "ConstantOfShape",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsNaN",
        "Less",
        "Max",
        "Min",
        "Not",
        "Range",
        "Unsqueeze",
    ),
)
def _lu(ctx: LoweringContext, a: ir.Value, **params: Any) -> list[ir.Value]:
    del params
    refuse_half_precision(ctx, "lu", "jnp.linalg.inv(a.astype(jnp.float32))")
    outs = lower_as_jax(ctx, lu, [a], cache_key=("lu", steps.UNROLL_LIMIT))
    # lu_factor / lu_solve turn the pivots back into the permutation lu made already
    outs[1].meta[_PERMUTATION] = (outs[2], ctx.avals_in[0].shape[-2])
    outs[0].meta[LU_FACTOR] = True  # lu_solve's triangular solves with L (see triangular_solve)
    outs[0].meta[_LU_OF] = (a, outs[2])  # a solve by this lu (see solves.custom_linear_solve)
    return outs


_PERMUTATION = "jax2onnx_nn.lu_permutation"  # on lu's pivots: (its permutation, rows)
_LU_OF = "jax2onnx_nn.lu_of"  # on lu's packed result: (the matrix factored, lu's permutation)


def lu_of(packed: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """(the matrix, the permutation) of the ``lu`` whose packed result ``packed`` is, if it is
    one."""
    return packed.meta.get(_LU_OF)


def pivots_to_permutation(pivots: jax.Array, permutation_size: int) -> jax.Array:
    """The permutation the row swaps ``i <-> pivots[i]`` make of ``0..permutation_size-1``."""
    ids = index_range(permutation_size)

    def step(i: Index, perm: jax.Array) -> jax.Array:
        is_p = ids == at_index(pivots, i, -1)
        return where(ids == i, pick_where(perm, is_p, -1), where(is_p, at_index(perm, i, -1), perm))

    perm = jnp.broadcast_to(ids, (*pivots.shape[:-1], permutation_size))
    return iterate(pivots.shape[-1], step, perm)


@lowering(
    "lu_pivots_to_permutation",
    onnx_ops=("Slice", "Where", "ReduceSum", "Loop", "Equal", "Expand", "Unsqueeze"),
)
def _lu_pivots_to_permutation(
    ctx: LoweringContext, pivots: ir.Value, *, permutation_size: int
) -> list[ir.Value]:
    made = pivots.meta.get(_PERMUTATION)
    if made is not None and same_dim(
        made[1], permutation_size
    ):  # pivots of an lu of that many rows
        return [made[0]]
    return lower_as_jax(ctx, lambda p: pivots_to_permutation(p, permutation_size), [pivots])
