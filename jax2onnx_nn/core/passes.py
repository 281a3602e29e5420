"""Clean-up after lowering: dead nodes, common subexpressions, and types for every value."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common

_INFERENCE_CONST_SIZE = 1024  # initializers up to this many elements keep their data for inference


def cleanup(model: ir.Model) -> None:
    common.RemoveUnusedNodesPass()(model)
    common.CommonSubexpressionEliminationPass()(model)
    common.RemoveUnusedNodesPass()(model)
    common.RemoveUnusedFunctionsPass()(model)


def _all_values(graph: ir.Graph) -> list[ir.Value]:
    values: list[ir.Value] = []
    for node in ir.traversal.RecursiveGraphIterator(graph):
        values.extend(node.outputs)
    return values


def fill_missing_types(model: ir.Model) -> None:
    """Give every value without a full type a dtype and shape from ONNX shape inference.

    Rules stamp each equation's outputs from the jaxpr; values made inside a rule are left to
    this pass. Inference runs on a copy of the graph without the data of large initializers,
    so the cost does not grow with the size of the weights; small ones (axes, pads, shapes)
    keep their data, which shape inference needs.
    """
    values = _all_values(model.graph)
    missing = [v for v in values if v.type is None or v.shape is None]
    if not missing:
        return
    graph = model.graph
    order = list(graph.initializers.values())
    initializers = [v for v in order if v.const_value is None or v.const_value.size > _INFERENCE_CONST_SIZE]
    saved = [(v, v.const_value) for v in initializers]
    try:
        for v in initializers:
            v.const_value = None
            graph.initializers.pop(v.name)
        graph.inputs.extend(initializers)
        proto = ir.serde.serialize_model(model)
    finally:
        del graph.inputs[len(graph.inputs) - len(initializers):]
        for v, tensor in saved:
            v.const_value = tensor
        graph.initializers.clear()
        for v in order:
            graph.register_initializer(v)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort; stamped values stay as they are
        return
    known: dict[str, onnx.TypeProto] = {}

    def collect(g: onnx.GraphProto) -> None:
        for vi in list(g.value_info) + list(g.output):
            known[vi.name] = vi.type
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    collect(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for sub in attr.graphs:
                        collect(sub)

    collect(inferred.graph)
    for v in missing:
        t = known.get(v.name)
        if t is None or not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
            continue
        if v.type is None:
            v.type = ir.TensorType(ir.DataType(t.tensor_type.elem_type))
        if v.shape is None and t.tensor_type.HasField("shape"):
            dims = []
            for d in t.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(d.dim_value)
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            v.shape = ir.Shape(dims)
