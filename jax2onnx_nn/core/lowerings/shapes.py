"""Shape primitives: reshape, broadcast_in_dim, transpose, squeeze, concatenate, pad, slice,
dynamic_slice, dynamic_update_slice, rev, iota, split, tile, stack, unstack, dim_as_value.

Arrays of PRNG keys carry their uint32 key data as trailing ONNX dims (see ``onnx_aval``):
rules marked ``key_data=True`` address only the leading, JAX-visible axes and leave that tail
alone (one node, where the interpreter's generic path would vmap over the key data). Symbolic dims
come in through ``ctx.dim`` / ``ctx.shape_tensor``; rules prefer forms that need no run-time
shape arithmetic (Reshape's -1, negative Slice bounds, Expand's 1 for "keep this dim").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering

_INT64_MAX = int(np.iinfo(np.int64).max)
_INT64_MIN = int(np.iinfo(np.int64).min)
_IOTA_CONSTANT_MAX = 1024  # longer iotas are a Range node, not a stored constant

Index = int | ir.Value  # a static int, or an int64 tensor of shape [1]


# -- helpers ----------------------------------------------------------------------------------
def _ints(ctx: LoweringContext, values: Sequence[int]) -> ir.Value:
    return ctx.const(np.asarray(values, dtype=np.int64))


def _key_rank(aval: Any) -> int:
    """How many trailing ONNX dims hold key data (0 for ordinary arrays)."""
    return len(onnx_aval(aval)[1]) - len(aval.shape)


def _same(a: Any, b: Any) -> bool:
    """Provably equal dims (symbolic ones compare by expression)."""
    return bool(a == b)


def _positive(d: Any) -> bool:
    """Provably >= 1 (JAX assumes every dim variable is)."""
    try:
        return bool(d >= 1)
    except jax.errors.InconclusiveDimensionOperation:
        return False


def _index(ctx: LoweringContext, d: Any) -> Index:
    return ctx.dim(d) if jxi.is_symbolic_dim(d) else int(d)


def _vector(ctx: LoweringContext, items: Sequence[Index]) -> ir.Value:
    """A 1-D int64 tensor of static ints and [1]-shaped values; a constant when all static."""
    if all(not isinstance(i, ir.Value) for i in items):
        return _ints(ctx, [int(i) for i in items])
    parts = [i if isinstance(i, ir.Value) else _ints(ctx, [i]) for i in items]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def _slice(ctx: LoweringContext, x: ir.Value, axes: Sequence[int], starts: Sequence[Index], ends: Sequence[Index], steps: Sequence[int] | None = None) -> ir.Value:
    inputs = [x, _vector(ctx, starts), _vector(ctx, ends), _ints(ctx, axes)]
    if steps is not None and any(s != 1 for s in steps):
        inputs.append(_ints(ctx, steps))
    return ctx.op.Slice(*inputs)


def _add(ctx: LoweringContext, a: Index, d: Any) -> Index:
    """``a + d`` for an index ``a`` and a dim ``d``; static when both are."""
    if not isinstance(a, ir.Value) and not jxi.is_symbolic_dim(d):
        return int(a) + int(d)
    return ctx.op.Add(_vector(ctx, [a]), _vector(ctx, [_index(ctx, d)]))


def _transpose(ctx: LoweringContext, x: ir.Value, perm: Sequence[int], aval: Any) -> ir.Value:
    if list(perm) == list(range(len(perm))):
        return x
    key_axes = range(len(perm), len(perm) + _key_rank(aval))
    return ctx.op.Transpose(x, perm=[*perm, *key_axes])


def _reshape_to(ctx: LoweringContext, x: ir.Value, dims: Sequence[Any]) -> ir.Value:
    """Reshape to ``dims`` (ints and symbolic dims).

    One symbolic dim becomes -1, inferred by Reshape instead of computed at run time, when
    every other dim is provably non-zero (a 0 would make -1 ambiguous). Otherwise every dim is
    given and allowzero=1, so a dim that is 0 means 0 and not "copy the input's dim".
    """
    symbolic = [i for i, d in enumerate(dims) if jxi.is_symbolic_dim(d)]
    if symbolic:
        # an expression (B*T) costs nodes to compute; a plain variable is one Shape node
        infer = next((i for i in symbolic if jxi.dim_vars(dims[i]) != {str(dims[i])}), symbolic[0])
        if all(_positive(d) for i, d in enumerate(dims) if i != infer):
            items = [-1 if i == infer else _index(ctx, d) for i, d in enumerate(dims)]
            return ctx.op.Reshape(x, _vector(ctx, items))
        return ctx.op.Reshape(x, ctx.shape_tensor(dims), allowzero=1)
    allowzero = 1 if any(int(d) == 0 for d in dims) else None
    return ctx.op.Reshape(x, ctx.shape_tensor(dims), allowzero=allowzero)


def _expand(ctx: LoweringContext, y: ir.Value, target: Sequence[Any], key_rank: int = 0) -> ir.Value:
    """Expand to ``target``, where a 1 keeps the operand's dim.

    A static 0 is made by expanding to 1 and slicing to 0: onnxruntime (1.32) removes an
    Expand to a constant shape holding a 0 where the operand has a 1 (ExpandElimination,
    after an Unsqueeze), and the 1 stays.
    """
    zeros = [i for i, d in enumerate(target) if not jxi.is_symbolic_dim(d) and d == 0]
    dims = [1 if i in zeros else d for i, d in enumerate(target)]
    y = ctx.op.Expand(y, ctx.shape_tensor([*dims, *[1] * key_rank]))
    return _slice(ctx, y, zeros, [0] * len(zeros), [0] * len(zeros)) if zeros else y


# -- reshape / broadcast / transpose ----------------------------------------------------------
@lowering("reshape", onnx_ops=("Reshape", "Transpose", "Concat"), key_data=True)
def _reshape(ctx: LoweringContext, x: ir.Value, *dyn: ir.Value, new_sizes: tuple, dimensions: Sequence[int] | None = None, **_: object) -> ir.Value:
    if dyn:
        raise NotImplementedError("reshape with dynamic (run-time) shape operands")
    in_shape = tuple(ctx.aval_in.shape)
    if dimensions is not None:  # reshape of the operand transposed by `dimensions`
        x = _transpose(ctx, x, dimensions, ctx.aval_in)
        in_shape = tuple(in_shape[d] for d in dimensions)
    if len(in_shape) == len(new_sizes) and all(map(_same, in_shape, new_sizes)):
        return x
    return _reshape_to(ctx, x, onnx_aval(ctx.aval_out)[1])


@lowering("broadcast_in_dim", onnx_ops=("Unsqueeze", "Expand", "Concat", "Slice"), key_data=True)
def _broadcast_in_dim(ctx: LoweringContext, x: ir.Value, *dyn: ir.Value, shape: tuple, broadcast_dimensions: Sequence[int], **_: object) -> ir.Value:
    if dyn:
        raise NotImplementedError("broadcast_in_dim with dynamic (run-time) shape operands")
    in_shape = tuple(ctx.aval_in.shape)
    if len(in_shape) == len(shape) and all(map(_same, in_shape, shape)):
        return x
    # broadcast_dimensions are strictly increasing (JAX checks), so the operand's dims keep
    # their order: unsqueeze the new dims, then Expand what still differs
    aligned: list[Any] = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        aligned[dst] = in_shape[src]
    new_axes = [i for i in range(len(shape)) if i not in broadcast_dimensions]
    if all(map(_same, aligned, shape)):  # only new size-1 dims
        return ctx.op.Unsqueeze(x, _ints(ctx, new_axes))
    # Expand aligns its operand to the right, so leading new dims need no Unsqueeze
    lead = broadcast_dimensions[0] if broadcast_dimensions else len(shape)
    inner = [i - lead for i in new_axes if i > lead]
    y = ctx.op.Unsqueeze(x, _ints(ctx, inner)) if inner else x
    # and a 1 in its shape keeps the operand's dim: dims already in place (symbolic ones
    # included) are not computed
    target = [1 if _same(a, d) else d for a, d in zip(aligned, shape, strict=True)]
    return _expand(ctx, y, target, _key_rank(ctx.aval_out))


@lowering("transpose", onnx_ops=("Transpose",), key_data=True)
def _transpose_rule(ctx: LoweringContext, x: ir.Value, *, permutation: Sequence[int], **_: object) -> ir.Value:
    return _transpose(ctx, x, permutation, ctx.aval_in)


@lowering("squeeze", onnx_ops=("Squeeze",), key_data=True)
def _squeeze(ctx: LoweringContext, x: ir.Value, *, dimensions: Sequence[int], **_: object) -> ir.Value:
    if not dimensions:
        return x
    rank = len(ctx.aval_in.shape)  # not the ONNX rank: key data dims trail
    return ctx.op.Squeeze(x, _ints(ctx, sorted(d % rank for d in dimensions)))


@lowering("concatenate", onnx_ops=("Concat",), key_data=True)
def _concatenate(ctx: LoweringContext, *xs: ir.Value, dimension: int, **_: object) -> ir.Value:
    if len(xs) == 1:
        return xs[0]
    return ctx.op.Concat(*xs, axis=dimension % len(ctx.aval_out.shape))


@lowering("tile", onnx_ops=("Tile",), key_data=True)
def _tile(ctx: LoweringContext, x: ir.Value, *, reps: Sequence[Any], **_: object) -> ir.Value:
    if all(_same(r, 1) for r in reps):
        return x
    return ctx.op.Tile(x, ctx.shape_tensor([*reps, *[1] * _key_rank(ctx.aval_in)]))


@lowering("stack", onnx_ops=("Unsqueeze", "Concat"), key_data=True)
def _stack(ctx: LoweringContext, *xs: ir.Value, axis: int, **_: object) -> ir.Value:
    axis = axis % len(ctx.aval_out.shape)
    parts = [ctx.op.Unsqueeze(x, _ints(ctx, [axis])) for x in xs]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=axis)


@lowering("unstack", onnx_ops=("Split", "Squeeze"), key_data=True)
def _unstack(ctx: LoweringContext, x: ir.Value, *, axis: int, **_: object) -> list[ir.Value]:
    axis = axis % len(ctx.aval_in.shape)
    n = int(ctx.aval_in.shape[axis])
    if n == 0:
        return []
    # the split input (not num_outputs) keeps the node valid from opset 13 on
    parts = [x] if n == 1 else ctx.op.Split(x, _ints(ctx, [1] * n), axis=axis, _outputs=n)
    return [ctx.op.Squeeze(p, _ints(ctx, [axis])) for p in parts]


@lowering("split", onnx_ops=("Split", "Concat"), key_data=True)
def _split(ctx: LoweringContext, x: ir.Value, *, sizes: Sequence[Any], axis: int, **_: object) -> list[ir.Value]:
    if len(sizes) == 1:
        return [x]
    axis = axis % len(ctx.aval_in.shape)
    return list(ctx.op.Split(x, ctx.shape_tensor(sizes), axis=axis, _outputs=len(sizes)))


# -- pad / slice / rev ------------------------------------------------------------------------
@lowering("pad", onnx_ops=("Pad", "Slice", "Unsqueeze", "Reshape", "Concat"))
def _pad(ctx: LoweringContext, x: ir.Value, value: ir.Value, *, padding_config: Sequence[tuple[int, int, int]], **_: object) -> ir.Value:
    if _key_rank(ctx.aval_in):
        raise NotImplementedError("pad of an array of PRNG keys")
    lows, highs, interiors = zip(*padding_config, strict=True) if padding_config else ((), (), ())
    if any(interiors):
        x = _interior_pad(ctx, x, value, tuple(ctx.aval_in.shape), interiors)
    # grow first, then crop: a crop can reach into the padding of the other side
    grow = [max(p, 0) for p in (*lows, *highs)]
    if any(grow):
        x = ctx.op.Pad(x, _ints(ctx, grow), value)
    crop = [a for a, (lo, hi) in enumerate(zip(lows, highs, strict=True)) if lo < 0 or hi < 0]
    if crop:
        starts = [-min(lows[a], 0) for a in crop]
        ends = [highs[a] if highs[a] < 0 else _INT64_MAX for a in crop]
        x = _slice(ctx, x, crop, starts, ends)
    return x


def _interior_pad(ctx: LoweringContext, x: ir.Value, value: ir.Value, shape: tuple[Any, ...], interiors: Sequence[int]) -> ir.Value:
    """``k`` pad values between neighbours: give every element a new axis, pad that axis to
    1 + k, merge it into its element's axis, and drop the k values after the last element."""
    axes = [a for a, k in enumerate(interiors) if k > 0]
    new_axes = [a + 1 + i for i, a in enumerate(axes)]
    rank = len(shape) + len(axes)
    pads = [0] * (2 * rank)
    for a, new in zip(axes, new_axes, strict=True):
        pads[rank + new] = interiors[a]
    y = ctx.op.Pad(ctx.op.Unsqueeze(x, _ints(ctx, new_axes)), _ints(ctx, pads), value)
    y = _reshape_to(ctx, y, [d * (k + 1) for d, k in zip(shape, interiors, strict=True)])
    return _slice(ctx, y, axes, [0] * len(axes), [-interiors[a] for a in axes])


def _bound(ctx: LoweringContext, i: Any, dim: Any) -> Index:
    """A slice bound; a symbolic bound at a fixed distance from the end counts from the end."""
    if not jxi.is_symbolic_dim(i):
        return int(i)
    back = dim - i
    if jxi.is_symbolic_dim(back):
        return ctx.dim(i)
    return _INT64_MAX if back == 0 else -int(back)


@lowering("slice", onnx_ops=("Slice",), key_data=True)
def _slice_rule(ctx: LoweringContext, x: ir.Value, *, start_indices: Sequence[Any], limit_indices: Sequence[Any], strides: Sequence[int] | None = None, **_: object) -> ir.Value:
    shape = tuple(ctx.aval_in.shape)
    strides = strides or (1,) * len(shape)
    axes = [
        a for a, (d, s, e, st) in enumerate(zip(shape, start_indices, limit_indices, strides, strict=True))
        if not (_same(s, 0) and _same(e, d) and st == 1)
    ]
    if not axes:
        return x
    starts = [_bound(ctx, start_indices[a], shape[a]) for a in axes]
    ends = [_bound(ctx, limit_indices[a], shape[a]) for a in axes]
    return _slice(ctx, x, axes, starts, ends, [int(strides[a]) for a in axes])


@lowering("rev", onnx_ops=("Slice",), key_data=True)
def _rev(ctx: LoweringContext, x: ir.Value, *, dimensions: Sequence[int], **_: object) -> ir.Value:
    if not dimensions:
        return x
    n = len(dimensions)
    return _slice(ctx, x, list(dimensions), [-1] * n, [_INT64_MIN] * n, [-1] * n)


# -- dynamic_slice / dynamic_update_slice -----------------------------------------------------
def _clamped_starts(ctx: LoweringContext, starts: Sequence[ir.Value], avals: Sequence[Any], limits: Sequence[Any]) -> list[Index] | ir.Value:
    """JAX clamps each start into [0, dim - size] so the window stays inside the operand.

    Returns static ints when every start and limit is static, else one int64 vector.
    """
    static = [_static_int(s) for s in starts]
    if all(v is not None for v in static) and not any(jxi.is_symbolic_dim(lim) for lim in limits):
        return [min(max(int(v), 0), int(lim)) for v, lim in zip(static, limits, strict=True)]
    pieces = [_as_int64_vector(ctx, s, aval) for s, aval in zip(starts, avals, strict=True)]
    vector = pieces[0] if len(pieces) == 1 else ctx.op.Concat(*pieces, axis=0)
    upper = ctx.op.Min(vector, ctx.shape_tensor(list(limits)))
    return ctx.op.Max(upper, _ints(ctx, [0] * len(pieces)))


def _static_int(value: ir.Value) -> int | None:
    tensor = value.const_value
    return None if tensor is None else int(tensor.numpy())


def _as_int64_vector(ctx: LoweringContext, index: ir.Value, aval: Any) -> ir.Value:
    dtype = np.dtype(aval.dtype)
    if dtype == np.uint64:  # above 2**63 the int64 cast wraps negative; no dim is that large
        index = ctx.op.Min(index, ctx.const(2**62, dtype=np.uint64))
    if dtype != np.int64:
        index = ctx.op.Cast(index, to=ir_dtype(np.int64))
    return ctx.op.Unsqueeze(index, _ints(ctx, [0]))


@lowering("dynamic_slice", onnx_ops=("Slice", "Min", "Max", "Add", "Cast", "Unsqueeze"), key_data=True)
def _dynamic_slice(ctx: LoweringContext, x: ir.Value, *starts: ir.Value, slice_sizes: Sequence[Any], **_: object) -> ir.Value:
    shape = tuple(ctx.aval_in.shape)
    if len(starts) != len(shape):
        raise NotImplementedError("dynamic_slice with dynamic (run-time) slice sizes")
    axes = [a for a, (d, n) in enumerate(zip(shape, slice_sizes, strict=True)) if not _same(d, n)]
    if not axes:  # the window is the whole operand: every start clamps to 0
        return x
    index_avals = ctx.avals_in[1:]
    begins = _clamped_starts(ctx, [starts[a] for a in axes], [index_avals[a] for a in axes], [shape[a] - slice_sizes[a] for a in axes])
    sizes = [_index(ctx, slice_sizes[a]) for a in axes]
    if isinstance(begins, list):
        return _slice(ctx, x, axes, begins, [_add(ctx, b, slice_sizes[a]) for b, a in zip(begins, axes, strict=True)])
    ends = ctx.op.Add(begins, _vector(ctx, sizes))
    return ctx.op.Slice(x, begins, ends, _ints(ctx, axes))


@lowering("dynamic_update_slice", onnx_ops=("Slice", "Concat", "Min", "Max", "Add", "Cast", "Unsqueeze"), key_data=True)
def _dynamic_update_slice(ctx: LoweringContext, x: ir.Value, update: ir.Value, *starts: ir.Value, **_: object) -> ir.Value:
    shape, window = tuple(ctx.aval_in.shape), tuple(ctx.avals_in[1].shape)
    axes = [a for a, (d, n) in enumerate(zip(shape, window, strict=True)) if not _same(d, n)]
    if not axes:  # the update covers the whole operand
        return update
    index_avals = ctx.avals_in[2:]
    # clamped one axis at a time: _splice wants each start on its own
    begins = [_clamped_starts(ctx, [starts[a]], [index_avals[a]], [shape[a] - window[a]]) for a in axes]
    begins = [b[0] if isinstance(b, list) else b for b in begins]
    return _splice(ctx, x, update, axes, begins, [window[a] for a in axes])


def _splice(ctx: LoweringContext, x: ir.Value, update: ir.Value, axes: Sequence[int], begins: Sequence[Index], sizes: Sequence[Any]) -> ir.Value:
    """``x`` with ``update`` written at ``begins``: along the first axis, the part before the
    window, the window (spliced along the other axes), and the part after, concatenated."""
    axis, begin = axes[0], begins[0]
    end = _add(ctx, begin, sizes[0])
    inner = update
    if len(axes) > 1:
        window = _slice(ctx, x, [axis], [begin], [end])
        inner = _splice(ctx, window, update, axes[1:], begins[1:], sizes[1:])
    before = _slice(ctx, x, [axis], [0], [begin])
    after = _slice(ctx, x, [axis], [end], [_INT64_MAX])
    return ctx.op.Concat(before, inner, after, axis=axis)


# -- iota / dim_as_value ----------------------------------------------------------------------
@lowering("iota", onnx_ops=("Range", "Cast", "Unsqueeze", "Expand", "Concat", "Squeeze"))
def _iota(ctx: LoweringContext, *dyn: ir.Value, dtype: Any, shape: tuple, dimension: int, **_: object) -> ir.Value:
    if dyn:
        raise NotImplementedError("iota with dynamic (run-time) shape operands")
    out_dtype = onnx_aval(ctx.aval_out)[0]
    n = shape[dimension]
    others = [i for i in range(len(shape)) if i != dimension]
    # counted in int64 and converted, as XLA converts the index: int8 wraps, float16 rounds
    if jxi.is_symbolic_dim(n) or int(n) > _IOTA_CONSTANT_MAX:
        limit = ctx.op.Squeeze(ctx.dim(n), _ints(ctx, [0]))
        line = ctx.op.Range(ctx.const(0, dtype=np.int64), limit, ctx.const(1, dtype=np.int64))
        if out_dtype != np.int64:
            line = ctx.op.Cast(line, to=ir_dtype(out_dtype))
        view = ctx.op.Unsqueeze(line, _ints(ctx, others)) if others else line
    else:
        view_shape = [int(n) if i == dimension else 1 for i in range(len(shape))]
        view = ctx.const(np.arange(int(n), dtype=np.int64).astype(out_dtype).reshape(view_shape))
    target = [1 if i == dimension else d for i, d in enumerate(shape)]
    if all(_same(d, 1) for d in target):
        return view
    return _expand(ctx, view, target)


@lowering("empty", onnx_ops=("ConstantOfShape", "Concat"))
def _empty(ctx: LoweringContext, *dyn: ir.Value, **_: object) -> ir.Value:
    """An uninitialised buffer (``jnp.empty``, scan buffers of newer JAX): zeros."""
    if dyn:
        raise NotImplementedError("empty with dynamic (run-time) shape operands")
    return ctx.zeros(ctx.aval_out)


@lowering("empty2", onnx_ops=("Constant",))
def _empty_scalar(ctx: LoweringContext, **_: object) -> ir.Value:
    return ctx.zeros(ctx.aval_out)


@lowering("dim_as_value", onnx_ops=("Squeeze", "Cast"))
def _dim_as_value(ctx: LoweringContext, *, dim: Any, **_: object) -> ir.Value:
    value = ctx.op.Squeeze(ctx.dim(dim), _ints(ctx, [0]))
    dtype = onnx_aval(ctx.aval_out)[0]
    return ctx.op.Cast(value, to=ir_dtype(dtype)) if dtype != np.int64 else value
