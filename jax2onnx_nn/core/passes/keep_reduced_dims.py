"""Reductions followed by a Reshape that restores the reduced dims keep them instead."""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.graph import is_required
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import one_reader
from jax2onnx_nn.core.ir.values import const_array
from jax2onnx_nn.core.ir.walk import all_nodes

_REDUCTIONS = frozenset(
    [
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceMean",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ]
)


def _reduced_axes(node: ir.Node, rank: int) -> list[int] | None:
    """The axes ``node`` (a Reduce*) reduces, non-negative and sorted; None when unknown."""
    axes: list[int]
    if len(node.inputs) > 1 and node.inputs[1] is not None:  # an input (ReduceSum 13, others 18)
        array = const_array(node.inputs[1])
        if array is None:
            return None
        axes = array.reshape(-1).tolist()
    elif (attr := node.attributes.get("axes")) is not None:
        axes = list(attr.as_ints())
    else:
        axes = []
    if not axes:  # no axes: all of them, unless noop_with_empty_axes
        return None if node.attributes.get_int("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a % rank for a in axes)


@rewrite(*_REDUCTIONS)
def keep_reduced_dims(model: ir.Model) -> int:
    """``ReduceX(keepdims=0)`` read only by an ``Unsqueeze`` of exactly the reduced axes (JAX's
    ``keepdims=True``: a reduction then a broadcast_in_dim/expand_dims) becomes one
    ``ReduceX(keepdims=1)``; same values, same shape. Returns the number of Unsqueezes removed
    (left unread for the clean-up)."""
    removed = 0
    for node, _ in all_nodes(model):
        if (
            node.domain != ""
            or node.op_type != "Unsqueeze"
            or len(node.inputs) < 2
            or is_required(node)
        ):
            continue
        source, out = node.inputs[0], node.outputs[0]
        reduce = source.producer() if source is not None else None
        if (
            source is None
            or reduce is None
            or reduce.domain != ""
            or reduce.op_type not in _REDUCTIONS
            or is_required(reduce)
            or reduce.attributes.get_int("keepdims", 1) != 0
            or one_reader(source) is not node
            or out.shape is None
            or (data := reduce.inputs[0]) is None
        ):
            continue
        rank = len(out.shape)
        unsqueezed = const_array(node.inputs[1])
        if unsqueezed is None or data.shape is not None and len(data.shape) != rank:
            continue
        if sorted(a % rank for a in unsqueezed.reshape(-1).tolist()) != _reduced_axes(reduce, rank):
            continue
        reduce.attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
        source.shape = out.shape
        out.replace_all_uses_with(source, replace_graph_outputs=True)
        if out.is_graph_output() or source.is_graph_output():
            name, out.name = out.name, None
            source.name = name
        removed += 1
    return removed


# -- shape plumbing: copied dims, identity arithmetic, broadcast Unsqueezes, split heads ----
