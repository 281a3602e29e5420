"""Editing a graph from a pass: constants added, values taking another's place, names, readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import dtype_name, numpy_tensor


def graph_of(node: ir.Node) -> ir.Graph:
    """The graph ``node`` is in (a node a pass or a rewrite edits is in one)."""
    if node.graph is None:
        raise ValueError(f"node {node.name!r} ({node.op_type}) is in no graph")
    return node.graph


def unused_name(graph: ir.Graph, name: str) -> str:
    candidate, i = name, 0
    while candidate in graph.initializers:
        i += 1
        candidate = f"{name}_{i}"
    return candidate


def new_constant(
    model: ir.Model, before: ir.Node, array: np.ndarray, in_function: bool
) -> ir.Value:
    """``array`` as a value ``before`` can read: an initializer of the main graph (bodies read
    the enclosing scope), or a Constant node in a function body."""
    if in_function:
        tensor = numpy_tensor(array)
        node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", tensor)])
        out = node.outputs[0]
        out.shape, out.type, out.const_value = (
            ir.Shape(array.shape),
            ir.TensorType(tensor.dtype),
            tensor,
        )
        graph_of(before).insert_before(before, node)
        return out
    return new_initializer(model.graph, array)


def new_initializer(graph: ir.Graph, array: np.ndarray) -> ir.Value:
    """``array`` as a new initializer of ``graph``, named ``const_<dtype>`` (numbered if taken)."""
    tensor = numpy_tensor(array)
    value = ir.Value(
        name=unused_name(graph, f"const_{dtype_name(array.dtype)}"),
        shape=ir.Shape(array.shape),
        type=ir.TensorType(tensor.dtype),
        const_value=tensor,
    )
    graph.register_initializer(value)
    return value


def take_place(old: ir.Value, new: ir.Value) -> None:
    """``new`` replaces ``old`` for every reader, and as a graph output under ``old``'s name."""
    was_output = old.is_graph_output()
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if was_output:
        name, old.name = old.name, None
        new.name = name


def renamable(v: ir.Value, graph: ir.Graph | None) -> bool:
    """``v`` can take the place (and the name) of an output of ``graph``: the result of one of
    its nodes that is not an output already (a graph input, an initializer or a value of an
    enclosing graph keeps its name)."""
    producer = v.producer()
    return producer is not None and producer.graph is graph and not v.is_graph_output()


def one_reader(v: ir.Value) -> ir.Node | None:
    uses = v.uses()
    if len(uses) != 1 or v.is_graph_output():
        return None
    return next(iter(uses)).node


# What a target rewrite returns: None (no match), the values that replace the node's outputs
# (one, or one per output), or True where it edited the graph itself (a loop's structure).
Replacement: TypeAlias = "ir.Value | Sequence[ir.Value] | bool | None"


class Editor:
    """Adds nodes before ``anchor`` in its graph and replaces its outputs by new values
    (``opset``: the model's, for a rewrite whose op is newer than some opsets). Constants
    are initializers of ``main`` (the model's main graph, which bodies read) where given,
    else Constant nodes (in a function body)."""

    def __init__(
        self, anchor: ir.Node, counter: list[int], opset: int, main: ir.Graph | None = None
    ) -> None:
        self.anchor = anchor
        self.graph = anchor.graph
        self.counter = counter
        self.opset = opset
        self.main = main

    def op(
        self,
        op_type: str,
        *inputs: ir.Value | np.ndarray | np.generic | None,
        dtype: ir.DataType | None = None,
        **attrs: Any,
    ) -> ir.Value:
        values = [
            x if x is None or isinstance(x, ir.Value) else self.const(x) for x in inputs
        ]  # None: an omitted input
        self.counter[0] += 1
        base = f"{self.anchor.name}/target{self.counter[0]}"
        node = ir.Node(
            "",
            op_type,
            values,
            ir.convenience.convert_attributes(attrs),
            name=f"{base}/{op_type}",
            doc_string=self.anchor.doc_string,
        )
        out = node.outputs[0]
        out.name = f"{base}_output"
        if dtype is not None:
            out.type = ir.TensorType(dtype)
        assert self.graph is not None
        self.graph.insert_before(self.anchor, node)
        return out

    def op_results(
        self, op_type: str, count: int, *inputs: ir.Value | None, **attrs: Any
    ) -> list[ir.Value]:
        """A node of ``count`` results (``op`` makes one), added before the anchor."""
        self.counter[0] += 1
        base = f"{self.anchor.name}/target{self.counter[0]}"
        node = ir.Node(
            "",
            op_type,
            list(inputs),
            ir.convenience.convert_attributes(attrs),
            num_outputs=count,
            name=f"{base}/{op_type}",
            doc_string=self.anchor.doc_string,
        )
        for i, out in enumerate(node.outputs):
            out.name = f"{base}_output_{i}"
        assert self.graph is not None
        self.graph.insert_before(self.anchor, node)
        return list(node.outputs)

    def const(self, array: np.ndarray | np.generic) -> ir.Value:
        if self.main is not None:
            return new_initializer(self.main, np.asarray(array))
        return self.op(
            "Constant",
            value=ir.tensor(np.asarray(array)),
            dtype=ir.DataType.from_numpy(np.asarray(array).dtype),
        )

    def replace(self, *news: ir.Value) -> None:
        """The anchor's outputs become ``news``, one each (keeping its name, type and shape),
        and the anchor goes."""
        for old, new in zip(self.anchor.outputs, news, strict=True):
            new.type, new.shape = old.type, old.shape
            old.replace_all_uses_with(new, replace_graph_outputs=True)
            old.name, new.name = f"{old.name}/replaced", old.name
        assert self.graph is not None
        self.graph.remove(self.anchor, safe=True)
