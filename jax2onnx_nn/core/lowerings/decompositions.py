"""lax.linalg: matrix factorizations and solves as exact decompositions into ONNX arithmetic.

ONNX has no linear-algebra ops besides ``Det``, ``MatMul`` and ``Einsum``, so every rule here
is an algorithm written in JAX (slices, ``where``, products and sums on the operands' avals,
leading batch dims included) and lowered through the interpreter like any other jaxpr. Each
algorithm is a sequence of steps over the matrix size ``n``: for a static ``n`` up to
``UNROLL_LIMIT`` the steps are unrolled (static slices, masks folded into constants); for a
larger or symbolic ``n`` they become one ONNX ``Loop`` whose body is the same step on a traced
index (``dynamic_slice`` reads, ``where`` writes), so the graph size does not grow with ``n``.
``cholesky``, ``triangular_solve`` and a square ``lu`` or ``qr`` above ``UNROLL_LIMIT`` are
blocked instead: a Loop over blocks of columns (rows), each block unrolled on static slices
and the rest updated by one MatMul.

Steps write through ``where`` with masks, never by multiplying with 0/1 masks, so inf and NaN
stay where LAPACK puts them: a NaN in a row does not leak into the rows it is not added to.

What LAPACK (JAX's CPU path) does on degenerate inputs, and what these rules do the same way:

- ``cholesky`` reads the lower triangle and keeps the input's strict upper triangle (``potrf``
  works in place); a pivot ``<= 0`` (not PD) makes the whole matrix NaN, a NaN pivot only
  propagates.
- ``triangular_solve`` reads only the named triangle (and no diagonal with
  ``unit_diagonal``) and divides plainly: a zero pivot gives inf, or NaN for 0/0. With
  ``lu``'s unit L (lu_solve; solve and inv above ``UNROLL_LIMIT``) it multiplies by powers of
  L's strict triangle instead (``_unit_solve_by_powers``): the same numbers up to rounding, a
  NaN spread wider.
- ``solve`` and ``inv`` up to ``UNROLL_LIMIT`` (``solve_by_elimination``, through
  ``custom_linear_solve``) eliminate on [a | b] with ``lu``'s pivots and zero-pivot rule and
  substitute with U as trsm does: JAX's inf/NaN pattern on singular matrices; a NaN in a
  searched column makes the whole solution NaN (as in JAX), whichever row the search picks.
- ``lu`` pivots on the first entry of largest magnitude in the column (``idamax``; NaN entries
  are never chosen over numbers, where JAX's CPU idamax gives a column with a NaN other
  pivots that follow no documented rule) and skips the division by a zero pivot (``getf2``), so a
  singular matrix factors without NaN and ``det`` is 0.

The numbers agree with JAX's to rounding, not bitwise: JAX's CPU getrf/trsm (OpenBLAS) take
each entry as the input less one sum of products accumulated with fused multiply-adds (which
ONNX lacks) and scale by the pivot's reciprocal, where these steps subtract one product at a
time and divide (see docs/limitations.md). Multiplying by the reciprocal would need an
ONNX ``Reciprocal`` (onnxruntime's DivMulFusion turns ``x * (1 / p)`` back into ``x / p``):
measured, one node more a step for lu results bitwise JAX's in 6.7% of random float32 3x3 to
16x16 matrices instead of 2.5% (float64 5.2% instead of 2.0%, solve ~1% either way), so left out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.symbolic import same_dim
from jax2onnx_nn.core.value_range import value_range

# Largest static matrix size whose steps are unrolled; above it (or for a symbolic size) the
# steps run in one ONNX Loop. Chosen by benchmarks/linalg_bench.py (graph size and latency).
UNROLL_LIMIT = 16

# Largest static step count of a pivoted QR (geqp3) that is unrolled: its steps are ~100 nodes
# each (a 16x16 was 1772 nodes); as a Loop onnxruntime ran 3x3 ~20% slower, 8x8 to 16x16 as
# fast or faster (benchmarks/linalg_bench.py --cases qr_pivoting).
PIVOTED_UNROLL_LIMIT = 4

Index = Any  # a Python int (unrolled step) or a traced int32 scalar (a Loop iteration)


def lower_as_jax(
    ctx: LoweringContext,
    fn: Callable[..., Any],
    operands: Sequence[ir.Value],
    *,
    cache_key: Hashable = None,
    avals: Sequence[Any] | None = None,
) -> list[ir.Value]:
    """Lower the equation as ``fn``, JAX code traced on the equation's input avals (or on
    ``avals``, those of ``operands`` when they are not the equation's inputs).

    With a ``cache_key`` (what ``fn`` computes, its params included) the trace is kept for
    every later equation with the same key and static avals: tracing a Jacobi SVD takes about
    a second, and a model (``pinv``, ``lstsq``, ``matrix_rank`` of one matrix) or a test
    suite exports the same one many times."""
    specs = [
        jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (ctx.avals_in if avals is None else avals)
    ]
    static = not any(jxi.is_symbolic_dim(d) for a in ctx.avals_in for d in a.shape)
    key = (
        cache_key,
        tuple((s.shape, str(s.dtype)) for s in specs),
        bool(jax.config.jax_enable_x64),
    )
    closed = _TRACES.get_or_make(
        key if cache_key is not None and static else None, lambda: jax.make_jaxpr(fn)(*specs)
    )
    return ctx.lower_sub(closed, list(operands))


_TRACES: BoundedMemo[Any] = BoundedMemo(256)


# -- the step machinery: unrolled for small static sizes, an ONNX Loop otherwise ----------------
def iterate(
    n: Any,
    step: Callable[[Index, Any], Any],
    carry: Any,
    *,
    reverse: bool = False,
    unroll: bool | None = None,
) -> Any:
    """``carry = step(j, carry)`` for j in 0..n-1 (n-1..0 with ``reverse``); ``unroll=False``
    asks for the Loop at any size (a factorization inside another algorithm's graph)."""
    if unrolls(n, unroll):
        for j in range(int(n) - 1, -1, -1) if reverse else range(int(n)):
            carry = step(j, carry)
        return carry
    if reverse:
        return lax.fori_loop(0, n, lambda t, c: step(n - 1 - t, c), carry)
    return lax.fori_loop(0, n, step, carry)


def unrolls(n: Any, unroll: bool | None) -> bool:
    """Whether ``iterate`` unrolls n steps: as asked, else for a static n up to UNROLL_LIMIT."""
    if unroll is None:
        return not jxi.is_symbolic_dim(n) and int(n) <= UNROLL_LIMIT
    return unroll


def at_index(x: jax.Array, j: Index, axis: int) -> jax.Array:
    """``x`` at index ``j`` of ``axis``, kept as a size-1 axis: a static slice for an int."""
    axis = axis % x.ndim
    if isinstance(j, int):
        return lax.slice_in_dim(x, j, j + 1, axis=axis)
    return lax.dynamic_slice_in_dim(x, j, 1, axis=axis)


# -- plain ONNX ops for the steps --------------------------------------------------------------
# The generic rules for these primitives handle cases a step never meets (a -0.0, a NaN in a
# pivot search, a float out of an int's range) with extra nodes; each helper here is its JAX
# reference function bound as a private primitive that exports as the bare ONNX op(s).
def _bare(name: str, reference: Callable[..., Any], *args: Any, **params: Any) -> jax.Array:
    specs = [jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)) for v in args]
    body = jax.make_jaxpr(lambda *a: reference(*a, **params))(*specs)
    return jxi.body_primitive(name).bind(*args, body=body, **params)[0]


def where(which: jax.Array, x: Any, y: Any) -> jax.Array:
    """``jnp.where`` as one ONNX ``Where`` (which broadcasts): the generic ``select_n`` rule
    adds a sign fix-up for a -0.0 picked from ``x`` and an ``Expand`` per broadcast operand,
    five nodes where the masks here need one. A zero the masks pick may lose its sign; LAPACK
    promises none either."""
    # a Python scalar takes the array's dtype (weak typing: with x64 on, jnp.asarray(1.0)
    # alone is float64 and would widen a float32 matrix)
    dtype = jnp.result_type(x, y)
    return _bare(_SELECT, jnp.where, which, jnp.asarray(x, dtype), jnp.asarray(y, dtype))


def pick_where(x: jax.Array, hits: jax.Array, axis: int) -> jax.Array:
    """The entries of ``x`` where ``hits`` (one per line along ``axis``), kept as a size-1
    axis: a masked sum (``Where``, ``ReduceSum``), exact (no products with 0 that would turn
    inf into NaN)."""
    return _bare(_PICK, _masked_sum, hits, x, axis=axis % x.ndim)


def _masked_sum(hits: jax.Array, x: jax.Array, *, axis: int) -> jax.Array:
    return jnp.sum(
        jnp.where(hits, x, jnp.zeros((), x.dtype)), axis=axis, keepdims=True, dtype=x.dtype
    )


def sum_keepdims(x: jax.Array, axis: int) -> jax.Array:
    """``jnp.sum(x, axis, keepdims=True)`` as one ``ReduceSum`` (the generic rule drops the
    axis and adds it back with an Unsqueeze)."""
    return _bare(_SUM, lambda x, axis: jnp.sum(x, axis=axis, keepdims=True), x, axis=axis % x.ndim)


def first_argmax(x: jax.Array, axis: int) -> jax.Array:
    """The index of the first largest entry along ``axis`` of an ``x`` without NaN, kept as a
    size-1 axis: one ONNX ``ArgMax`` and a Cast to JAX's index type (the generic rule's NaN
    handling is nine nodes)."""
    return _bare(
        _ARGMAX, lambda x, axis: jnp.argmax(x, axis=axis, keepdims=True), x, axis=axis % x.ndim
    )


def exact_cast(x: jax.Array, dtype: Any) -> jax.Array:
    """``x`` (integers held in a float) as the integer ``dtype``: one Cast (the generic rule
    saturates out-of-range values and NaN first, six more nodes)."""
    return _bare(_CAST, lambda x: x.astype(dtype), x)


def take_rows(x: jax.Array, rows: jax.Array) -> jax.Array:
    """The rows ``rows`` (..., r, 1) of ``x`` (..., m, c), one per matrix each: one ONNX
    ``GatherElements`` (the generic gather rule clamps and checks the indices first)."""
    return _bare(_TAKE_ROWS, lambda x, rows: jnp.take_along_axis(x, rows, axis=-2), x, rows)


def drop_pivot_row(x: jax.Array, p: jax.Array) -> jax.Array:
    """The rows of ``x`` (..., m, c) left after an elimination step on pivot row ``p``
    (..., 1, 1): getrf's swap puts row 0 where row ``p`` was, then row 0 leaves, so the rows
    keep LAPACK's order (the next pivot search's ties). One ONNX ``ScatterElements`` and two
    Slices; of two rows, the one that is not ``p``: one ``GatherND`` at 1 - p."""
    return _bare(_DROP_PIVOT_ROW, _drop_pivot_row_reference, x, p)


def _drop_pivot_row_reference(x: jax.Array, p: jax.Array) -> jax.Array:
    return jnp.where(lax.broadcasted_iota(p.dtype, x.shape, x.ndim - 2) == p, x[..., :1, :], x)[
        ..., 1:, :
    ]


def step_pivots(rows: Sequence[jax.Array]) -> jax.Array:
    """getrf's 0-based ``ipiv`` (..., steps) int32 from each step's pivot row among the rows it
    had left (``first_argmax`` results or int32 constants, (..., 1, 1) each): row + step. One
    Concat of the ArgMaxes' own int64 results and one Cast, where each step's ArgMax would
    otherwise be cast on its own."""
    return _bare(_STEP_PIVOTS, _step_pivots_reference, *rows)


def _step_pivots_reference(*rows: jax.Array) -> jax.Array:
    return (jnp.concatenate(rows, axis=-1)[..., 0, :] + index_range(len(rows))).astype(jnp.int32)


@lowering("linalg_step_pivots", onnx_ops=("Concat", "Squeeze", "Add", "Cast"))
def _linalg_step_pivots(ctx: LoweringContext, *rows: ir.Value, body: Any) -> ir.Value:
    del body  # _step_pivots_reference, in int64 until the end: exact for row indices
    wide = []
    for row in rows:
        producer = row.producer()
        looked_through = (
            producer is not None
            and producer.op_type == "Cast"
            and producer.inputs[0].dtype == ir.DataType.INT64
        )
        wide.append(producer.inputs[0] if looked_through else ctx.cast(row, np.int64))
    rank = len(ctx.avals_in[0].shape)
    joined = ctx.op.Concat(*wide, axis=rank - 1) if len(wide) > 1 else wide[0]
    joined = ctx.op.Squeeze(joined, ctx.ints([rank - 2]))
    return ctx.cast(ctx.op.Add(joined, ctx.ints(list(range(len(rows))))), np.int32)


_STEP_PIVOTS = "linalg_step_pivots"
_TAKE_ROWS, _DROP_PIVOT_ROW = "linalg_take_rows", "linalg_drop_pivot_row"


def _int64_index(ctx: LoweringContext, index: ir.Value) -> ir.Value:
    """``index`` as int64; an ArgMax's int64 result is used directly, not through its Cast to
    JAX's index type."""
    producer = index.producer()
    if (
        producer is not None
        and producer.op_type == "Cast"
        and producer.inputs[0].dtype == ir.DataType.INT64
    ):
        return producer.inputs[0]
    return ctx.cast(index, np.int64)


def _row_index(ctx: LoweringContext, index: ir.Value, dims: Sequence[Any]) -> ir.Value:
    """An index (..., r, 1) as the int64 (..., r, c) GatherElements/ScatterElements need."""
    return ctx.expand(_int64_index(ctx, index), dims)


def _one_of_two_rows(ctx: LoweringContext, x: ir.Value, index: ir.Value) -> ir.Value:
    """Row ``index`` (int64 (..., 1, 1)) of each matrix of ``x`` (..., 2, c): one GatherND over
    the batch dims, which takes the index as it is (GatherElements needs it expanded to c
    columns: one node more; a ScatterElements of more rows shares that one)."""
    return ctx.op.GatherND(x, index, batch_dims=len(ctx.avals_in[0].shape) - 2)


def _two_rows(aval: Any) -> bool:
    return not jxi.is_symbolic_dim(aval.shape[-2]) and aval.shape[-2] == 2


@lowering(_TAKE_ROWS, onnx_ops=("GatherElements", "GatherND", "Expand", "Cast", "Concat"))
def _linalg_take_rows(ctx: LoweringContext, x: ir.Value, rows: ir.Value, *, body: Any) -> ir.Value:
    del body  # take_along_axis on in-range indices
    rank = len(ctx.avals_in[0].shape)
    if _two_rows(ctx.avals_in[0]) and ctx.aval_out.shape[-2] == 1:
        return _one_of_two_rows(ctx, x, _int64_index(ctx, rows))
    return ctx.op.GatherElements(x, _row_index(ctx, rows, ctx.aval_out.shape), axis=rank - 2)


@lowering(
    _DROP_PIVOT_ROW,
    onnx_ops=("ScatterElements", "Slice", "GatherND", "Sub", "Expand", "Cast", "Concat"),
)
def _linalg_drop_pivot_row(
    ctx: LoweringContext, x: ir.Value, p: ir.Value, *, body: Any
) -> ir.Value:
    del body  # _drop_pivot_row_reference, on an in-range p
    shape = ctx.avals_in[0].shape
    axis = len(shape) - 2
    if _two_rows(ctx.avals_in[0]):  # the row that is not p
        return _one_of_two_rows(
            ctx, x, ctx.op.Sub(ctx.const(np.ones((), np.int64)), _int64_index(ctx, p))
        )
    index = _row_index(
        ctx, p, (*shape[:-2], 1, shape[-1])
    )  # the pivot row's gather made the same one: one node
    first = ctx.slice(x, [axis], [0], [1])
    return ctx.slice(ctx.op.ScatterElements(x, index, first, axis=axis), [axis], [1], [2**63 - 1])


_SELECT, _PICK, _SUM, _ARGMAX, _CAST = (
    "linalg_select",
    "linalg_pick",
    "linalg_sum",
    "linalg_first_argmax",
    "linalg_exact_cast",
)


@lowering(_SELECT, onnx_ops=("Where",))
def _linalg_select(
    ctx: LoweringContext, which: ir.Value, x: ir.Value, y: ir.Value, *, body: Any
) -> ir.Value:
    del body  # jnp.where, which ONNX Where computes with its own broadcasting
    return ctx.op.Where(which, x, y)


@lowering(_PICK, onnx_ops=("Where", "ReduceSum"))
def _linalg_pick(
    ctx: LoweringContext, hits: ir.Value, x: ir.Value, *, body: Any, axis: int
) -> ir.Value:
    del body  # _masked_sum
    masked = ctx.op.Where(hits, x, ctx.const(np.zeros((), onnx_aval(ctx.avals_in[1])[0])))
    return ctx.op.ReduceSum(masked, ctx.ints([axis]), keepdims=1)


@lowering(_SUM, onnx_ops=("ReduceSum",))
def _linalg_sum(ctx: LoweringContext, x: ir.Value, *, body: Any, axis: int) -> ir.Value:
    del body  # jnp.sum with keepdims
    return ctx.op.ReduceSum(x, ctx.ints([axis]), keepdims=1)


@lowering(_ARGMAX, onnx_ops=("ArgMax", "Cast"))
def _linalg_first_argmax(ctx: LoweringContext, x: ir.Value, *, body: Any, axis: int) -> ir.Value:
    del body  # jnp.argmax, which ArgMax computes on NaN-free input
    return ctx.cast(
        ctx.op.ArgMax(x, axis=axis, keepdims=1, select_last_index=0), onnx_aval(ctx.aval_out)[0]
    )


@lowering(_CAST, onnx_ops=("Cast",))
def _linalg_exact_cast(ctx: LoweringContext, x: ir.Value, *, body: Any) -> ir.Value:
    del body  # astype, exact on the integers the steps hold
    return ctx.cast(x, onnx_aval(ctx.aval_out)[0])


def mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def index_range(n: Any) -> jax.Array:
    return lax.iota(jnp.int32, n)


# -- cholesky ----------------------------------------------------------------------------------
# Column block of the blocked Cholesky (above UNROLL_LIMIT): a Loop trip factors one block of
# columns unrolled and updates the trailing matrix with one MatMul, so 64x64 takes 4 trips.
BLOCK = 16


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
    if n <= UNROLL_LIMIT:
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
    columns, pivots = [], []
    for j in range(b):
        col = panel[..., :, j : j + 1]
        pivot = col[..., j : j + 1, :]
        columns.append(col)
        pivots.append(pivot)
        if j + 1 < b:
            panel = panel - col * (mT(col if r == b else col[..., :b, :]) / pivot)
    pivots = jnp.concatenate(pivots, axis=-1)
    return jnp.concatenate(columns, axis=-1) / jnp.sqrt(pivots), pivots


def _cholesky_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Blocked right-looking Cholesky of a static n > BLOCK: a Loop over blocks of b columns
    (the matrix padded with I to a multiple of b). Each trip factors the trailing matrix's
    first b columns (``_cholesky_panel``) and shrinks it to its trailing part less one MatMul,
    padded with zeros at the end back to the Loop's fixed shape, so block k's rows start at
    row k*b of L."""
    n = int(a.shape[-1])
    blocks = -(-n // BLOCK)
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
    shifted = _rows_of_blocks(
        jnp.moveaxis(columns, 0, -3), (np.arange(size) - b * np.arange(blocks)[:, None]) % size
    )
    factor = jnp.swapaxes(shifted, -3, -2).reshape((*shifted.shape[:-3], size, size))
    pivots = jnp.moveaxis(pivots, 0, -2).reshape((*pivots.shape[1:-2], 1, size))
    return factor[..., :n, :n], pivots[..., :n]


def _rows_of_blocks(x: jax.Array, rows: np.ndarray) -> jax.Array:
    """``x`` (..., blocks, r, c) with block k's rows ``rows[k]`` (a static (blocks, r') index
    table), in one Gather: (..., blocks, r', c)."""
    blocks, r, c = x.shape[-3:]
    flat = x.reshape((*x.shape[:-3], blocks * r, c))
    index = (rows + r * np.arange(blocks)[:, None]).reshape(-1)
    return jnp.take(flat, index, axis=-2, mode="clip").reshape(
        (*x.shape[:-3], blocks, rows.shape[1], c)
    )


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
    return lower_as_jax(ctx, cholesky, [a], cache_key=("cholesky", UNROLL_LIMIT))


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
    if m <= UNROLL_LIMIT:
        return _substitute_unrolled(a, b, lower=lower, unit_diagonal=unit_diagonal)
    if not lower:  # backward substitution is forward substitution in reversed order
        x = _forward_blocked(a[..., ::-1, ::-1], b[..., ::-1, :], unit_diagonal=unit_diagonal)
        return x[..., ::-1, :]
    return _forward_blocked(a, b, unit_diagonal=unit_diagonal)


# Largest size whose unrolled substitution with separate pivots divides each solved row by its
# pivot as it goes (trsm's order): a Slice of the right-hand side, a Div, a Mul and a Sub a row
# (4m nodes with the Split and the Concat), where dividing the columns first is 3m + 5.
SMALL_SUBSTITUTION = 5


def _substitute_unrolled(
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
        rows = [None] * m
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
    rows = [None] * m
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
    its diagonal block unrolled (``_substitute_unrolled``) on the right-hand side's first rows,
    then keeps the rows below less one MatMul with the block's column below the diagonal,
    padded with zeros at the end back to the Loop's fixed shape."""
    m = int(a.shape[-1])
    blocks = -(-m // BLOCK)
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
    by_block = _rows_of_blocks(by_block, (np.arange(size) + bs * np.arange(blocks)[:, None]) % size)

    def trip(rhs: jax.Array, block: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = _substitute_unrolled(block[..., :bs, :], rhs[..., :bs, :], unit_diagonal=unit_diagonal)
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
    unrolled = not jxi.is_symbolic_dim(m) and 0 < m <= UNROLL_LIMIT
    diagonal = _diagonal(a) if unrolled and not unit_diagonal else None  # before a transpose
    if transpose_a:
        a, lower = mT(a), not lower
    if l_factor and unrolled and m > 1:
        x = _unit_solve_by_powers(a, b, lower=lower)
    elif unrolled:
        x = _substitute_unrolled(a, b, lower=lower, unit_diagonal=unit_diagonal, diagonal=diagonal)
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
    lu_factor = bool(a.meta.get(_LU_FACTOR))
    key = ("triangular_solve", UNROLL_LIMIT, lu_factor, *sorted(params.items()))
    return lower_as_jax(
        ctx,
        lambda a, b: triangular_solve(a, b, **params, lu_factor=lu_factor),
        [a, b],
        cache_key=key,
    )


# -- lu ----------------------------------------------------------------------------------------
def lu(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LU with partial pivoting of ``a`` (..., m, n) as ``getrf``: (lu, pivots, permutation).
    Unrolled for static sizes up to ``UNROLL_LIMIT``, blocked for a larger static square
    matrix, one Loop step per column otherwise."""
    m, n = a.shape[-2], a.shape[-1]
    if jxi.is_symbolic_dim(m) or jxi.is_symbolic_dim(n) or min(m, n) == 0:
        return _lu_columns(a)
    if max(m, n) > UNROLL_LIMIT:
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
    """``steps`` unrolled steps of ``getf2`` on ``work`` (..., m, c): its first ``riders``
    columns ride along (swapped only), the others are eliminated. Each step takes its pivot row out (one Gather),
    eliminates every row against it in place (the pivot row's own result is discarded),
    then puts the first row where the pivot row was and drops it (``drop_pivot_row``), so no
    step masks a whole matrix and the swap moves the eliminated rows. Returns (the pivot rows
    (..., steps, c), the rows left, each step's pivot row among the rows it had left
    (..., 1, 1): step j's row is that plus j)."""
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
    if n <= SMALL_SUBSTITUTION:
        *u, rhs = lax.split(u, [1] * n + [k], axis=a.ndim - 1)
    else:
        u, rhs = lax.split(u, [n, k], axis=a.ndim - 1)
    return _substitute_unrolled(u, rhs, lower=False, unit_diagonal=False, diagonal=pivots)


def _lu_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Blocked right-looking LU of a square ``a`` of static size n > BLOCK: a Loop over blocks
    of b columns. A trip factors the panel (the trailing matrix's first b columns) unrolled
    (``_lu_panel``), gathers the rest of the rows into the panel's row order, solves the
    block row of U with the panel's unit-lower block (``_substitute_unrolled``), and updates
    the trailing matrix with one MatMul. The trailing matrix keeps all columns, rotated so
    the panel comes first: [trailing | the L columns done (later swaps still move them) |
    the permutation]; it loses b rows a trip, padded back with NaN rows at the bottom, which
    a pivot search never picks over a number or an earlier NaN. ``a`` is padded to a
    multiple of b the same way (zero columns, NaN rows): the padding only meets itself."""
    n = int(a.shape[-1])
    blocks = -(-n // BLOCK)
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
            _substitute_unrolled(panel[..., :b, :b], rest[..., :b, :], unit_diagonal=True),
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
    columns = _rows_of_blocks(
        mT(done[..., :size]), (np.arange(size) - b * np.arange(blocks)[:, None]) % size
    )
    packed = mT(columns).reshape((*done.shape[:-3], size, size))
    pivots = jnp.moveaxis(pivots, 0, -3).reshape((*done.shape[:-3], size)).astype(jnp.int32)
    return packed[..., :n, :n], pivots[..., :n], perm[..., :n]


def _lu_columns(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LU as one Loop step per column (a symbolic or large size)."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else min(m, n)
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


def refuse_half_precision(ctx: LoweringContext, name: str, call: str) -> None:
    """Refuse a float16 / bfloat16 matrix for ``name``, as JAX does: its CPU lowering of the
    LAPACK primitives (getrf, potrf, geqrf, orgqr, syevd, gesdd) has no half-precision kernel
    ("Unsupported dtype float16"; JAX 0.12 refuses the dtype while tracing already), so there
    is no JAX result to match. ``call``: the user-level function on ``a`` in float32 that the
    message suggests (``jnp.linalg.inv(a.astype(jnp.float32))``)."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype.itemsize == 2:
        raise ConversionError(
            f"{name} of a {dtype.name} matrix at {ctx.source_line or '<unknown location>'} is not supported: "
            f"JAX's CPU {name} has no {dtype.name} kernel either (LAPACK works in float32 and float64). "
            f"Cast the matrix to float32 first and the results back, e.g. {call} and .astype(jnp.{dtype.name}) on its results"
        )


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
    outs = lower_as_jax(ctx, lu, [a], cache_key=("lu", UNROLL_LIMIT))
    # lu_factor / lu_solve turn the pivots back into the permutation lu made already
    outs[1].meta[_PERMUTATION] = (outs[2], ctx.avals_in[0].shape[-2])
    outs[0].meta[_LU_FACTOR] = True  # lu_solve's triangular solves with L (see triangular_solve)
    outs[0].meta[_LU_OF] = (a, outs[2])  # a solve by this lu (see solves.custom_linear_solve)
    return outs


_PERMUTATION = "jax2onnx_nn.lu_permutation"  # on lu's pivots: (its permutation, rows)
_LU_FACTOR = (
    "jax2onnx_nn.lu_factor"  # on lu's packed result: L's entries are at most 1 in magnitude
)
_LU_OF = "jax2onnx_nn.lu_of"  # on lu's packed result: (the matrix factored, lu's permutation)


def lu_of(packed: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """(the matrix, the permutation) of the ``lu`` whose packed result ``packed`` is, if it is one."""
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


# The scale a matrix is divided by before a factorization that squares its entries (Jacobi
# rotations, Householder norms): 2^k, k a multiple of SCALE_STEP, the
# largest not above max |a| (its reciprocal normal too): the scaled entries are below 2^SCALE_STEP
# and the largest at least 1, so no square overflows or underflows (float32 entries of 1e30 or
# 1e-30), and dividing by it and multiplying the values back are exact.
SCALE_STEP = 4


def power_of_two_scale(a: jax.Array) -> jax.Array:
    """The power of two (..., 1, 1) that ``a`` (..., m, n) is divided by (see SCALE_STEP), from
    a table: one comparison with ~64 (float32) or ~512 (float64) entries and one Gather. A zero
    matrix gets the smallest entry, an inf one the largest and a NaN one (no comparison holds)
    the smallest: either way the NaN or inf stays in the scaled matrix; an empty one, 1."""
    if any(not jxi.is_symbolic_dim(d) and d == 0 for d in a.shape[-2:]):
        return jnp.ones((*a.shape[:-2], 1, 1), a.dtype)
    top = jnp.finfo(a.dtype).maxexp - 2
    powers = 2.0 ** np.arange(-top, top + 1, SCALE_STEP)
    big = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    below = jnp.sum(
        (jnp.asarray(powers, a.dtype) <= big).astype(jnp.int32), axis=-1, keepdims=True
    )  # (..., 1, 1)
    # entry i of the table read is the i-th power's predecessor (its first one twice)
    return (
        jnp.asarray(np.concatenate([powers[:1], powers]), a.dtype)
        .at[below]
        .get(mode="promise_in_bounds")
    )


def upper(rows: Any, cols: Any) -> Any:
    """R's entries (on and above the diagonal) for ``scaled``'s ``keeps_scale``."""
    return rows <= cols


def scaled(
    factor: Callable[[jax.Array], tuple[jax.Array, ...]], keeps_scale: Callable[[Any, Any], Any]
) -> Callable[[jax.Array], tuple[jax.Array, ...]]:
    """``factor`` (a Householder reduction: (packed, taus)) of ``a`` divided by
    ``power_of_two_scale(a)``, the packed entries where ``keeps_scale(rows, cols)`` (R, H)
    multiplied back: the reflectors' norms square the entries, which overflow or underflow from
    ~1e19 / ~1e-19 in float32 (LAPACK's dnrm2 scales), and the reflectors and taus do not
    depend on a power of two, exactly (so the results are unchanged where nothing overflowed)."""

    def on_scaled(a: jax.Array) -> tuple[jax.Array, ...]:
        scale = power_of_two_scale(a)
        packed, *rest = factor(a / scale)
        rows, cols = index_range(packed.shape[-2])[:, None], index_range(packed.shape[-1])[None, :]
        return (where(keeps_scale(rows, cols), packed * scale, packed), *rest)

    return on_scaled


# -- qr: Householder reflections as LAPACK's geqrf / orgqr / ormqr -----------------------------
def reflector(x: jax.Array, j: Index, tail: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``dlarfg`` on the column ``x`` (..., m, 1): the Householder vector ``v`` (1 at row
    ``j``, the scaled ``tail`` rows, 0 elsewhere), ``tau``, and x[j]'s new value ``beta =
    -sign(alpha) * |(alpha, x[tail])|`` (``sign(0) = +``); a tail already zero is no reflection
    (``tau = 0``, x[j] kept)."""
    zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
    rows = index_range(x.shape[-2])[:, None]
    # j is a step's index, or one per matrix (..., 1, 1) (a QR sweep's position per matrix)
    alpha = at_index(x, j, -2) if jnp.ndim(j) == 0 else pick_where(x, rows == j, -2)  # (..., 1, 1)
    rest = where(tail, x, zero)
    # a column whose magnitudes sum below 2^low has squares near or under the float range
    # (denormals keep a few bits, or none): it is taken times 2^lift (exact), which v and tau
    # do not see, and beta divided back, as dlarfg rescales (float32 Hessenberg forms of d G d,
    # d = (1, 1e-22, ...), had taus 100% off JAX's; a real Schur sweep on a block at 1e-15 of
    # max |a|, or on the noise block of a float32 matrix of ones, lost z's orthogonality). A
    # sum, not a max: no NaN handling, and a NaN stays NaN either way.
    low, lift = _reflector_range(x.dtype)
    size = sum_keepdims(jnp.abs(rest), -2) + jnp.abs(alpha)
    factor = where(size < 2.0**low, jnp.asarray(2.0**lift, x.dtype), one)
    alpha, rest = alpha * factor, rest * factor
    xnorm = jnp.sqrt(jnp.sum(rest * rest, axis=-2, keepdims=True))
    trivial = xnorm == 0
    norm = jnp.hypot(alpha, xnorm)
    beta = where(alpha >= 0, -norm, norm)
    tau = where(trivial, zero, (beta - alpha) / beta)
    v = where(tail, rest / where(trivial, one, alpha - beta), where(rows == j, one, zero))
    return v, tau, where(trivial, alpha, beta) / factor


def _reflector_range(dtype: Any) -> tuple[int, int]:
    """(low, lift) of ``reflector`` (float32 -40 and 86, float64 -459 and 563): below 2^low,
    the squares of entries eps below the largest are not all normal; times 2^lift, the
    smallest denormal's square is normal and 2^low's is 2^(4 nmant), far from overflow."""
    info = jnp.finfo(dtype)
    return info.minexp // 2 + info.nmant, info.nmant - info.minexp // 2


def geqrf(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """Householder QR of ``a`` (..., m, n) packed as ``geqrf``: R on and above the diagonal,
    the reflectors' vectors (implicit 1 on the diagonal) below it, and their ``taus``.

    Each reflector is ``dlarfg``'s: ``beta = -sign(alpha) * |x|`` (``sign(0) = +``), so R's
    diagonal has LAPACK's signs and ``qr`` matches JAX's Q and R, not just their product; a
    column already zero below the diagonal gets ``tau = 0`` (no reflection)."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else min(m, n)
    rows, cols = index_range(m)[:, None], index_range(n)[None, :]

    def step(j: Index, carry: tuple) -> tuple:
        r, taus = carry
        x = at_index(r, j, -1)  # (..., m, 1)
        below = rows > j
        v, tau, head = reflector(x, j, below)
        r = where(cols > j, r - (tau * v) * (mT(v) @ r), r)
        r = where(cols == j, where(rows == j, head, where(below, v, x)), r)
        return r, where(index_range(k)[None, :] == j, tau, taus)

    packed, taus = iterate(k, step, (a, jnp.zeros((*a.shape[:-2], 1, k), a.dtype)), unroll=unroll)
    return packed, taus[..., 0, :]


def reflector_vectors(packed: jax.Array, k: Any) -> jax.Array:
    """The vectors (..., m, k) of the k reflectors H_j = I - tau_j v_j v_j^T that ``geqrf``
    packed: column j is v_j, 1 at row j, ``packed``'s column j below it, 0 above."""
    rows, cols = index_range(packed.shape[-2])[:, None], index_range(k)[None, :]
    one, zero = jnp.ones((), packed.dtype), jnp.zeros((), packed.dtype)
    below = packed if packed.shape[-1] is k else lax.slice_in_dim(packed, 0, k, axis=-1)
    return where(rows > cols, below, where(rows == cols, one, zero))


def apply_reflectors(
    packed: jax.Array,
    taus: jax.Array,
    c: jax.Array,
    *,
    left: bool,
    transpose: bool,
    masked: bool = True,
    unroll: bool | None = None,
) -> jax.Array:
    """``ormqr``: Q c, Q^T c, c Q or c Q^T for Q = H_0 ... H_{k-1}, the k = len(taus) reflectors
    ``packed`` (..., m, n >= k) holds below its diagonal, without forming Q (``dorm2r``: one
    reflector at a time, each a rank-1 update of ``c``). Q c and c Q^T apply H_{k-1} first,
    Q^T c and c Q apply H_0 first.

    As ``dlarf``, H_j reads and writes only the rows (left; columns: right) j.. of ``c``, and
    none for ``tau_j = 0``: an inf or NaN in ``c`` spreads where LAPACK spreads it (masks,
    not products with the zeros of v_j); ``masked=False`` leaves the masks out for a finite
    ``c`` (``householder_product``'s identity). The vectors, scaled by tau on the side the
    update needs, and the masks are made once for all steps; unrolled steps take theirs from
    one Split each."""
    m, k = packed.shape[-2], taus.shape[-1]
    v = reflector_vectors(packed, k)
    # left: H c = c - (tau v) (v^T c), step j's column and row; right: c H = c - (c v) (tau v^T)
    taus = taus[..., None, :] if left else taus[..., :, None]
    per_step = [(taus * v, -1), (mT(v), -2)] if left else [(v, -1), (taus * mT(v), -2)]
    if masked:  # column (left) or row (right) j: the lines of c that H_j reaches
        if left:
            writes, axis = index_range(m)[:, None] >= index_range(k)[None, :], -1
        else:
            writes, axis = index_range(k)[:, None] <= index_range(m)[None, :], -2
        per_step += [(writes & (taus != 0), axis), (writes, axis)]
    unroll = unrolls(k, unroll)
    pieces = [
        lax.split(x, [1] * int(k), axis=axis) if unroll and int(k) > 1 else [x]
        for x, axis in per_step
    ]

    def step(j: Index, c: jax.Array) -> jax.Array:
        if isinstance(j, int):
            column, row, *masks = (p[j] for p in pieces)
        else:
            column, row, *masks = (at_index(x, j, axis) for x, axis in per_step)
        read = where(masks[0], c, jnp.zeros((), c.dtype)) if masked else c
        update = column * (row @ read) if left else (read @ column) * row
        return where(masks[1], c - update, c) if masked else c - update

    return iterate(k, step, c, reverse=left != transpose, unroll=unroll)


def householder_product(
    packed: jax.Array, taus: jax.Array, columns: Any = None, *, unroll: bool | None = None
) -> jax.Array:
    """The first ``columns`` (default n) columns of H_0 ... H_{k-1}, H_j = I - tau_j v_j v_j^T
    with v_j read below the diagonal of ``packed`` (``orgqr``'s backward accumulation: Q
    applied to the identity's columns)."""
    m, n = packed.shape[-2], packed.shape[-1]
    columns = n if columns is None else columns
    eye = (index_range(m)[:, None] == index_range(columns)[None, :]).astype(packed.dtype)
    q = jnp.broadcast_to(eye, (*packed.shape[:-2], m, columns))
    return apply_reflectors(
        packed, taus, q, left=True, transpose=False, masked=False, unroll=unroll
    )


def geqp3(a: jax.Array, *, unroll: bool | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Householder QR with column pivoting as ``geqp3`` (unblocked ``laqp2``): (packed, the
    0-based column permutation, taus). Step j swaps in the remaining column of largest
    partial norm (the first on ties); the partial norms are downdated as LAPACK does and
    recomputed when cancellation makes the downdate inaccurate (below sqrt(eps))."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else min(m, n)
    rows, cols = index_range(m)[:, None], index_range(n)[None, :]
    zero, one = jnp.zeros((), a.dtype), jnp.ones((), a.dtype)
    cutoff = float(np.sqrt(np.finfo(a.dtype).eps / 2))  # sqrt(dlamch('E'))

    def norms(x: jax.Array, live: jax.Array) -> jax.Array:
        x = where(live, x, zero)
        return jnp.sqrt(jnp.sum(x * x, axis=-2, keepdims=True))

    def step(j: Index, carry: tuple) -> tuple:
        r, perm, vn1, vn2, taus = carry  # perm, vn1, vn2: (..., 1, n)
        largest = jnp.max(where(cols >= j, vn1, -one), axis=-1, keepdims=True)
        p = jnp.min(where((cols >= j) & (vn1 == largest), cols, n), axis=-1, keepdims=True)
        is_j, is_p = cols == j, cols == p

        def swap(x: jax.Array) -> jax.Array:
            return where(is_j, pick_where(x, is_p, -1), where(is_p, at_index(x, j, -1), x))

        r, perm, vn1, vn2 = swap(r), swap(perm), swap(vn1), swap(vn2)
        x = at_index(r, j, -1)
        below = rows > j
        v, tau, head = reflector(x, j, below)
        r = where(cols > j, r - (tau * v) * (mT(v) @ r), r)
        r = where(is_j, where(rows == j, head, where(below, v, x)), r)
        live = (cols > j) & (vn1 != 0)
        safe1, safe2 = where(live, vn1, one), where(live, vn2, one)
        ratio = jnp.abs(at_index(r, j, -2)) / safe1
        temp = jnp.maximum(1 - ratio * ratio, zero)
        recompute = temp * (safe1 / safe2) ** 2 <= cutoff
        fresh = norms(r, below)
        vn1 = where(live, where(recompute, fresh, vn1 * jnp.sqrt(temp)), vn1)
        vn2 = where(live & recompute, fresh, vn2)
        return r, perm, vn1, vn2, where(index_range(k)[None, :] == j, tau, taus)

    vn = norms(a, jnp.ones((), bool))
    perm = jnp.broadcast_to(cols, (*a.shape[:-2], 1, n))
    carry = (a, perm, vn, vn, jnp.zeros((*a.shape[:-2], 1, k), a.dtype))
    if unroll is None:  # a step is ~100 nodes: unrolled only where that is faster
        unroll = not jxi.is_symbolic_dim(k) and int(k) <= PIVOTED_UNROLL_LIMIT
    packed, perm, _, _, taus = iterate(k, step, carry, unroll=unroll)
    return packed, perm[..., 0, :], taus[..., 0, :]


def qr(
    a: jax.Array, *, full_matrices: bool, pivoting: bool = False, unroll: bool | None = None
) -> tuple[jax.Array, ...]:
    """(q, r) with q (..., m, m) and r (..., m, n) when ``full_matrices``, else (m, k), (k, n);
    with ``pivoting`` also the column permutation p (a[..., p] = q r), zeros when a is empty
    (as JAX). Without pivoting, a static size up to ``UNROLL_LIMIT`` runs on shrinking
    blocks (``_qr_unrolled``), a larger static square one blocked (``_qr_blocked``);
    otherwise ``geqrf`` and ``householder_product``."""
    m, n = a.shape[-2], a.shape[-1]
    k = m if m is n else min(m, n)
    static = not any(jxi.is_symbolic_dim(d) for d in a.shape[-2:])
    if not pivoting and unroll is not False and static and 0 < k and max(m, n) <= UNROLL_LIMIT:
        return _qr_unrolled(a, full_matrices=full_matrices)
    if not pivoting and unroll is not False and static and m == n and n > UNROLL_LIMIT:
        return _qr_blocked(a)
    if pivoting:
        packed, perm, taus = geqp3(a, unroll=unroll)
        if not jxi.is_symbolic_dim(k) and k == 0:
            perm = jnp.zeros_like(perm)
    else:
        packed, taus = geqrf(a, unroll=unroll)
    r = where(index_range(m)[:, None] <= index_range(n)[None, :], packed, jnp.zeros((), a.dtype))
    columns, r = (m, r) if full_matrices else (k, r[..., :k, :])
    q = householder_product(packed, taus, columns, unroll=unroll)
    return (q, r, perm) if pivoting else (q, r)


def _reflect(block: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One Householder step on ``block`` (..., r, c), r >= 2: ``dlarfg``'s reflector of its
    first column (v = [1; w], as ``reflector``) applied to it. Returns (R's row (..., 1, c),
    w (..., r-1, 1), tau (..., 1, 1), the trailing block (..., r-1, c-1))."""
    x = block[..., :, :1]
    alpha, tail = x[..., :1, :], x[..., 1:, :]
    squares = x * x
    trivial = sum_keepdims(squares[..., 1:, :], -2) == 0
    norm = jnp.sqrt(sum_keepdims(squares, -2))
    beta = where(alpha >= 0, -norm, norm)
    tau = where(trivial, jnp.zeros((), x.dtype), (beta - alpha) / beta)
    w = tail / where(trivial, jnp.ones((), x.dtype), alpha - beta)
    head = where(trivial, alpha, beta)
    if block.shape[-1] == 1:
        return head, w, tau, block[..., 1:, 1:]
    top, bottom = block[..., :1, 1:], block[..., 1:, 1:]
    scaled = tau * (top + mT(w) @ bottom)  # tau v^T (the block's other columns)
    return jnp.concatenate([head, top - scaled], axis=-1), w, tau, bottom - w * scaled


def _qr_blocked(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``qr`` of a square ``a`` of static size n > BLOCK: a Loop over blocks of b columns, each
    trip b unrolled ``_reflect`` steps on the trailing block (padded back with zero rows and
    columns, which reflect to nothing) and the same reflectors applied to Q from the right
    (Q <- Q H_j, forward), Q's columns rotated so the trip's first column comes first (the
    columns done sit where the reflectors are 0). ``a`` is padded with zeros to a multiple of
    b: its factors are [[Q, 0], [0, I]] and [[R, 0], [0, 0]]. A NaN input makes all of Q NaN
    (LAPACK's Q keeps some entries; so did none of the per-column Loop's), R as LAPACK's."""
    n = int(a.shape[-1])
    blocks = -(-n // BLOCK)
    b = -(-n // blocks)
    size = blocks * b
    batch = [(0, 0, 0)] * (a.ndim - 2)
    zero = jnp.zeros((), a.dtype)
    a = lax.pad(a, zero, [*batch, (0, size - n, 0), (0, size - n, 0)])

    def trip(carry: tuple, _: Any) -> tuple:
        block, q = carry
        rows = []
        for i in range(b):
            row, w, tau, block = _reflect(block)
            rows.append(lax.pad(row, zero, [*batch, (0, 0, 0), (0, i, 0)]))
            first, rest = q[..., :, i : i + 1], q[..., :, i + 1 :]
            t = tau * (first + rest @ w)  # tau Q[:, i:] v
            q = jnp.concatenate(
                [*([q[..., :, :i]] if i else []), first - t, rest - t * mT(w)], axis=-1
            )
        block = lax.pad(block, zero, [*batch, (0, b, 0), (0, b, 0)])
        return (block, jnp.concatenate([q[..., :, b:], q[..., :, :b]], axis=-1)), jnp.concatenate(
            rows, axis=-2
        )

    eye = jnp.broadcast_to(jnp.eye(size, dtype=a.dtype), a.shape)
    (_, q), rows = lax.scan(trip, (a, eye), length=blocks)  # rows (blocks, ..., b, size)
    rows = jnp.moveaxis(rows, 0, -3).reshape((*a.shape[:-2], size, size, 1))
    # row j holds R[j, j:]: shift it right by j (one Gather), zero left of the diagonal
    ids = np.arange(size)
    r = _rows_of_blocks(rows, (ids[None, :] - ids[:, None]) % size).reshape(a.shape)
    r = where(index_range(size)[:, None] <= index_range(size)[None, :], r, zero)
    return q[..., :n, :n], r[..., :n, :n]


def _qr_unrolled(a: jax.Array, *, full_matrices: bool) -> tuple[jax.Array, jax.Array]:
    """``qr`` of a small static ``a`` (..., m, n) on shrinking blocks, no masks: step j
    reflects the trailing block a[j:, j:] (``dlarfg``'s reflector, as ``reflector``) and
    leaves R's row j; Q is accumulated backward on the growing block Q[j:, j:] (``orgqr``).
    The reflector v = [1; w] is never formed: v^T X = X's first row + w^T X's other rows."""
    m, n = int(a.shape[-2]), int(a.shape[-1])
    k = min(m, n)
    batch = [(0, 0, 0)] * (a.ndim - 2)
    zero = jnp.zeros((), a.dtype)
    block, rows, reflectors = a, [], []
    for _ in range(k):
        if block.shape[-2] == 1:  # no tail: no reflection (tau = 0), as dlarfg on one entry
            rows.append(block)
            break
        row, w, tau, block = _reflect(block)
        rows.append(row)
        reflectors.append((w, tau))
    # R: row j starts at column j
    r = jnp.concatenate(
        [lax.pad(row, zero, [*batch, (0, 0, 0), (j, 0, 0)]) for j, row in enumerate(rows)], axis=-2
    )
    if full_matrices and m > k:
        r = lax.pad(r, zero, [*batch, (0, m - k, 0), (0, 0, 0)])
    columns = m if full_matrices else k
    # Q[j:, j:] = H_j diag(1, Q[j+1:, j+1:]), from the identity below the last reflector
    q = None
    if columns > len(reflectors):
        size = m - len(reflectors)
        eye = np.eye(size, columns - len(reflectors))
        q = jnp.broadcast_to(jnp.asarray(eye, a.dtype), (*a.shape[:-2], *eye.shape))
    for w, tau in reversed(reflectors):
        if q is None:
            top, bottom = 1 - tau, -tau * w
        else:
            scaled = tau * (mT(w) @ q)  # tau v^T diag(1, q), its columns past the first
            top = jnp.concatenate([1 - tau, -scaled], axis=-1)
            bottom = jnp.concatenate([-tau * w, q - w * scaled], axis=-1)
        q = jnp.concatenate([top, bottom], axis=-2)
    return q, r


@lowering(
    "geqrf",
    onnx_ops=(
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Div",
        "Sqrt",
        "Where",
        "Loop",
        "Abs",
        "Add",
        "Cast",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Or",
        "Range",
        "ReduceMax",
        "ReduceSum",
        "Scan",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _geqrf(ctx: LoweringContext, a: ir.Value, **params: Any) -> list[ir.Value]:
    del params
    refuse_half_precision(ctx, "geqrf", "jnp.linalg.qr(a.astype(jnp.float32))")
    return lower_as_jax(ctx, scaled(geqrf, upper), [a])


@lowering(
    "householder_product",
    onnx_ops=(
        "Split",
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Where",
        "Loop",
        "Cast",
        "Equal",
        "Expand",
        "Greater",
        "Transpose",
        "Unsqueeze",
        "Add",
        "Less",
        "Max",
        "Min",
        "Range",
        "Reshape",
        "Scan",
        "Squeeze",
    ),
)
def _householder_product(
    ctx: LoweringContext, a: ir.Value, taus: ir.Value, **params: Any
) -> list[ir.Value]:
    del params
    refuse_half_precision(ctx, "householder_product", "jnp.linalg.qr(a.astype(jnp.float32))")
    return lower_as_jax(ctx, householder_product, [a, taus])


@lowering(
    "ormqr",
    onnx_ops=(
        "Split",
        "MatMul",
        "Mul",
        "Sub",
        "Where",
        "Transpose",
        "Loop",
        "Slice",
        "Add",
        "And",
        "Cast",
        "Equal",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Not",
        "Range",
        "Scan",
        "Squeeze",
        "Unsqueeze",
    ),
)
def _ormqr(
    ctx: LoweringContext, a: ir.Value, taus: ir.Value, c: ir.Value, *, left: bool, transpose: bool
) -> list[ir.Value]:
    refuse_half_precision(
        ctx,
        "ormqr",
        "lax.linalg.ormqr(a.astype(jnp.float32), taus.astype(jnp.float32), c.astype(jnp.float32))",
    )
    m, n = ctx.avals_in[0].shape[-2:]
    k = ctx.avals_in[1].shape[-1]
    static = not any(jxi.is_symbolic_dim(d) for d in (m, n, k))
    if static and k > min(m, n):  # LAPACK refuses k > m; JAX's CPU ormqr reads past a for k > n
        raise ConversionError(
            f"ormqr at {ctx.source_line or '<unknown location>'} got {k} taus for a {m}x{n} matrix of reflectors: "
            f"there are at most min(m, n) = {min(m, n)} (JAX's CPU ormqr fails or reads past a). "
            f"Pass taus[..., :{min(m, n)}], as geqrf returns them"
        )
    fn = functools.partial(apply_reflectors, left=left, transpose=transpose)
    return lower_as_jax(ctx, fn, [a, taus, c], cache_key=("ormqr", left, transpose, UNROLL_LIMIT))


@lowering(
    "geqp3",
    onnx_ops=(
        "Slice",
        "MatMul",
        "Mul",
        "Sub",
        "Div",
        "Sqrt",
        "Abs",
        "Where",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "Loop",
        "Scan",
        "Add",
        "And",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "Equal",
        "Expand",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Neg",
        "Not",
        "Or",
        "Range",
        "Reshape",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
        "Xor",
    ),
)
def _geqp3(ctx: LoweringContext, a: ir.Value, jpvt: ir.Value, *, use_magma: Any) -> list[ir.Value]:
    del use_magma  # a GPU choice
    refuse_half_precision(ctx, "geqp3", "jax.scipy.linalg.qr(a.astype(jnp.float32), pivoting=True)")
    n = ctx.avals_in[0].shape[-1]
    empty = not jxi.is_symbolic_dim(n) and n == 0
    if not empty and value_range(jpvt) != (0, 0):
        raise ConversionError(
            f"geqp3 at {ctx.source_line or '<unknown location>'} got a jpvt not known to be all zero: LAPACK's "
            "leading columns (jpvt[j] != 0: column j moved to the front, not pivoted) are not supported. "
            "Pass zeros (every column free), as jax.scipy.linalg.qr(pivoting=True) and qr_multiply do"
        )

    def fn(a: jax.Array, jpvt: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        packed, perm, taus = scaled(geqp3, upper)(a)  # entries of 1e20 as qr's
        # 1-based as LAPACK's; no step (min(m, n) = 0) leaves jpvt as it came
        k = taus.shape[-1]
        stepped = jxi.is_symbolic_dim(k) or k > 0
        return packed, (perm + 1).astype(jpvt.dtype) if stepped else jpvt, taus

    return lower_as_jax(ctx, fn, [a, jpvt])


@lowering(
    "qr",
    onnx_ops=(
        "Split",
        "Slice",
        "MatMul",
        "Transpose",
        "Mul",
        "Add",
        "Sub",
        "Neg",
        "Div",
        "Sqrt",
        "Abs",
        "Max",
        "GreaterOrEqual",
        "Equal",
        "Where",
        "ReduceSum",
        "Concat",
        "Pad",
        "Expand",
        "Reshape",
        "Gather",
        "Scan",
        "Loop",
        "And",
        "Cast",
        "ConstantOfShape",
        "CumSum",
        "Greater",
        "IsNaN",
        "Less",
        "LessOrEqual",
        "Min",
        "Not",
        "Or",
        "Range",
        "ReduceMax",
        "ReduceMin",
        "Squeeze",
        "Unsqueeze",
        "Xor",
        "Identity",
    ),
)
def _qr(
    ctx: LoweringContext, a: ir.Value, *, full_matrices: bool, pivoting: bool = False, **params: Any
) -> list[ir.Value]:
    del params  # use_magma: a GPU choice
    refuse_half_precision(ctx, "qr", "jnp.linalg.qr(a.astype(jnp.float32))")

    def scaled_qr(a: jax.Array) -> tuple[jax.Array, ...]:
        scale = power_of_two_scale(a)
        q, r, *perm = qr(a / scale, full_matrices=full_matrices, pivoting=pivoting)
        return (q, r * scale, *perm)

    return lower_as_jax(ctx, scaled_qr, [a])
