"""Rotary position embedding written out by the model (rotate-half, or interleaved pairs) ->
ONNX ``RotaryEmbedding``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement, one_reader
from jax2onnx_nn.core.ir.values import const_array, same_dim, same_dims

_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})


def _producer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    """The node of ``op_type`` (default domain) that makes ``v``, read by nothing else."""
    if v is None:
        return None
    node = v.producer()
    if node is None or node.op_type != op_type or node.domain != "" or one_reader(v) is None:
        return None
    return node


def _half_of(v: ir.Value | None) -> tuple[ir.Value, int] | None:
    """``(x, 0)`` for ``x[..., :D/2]``, ``(x, 1)`` for ``x[..., D/2:]`` (a Slice of the last
    axis of ``x``, whose last dim ``D`` is static and even)."""
    node = v.producer() if v is not None else None
    if node is None or node.op_type != "Slice" or node.domain != "" or len(node.inputs) < 4:
        return None
    x = node.inputs[0]
    starts, ends, axes = (const_array(u) for u in node.inputs[1:4])
    steps = const_array(node.inputs[4]) if len(node.inputs) > 4 else None
    if x is None or x.shape is None or starts is None or ends is None or axes is None:
        return None
    rank, depth = len(x.shape), x.shape[-1]
    if not isinstance(depth, int) or depth % 2 or axes.size != 1 or starts.size != 1:
        return None
    if int(axes.item()) % rank != rank - 1 or (steps is not None and int(steps.item()) != 1):
        return None
    start, end = int(starts.item()), int(ends.item())
    if (start, min(end, depth)) == (0, depth // 2):
        return x, 0
    if (start, min(end, depth)) == (depth // 2, depth):
        return x, 1
    return None


def _pair_part(v: ir.Value | None) -> tuple[ir.Value, int] | None:
    """``(x, 0)`` for ``x[..., 0::2]``, ``(x, 1)`` for ``x[..., 1::2]`` (a Slice of step 2 to
    the end of the last axis of ``x``, whose last dim is static and even): the first and the
    second element of each pair."""
    node = v.producer() if v is not None else None
    if node is None or node.op_type != "Slice" or node.domain != "" or len(node.inputs) != 5:
        return None
    x = node.inputs[0]
    starts, ends, axes, steps = (const_array(u) for u in node.inputs[1:5])
    if x is None or x.shape is None or starts is None or ends is None or axes is None:
        return None
    rank, depth = len(x.shape), x.shape[-1]
    if not isinstance(depth, int) or depth % 2 or axes.size != 1 or starts.size != 1:
        return None
    if int(axes.item()) % rank != rank - 1 or steps is None or int(steps.item()) != 2:
        return None
    start = int(starts.item())
    return (x, start) if start in (0, 1) and int(ends.item()) >= depth else None


Part = Callable[[ir.Value | None], "tuple[ir.Value, int] | None"]


def _product(
    v: ir.Value | None, part: Part = _half_of
) -> list[tuple[tuple[ir.Value, int], ir.Value]]:
    """The ways to read ``v = Mul(a, b)`` as ``half * table`` (``half`` a ``part`` of ``x``:
    :func:`_half_of` or :func:`_pair_part`)."""
    node = _producer(v, "Mul")
    if node is None or len(node.inputs) != 2:
        return []
    a, b = node.inputs
    found = []
    for half, table in ((a, b), (b, a)):
        of = part(half)
        if of is not None and table is not None:
            found.append((of, table))
    return found


def _terms(v: ir.Value | None, op_type: str) -> list[tuple[ir.Value | None, ir.Value | None]]:
    """The operand pairs of ``v = op_type(a, b)`` (both orders for the commutative Add)."""
    node = _producer(v, op_type)
    if node is None or len(node.inputs) != 2:
        return []
    a, b = node.inputs
    return [(a, b), (b, a)] if op_type == "Add" else [(a, b)]


@rewrite("Concat", creates=("RotaryEmbedding", "Squeeze"))
def rotary_embedding(node: ir.Node, edit: Editor) -> Replacement:
    """``concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)`` with ``x1, x2`` the halves of
    the last axis of ``x`` ``[B, H, S, D]`` and ``cos, sin`` ``[B, 1, S, D/2]`` (the rotate-half
    rotary embedding as Llama-style models write it, tables computed from the positions) ->
    ``RotaryEmbedding(x, cos, sin)`` with the tables squeezed to ``[B, S, D/2]``.

    The op computes the same products and sums in the same order (two roundings each), so its
    numbers are JAX's up to the contraction of a product and a sum into one rounding: 1 ulp.
    Nine nodes per rotated tensor become one (the Squeezes are shared by common subexpression
    elimination)."""
    out = node.outputs[0]
    if len(node.inputs) != 2 or out.shape is None or len(out.shape) != 4:
        return None
    if out.dtype not in _FLOATS or int(node.attributes["axis"].value) % 4 != 3:
        return None
    for first, second in _terms(node.inputs[0], "Sub"):
        for lo, cos in _product(first):
            for hi, sin in _product(second):
                x = lo[0]
                if lo[1] != 0 or hi != (x, 1) or not _rotates(node.inputs[1], x, cos, sin):
                    continue
                if _tables_fit(x, cos) and _tables_fit(x, sin):
                    return _rotary(edit, x, cos, sin, interleaved=0)
    return None


@rewrite("Reshape", creates=("RotaryEmbedding", "Squeeze"))
def interleaved_rotary_embedding(node: ir.Node, edit: Editor) -> Replacement:
    """``stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape)`` with ``x1,
    x2 = x[..., 0::2], x[..., 1::2]`` (each pair of the last axis of ``x`` ``[B, H, S, D]``
    rotated, as GPT-J and some JAX models write it) and ``cos, sin`` ``[B, 1, S, D/2]`` ->
    ``RotaryEmbedding(x, cos, sin, interleaved=1)``, the tables squeezed to ``[B, S, D/2]``.

    The same products and sums as :func:`rotary_embedding`'s (1 ulp from JAX's); the stack is
    two Unsqueezes and a Concat, the reshape merges the pairs back: thirteen nodes per rotated
    tensor become one."""
    out, stacked = node.outputs[0], node.inputs[0]
    concat = _producer(stacked, "Concat")
    if concat is None or len(concat.inputs) != 2 or out.shape is None or len(out.shape) != 4:
        return None
    if out.dtype not in _FLOATS or int(concat.attributes["axis"].value) % 5 != 4:
        return None
    first, second = (_unsqueezed_last(v) for v in concat.inputs)
    for a, b in _terms(first, "Sub"):
        for lo, cos in _product(a, _pair_part):
            for hi, sin in _product(b, _pair_part):
                x = lo[0]
                if lo[1] != 0 or hi != (x, 1) or not same_dims(x.shape, out.shape):
                    continue
                if not _rotates(second, x, cos, sin, _pair_part):
                    continue
                if _tables_fit(x, cos) and _tables_fit(x, sin):
                    return _rotary(edit, x, cos, sin, interleaved=1)
    return None


def _rotary(edit: Editor, x: ir.Value, cos: ir.Value, sin: ir.Value, interleaved: int) -> ir.Value:
    """``RotaryEmbedding(x, cos, sin)`` on the tables squeezed from ``[B, 1, S, D/2]``."""
    axis = edit.const(np.asarray([1], np.int64))
    tables = [edit.op("Squeeze", t, axis) for t in (cos, sin)]
    return edit.op("RotaryEmbedding", x, *tables, interleaved=interleaved)


def _unsqueezed_last(v: ir.Value | None) -> ir.Value | None:
    """``u`` where ``v`` is ``u`` with a new last axis (an Unsqueeze read by nothing else)."""
    node = _producer(v, "Unsqueeze")
    axes = const_array(node.inputs[1]) if node is not None and len(node.inputs) > 1 else None
    u = node.inputs[0] if node is not None else None
    if axes is None or u is None or u.shape is None or axes.size != 1:
        return None
    return u if int(axes.item()) % (len(u.shape) + 1) == len(u.shape) else None


def _rotates(
    v: ir.Value | None, x: ir.Value, cos: ir.Value, sin: ir.Value, part: Part = _half_of
) -> bool:
    """Whether ``v`` is ``x2 * cos + x1 * sin`` (in any order of terms and factors; ``x1``,
    ``x2`` the ``part`` 0 and 1 of ``x``)."""
    for a, b in _terms(v, "Add"):
        if any(h == (x, 1) and t is cos for h, t in _product(a, part)) and any(
            h == (x, 0) and t is sin for h, t in _product(b, part)
        ):
            return True
    return False


def _tables_fit(x: ir.Value, table: ir.Value) -> bool:
    """``table`` is ``[B, 1, S, D/2]`` for ``x`` ``[B, H, S, D]``, of ``x``'s type."""
    shape, dims = table.shape, x.shape
    if shape is None or dims is None or len(shape) != 4 or table.dtype != x.dtype:
        return False
    depth = dims[3]
    return (
        same_dim(shape[0], dims[0])
        and shape[1] == 1
        and same_dim(shape[2], dims[2])
        and isinstance(depth, int)
        and shape[3] == depth // 2
    )
