"""Clean-up after lowering: exact constant folding, dead nodes, common subexpressions, and
types for every value."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common
from onnx.reference import ReferenceEvaluator

from jax2onnx_nn.core.graph import is_required, tensor_bytes

_INFERENCE_CONST_SIZE = 1024  # initializers up to this many elements keep their data for inference


# Ops whose result on constants is exact whatever the dtype (they move or select elements)...
_MOVING_OPS = frozenset({
    "Gather", "GatherElements", "GatherND", "Slice", "Reshape", "Unsqueeze", "Squeeze", "Expand",
    "Concat", "Transpose", "Where", "Identity", "Flatten",
})
# ...and ops that are exact on integers and bools only (float arithmetic is left to the runtime:
# its rounding is the runtime's, and folding must not change a number).
_INTEGER_OPS = frozenset({
    "Add", "Sub", "Mul", "Neg", "Abs", "Min", "Max", "Clip", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Equal", "And", "Or", "Xor", "Not", "Range", "Cast",
})
_FOLD_GROWTH_BYTES = 1024  # a folded result may be larger than its inputs by this much (iota: a Range)
_MERGE_MIN_BYTES = 1 << 16  # equal initializers at least this large are stored once
_SHARED_WEIGHT_BYTES = 1 << 16  # above this, a weight also read elsewhere is not folded into a copy


def _exact_dtype(dtype: ir.DataType | None) -> bool:
    return dtype is not None and (dtype.is_integer() or dtype == ir.DataType.BOOL)


def fold_constants(model: ir.Model) -> int:
    """Replace main-graph nodes whose inputs are all initializers by initializers holding their
    result, for ops whose result is exact (element moves and selections of any dtype,
    integer and bool arithmetic). Index computations on constant positions (embedding
    lookups of ``arange`` positions, clamps of constant indices) disappear. A result is not
    folded when it would be more than 1 KiB larger than its inputs (a long ``Range`` stays a
    node), nor when it is large and a large input is also read elsewhere (a weight would be
    stored twice). A rearranged weight keeps the weight's name. Returns the number folded."""
    graph = model.graph
    outputs = {id(v) for v in graph.outputs}
    opset = model.opset_imports[""]  # set by the export from its config
    folded = 0
    for node in list(graph):
        if node.domain != "" or node.op_type not in _MOVING_OPS | _INTEGER_OPS or not node.inputs:
            continue
        inputs = [v for v in node.inputs if v is not None]
        if not all(v.const_value is not None and v.producer() is None and v.name in graph.initializers for v in inputs):
            continue
        if any(id(out) in outputs for out in node.outputs) or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if node.op_type in _INTEGER_OPS and not all(_exact_dtype(v.dtype) for v in (*inputs, out)):
            continue
        result = _evaluate(node, opset)
        if result is None or result.nbytes > sum(v.const_value.nbytes for v in inputs) + _FOLD_GROWTH_BYTES:
            continue
        if result.nbytes > _SHARED_WEIGHT_BYTES and any(len(v.uses()) > 1 for v in inputs if v.const_value.nbytes > _SHARED_WEIGHT_BYTES):
            continue  # a large weight read elsewhere too: folding would store it twice
        name = out.name
        source = node.inputs[0]
        if node.op_type in _MOVING_OPS and source is not None and len(source.uses()) == 1 and source.name:
            # a rearranged weight keeps the weight's name (``bn.mean``); the original is dropped
            name, source.name = source.name, _unused_name(graph, f"{source.name}/original")
        constant = ir.Value(name=None, shape=ir.Shape(result.shape), type=out.type, const_value=ir.tensor(result))
        ir.convenience.replace_all_uses_with(out, constant)
        graph.remove(node, safe=True)
        if source is not None and source.name in graph.initializers and not source.uses():
            graph.initializers.pop(source.name)
        constant.name = name
        graph.register_initializer(constant)
        folded += 1
    return folded


def _unused_name(graph: ir.Graph, name: str) -> str:
    candidate, i = name, 0
    while candidate in graph.initializers:
        i += 1
        candidate = f"{name}_{i}"
    return candidate


def _evaluate(node: ir.Node, opset: int) -> np.ndarray | None:
    """The node's result on its constant inputs, by ONNX's reference implementation; None
    for an op, dtype or case it does not cover (the node then stays)."""
    try:
        proto = ir.serde.serialize_node(node)
        names = [f"in{i}" if v is not None else "" for i, v in enumerate(node.inputs)]
        del proto.input[:]
        proto.input.extend(names)
        del proto.output[:]
        proto.output.append("out")
        feeds = {n: v.const_value.numpy() for n, v in zip(names, node.inputs, strict=True) if v is not None}
        inputs = [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ]
        graph = onnx.helper.make_graph([proto], "fold", inputs, [onnx.helper.make_empty_tensor_value_info("out")])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        (result,) = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - the reference's coverage decides, not ours
        return None
    return np.asarray(result)


def merge_duplicate_initializers(model: ir.Model) -> int:
    """Make initializers with equal dtype, shape and data one (a weight closed over twice, a
    kernel rearranged the same way by two rules). Only tensors that share dtype and shape with
    another are looked at, first by a sample of their bytes, and compared whole only when the
    samples agree, so a model of distinct weights costs next to nothing. Returns how many
    were merged.

    Weights below ``_MERGE_MIN_BYTES`` keep their own initializer: equal small weights are
    mostly fresh zeros and ones (a BatchNorm mean and a Linear bias), distinct parameters whose
    module-path names a reader needs, and merging them would save next to nothing."""
    graph = model.graph
    groups: dict[tuple[Any, tuple[int, ...]], list[ir.Value]] = {}
    for value in graph.initializers.values():
        if value.const_value is None or value.const_value.nbytes < _MERGE_MIN_BYTES:
            continue
        if not value.is_graph_input() and not value.is_graph_output():
            groups.setdefault((value.const_value.dtype, tuple(value.const_value.shape.numpy())), []).append(value)
    merged = 0
    for values in groups.values():
        if len(values) < 2:
            continue
        kept: dict[bytes, ir.Value] = {}
        for value in values:
            data = tensor_bytes(value.const_value)
            first = kept.setdefault(_sample(data), value)  # distinct weights differ in a sample
            if first is value or not np.array_equal(np.frombuffer(data, np.uint8), np.frombuffer(tensor_bytes(first.const_value), np.uint8)):
                continue
            value.replace_all_uses_with(first)
            graph.initializers.pop(value.name)
            merged += 1
    return merged


def _sample(data: memoryview | bytes, count: int = 64, width: int = 8) -> bytes:
    """``count`` slices of ``width`` bytes spread over ``data``: equal for equal tensors, and
    in practice different for different weights, at a cost that does not grow with size."""
    view = memoryview(data).cast("B")
    if view.nbytes <= count * width:
        return bytes(view)
    step = view.nbytes // count
    return b"".join(bytes(view[i * step:i * step + width]) for i in range(count))


# -- chains of layout ops -------------------------------------------------------------------

_SHAPE_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})  # move no element, keep order
_D = ir.DataType
# dtype -> the dtypes that hold each of its values exactly (a cast there and back is the identity)
_WIDER: dict[ir.DataType, frozenset[ir.DataType]] = {
    _D.BOOL: frozenset({_D.INT8, _D.UINT8, _D.INT16, _D.UINT16, _D.INT32, _D.UINT32, _D.INT64, _D.UINT64,
                        _D.FLOAT16, _D.BFLOAT16, _D.FLOAT, _D.DOUBLE}),
    _D.INT8: frozenset({_D.INT16, _D.INT32, _D.INT64, _D.FLOAT16, _D.BFLOAT16, _D.FLOAT, _D.DOUBLE}),
    _D.UINT8: frozenset({_D.INT16, _D.UINT16, _D.INT32, _D.UINT32, _D.INT64, _D.UINT64, _D.FLOAT16, _D.FLOAT, _D.DOUBLE}),
    _D.INT16: frozenset({_D.INT32, _D.INT64, _D.FLOAT, _D.DOUBLE}),
    _D.UINT16: frozenset({_D.INT32, _D.UINT32, _D.INT64, _D.UINT64, _D.FLOAT, _D.DOUBLE}),
    _D.INT32: frozenset({_D.INT64, _D.DOUBLE}),
    _D.UINT32: frozenset({_D.INT64, _D.UINT64, _D.DOUBLE}),
    _D.FLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.BFLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.FLOAT: frozenset({_D.DOUBLE}),
}


def _same_shape(a: ir.Value, b: ir.Value) -> bool:
    """Both shapes known and equal dim by dim (equal ints or equal symbolic names)."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    return all(isinstance(x, int) and x == y or isinstance(x, ir.SymbolicDim) and x.value is not None and x == y
               for x, y in zip(a.shape, b.shape, strict=True))


def _static_dims(v: ir.Value) -> tuple[int, ...] | None:
    if v.shape is None or not all(isinstance(d, int) for d in v.shape):
        return None
    return tuple(int(d) for d in v.shape)


def _shortcut(node: ir.Node) -> ir.Value | None:
    """What ``node`` (a layout op fed by another one) computes, from the chain's source: the
    source itself when the pair is the identity, a new single node's output, or None."""
    (source_value, *_rest) = node.inputs
    producer = source_value.producer() if source_value is not None else None
    if is_required(producer):
        producer = None  # a required node is not looked through either
    out = node.outputs[0]
    if node.op_type == "Cast":
        to = ir.DataType(node.attributes["to"].value)
        if source_value is not None and source_value.dtype == to:
            return source_value  # a cast to the dtype it has
        if producer is None or producer.op_type != "Cast" or producer.domain != "":
            return None
        x = producer.inputs[0]
        if x is None or x.dtype is None or ir.DataType(producer.attributes["to"].value) not in _WIDER.get(x.dtype, ()):
            return None  # the first cast rounds or wraps: the pair is not one cast
        if x.dtype == to:
            return x
        return _insert_before(node, "Cast", [x], {"to": to}, out)
    if node.op_type == "Transpose":
        perm = list(node.attributes["perm"].value) if "perm" in node.attributes else None
        if perm is not None and perm == sorted(perm):
            return source_value
        if producer is None or producer.op_type != "Transpose" or producer.domain != "" or perm is None:
            return None
        if "perm" not in producer.attributes:
            return None
        first = list(producer.attributes["perm"].value)
        combined = [first[p] for p in perm]
        x = producer.inputs[0]
        if combined == sorted(combined):
            return x
        return _insert_before(node, "Transpose", [x], {"perm": combined}, out)
    # Reshape / Squeeze / Unsqueeze / Flatten
    if source_value is not None and _same_shape(source_value, out):
        return source_value
    if producer is None or producer.op_type not in _SHAPE_OPS or producer.domain != "":
        return None
    x = producer.inputs[0]
    if x is None:
        return None
    if _same_shape(x, out):
        return x
    dims = _static_dims(out)
    if dims is None:
        return None
    shape = ir.Value(name=None, shape=ir.Shape([len(dims)]), type=ir.TensorType(ir.DataType.INT64),
                     const_value=ir.tensor(np.asarray(dims, np.int64)))
    return _insert_before(node, "Reshape", [x, shape], {}, out, constant=shape)


def _insert_before(node: ir.Node, op_type: str, inputs: list[ir.Value], attributes: dict[str, Any],
                   like: ir.Value, constant: ir.Value | None = None) -> ir.Value:
    """A new node computing ``like`` from ``inputs``, placed before ``node`` (a small constant
    operand becomes a Constant node: it works in functions and subgraphs alike). Its values
    are named after ``like``: onnx_ir would number unnamed ones per graph (``val_0``), and a
    Loop body's names must differ from the outer graph's."""
    owner = node.graph
    new_inputs = list(inputs)
    if constant is not None:
        const_node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", constant.const_value)],
                             name=f"{node.name}/shape" if node.name else None)
        const_node.outputs[0].shape, const_node.outputs[0].type = constant.shape, constant.type
        const_node.outputs[0].const_value = constant.const_value
        const_node.outputs[0].name = f"{like.name}/shape" if like.name else None
        owner.insert_before(node, const_node)
        new_inputs[new_inputs.index(constant)] = const_node.outputs[0]
    attrs = [ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, int(v)) for k, v in attributes.items()]
    new = ir.Node("", op_type, new_inputs, attributes=attrs, name=node.name or None)
    new.outputs[0].shape, new.outputs[0].type = like.shape, like.type
    new.outputs[0].name = f"{like.name}/merged" if like.name else None
    owner.insert_before(node, new)
    return new.outputs[0]


def cancel_layout_chains(model: ir.Model) -> int:
    """Back-to-back Transposes, Casts and shape ops (Reshape, Squeeze, Unsqueeze, Flatten)
    become one node, or none when the pair is the identity (``x.T.T``, ``squeeze(expand_dims(x))``,
    a cast to a wider dtype and back); a Transpose with the identity perm, a Cast to the dtype
    it has and a reshape to the shape it has go too. A node marked with
    :func:`~jax2onnx_nn.core.graph.mark_required` stays and is not looked through. Exact: a Cast pair is merged only when
    the first cast is lossless. One walk over every node of the graph, its subgraphs and the
    function bodies, each node looking at its producer only; the nodes left unused are removed
    by the clean-up. Returns the number of nodes bypassed."""
    bypassed = 0
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    for graph in graphs:
        for node in list(ir.traversal.RecursiveGraphIterator(graph)):
            if node.domain != "" or node.op_type not in {"Transpose", "Cast", *_SHAPE_OPS} or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            if not node.inputs or node.inputs[0] is None or out.is_graph_output() or is_required(node):
                continue
            replacement = _shortcut(node)
            if replacement is None or replacement is out:
                continue
            out.replace_all_uses_with(replacement)
            bypassed += 1
    return bypassed


# -- BatchNorm / affine into the Conv or Gemm before it --------------------------------------


def _initializer_array(v: ir.Value | None, graph: ir.Graph) -> np.ndarray | None:
    if v is None or v.producer() is not None or v.name not in graph.initializers or v.const_value is None:
        return None
    return v.const_value.numpy()


def _per_channel(c: np.ndarray, rank: int) -> np.ndarray | None:
    """``c`` as a vector over axis 1 of a rank-``rank`` result it broadcasts against (None if
    it varies along another axis or would broadcast the result to a larger shape)."""
    if c.ndim > rank:
        return None
    full = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1):
        return None
    return full.reshape(-1)


def _foldable_producer(value: ir.Value, graph: ir.Graph) -> ir.Node | None:
    """The Conv or plain Gemm (alpha = beta = 1, A not transposed) making ``value``, when
    ``value`` has no other reader and the weight is an initializer read by that node alone."""
    node = value.producer()
    if node is None or node.domain != "" or node.graph is not graph or len(value.uses()) != 1 or value.is_graph_output():
        return None
    if node.op_type == "Conv":
        weight = node.inputs[1]
    elif node.op_type == "Gemm":
        attrs = node.attributes
        if attrs.get("transA") is not None and attrs["transA"].value or any(
            attrs.get(k) is not None and attrs[k].value != 1.0 for k in ("alpha", "beta")
        ):
            return None
        weight = node.inputs[1]
    else:
        return None
    if _initializer_array(weight, graph) is None or len(weight.uses()) != 1:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None and (_initializer_array(bias, graph) is None or len(bias.uses()) != 1):
        return None
    return node


def _scale_shift(node: ir.Node, graph: ir.Graph, rank: int | None) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """(scale, shift) per channel of an inference BatchNormalization, a Mul or an Add by a
    constant; None for anything else."""
    if node.domain != "":
        return None
    if node.op_type == "BatchNormalization" and len(node.outputs) == 1:
        arrays = [_initializer_array(v, graph) for v in node.inputs[1:5]]
        if any(a is None for a in arrays) or node.attributes.get("training_mode") is not None and node.attributes["training_mode"].value:
            return None
        gamma, beta, mean, var = (a.astype(np.float64) for a in arrays)
        eps = node.attributes["epsilon"].value if "epsilon" in node.attributes else 1e-5
        scale = gamma / np.sqrt(var + np.float64(np.float32(eps)))
        return scale, beta - mean * scale
    if node.op_type in ("Mul", "Add") and len(node.inputs) == 2:
        for c in node.inputs:
            array = _initializer_array(c, graph)
            if array is not None and rank is not None:
                vector = _per_channel(array.astype(np.float64), rank)
                if vector is None:
                    return None
                return (vector, None) if node.op_type == "Mul" else (None, vector)
    return None


def fold_into_weights(model: ir.Model) -> int:
    """A BatchNormalization in inference mode, or a Mul / Add by a per-channel constant, right
    after a Conv or Gemm with constant weights is folded into that node's weight and bias, so a
    convolution with its BatchNorm is one Conv and ``linear(x) * g + b`` one Gemm.

    Not bit-exact: the folded weights are rounded once to their dtype (computed in float64),
    where JAX rounds the convolution's result and then each affine step, so results differ
    from JAX by about one ulp of the result (checked at 1e-5 relative in float32). Only the
    main graph; a weight or result read by another node is left alone (folding would copy
    the weight). Returns the number of nodes folded."""
    graph = model.graph
    folded = 0
    for node in list(graph):
        if not node.inputs or node.inputs[0] is None or node.graph is not graph:
            continue
        x = node.inputs[0] if node.op_type == "BatchNormalization" else next(
            (v for v in node.inputs if v is not None and v.producer() is not None), None)
        producer = _foldable_producer(x, graph) if x is not None else None
        if producer is None or node.outputs[0].dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
            continue
        rank = 2 if producer.op_type == "Gemm" else len(x.shape) if x.shape is not None else None
        affine = _scale_shift(node, graph, rank)
        if affine is None:
            continue
        weight = producer.inputs[1]
        w = weight.const_value.numpy()
        channels = w.shape[0] if producer.op_type == "Conv" else w.shape[1] if not (
            producer.attributes.get("transB") is not None and producer.attributes["transB"].value) else w.shape[0]
        scale, shift = affine
        if any(v is not None and v.size not in (1, channels) for v in (scale, shift)):
            continue
        scale = np.ones(channels) if scale is None else np.broadcast_to(scale, (channels,))
        shift = np.zeros(channels) if shift is None else np.broadcast_to(shift, (channels,))
        bias_value = producer.inputs[2] if len(producer.inputs) > 2 else None
        b = np.zeros(channels) if bias_value is None else bias_value.const_value.numpy().astype(np.float64)
        if b.size not in (1, channels):
            continue
        # the scale rounded once to the weight's dtype: no float64 copy of a large weight
        if producer.op_type == "Conv" or producer.attributes.get("transB") is not None and producer.attributes["transB"].value:
            w_new = w * scale.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            w_new = w * scale.astype(w.dtype).reshape(1, -1)
        b_new = (np.broadcast_to(b, (channels,)) * scale + shift).astype(w.dtype)
        weight.const_value = ir.tensor(w_new, name=weight.name)
        if bias_value is None:
            bias_value = ir.Value(name=f"{weight.name}/folded_bias", shape=ir.Shape([channels]), type=weight.type)
            bias_value.const_value = ir.tensor(b_new, name=bias_value.name)
            graph.register_initializer(bias_value)
            producer.resize_inputs(3)
            producer.replace_input_with(2, bias_value)
        else:
            bias_value.const_value = ir.tensor(b_new, name=bias_value.name)
            bias_value.shape = ir.Shape([channels])
        out = node.outputs[0]
        if out.is_graph_output():  # x takes its place and its name
            name, out.name = out.name, None
            out.replace_all_uses_with(x, replace_graph_outputs=True)
            x.name = name
        else:
            out.replace_all_uses_with(x)
        graph.remove(node, safe=True)  # now, so that x's next reader sees it read once
        folded += 1
    return folded


# -- loop-invariant work out of Loop / Scan bodies -------------------------------------------

# ops that cannot fail on inputs a valid graph gives them and have no effect but their result:
# safe to run once before the loop even when the loop runs zero times
_HOISTABLE = frozenset({
    "Constant", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Concat", "Cast", "Shape",
    "Add", "Sub", "Mul", "Neg", "Abs", "Min", "Max", "Exp", "Sqrt", "Reciprocal", "Not", "And", "Or",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Where", "Expand", "Range", "Slice",
})


def hoist_loop_invariants(model: ir.Model) -> int:
    """Move nodes of a ``Loop`` or ``Scan`` body whose inputs all come from outside the body
    (constants, values of the enclosing graph, or such nodes) in front of the loop, so that
    they run once instead of once per iteration. Only ops without side effects or failure
    modes (:data:`_HOISTABLE`) move, and never a node making a body output. One walk over
    each body; the main graph and function bodies. Returns the number of nodes moved."""
    moved = 0
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    for graph in graphs:
        for loop in list(ir.traversal.RecursiveGraphIterator(graph)):
            if loop.domain != "" or loop.op_type not in ("Loop", "Scan") or "body" not in loop.attributes:
                continue
            body = loop.attributes["body"].value
            outer = loop.graph
            inside: set[int] = {id(v) for v in body.inputs}
            for node in list(body):
                if (
                    node.domain != "" or node.op_type not in _HOISTABLE or any(a.type == ir.AttributeType.GRAPH for a in node.attributes.values())
                    or any(v is not None and id(v) in inside for v in node.inputs)
                    or any(o.is_graph_output() for o in node.outputs)
                ):
                    inside.update(id(o) for o in node.outputs)
                    continue
                body.remove(node)
                outer.insert_before(loop, node)
                moved += 1
    return moved


def cleanup(model: ir.Model, *, fold_weights: bool = False) -> None:
    """The clean-up passes in order; ``fold_weights``: also :func:`fold_into_weights`."""
    hoist_loop_invariants(model)
    fold_constants(model)
    cancel_layout_chains(model)
    common.RemoveUnusedNodesPass()(model)  # the folding below needs exact reader counts
    if fold_weights:
        fold_into_weights(model)
    merge_duplicate_initializers(model)
    common.RemoveUnusedNodesPass()(model)
    common.CommonSubexpressionEliminationPass()(model)
    common.RemoveUnusedNodesPass()(model)
    common.RemoveUnusedFunctionsPass()(model)


def vector_times_untransposed(model: ir.Model) -> int:
    """``MatMul(Transpose(x), v)`` (last two dims swapped, ``v`` a vector) -> ``MatMul(v, x)``.

    The two are the same product (ONNX MatMul treats a 1-D operand as a row or column), the
    second has one node fewer, and onnxruntime 1.32 computes the first wrong: its fusion of the
    Transpose into a FusedMatMul mishandles the 1-D right operand (off by ~10 on a 32x7 ``a.T @ v``,
    with graph optimizations on). Needs ranks, so it runs after :func:`fill_missing_types`.
    Returns the number of MatMuls rewritten; a Transpose left unused is removed.
    """
    graphs = [model.graph, *(f for f in model.functions.values())]
    rewritten = 0
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
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
        common.RemoveUnusedNodesPass()(model)
    return rewritten


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
    used = {n.domain for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    for domain in [d for d in model.opset_imports if d not in used and d not in ("", "ai.onnx")]:
        del model.opset_imports[domain]
    return model


def _inlined_names(nodes: Any, functions: Any, prefix: str) -> list[str]:
    names: list[str] = []
    for node in nodes:
        function = functions.get(node.op_identifier())
        name = f"{prefix}{node.name}"
        names.extend([name] if function is None else _inlined_names(function, functions, f"{name}/"))
    return names
