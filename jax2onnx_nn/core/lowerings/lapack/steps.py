"""The step machinery of the LAPACK routines: ``lower_as_jax`` (an equation lowered as JAX
code traced on its avals), ``iterate`` (steps unrolled for a small static size, else one ONNX
``Loop``) and the plain-ONNX step helpers (``where``, ``pick_where``, ``take_rows``, ...), each a
private primitive whose rule writes the bare op(s).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError, VectorSignWarning, user_stacklevel
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.registry import lowering

# Largest static matrix size whose steps are unrolled; above it (or for a symbolic size) the
# steps run in one ONNX Loop. Chosen by benchmarks/linalg_bench.py (graph size and latency).
UNROLL_LIMIT = 16

# Largest static step count of a pivoted QR (geqp3) that is unrolled: its steps are ~100 nodes
# each (a 16x16 was 1772 nodes); as a Loop onnxruntime ran 3x3 ~20% slower, 8x8 to 16x16 as
# fast or faster (benchmarks/linalg_bench.py --cases qr_pivoting).
PIVOTED_UNROLL_LIMIT = 4

# Column block of the blocked Cholesky (above UNROLL_LIMIT): a Loop trip factors one block of
# columns unrolled and updates the trailing matrix with one MatMul, so 64x64 takes 4 trips.
BLOCK = 16

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
        bool(jax.config.jax_enable_x64),  # type: ignore[attr-defined]  # set at run time
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
def _bare(
    name: str,
    reference: Callable[..., Any],
    *args: Any,
    closure: Hashable = (),
    **params: Any,
) -> jax.Array:
    """``reference`` bound as the primitive ``name``; ``closure``: what ``reference`` reads
    besides its arguments and params (its jaxpr is memoized on them)."""
    specs = [jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)) for v in args]
    body = _BARE_BODIES.get_or_make(
        _bare_key(name, specs, params, closure),
        lambda: jax.make_jaxpr(lambda *a: reference(*a, **params))(*specs),
    )
    return jxi.body_primitive(name).bind(*args, body=body, **params)[0]


def _bare_key(
    name: str, specs: list[jax.ShapeDtypeStruct], params: dict[str, Any], closure: Hashable
) -> Any:
    """The key of a helper's reference jaxpr (``make_jaxpr`` per call was most of an unrolled
    sweep's export time: gesdd 16x16 made 1300), or None (symbolic sizes, unhashable params)."""
    if any(jxi.is_symbolic_dim(d) for s in specs for d in s.shape):
        return None
    key = (
        name,
        tuple((s.shape, str(s.dtype)) for s in specs),
        tuple(sorted(params.items())),
        closure,
        bool(jax.config.jax_enable_x64),  # type: ignore[attr-defined]  # set at run time
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


_BARE_BODIES: BoundedMemo[Any] = BoundedMemo(1024)


def where(which: jax.Array | np.ndarray, x: Any, y: Any) -> jax.Array:
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
    return _bare(_CAST, lambda x: x.astype(dtype), x, closure=np.dtype(dtype).str)


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
    wide = [_int64_index(ctx, row) for row in rows]
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
    if producer is not None and producer.op_type == "Cast":
        source = producer.inputs[0]
        if source is not None and source.dtype == ir.DataType.INT64:
            return source
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


def refuse_half_precision(ctx: LoweringContext, name: str, call: str) -> None:
    """Refuse a float16 / bfloat16 matrix for ``name``, as JAX does: its CPU lowering of the
    LAPACK primitives (getrf, potrf, geqrf, orgqr, syevd, gesdd) has no half-precision kernel
    ("Unsupported dtype float16"; JAX 0.12 refuses the dtype while tracing already), so there
    is no JAX result to match. ``call``: the user-level function on ``a`` in float32 that the
    message suggests (``jnp.linalg.inv(a.astype(jnp.float32))``)."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype.itemsize == 2:
        raise ConversionError(
            f"{name} of a {dtype.name} matrix at {ctx.source_line or '<unknown location>'} is not "
            "supported: "
            f"JAX's CPU {name} has no {dtype.name} kernel either (LAPACK works in float32 and "
            "float64). "
            f"Cast the matrix to float32 first and the results back, e.g. {call} and "
            f".astype(jnp.{dtype.name}) on its results"
        )


def warn_free_signs(
    ctx: LoweringContext, function: str, why: str, values: str = "the values are JAX's"
) -> None:
    """A ``VectorSignWarning`` at the user's line: ``function``'s vectors come from a path that
    is not LAPACK's (``why``), so their signs (phases) need not be JAX's; ``values``: what
    holds of the values."""
    aval = ctx.avals_in[0]
    dims = ",".join(str(d) for d in aval.shape)
    sign = "phase" if jxi.is_complex_dtype(aval.dtype) else "sign"
    warnings.warn(
        f"{ctx.source_line + ': ' if ctx.source_line else ''}{function} of "
        f"{np.dtype(aval.dtype).name}[{dims}]: {why}, so a vector may come out with another "
        f"{sign} than JAX's ({values}). If the program depends on the {sign}s, fix them in it "
        "(for instance make each vector's largest-magnitude entry real and positive) so that "
        "JAX and the export agree.",
        VectorSignWarning,
        stacklevel=user_stacklevel(),
    )


def mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def index_range(n: Any) -> jax.Array:
    return lax.iota(jnp.int32, n)


def rows_of_blocks(x: jax.Array, rows: np.ndarray) -> jax.Array:
    """``x`` (..., blocks, r, c) with block k's rows ``rows[k]`` (a static (blocks, r') index
    table), in one Gather: (..., blocks, r', c)."""
    blocks, r, c = x.shape[-3:]
    flat = x.reshape((*x.shape[:-3], blocks * r, c))
    index = (rows + r * np.arange(blocks)[:, None]).reshape(-1)
    return jnp.take(flat, index, axis=-2, mode="clip").reshape(
        (*x.shape[:-3], blocks, rows.shape[1], c)
    )


def lapack_eps(dtype: Any) -> tuple[float, float]:
    """(eps, safmin) of LAPACK's dlamch: half the spacing at 1 (rounding), the smallest normal."""
    info = jnp.finfo(dtype)
    return float(info.eps) / 2, float(info.tiny)
