"""Nodes whose results nothing reads removed (and unread optional outputs dropped)."""

from __future__ import annotations

import functools

import onnx
import onnx_ir as ir

from jax2onnx_nn.core.ir.walk import graph_nodes, graphs, node_bodies
from jax2onnx_nn.core.opset_forms import schema


def remove_unused_nodes(model: ir.Model) -> None:
    """Dead nodes and unread initializers of every graph, in one walk per graph.

    Each graph is walked from its last node back, so a node's readers are settled before it
    is looked at: a node none of whose outputs is read (nor a graph output) goes, and so do
    the reads of the nodes in its bodies (nested ones too), which would otherwise keep what
    only they read; a kept node loses its trailing empty inputs and the unread optional
    outputs its schema allows to leave out (at the export's opset), and its bodies are walked
    the same way. Then initializers nothing reads go, from body graphs too. Same result as
    onnx_ir's ``RemoveUnusedNodesPass`` run until nothing more goes, which left the reads of
    removed bodies and asked onnx for a schema per kept node (a third of the clean-up of a
    small model)."""
    graph = model.graph
    remove_unused_in(graph, graph.opset_imports.get(""))
    kept = {id(v) for v in (*graph.outputs, *graph.inputs)}
    for name, value in list(graph.initializers.items()):
        if not value.uses() and id(value) not in kept:
            graph.initializers.pop(name)
    for function in model.functions.values():
        remove_unused_in(function, function.opset_imports.get(""))
    for body in graphs(model)[1:]:
        for name, value in list(body.initializers.items()):
            if not value.uses() and not value.is_graph_output():
                body.initializers.pop(name)


def _drop_reads(body: ir.Graph) -> None:
    """The reads of the nodes of a removed node's ``body`` (nested bodies too)."""
    for inner in graph_nodes(body):
        for k, v in enumerate(inner.inputs):
            if v is not None:
                inner.replace_input_with(k, None)


@functools.cache
def _optional_outputs(op_type: str, opset: int) -> tuple[bool, tuple[bool, ...] | None]:
    """(whether the opset defines ``op_type``, which of its outputs are optional: None when
    none is or one is variadic), asked of onnx once per op and opset."""
    found = schema(op_type, opset)
    if found is None:
        return False, None
    optional = []
    for formal in found.outputs:
        if formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            return True, None
        optional.append(formal.option == onnx.defs.OpSchema.FormalParameterOption.Optional)
    return True, tuple(optional) if any(optional) else None


def _drop_unread_optional_outputs(node: ir.Node, graph_outputs: set[int], opset: int) -> None:
    """Unread optional outputs of ``node`` lose their name, trailing nameless outputs go (a
    BatchNormalization only in inference mode, whose ``training_mode=0`` goes too)."""
    known, optional = _optional_outputs(node.op_type, opset)
    if not known:
        return
    if node.op_type == "BatchNormalization":
        if opset < 14:  # before 14 the number of outputs selects the training mode
            return
        mode = node.attributes.get("training_mode")
        if mode is not None and (
            mode.is_ref() or mode.type != ir.AttributeType.INT or mode.as_int() != 0
        ):
            return
        node.attributes.pop("training_mode", None)
    if optional is None:
        return
    outs = node.outputs
    for i, out in enumerate(outs[: len(optional)]):
        if optional[i] and not out.uses() and id(out) not in graph_outputs:
            out.name = ""
    count = len(outs)
    while count and not outs[count - 1].name:
        count -= 1
    if count != len(outs):
        node.resize_outputs(count)


# -- common subexpressions, in every graph -----------------------------------------------


def remove_unused_in(graph: ir.Graph | ir.Function, opset: int | None) -> None:
    """:func:`remove_unused_nodes` on one graph and the bodies in it; unread optional outputs
    are left alone when ``opset`` is None (a loop body pruned by :func:`_prune_loop`)."""
    outputs = {id(v) for v in graph.outputs}
    for node in reversed(graph):
        if not any(o.uses() or id(o) in outputs for o in node.outputs):
            bodies = node_bodies(node)
            graph.remove(node, safe=True)
            for body in bodies:
                _drop_reads(body)
            continue
        inputs = node.inputs
        count = len(inputs)
        while count and inputs[count - 1] is None:
            count -= 1
        if count != len(inputs):
            node.resize_inputs(count)
        if opset is not None and node.domain == "":
            _drop_unread_optional_outputs(node, outputs, opset)
        for body in node_bodies(node):
            remove_unused_in(body, opset)
