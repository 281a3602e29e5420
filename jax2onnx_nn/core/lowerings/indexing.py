"""Gather and scatter (set/add/sub/mul/min/max): every indexing pattern NumPy-style code makes.

One plan serves both primitives. Each operand dim is one of

- *batch*: an ``operand_batching_dims`` dim (from vmap), addressed by the position along its
  paired indices dim;
- *point*: indexed, with a window of 1;
- *window*: a window of another size, starting at an index or at 0;
- *whole*: the window is the full dim, so JAX's clamping pins its start to 0.

Batch, point and window dims become the coordinate columns of a GatherND/ScatterND index
(a window adds an axis of offsets); whole dims stay slices. Common gathers take simpler ops:
one point index is ``Gather``, ``take_along_axis`` is ``GatherElements``, a single start
vector (dynamic_slice-like) is ``Slice``.

JAX clamps starts so that the whole window is in bounds (CLIP, and PROMISE_IN_BOUNDS gathers,
as XLA does). ONNX wraps negative indices and rejects large ones, so starts are always clamped.
FILL_OR_DROP gathers replace windows that are not fully in bounds by ``fill_value``; FILL_OR_DROP
and PROMISE_IN_BOUNDS scatters drop such windows (XLA's behaviour), here by compressing them out
of the index. For ``scatter`` (set) with duplicate indices JAX leaves the winner unspecified;
XLA on CPU and onnxruntime both apply updates in order, so the last one wins in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial, reduce
from operator import mul
from typing import Any

import jax
import numpy as np
import onnx_ir as ir
from jax import lax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext, is_float, onnx_aval
from jax2onnx_nn.core.registry import lowering, register
from jax2onnx_nn.core.symbolic import has_zero, same_dim
from jax2onnx_nn.core.value_range import within

Dim = Any  # an int or a symbolic dim
BATCH, POINT, WINDOW, WHOLE = "batch", "point", "window", "whole"


def _prod(dims: Sequence[Dim]) -> Dim:
    return reduce(mul, dims, 1)


@dataclass(frozen=True)
class _Plan:
    """How a gather/scatter addresses its operand (dims as ONNX sees them: key data dims last)."""

    shape: tuple[Dim, ...]
    window: tuple[Dim, ...]  # window size per operand dim
    index_map: tuple[int, ...]  # operand dim of each index column
    batching: dict[int, int]  # operand batching dim -> indices batch axis
    batch_shape: tuple[Dim, ...]  # indices shape without the index vector dim
    kinds: tuple[str, ...]

    @property
    def coords(self) -> list[int]:
        return [d for d, k in enumerate(self.kinds) if k != WHOLE]

    @property
    def windows(self) -> list[int]:
        return [d for d, k in enumerate(self.kinds) if k == WINDOW]

    @property
    def whole(self) -> list[int]:
        return [d for d, k in enumerate(self.kinds) if k == WHOLE]

    @property
    def batch_rank(self) -> int:
        return len(self.batch_shape)

    @property
    def index_shape(self) -> list[Dim]:
        """Shape of the coordinate index without its last axis: batch axes, then window axes."""
        return [*self.batch_shape, *(self.window[d] for d in self.windows)]


def _plan(
    shape: Sequence[Dim],
    window: Sequence[Dim],
    index_map: Sequence[int],
    batching: dict[int, int],
    batch_shape: Sequence[Dim],
) -> _Plan:
    kinds = []
    for d, (size, w) in enumerate(zip(shape, window, strict=True)):
        if d in batching:
            kinds.append(BATCH)
        elif same_dim(w, size):
            kinds.append(WHOLE)
        elif d in index_map and same_dim(w, 1):
            kinds.append(POINT)
        else:
            kinds.append(WINDOW)
    return _Plan(
        tuple(shape), tuple(window), tuple(index_map), batching, tuple(batch_shape), tuple(kinds)
    )


def _batching(operand_dims: Sequence[int], indices_dims: Sequence[int]) -> dict[int, int]:
    return dict(zip(operand_dims, indices_dims, strict=True))


# -- building blocks --------------------------------------------------------------------------
def _arrange(
    ctx: LoweringContext, x: ir.Value, labels: Sequence[int | None], shape: Sequence[Dim]
) -> ir.Value:
    """Move axis ``a`` of ``x`` to position ``labels[a]`` of ``shape``; None marks a size-1 axis
    to drop, and size-1 positions of ``shape`` no axis is labelled with are inserted."""
    kept = sorted((label, a) for a, label in enumerate(labels) if label is not None)
    dropped = [a for a, label in enumerate(labels) if label is None]
    perm = [a for _, a in kept] + dropped
    if perm != list(range(len(perm))):
        x = ctx.op.Transpose(x, perm=perm)
    if dropped or len(kept) != len(shape):
        x = ctx.reshape(x, shape)
    return x


def _starts(
    ctx: LoweringContext,
    indices: ir.Value,
    plan: _Plan,
    *,
    masked: bool,
    wrap_to: np.dtype | None = None,
) -> tuple[ir.Value, ir.Value | None]:
    """Clamped int64 start indices, and (when ``masked``) whether each window is in bounds.
    ``wrap_to``: an integer type the indices are first converted to, wrapping as in JAX."""
    limits = [plan.shape[d] - plan.window[d] for d in plan.index_map]
    # what the indices' value range (an iota's, lu's permutation: core/value_range.py) proves
    static = not any(jxi.is_symbolic_dim(v) for v in limits)
    above, below = within(
        indices, 0, min(int(v) for v in limits) if limits and static else np.iinfo(np.int64).min
    )
    if above and below:
        return ctx.cast(indices, np.int64), None
    bounds = ctx.shape_tensor(limits)
    dtype = onnx_aval(ctx.avals_in[1])[0]
    if wrap_to is not None and not np.can_cast(dtype, wrap_to, "safe"):
        indices, dtype, above = ctx.cast(indices, wrap_to), wrap_to, False  # may wrap below 0
    as_i64 = ctx.cast(indices, np.int64)
    keep = None
    if masked and plan.index_map:
        inside = ctx.op.And(
            ctx.op.GreaterOrEqual(as_i64, ctx.ints(0)), ctx.op.LessOrEqual(as_i64, bounds)
        )
        keep = ctx.all(inside, [-1])
    if dtype == np.uint64:  # values above 2**63 turn negative as int64: clamp them first
        as_i64 = ctx.cast(ctx.op.Min(indices, ctx.cast(bounds, np.uint64)), np.int64)
    clamped = ctx.op.Min(as_i64, bounds)
    return clamped if above else ctx.op.Max(clamped, ctx.ints(0)), keep


def _column(ctx: LoweringContext, start: ir.Value, plan: _Plan, d: int) -> ir.Value:
    if len(plan.index_map) == 1:
        return ctx.op.Squeeze(start, ctx.ints([-1]))
    return ctx.op.Gather(start, ctx.ints(plan.index_map.index(d)), axis=-1)


def _coordinates(
    ctx: LoweringContext, plan: _Plan, start: ir.Value, leading: Sequence[int] = ()
) -> ir.Value:
    """The GatherND/ScatterND index: shape (*batch, *windows, columns), int64, one column per
    coordinate dim (``leading`` batch dims excepted: GatherND's ``batch_dims`` covers them)."""
    coords = [d for d in plan.coords if d not in leading]
    if not coords:  # the caller adds a leading size-1 dim to the operand for this zero
        shape = ctx.shape_tensor([*plan.batch_shape, 1])
        return ctx.op.ConstantOfShape(shape, value=ir.tensor(np.zeros(1, np.int64)))
    if all(plan.kinds[d] == POINT for d in coords):
        columns = [plan.index_map.index(d) for d in coords]
        if columns == list(range(len(plan.index_map))):
            return start
        return ctx.op.Gather(start, ctx.ints(columns), axis=-1)
    nb, windows = plan.batch_rank, plan.windows
    rank = nb + len(windows)
    full = ctx.shape_tensor(plan.index_shape)
    pieces = []
    for d in coords:
        if plan.kinds[d] == BATCH:
            axis = plan.batching[d]
            piece = ctx.iota(plan.batch_shape[axis], axis, rank)
        else:
            piece = None
            if d in plan.index_map:
                piece = _column(ctx, start, plan, d)
                if windows:
                    piece = ctx.op.Unsqueeze(piece, ctx.ints(list(range(nb, rank))))
            if plan.kinds[d] == WINDOW:
                offsets = ctx.iota(plan.window[d], nb + windows.index(d), rank)
                piece = offsets if piece is None else ctx.op.Add(piece, offsets)
        pieces.append(ctx.op.Unsqueeze(ctx.op.Expand(piece, full), ctx.ints([-1])))
    return pieces[0] if len(pieces) == 1 else ctx.op.Concat(*pieces, axis=-1)


def _coordinate_layout(
    ctx: LoweringContext, x: ir.Value, plan: _Plan, leading: Sequence[int] = ()
) -> ir.Value:
    """The operand with ``leading`` dims, then coordinate dims, then whole dims (a leading
    size-1 dim stands in for the coordinate when there is none)."""
    coords = [d for d in plan.coords if d not in leading]
    if not coords:
        return ctx.op.Unsqueeze(x, ctx.ints([0]))
    perm = [*leading, *coords, *plan.whole]
    return x if perm == sorted(perm) else ctx.op.Transpose(x, perm=perm)


def _leading_batch(plan: _Plan) -> list[int]:
    """Operand batching dims that GatherND's ``batch_dims`` can take: paired with the leading
    indices axes, with some other coordinate left to index."""
    pairs = sorted(plan.batching.items(), key=lambda pair: pair[1])
    if [axis for _, axis in pairs] != list(range(len(pairs))) or len(pairs) == len(plan.coords):
        return []
    return [d for d, _ in pairs]


def _mode(mode: Any) -> lax.GatherScatterMode:
    return mode if isinstance(mode, lax.GatherScatterMode) else lax.GatherScatterMode.from_any(mode)


# -- gather -----------------------------------------------------------------------------------
@lowering(
    "gather",
    onnx_ops=(
        "Gather",
        "GatherElements",
        "GatherND",
        "Slice",
        "Where",
        "Add",
        "And",
        "Cast",
        "Concat",
        "ConstantOfShape",
        "Expand",
        "GreaterOrEqual",
        "LessOrEqual",
        "Max",
        "Min",
        "Range",
        "ReduceMin",
        "Reshape",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    ),
)
def _gather(
    ctx: LoweringContext,
    operand: ir.Value,
    indices: ir.Value,
    *,
    dimension_numbers: Any,
    slice_sizes: Sequence[Dim],
    mode: Any,
    fill_value: Any = None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    out_sharding: object = None,
) -> ir.Value:
    # hints for XLA and (JAX 0.12's out_sharding) device placement: the result is the same
    del indices_are_sorted, unique_indices, out_sharding
    dn = dimension_numbers
    shape = onnx_aval(ctx.avals_in[0])[1]
    out_dtype, out_shape = onnx_aval(ctx.aval_out)
    rank, out_rank = len(slice_sizes), len(ctx.aval_out.shape)
    batching = _batching(
        getattr(dn, "operand_batching_dims", ()), getattr(dn, "start_indices_batching_dims", ())
    )
    window = (*slice_sizes, *shape[rank:])  # key data dims are taken whole
    plan = _plan(shape, window, dn.start_index_map, batching, ctx.avals_in[1].shape[:-1])

    removed = set(dn.collapsed_slice_dims) | set(batching)
    offsets = [d for d in range(rank) if d not in removed]
    offset_pos = dict(zip(offsets, dn.offset_dims, strict=True))
    offset_pos.update({rank + i: out_rank + i for i in range(len(shape) - rank)})
    batch_pos = [p for p in range(out_rank) if p not in dn.offset_dims]

    if has_zero(out_shape):
        return ctx.op.ConstantOfShape(
            ctx.shape_tensor(out_shape), value=ir.tensor(np.zeros(1, out_dtype))
        )
    masked = _mode(mode) == lax.GatherScatterMode.FILL_OR_DROP
    wrap_to = _fill_index_dtype(ctx.avals_in[0].shape) if masked else None
    start, keep = _starts(ctx, indices, plan, masked=masked, wrap_to=wrap_to)
    out = _gather_windows(ctx, operand, start, plan, batch_pos, offset_pos, out_shape)
    if keep is not None:
        mask = ctx.op.Unsqueeze(keep, ctx.ints(sorted(offset_pos.values()))) if offset_pos else keep
        out = ctx.op.Where(mask, out, ctx.const(fill_value, dtype=out_dtype))
    return out


def _fill_index_dtype(shape: Sequence[Dim]) -> np.dtype:
    """The type JAX's FILL_OR_DROP gather converts indices to before checking them: int32 unless
    a dim needs more, so wider index values wrap (e.g. int64 -2**62 becomes 0, in bounds)."""
    if any(jxi.is_symbolic_dim(d) for d in shape):
        return np.dtype(jax.dtypes.canonicalize_dtype(np.int64))
    return np.dtype(np.int64 if any(d > np.iinfo(np.int32).max for d in shape) else np.int32)


def _gather_windows(
    ctx: LoweringContext,
    x: ir.Value,
    start: ir.Value,
    plan: _Plan,
    batch_pos: list[int],
    offset_pos: dict[int, int],
    out_shape: Sequence[Dim],
) -> ir.Value:
    coords, nb = plan.coords, plan.batch_rank
    if len(coords) == 1 and plan.kinds[coords[0]] == POINT:
        (d,) = coords
        out = ctx.op.Gather(x, _column(ctx, start, plan, d), axis=d)
        labels = [offset_pos.get(a) for a in range(d)] + batch_pos
        labels += [offset_pos.get(a) for a in range(d + 1, len(plan.shape))]
        return _arrange(ctx, out, labels, out_shape)
    if nb == 0:  # one window at one start vector: dynamic_slice
        if coords:
            starts = ctx.op.Concat(*[_slice_start(ctx, start, plan, d) for d in coords], axis=0)
            sizes = ctx.shape_tensor([plan.window[d] for d in coords])
            x = ctx.op.Slice(x, starts, ctx.op.Add(starts, sizes), ctx.ints(coords))
        return _arrange(ctx, x, [offset_pos.get(a) for a in range(len(plan.shape))], out_shape)
    if _is_take_along_axis(plan):
        (d,) = [c for c in coords if plan.kinds[c] == POINT]
        out = ctx.op.GatherElements(x, _column(ctx, start, plan, d), axis=d)
        return _arrange(ctx, out, batch_pos, out_shape)
    leading = _leading_batch(plan)
    data = _coordinate_layout(ctx, x, plan, leading)
    out = ctx.op.GatherND(data, _coordinates(ctx, plan, start, leading), batch_dims=len(leading))
    labels = (
        batch_pos
        + [offset_pos.get(d) for d in plan.windows]
        + [offset_pos.get(d) for d in plan.whole]
    )
    return _arrange(ctx, out, labels, out_shape)


def _slice_start(ctx: LoweringContext, start: ir.Value, plan: _Plan, d: int) -> ir.Value:
    if d not in plan.index_map:
        return ctx.ints([0])
    k = plan.index_map.index(d)
    return ctx.op.Slice(start, ctx.ints([k]), ctx.ints([k + 1]))


def _is_take_along_axis(plan: _Plan) -> bool:
    """Indices as big as the operand, one point dim, every other dim batched with its own axis."""
    points = [d for d, k in enumerate(plan.kinds) if k == POINT]
    return (
        len(points) == 1
        and plan.batch_rank == len(plan.shape)
        and all(k in (BATCH, POINT) for k in plan.kinds)
        and all(d == axis for d, axis in plan.batching.items())
    )


# -- scatter ----------------------------------------------------------------------------------
SCATTER = {
    "scatter": "none",
    "scatter-add": "add",
    "scatter-sub": "add",
    "scatter-mul": "mul",
    "scatter-min": "min",
    "scatter-max": "max",
}


def _scatter(
    reduction: str,
    ctx: LoweringContext,
    operand: ir.Value,
    indices: ir.Value,
    updates: ir.Value,
    *,
    dimension_numbers: Any,
    mode: Any,
    update_jaxpr: Any = None,
    update_consts: Any = (),
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    out_sharding: object = None,
) -> ir.Value:
    # the update function is an overwrite or the primitive's own reduction (anything else is
    # refused below), which read no constants; the rest are hints for XLA (and JAX 0.12's
    # out_sharding: device placement), not semantics
    del update_consts, indices_are_sorted, unique_indices, out_sharding
    prim = ctx.eqn.primitive.name
    if prim == "scatter" and update_jaxpr is not None and not _is_overwrite(update_jaxpr):
        raise NotImplementedError("scatter with a custom update function (lax.scatter_apply)")
    dn = dimension_numbers
    shape = onnx_aval(ctx.avals_in[0])[1]
    update_shape = onnx_aval(ctx.avals_in[2])[1]
    rank = len(ctx.avals_in[0].shape)
    batching = _batching(
        getattr(dn, "operand_batching_dims", ()), getattr(dn, "scatter_indices_batching_dims", ())
    )
    inserted = set(dn.inserted_window_dims) | set(batching)
    window_dims = [d for d in range(rank) if d not in inserted] + list(range(rank, len(shape)))
    update_window_axes = [
        *dn.update_window_dims,
        *range(len(ctx.avals_in[2].shape), len(update_shape)),
    ]
    window_of = dict(zip(window_dims, update_window_axes, strict=True))
    window = [update_shape[window_of[d]] if d in window_of else 1 for d in range(len(shape))]
    plan = _plan(
        shape, window, dn.scatter_dims_to_operand_dims, batching, ctx.avals_in[1].shape[:-1]
    )
    if has_zero(update_shape):
        return operand

    start, keep = _starts(ctx, indices, plan, masked=_mode(mode) != lax.GatherScatterMode.CLIP)
    index = _coordinates(ctx, plan, start)
    rows = _update_rows(ctx, updates, plan, window_of)
    if prim == "scatter-sub":
        rows = _negate(ctx, rows, onnx_aval(ctx.avals_in[2])[0])
    whole_shape = [shape[d] for d in plan.whole]
    if keep is not None and (plan.batch_rank != 1 or plan.windows):  # flatten to rows for Compress
        count = _prod(plan.index_shape)
        if plan.windows:  # a window is kept or dropped as a whole
            window_axes = list(range(plan.batch_rank, len(plan.index_shape)))
            keep = ctx.op.Expand(
                ctx.op.Unsqueeze(keep, ctx.ints(window_axes)), ctx.shape_tensor(plan.index_shape)
            )
        keep = ctx.reshape(keep, [count])
        index = ctx.reshape(index, [count, max(len(plan.coords), 1)])
        rows = ctx.reshape(rows, [count, *whole_shape])
    if keep is not None:  # drop every window that is not fully in bounds
        index = ctx.op.Compress(index, keep, axis=0)
        rows = ctx.op.Compress(rows, keep, axis=0)
    data = _coordinate_layout(ctx, operand, plan)
    out = ctx.op.ScatterND(data, index, rows, reduction=reduction)
    if reduction in ("min", "max") and is_float(onnx_aval(ctx.aval_out)[0]):
        out = _ieee_extremum(ctx, reduction, data, index, rows, out)
    if not plan.coords:
        return ctx.op.Squeeze(out, ctx.ints([0]))
    perm = plan.coords + plan.whole
    return out if perm == sorted(perm) else ctx.op.Transpose(out, perm=list(np.argsort(perm)))


def _update_rows(
    ctx: LoweringContext, updates: ir.Value, plan: _Plan, window_of: dict[int, int]
) -> ir.Value:
    """Updates laid out as ScatterND wants them: (*batch, *windows, *whole dims)."""
    windows, whole = plan.windows, plan.whole
    labels: list[int | None] = []
    axis_dim = {axis: d for d, axis in window_of.items()}
    scatter_axis = 0
    for axis in range(len(onnx_aval(ctx.avals_in[2])[1])):
        d = axis_dim.get(axis)
        if d is None:
            labels.append(scatter_axis)
            scatter_axis += 1
        elif plan.kinds[d] == WINDOW:
            labels.append(plan.batch_rank + windows.index(d))
        elif plan.kinds[d] == WHOLE:
            labels.append(plan.batch_rank + len(windows) + whole.index(d))
        else:
            labels.append(None)
    return _arrange(ctx, updates, labels, [*plan.index_shape, *(plan.shape[d] for d in whole)])


def _negate(ctx: LoweringContext, x: ir.Value, dtype: np.dtype) -> ir.Value:
    # Neg keeps x - u == x + (-u) for floats (signed zeros too); unsigned ints wrap with 0 - u
    if dtype.kind == "u":
        return ctx.op.Sub(ctx.const(0, dtype=dtype), x)
    return ctx.op.Neg(x)


_PREFERRED_ZERO = {"min": -0.0, "max": 0.0}


def _ieee_extremum(
    ctx: LoweringContext,
    reduction: str,
    data: ir.Value,
    index: ir.Value,
    rows: ir.Value,
    out: ir.Value,
) -> ir.Value:
    """JAX's min/max propagate NaN and order -0 below +0; ScatterND's do neither. A second
    ScatterND takes the max of per-value flags (2: NaN, 1: the preferred zero) and fixes both."""
    flags = ctx.op.ScatterND(
        _flags(ctx, reduction, data), index, _flags(ctx, reduction, rows), reduction="max"
    )
    zero = ctx.const(_PREFERRED_ZERO[reduction], like=out)
    fixed = ctx.op.Where(
        ctx.op.And(ctx.op.Equal(flags, _u8(ctx, 1)), ctx.op.Equal(out, ctx.const(0, like=out))),
        zero,
        out,
    )
    return ctx.op.Where(ctx.op.Equal(flags, _u8(ctx, 2)), ctx.const(math.nan, like=out), fixed)


def _u8(ctx: LoweringContext, v: int) -> ir.Value:
    return ctx.const(v, dtype=np.uint8)


def _flags(ctx: LoweringContext, reduction: str, x: ir.Value) -> ir.Value:
    zero = ctx.const(0, like=x)
    sign = ctx.op.Div(ctx.const(1, like=x), x)  # +-inf tells +0 from -0
    preferred = ctx.op.Less(sign, zero) if reduction == "min" else ctx.op.Greater(sign, zero)
    is_zero = ctx.op.And(ctx.op.Equal(x, zero), preferred)
    return ctx.op.Where(
        ctx.op.IsNaN(x), _u8(ctx, 2), ctx.op.Where(is_zero, _u8(ctx, 1), _u8(ctx, 0))
    )


def _is_overwrite(update_jaxpr: Any) -> bool:
    """True for the update function ``lambda x, y: y`` of a plain scatter."""
    jaxpr = getattr(update_jaxpr, "jaxpr", update_jaxpr)
    return not jaxpr.eqns and len(jaxpr.invars) == 2 and jaxpr.outvars[0] is jaxpr.invars[1]


for _prim, _reduction in SCATTER.items():
    register(
        _prim,
        partial(_scatter, _reduction),
        onnx_ops=(
            "ScatterND",
            "Compress",
            "Add",
            "And",
            "Cast",
            "Concat",
            "ConstantOfShape",
            "Div",
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
            "Range",
            "ReduceMin",
            "Reshape",
            "Squeeze",
            "Transpose",
            "Unsqueeze",
            "Where",
            "Neg",
        ),
    )
