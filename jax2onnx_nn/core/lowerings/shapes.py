"""Shape primitives: reshape, broadcast_in_dim, transpose, squeeze, concatenate, pad, slice,
dynamic_slice, dynamic_update_slice, rev, iota, split, tile, stack, unstack, dim_as_value.

Arrays of PRNG keys carry their uint32 key data as trailing ONNX dims (see ``onnx_aval``):
rules marked ``key_data=True`` address only the leading, JAX-visible axes and leave that tail
alone (one node, where the interpreter's generic path would vmap over the key data). Symbolic dims
come in through the toolkit on ``ctx`` (``ctx.reshape``, ``ctx.slice``, ``ctx.expand``, ...),
which prefers forms that need no run-time shape arithmetic (Reshape's -1, negative Slice
bounds, Expand's 1 for "keep this dim").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers.spatial import pad
from jax2onnx_nn.core.lower import Index, LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.symbolic import same_dim, same_shape
from jax2onnx_nn.core.value_range import dim_value

# on a pad's result: (its operand, low pads, high pads), no interior padding (the
# dynamic_update_slice rule writes a padded tail as a Concat)
PADDED = "jax2onnx_nn.padded"

_INT64_MAX = int(np.iinfo(np.int64).max)
_INT64_MIN = int(np.iinfo(np.int64).min)


# -- helpers ----------------------------------------------------------------------------------
def _key_rank(aval: Any) -> int:
    """How many trailing ONNX dims hold key data (0 for ordinary arrays)."""
    return len(onnx_aval(aval)[1]) - len(aval.shape)


def _add(ctx: LoweringContext, a: Index, d: Any) -> Index:
    """``a + d`` for an index ``a`` and a dim ``d``; static when both are."""
    if not isinstance(a, ir.Value) and not jxi.is_symbolic_dim(d):
        return int(a) + int(d)
    return ctx.op.Add(ctx.index_vector([a]), ctx.index_vector([ctx.index(d)]))


def _transpose(ctx: LoweringContext, x: ir.Value, perm: Sequence[int], aval: Any) -> ir.Value:
    if list(perm) == list(range(len(perm))):
        return x
    key_axes = range(len(perm), len(perm) + _key_rank(aval))
    return ctx.op.Transpose(x, perm=[*perm, *key_axes])


# -- reshape / broadcast / transpose ----------------------------------------------------------
@lowering("reshape", onnx_ops=("Reshape", "Transpose", "Concat"), key_data=True)
def _reshape(
    ctx: LoweringContext,
    x: ir.Value,
    *dyn: ir.Value,
    new_sizes: tuple,
    dimensions: Sequence[int] | None = None,
    sharding: object = None,
) -> ir.Value:
    del sharding  # placement on devices: one ONNX graph has none
    if dyn:
        raise NotImplementedError("reshape with dynamic (run-time) shape operands")
    in_shape = tuple(ctx.aval_in.shape)
    if dimensions is not None:  # reshape of the operand transposed by `dimensions`
        x = _transpose(ctx, x, dimensions, ctx.aval_in)
        in_shape = tuple(in_shape[d] for d in dimensions)
    if same_shape(in_shape, new_sizes):
        return x
    return ctx.reshape(x, onnx_aval(ctx.aval_out)[1])


@lowering("broadcast_in_dim", onnx_ops=("Unsqueeze", "Expand", "Concat", "Slice"), key_data=True)
def _broadcast_in_dim(
    ctx: LoweringContext,
    x: ir.Value,
    *dyn: ir.Value,
    shape: tuple,
    broadcast_dimensions: Sequence[int],
    sharding: object = None,
) -> ir.Value:
    del sharding  # placement on devices: one ONNX graph has none
    if dyn:
        raise NotImplementedError("broadcast_in_dim with dynamic (run-time) shape operands")
    in_shape = tuple(ctx.aval_in.shape)
    if same_shape(in_shape, shape):
        return x
    # broadcast_dimensions are strictly increasing (JAX checks), so the operand's dims keep
    # their order: unsqueeze the new dims, then Expand what still differs
    aligned: list[Any] = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        aligned[dst] = in_shape[src]
    new_axes = [i for i in range(len(shape)) if i not in broadcast_dimensions]
    if same_shape(aligned, shape):  # only new size-1 dims
        return ctx.op.Unsqueeze(x, ctx.ints(new_axes))
    # Expand aligns its operand to the right, so leading new dims need no Unsqueeze
    lead = broadcast_dimensions[0] if broadcast_dimensions else len(shape)
    inner = [i - lead for i in new_axes if i > lead]
    y = ctx.op.Unsqueeze(x, ctx.ints(inner)) if inner else x
    # and a 1 in its shape keeps the operand's dim: dims already in place (symbolic ones
    # included) are not computed
    target = [1 if same_dim(a, d) else d for a, d in zip(aligned, shape, strict=True)]
    return ctx.expand(y, [*target, *[1] * _key_rank(ctx.aval_out)])


@lowering("transpose", onnx_ops=("Transpose",), key_data=True)
def _transpose_rule(ctx: LoweringContext, x: ir.Value, *, permutation: Sequence[int]) -> ir.Value:
    return _transpose(ctx, x, permutation, ctx.aval_in)


@lowering("squeeze", onnx_ops=("Squeeze",), key_data=True)
def _squeeze(ctx: LoweringContext, x: ir.Value, *, dimensions: Sequence[int]) -> ir.Value:
    if not dimensions:
        return x
    rank = len(ctx.aval_in.shape)  # not the ONNX rank: key data dims trail
    return ctx.op.Squeeze(x, ctx.ints(sorted(d % rank for d in dimensions)))


@lowering("concatenate", onnx_ops=("Concat",), key_data=True)
def _concatenate(ctx: LoweringContext, *xs: ir.Value, dimension: int) -> ir.Value:
    if len(xs) == 1:
        return xs[0]
    return ctx.op.Concat(*xs, axis=dimension % len(ctx.aval_out.shape))


@lowering("tile", onnx_ops=("Tile",), key_data=True)
def _tile(ctx: LoweringContext, x: ir.Value, *, reps: Sequence[Any]) -> ir.Value:
    if all(same_dim(r, 1) for r in reps):
        return x
    return ctx.op.Tile(x, ctx.shape_tensor([*reps, *[1] * _key_rank(ctx.aval_in)]))


@lowering("stack", onnx_ops=("Unsqueeze", "Concat"), key_data=True)
def _stack(ctx: LoweringContext, *xs: ir.Value, axis: int) -> ir.Value:
    axis = axis % len(ctx.aval_out.shape)
    parts = [ctx.op.Unsqueeze(x, ctx.ints([axis])) for x in xs]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis)


@lowering("unstack", onnx_ops=("Split", "Squeeze"), key_data=True)
def _unstack(ctx: LoweringContext, x: ir.Value, *, axis: int) -> list[ir.Value]:
    axis = axis % len(ctx.aval_in.shape)
    n = int(ctx.aval_in.shape[axis])
    if n == 0:
        return []
    # the split input (not num_outputs) keeps the node valid from opset 13 on
    parts = [x] if n == 1 else ctx.op.Split(x, ctx.ints([1] * n), axis=axis, _outputs=n)
    return [ctx.op.Squeeze(p, ctx.ints([axis])) for p in parts]


@lowering("split", onnx_ops=("Split", "Concat"), key_data=True)
def _split(ctx: LoweringContext, x: ir.Value, *, sizes: Sequence[Any], axis: int) -> list[ir.Value]:
    if len(sizes) == 1:
        return [x]
    axis = axis % len(ctx.aval_in.shape)
    return list(ctx.op.Split(x, ctx.shape_tensor(sizes), axis=axis, _outputs=len(sizes)))


# -- pad / slice / rev ------------------------------------------------------------------------
@lowering("pad", onnx_ops=("Pad", "Slice", "Unsqueeze", "Reshape", "Concat"))
def _pad(
    ctx: LoweringContext,
    x: ir.Value,
    value: ir.Value,
    *,
    padding_config: Sequence[tuple[int, int, int]],
) -> ir.Value:
    if _key_rank(ctx.aval_in):
        raise NotImplementedError("pad of an array of PRNG keys")
    lows, highs, interiors = zip(*padding_config, strict=True) if padding_config else ((), (), ())
    if any(interiors):
        x = _interior_pad(ctx, x, value, tuple(ctx.aval_in.shape), interiors)
    out = pad(ctx, x, list(zip(lows, highs, strict=True)), value)
    if out is not x and not any(interiors):
        out.meta[PADDED] = (x, lows, highs)
    return out


def _interior_pad(
    ctx: LoweringContext,
    x: ir.Value,
    value: ir.Value,
    shape: tuple[Any, ...],
    interiors: Sequence[int],
) -> ir.Value:
    """``k`` pad values between neighbours: give every element a new axis, pad that axis to
    1 + k, merge it into its element's axis, and drop the k values after the last element."""
    axes = [a for a, k in enumerate(interiors) if k > 0]
    new_axes = [a + 1 + i for i, a in enumerate(axes)]
    rank = len(shape) + len(axes)
    pads = [0] * (2 * rank)
    for a, new in zip(axes, new_axes, strict=True):
        pads[rank + new] = interiors[a]
    y = ctx.op.Pad(ctx.op.Unsqueeze(x, ctx.ints(new_axes)), ctx.ints(pads), value)
    y = ctx.reshape(y, [d * (k + 1) for d, k in zip(shape, interiors, strict=True)])
    return ctx.slice(y, axes, [0] * len(axes), [-interiors[a] for a in axes])


def _bound(ctx: LoweringContext, i: Any, dim: Any) -> Index:
    """A slice bound; a symbolic bound at a fixed distance from the end counts from the end."""
    if not jxi.is_symbolic_dim(i):
        return int(i)
    back = dim - i
    if jxi.is_symbolic_dim(back):
        return ctx.dim(i)
    return _INT64_MAX if back == 0 else -int(back)


@lowering("slice", onnx_ops=("Slice",), key_data=True)
def _slice_rule(
    ctx: LoweringContext,
    x: ir.Value,
    *,
    start_indices: Sequence[Any],
    limit_indices: Sequence[Any],
    strides: Sequence[int] | None = None,
) -> ir.Value:
    shape = tuple(ctx.aval_in.shape)
    strides = strides or (1,) * len(shape)
    axes = [
        a
        for a, (d, s, e, st) in enumerate(
            zip(shape, start_indices, limit_indices, strides, strict=True)
        )
        if not (same_dim(s, 0) and same_dim(e, d) and st == 1)
    ]
    if not axes:
        return x
    starts = [_bound(ctx, start_indices[a], shape[a]) for a in axes]
    ends = [_bound(ctx, limit_indices[a], shape[a]) for a in axes]
    return ctx.slice(x, axes, starts, ends, [int(strides[a]) for a in axes])


@lowering("rev", onnx_ops=("Slice",), key_data=True)
def _rev(ctx: LoweringContext, x: ir.Value, *, dimensions: Sequence[int]) -> ir.Value:
    if not dimensions:
        return x
    n = len(dimensions)
    return ctx.slice(x, list(dimensions), [-1] * n, [_INT64_MIN] * n, [-1] * n)


# -- dynamic_slice / dynamic_update_slice -----------------------------------------------------
def _clamped_starts(
    ctx: LoweringContext, starts: Sequence[ir.Value], avals: Sequence[Any], limits: Sequence[Any]
) -> list[Index] | ir.Value:
    """JAX clamps each start into [0, dim - size] so the window stays inside the operand.

    Returns static ints when every start and limit is static, the starts' dims when each is
    one provably inside its range (a cache written at its past length), else one int64
    vector.
    """
    static = [v for v in (_static_int(s) for s in starts) if v is not None]
    if len(static) == len(starts) and not any(jxi.is_symbolic_dim(lim) for lim in limits):
        return [min(max(v, 0), int(lim)) for v, lim in zip(static, limits, strict=True)]
    known = _starts_inside(starts, limits)
    if known is not None:
        return [ctx.index(d) for d in known]
    pieces = [_as_int64_vector(ctx, s, aval) for s, aval in zip(starts, avals, strict=True)]
    vector = pieces[0] if len(pieces) == 1 else ctx.op.Concat(*pieces, axis=0)
    upper = ctx.op.Min(vector, ctx.shape_tensor(list(limits)))
    return ctx.op.Max(upper, ctx.ints([0] * len(pieces)))


def _starts_inside(starts: Sequence[ir.Value], limits: Sequence[Any]) -> list[Any] | None:
    """The dims the starts hold (``value_range.dim_value``) when each is provably in
    ``[0, limit]`` (0, the limit itself, or static and between), else None."""
    dims = [dim_value(s) for s in starts]
    for d, lim in zip(dims, limits, strict=True):
        if d is None:
            return None
        static = not jxi.is_symbolic_dim(d) and not jxi.is_symbolic_dim(lim)
        if not (same_dim(d, 0) or same_dim(d, lim) or static and 0 <= int(d) <= int(lim)):
            return None
    return dims


def _static_int(value: ir.Value) -> int | None:
    tensor = value.const_value
    return None if tensor is None else int(tensor.numpy())


def _as_int64_vector(ctx: LoweringContext, index: ir.Value, aval: Any) -> ir.Value:
    if (
        np.dtype(aval.dtype) == np.uint64
    ):  # above 2**63 the int64 cast wraps negative; no dim is that large
        index = ctx.op.Min(index, ctx.const(2**62, dtype=np.uint64))
    return ctx.op.Unsqueeze(ctx.cast(index, np.int64), ctx.ints([0]))


@lowering(
    "dynamic_slice",
    onnx_ops=("Slice", "Min", "Max", "Add", "Cast", "Unsqueeze", "Concat"),
    key_data=True,
)
def _dynamic_slice(
    ctx: LoweringContext, x: ir.Value, *starts: ir.Value, slice_sizes: Sequence[Any]
) -> ir.Value:
    shape = tuple(ctx.aval_in.shape)
    if len(starts) != len(shape):
        raise NotImplementedError("dynamic_slice with dynamic (run-time) slice sizes")
    axes = [
        a for a, (d, n) in enumerate(zip(shape, slice_sizes, strict=True)) if not same_dim(d, n)
    ]
    if not axes:  # the window is the whole operand: every start clamps to 0
        return x
    index_avals = ctx.avals_in[1:]
    begins = _clamped_starts(
        ctx,
        [starts[a] for a in axes],
        [index_avals[a] for a in axes],
        [shape[a] - slice_sizes[a] for a in axes],
    )
    sizes = [ctx.index(slice_sizes[a]) for a in axes]
    if isinstance(begins, list):
        return ctx.slice(
            x,
            axes,
            begins,
            [_add(ctx, b, slice_sizes[a]) for b, a in zip(begins, axes, strict=True)],
        )
    ends = ctx.op.Add(begins, ctx.index_vector(sizes))
    return ctx.op.Slice(x, begins, ends, ctx.ints(axes))


@lowering(
    "dynamic_update_slice",
    onnx_ops=(
        "Slice",
        "Concat",
        "Min",
        "Max",
        "Add",
        "Cast",
        "Unsqueeze",
        "TensorScatter",
        "Expand",
    ),
    key_data=True,
)
def _dynamic_update_slice(
    ctx: LoweringContext, x: ir.Value, update: ir.Value, *starts: ir.Value
) -> ir.Value:
    shape, window = tuple(ctx.aval_in.shape), tuple(ctx.avals_in[1].shape)
    axes = [a for a, (d, n) in enumerate(zip(shape, window, strict=True)) if not same_dim(d, n)]
    if not axes:  # the update covers the whole operand
        return update
    index_avals = ctx.avals_in[2:]
    if len(axes) == 1 and _starts_inside([starts[axes[0]]], [shape[axes[0]] - window[axes[0]]]):
        tail = _write_tail(ctx, x, update, axes[0], starts[axes[0]])
        if tail is not None:
            return tail
    if len(axes) == 1 and axes[0] > 0 and ctx.has_kernel("TensorScatter"):
        return _tensor_scatter(ctx, x, update, axes[0], starts[axes[0]], index_avals[axes[0]])
    # clamped one axis at a time: _splice wants each start on its own
    clamped = [
        _clamped_starts(ctx, [starts[a]], [index_avals[a]], [shape[a] - window[a]]) for a in axes
    ]
    begins = [b[0] if isinstance(b, list) else b for b in clamped]
    return _splice(ctx, x, update, axes, begins, [window[a] for a in axes])


def _write_tail(
    ctx: LoweringContext, x: ir.Value, update: ir.Value, axis: int, start: ir.Value
) -> ir.Value | None:
    """A window that is the operand's tail along ``axis`` (its start provably the operand's
    length less the window's): ``x``'s head and ``update`` concatenated. Where ``x`` is a pad
    whose padding is that tail (a KV cache given ``S`` empty slots after the past, written at
    the past's length), the head is the pad's operand: the Pad goes. None when the head would
    need a Slice and TensorScatter writes the window in one node."""
    shape = ctx.aval_in.shape
    begin = dim_value(start)
    if not same_dim(begin, shape[axis] - ctx.avals_in[1].shape[axis]):
        return None
    padded = x.meta.get(PADDED)
    if padded is not None:
        source, lows, highs = padded
        tail_only = all(
            same_dim(lo, 0) and (a == axis or same_dim(hi, 0))
            for a, (lo, hi) in enumerate(zip(lows, highs, strict=True))
        )
        if tail_only and same_dim(highs[axis], ctx.avals_in[1].shape[axis]):
            return ctx.op.Concat(source, update, axis=axis)
    if axis > 0 and ctx.has_kernel("TensorScatter"):
        return None
    return ctx.op.Concat(ctx.slice(x, [axis], [0], [ctx.index(begin)]), update, axis=axis)


def _tensor_scatter(
    ctx: LoweringContext, x: ir.Value, update: ir.Value, axis: int, start: ir.Value, aval: Any
) -> ir.Value:
    """A window along one axis after the first (a KV cache written at its slot): ONNX
    ``TensorScatter`` (opset 24), one node where the splice is three, the clamped start
    repeated for each row of the first axis (its ``write_indices``)."""
    shape, window = ctx.aval_in.shape, ctx.avals_in[1].shape
    begin = _clamped_starts(ctx, [start], [aval], [shape[axis] - window[axis]])
    rows = ctx.index_vector(begin) if isinstance(begin, list) else begin
    indices = ctx.expand(rows, [shape[0]])
    return ctx.op.TensorScatter(x, update, indices, axis=axis)


def _splice(
    ctx: LoweringContext,
    x: ir.Value,
    update: ir.Value,
    axes: Sequence[int],
    begins: Sequence[Index],
    sizes: Sequence[Any],
) -> ir.Value:
    """``x`` with ``update`` written at ``begins``: along the first axis, the part before the
    window, the window (spliced along the other axes), and the part after, concatenated."""
    axis, begin = axes[0], begins[0]
    end = _add(ctx, begin, sizes[0])
    inner = update
    if len(axes) > 1:
        window = ctx.slice(x, [axis], [begin], [end])
        inner = _splice(ctx, window, update, axes[1:], begins[1:], sizes[1:])
    before = ctx.slice(x, [axis], [0], [begin])
    after = ctx.slice(x, [axis], [end], [_INT64_MAX])
    return ctx.op.Concat(before, inner, after, axis=axis)


# -- iota / dim_as_value ----------------------------------------------------------------------
@lowering("iota", onnx_ops=("Range", "Cast", "Unsqueeze", "Expand", "Concat", "Squeeze", "Slice"))
def _iota(
    ctx: LoweringContext,
    *dyn: ir.Value,
    dtype: Any,
    shape: tuple,
    dimension: int,
    sharding: object = None,
) -> ir.Value:
    del dtype, sharding  # the output aval's dtype; a sharding places values, a graph none
    if dyn:
        raise NotImplementedError("iota with dynamic (run-time) shape operands")
    view = ctx.iota(shape[dimension], dimension, len(shape), onnx_aval(ctx.aval_out)[0])
    target = [1 if i == dimension else d for i, d in enumerate(shape)]
    if all(same_dim(d, 1) for d in target):
        return view
    return ctx.expand(view, target)


@lowering("empty", onnx_ops=("ConstantOfShape", "Concat"))
def _empty(
    ctx: LoweringContext,
    *dyn: ir.Value,
    shape: object = None,
    dtype: object = None,
    out_sharding: object = None,
) -> ir.Value:
    """An uninitialised buffer (``jnp.empty``, scan buffers of newer JAX): zeros."""
    del shape, dtype  # the output aval's
    del out_sharding  # where the result lives on a mesh: one device here
    if dyn:
        raise NotImplementedError("empty with dynamic (run-time) shape operands")
    return ctx.zeros(ctx.aval_out)


@lowering("empty2", onnx_ops=("Constant",))
def _empty_scalar(
    ctx: LoweringContext, *, dtype: object = None, memory_space: object = None
) -> ir.Value:
    del dtype  # the output aval's
    del memory_space  # which memory of an accelerator holds it: one memory here
    return ctx.zeros(ctx.aval_out)


@lowering("dim_as_value", onnx_ops=("Squeeze", "Cast"))
def _dim_as_value(ctx: LoweringContext, *, dim: Any) -> ir.Value:
    return ctx.cast(ctx.dim_scalar(dim), onnx_aval(ctx.aval_out)[0])
