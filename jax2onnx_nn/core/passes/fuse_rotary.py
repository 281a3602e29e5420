"""Rotary position embedding written out by the model (rotate-half) -> ONNX ``RotaryEmbedding``."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement, one_reader
from jax2onnx_nn.core.ir.values import const_array, same_dim

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


def _product(v: ir.Value | None) -> list[tuple[tuple[ir.Value, int], ir.Value]]:
    """The ways to read ``v = Mul(a, b)`` as ``half * table`` (``half`` a :func:`_half_of`)."""
    node = _producer(v, "Mul")
    if node is None or len(node.inputs) != 2:
        return []
    a, b = node.inputs
    found = []
    for half, table in ((a, b), (b, a)):
        of = _half_of(half)
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
                if not _tables_fit(x, cos) or not _tables_fit(x, sin):
                    continue
                axis = edit.const(np.asarray([1], np.int64))
                tables = [edit.op("Squeeze", t, axis) for t in (cos, sin)]
                return edit.op("RotaryEmbedding", x, *tables, interleaved=0)
    return None


def _rotates(v: ir.Value | None, x: ir.Value, cos: ir.Value, sin: ir.Value) -> bool:
    """Whether ``v`` is ``x2 * cos + x1 * sin`` (in any order of terms and factors)."""
    for a, b in _terms(v, "Add"):
        if any(h == (x, 1) and t is cos for h, t in _product(a)) and any(
            h == (x, 0) and t is sin for h, t in _product(b)
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
