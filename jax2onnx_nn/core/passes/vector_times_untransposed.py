"""MatMul(Transpose(x), v) written as MatMul(v, x)."""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.walk import graph_nodes
from jax2onnx_nn.core.passes.remove_unused import remove_unused_nodes


@rewrite("MatMul")
def vector_times_untransposed(model: ir.Model) -> int:
    """``MatMul(Transpose(x), v)`` (last two dims swapped, ``v`` a vector) -> ``MatMul(v, x)``.

    The two are the same product (ONNX MatMul treats a 1-D operand as a row or column), the
    second has one node fewer, and onnxruntime 1.32 computes the first wrong: its fusion of the
    Transpose into a FusedMatMul mishandles the 1-D right operand (off by ~10 on a 32x7 ``a.T @ v``,
    with graph optimizations on). Needs ranks, so it runs after :func:`fill_missing_types`.
    Returns the number of MatMuls rewritten; a Transpose left unused is removed.
    """
    graphs: list[ir.Graph | ir.Function] = [model.graph, *model.functions.values()]
    rewritten = 0
    for graph in graphs:
        for node in graph_nodes(graph):
            if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
                continue
            a, v = node.inputs
            if a is None or v is None or v.shape is None or len(v.shape) != 1:
                continue
            producer = a.producer()
            if producer is None or producer.op_type != "Transpose" or producer.domain != "":
                continue
            perm_attr = producer.attributes.get("perm")
            rank = len(a.shape) if a.shape is not None else None
            if perm_attr is None or rank is None or rank < 2:
                continue
            perm = list(perm_attr.value)
            if perm != [*range(rank - 2), rank - 1, rank - 2]:
                continue
            node.replace_input_with(0, v)
            node.replace_input_with(1, producer.inputs[0])
            rewritten += 1
    if rewritten:
        remove_unused_nodes(model)
    return rewritten
