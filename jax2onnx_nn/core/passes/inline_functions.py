"""Model-local ONNX functions expanded into the graph."""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common

from jax2onnx_nn.core.ir.walk import graph_nodes


def inline_functions(model: ir.Model | onnx.ModelProto) -> ir.Model | onnx.ModelProto:
    """Expand every call of a model-local ONNX function into the function's body.

    For runtimes without model-local functions (OpenVINO, tract, TensorRT). Inlined nodes are
    named after the call they came from (``block1/MLPBlock/linear1/Gemm``), so the module
    path stays readable in Netron and in profiles. An ``onnx.ModelProto`` gives a new
    ModelProto; an ``onnx_ir.Model`` is changed in place and returned.

    Example::

        flat = inline_functions(to_onnx(model, [("B", 256)], auto_functions=True))
        assert not flat.functions
    """
    if isinstance(model, onnx.ModelProto):
        return ir.to_proto(inline_functions(ir.from_proto(model)))
    if not model.functions:
        return model
    planned = _inlined_names(model.graph, model.functions, "")
    common.InlinePass()(model)
    nodes = list(model.graph)
    if len(nodes) == len(planned):  # the pass expands each call in place, in order
        for node, name in zip(nodes, planned, strict=True):
            node.name = name
    used = {n.domain for n in graph_nodes(model.graph)}
    for domain in [d for d in model.opset_imports if d not in used and d not in ("", "ai.onnx")]:
        del model.opset_imports[domain]
    return model


def _inlined_names(nodes: Any, functions: Any, prefix: str) -> list[str]:
    names: list[str] = []
    for node in nodes:
        function = functions.get(node.op_identifier())
        name = f"{prefix}{node.name}"
        names.extend(
            [name] if function is None else _inlined_names(function, functions, f"{name}/")
        )
    return names
