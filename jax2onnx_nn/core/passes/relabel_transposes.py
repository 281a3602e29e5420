"""Transposes that move only size-1 axes written as Reshapes."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import is_required
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import graph_of, new_constant, take_place
from jax2onnx_nn.core.ir.values import same_dim
from jax2onnx_nn.core.ir.walk import all_nodes
from jax2onnx_nn.core.passes.layout_chains import cancel_layout_chains
from jax2onnx_nn.core.passes.remove_unused import remove_unused_nodes


def _relabelling_shape(node: ir.Node) -> list[int] | None:
    """The Reshape target equal to ``node`` (a Transpose) when it moves only axes of size 1
    (the other axes keep their order, so no element moves), or None. A symbolic dim is copied
    (0) where it keeps its index, else inferred (-1) when every other dim is a known nonzero
    size; a tensor with a static 0 dim is left as it is (a 0 would read as "copy")."""
    out = node.outputs[0]
    if out.shape is None or "perm" not in node.attributes:
        return None
    perm = list(node.attributes["perm"].value)
    if sorted(perm) != list(range(len(out.shape))):
        return None
    # the input's dims, from the output's (a rule may leave the input unshaped)
    dims: list[int | ir.SymbolicDim | None] = [None] * len(perm)
    for i, p in enumerate(perm):
        dims[p] = out.shape[i]
    kept = [p for p in perm if dims[p] != 1]
    if kept != sorted(kept) or any(isinstance(d, int) and d == 0 for d in out.shape):
        return None
    target: list[int] = []
    for i, d in enumerate(out.shape):
        if isinstance(d, int):
            target.append(d)
        elif same_dim(dims[i], d):
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1 or (-1 in target and 0 in target):
        return None
    return target


@rewrite("Transpose", creates={"Reshape", "Constant"})
def relabel_transposes(model: ir.Model) -> int:
    """A Transpose that moves only axes of size 1 (``(B, 4, 1) -> (B, 1, 4)``, JAX's
    ``swapaxes`` of a vector) becomes a Reshape: no element moves, and the Reshapes merge with
    the shape ops around them (:func:`cancel_layout_chains` and :func:`remove_unused_nodes`
    run again when one was replaced). It runs after :func:`fill_missing_types`: the shapes of
    the Transposes a rule makes inside an equation are known only then. A Transpose whose
    target shape one Reshape cannot state (a symbolic dim that moves next to another one)
    stays. Returns the number of Transposes replaced."""
    replaced = 0
    for node, in_function in all_nodes(model):
        if (
            node.domain != ""
            or node.op_type != "Transpose"
            or is_required(node)
            or node.inputs[0] is None
        ):
            continue
        target = _relabelling_shape(node)
        if target is None:
            continue
        shape = new_constant(model, node, np.asarray(target, np.int64), in_function)
        out = node.outputs[0]
        reshape = ir.Node("", "Reshape", [node.inputs[0], shape], name=node.name or None)
        reshape.outputs[0].shape, reshape.outputs[0].type = out.shape, out.type
        reshape.outputs[0].name = f"{out.name}/relabelled" if out.name else None
        graph_of(node).insert_before(node, reshape)
        take_place(out, reshape.outputs[0])
        replaced += 1
    if replaced:
        cancel_layout_chains(model)
        remove_unused_nodes(model)
    return replaced
