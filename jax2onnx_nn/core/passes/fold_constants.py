"""Exact constant folding: nodes of constant inputs become constants of their result."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx.reference import ReferenceEvaluator

from jax2onnx_nn.core.graph import numpy_tensor
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import new_constant, unused_name
from jax2onnx_nn.core.ir.values import attributes_key, exact_dtype
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.quant.dequantize import starts_dequantization

# Ops whose result on constants is exact whatever the dtype (they move or select elements)...
_MOVING_OPS = frozenset(
    {
        "Gather",
        "GatherElements",
        "GatherND",
        "Slice",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Expand",
        "Concat",
        "Transpose",
        "Where",
        "Identity",
        "Flatten",
    }
)
# ...and ops that are exact on integers and bools only (float arithmetic is left to the runtime:
# its rounding is the runtime's, and folding must not change a number).
_INTEGER_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Neg",
        "Abs",
        "Min",
        "Max",
        "Clip",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Equal",
        "And",
        "Or",
        "Xor",
        "Not",
        "Range",
        "Cast",
    }
)
# Split: exact, and what a cell's weights go through to become a GRU's W / R (the gate order)
_FOLDABLE = _MOVING_OPS | _INTEGER_OPS | {"Split"}
_FOLD_GROWTH_BYTES = (
    1024  # a folded result may be larger than its inputs by this much (iota: a Range)
)
_SHARED_WEIGHT_BYTES = 1 << 16  # above this, a weight also read elsewhere is not folded into a copy


@rewrite(*_FOLDABLE, creates={"Constant"})
def fold_constants(model: ir.Model) -> int:
    """Replace nodes whose inputs are all constants by constants holding their result, for
    ops whose result is exact (element moves and selections of any dtype, integer and bool
    arithmetic): in the main graph (inputs initializers or Constant nodes, results
    initializers) and in function bodies (inputs and results Constant nodes of the body).
    A Cast of bools or integers folds when every value converts back exactly (to a float too).
    Index computations on constant positions (embedding lookups of ``arange`` positions,
    clamps of constant indices) disappear, and so does the layout work on a cell's weights
    (Split / Concat / Transpose of a GRU kernel) that :func:`hoist_loop_invariants` moved out
    of a loop body or that a kept function would redo at every call. A result is not folded
    when it would be more than 1 KiB larger than its inputs (a long ``Range`` stays a node),
    nor when it is large and a large input is also read elsewhere (a weight would be stored
    twice). A rearranged weight keeps the weight's name. Returns the number folded."""
    opset = model.opset_imports[""]  # set by the export from its config
    folded = _fold_graph(model, model.graph, False, opset)
    for function in model.functions.values():
        folded += _fold_graph(model, function.graph, True, opset)
    return folded


def _own_constant(v: ir.Value, graph: ir.Graph, in_function: bool) -> ir.TensorProtocol | None:
    """``v``'s tensor when it is a constant of ``graph`` itself: an initializer of the main
    graph, or the output of a Constant node of the graph (a function body's own, or one hoisted
    out of a loop body into the main graph); else None."""
    tensor = v.const_value
    if tensor is None:
        return None
    producer = v.producer()
    if producer is None:
        initializer = not in_function and v.name is not None and graph.initializers.get(v.name) is v
        return tensor if initializer else None
    own = producer.op_type == "Constant" and producer.domain == "" and producer.graph is graph
    return tensor if own else None


def _fold_graph(model: ir.Model, graph: ir.Graph, in_function: bool, opset: int) -> int:
    outputs = {id(v) for v in graph.outputs}
    folded = 0
    for node in list(graph):
        if node.domain != "" or node.op_type not in _FOLDABLE or not node.inputs:
            continue
        inputs = [v for v in node.inputs if v is not None]
        found = [_own_constant(v, graph, in_function) for v in inputs]
        tensors = [t for t in found if t is not None]
        if len(tensors) != len(inputs):
            continue
        if any(id(out) in outputs for out in node.outputs) or starts_dequantization(node):
            continue
        # a Cast of bools or integers to floats is exact when every value converts back (a mask
        # or an identity made of iota comparisons, as jnp.eye is)
        exact_cast = node.op_type == "Cast" and exact_dtype(inputs[0].dtype)
        if (
            node.op_type in _INTEGER_OPS
            and not exact_cast
            and not all(exact_dtype(v.dtype) for v in (*inputs, *node.outputs))
        ):
            continue
        with np.errstate(
            over="ignore", invalid="ignore"
        ):  # an int beyond the float: inf, which does not convert back
            results = _evaluate(node, opset)
            if results is None or len(results) != len(node.outputs):
                continue
            if exact_cast:
                original = tensors[0].numpy()
                if not np.array_equal(results[0].astype(original.dtype), original):
                    continue
        result_bytes = sum(r.nbytes for r in results)
        if result_bytes > sum(t.nbytes for t in tensors) + _FOLD_GROWTH_BYTES:
            continue
        if result_bytes > _SHARED_WEIGHT_BYTES and any(
            len(v.uses()) > 1
            for v, t in zip(inputs, tensors, strict=True)
            if t.nbytes > _SHARED_WEIGHT_BYTES
        ):
            continue  # a large weight read elsewhere too: folding would store it twice
        source = node.inputs[0]
        names = [out.name for out in node.outputs]
        if (
            not in_function
            and (node.op_type in _MOVING_OPS or exact_cast)
            and source is not None
            and len(source.uses()) == 1
            and source.name
            and graph.initializers.get(source.name) is source
        ):
            if len(names) == 1:
                # a rearranged (or exactly converted) weight keeps the weight's name
                # (``bn.mean``, an integer counter read as a float); the original is dropped
                names[0], source.name = source.name, unused_name(graph, f"{source.name}/original")
            else:  # the parts of a split weight are named after it
                names = [unused_name(graph, f"{source.name}_{i}") for i in range(len(names))]
        constants = []
        for out, result in zip(node.outputs, results, strict=True):
            if in_function:
                constant = new_constant(model, node, result, True)
                constant.type = out.type
            else:
                constant = ir.Value(
                    name=None,
                    shape=ir.Shape(result.shape),
                    type=out.type,
                    const_value=numpy_tensor(result),
                )
            ir.convenience.replace_all_uses_with(out, constant)
            constants.append(constant)
        graph.remove(node, safe=True)
        if (
            not in_function
            and source is not None
            and source.name is not None
            and graph.initializers.get(source.name) is source
            and not source.uses()
        ):
            graph.initializers.pop(source.name)
        for constant, name in zip(constants, names, strict=True):
            constant.name = name
            if not in_function:
                graph.register_initializer(constant)
        folded += 1
    return folded


def _evaluate(node: ir.Node, opset: int) -> list[np.ndarray] | None:
    """The node's results (one per output) on its constant inputs, by ONNX's reference
    implementation; None for an op, dtype or case it does not cover (the node then stays).

    Folds of small inputs (index arithmetic, shapes, a loop's bounds) are remembered by the
    op, its attributes and the inputs' bytes: each export of a model makes the same ones, and
    the reference evaluator costs ~0.3 ms a node (the node is serialized only when it runs)."""
    if any(v is not None and v.const_value is None for v in node.inputs):
        return None
    try:
        arrays = [
            None if v is None or v.const_value is None else v.const_value.numpy()
            for v in node.inputs
        ]
    except Exception:
        return None
    given = [a for a in arrays if a is not None]
    key = None
    if sum(a.nbytes for a in given) <= _EVALUATED_INPUT_BYTES and all(
        a.dtype.kind != "O" for a in given
    ):
        attributes = attributes_key(node)  # (strings: no bytes to compare)
        if attributes is not None:
            key = (
                opset,
                node.op_identifier(),
                len(node.outputs),
                attributes,
                *(None if a is None else (a.dtype, a.shape, a.tobytes()) for a in arrays),
            )
            known = _EVALUATED.get(key, _UNKNOWN)
            if known is not _UNKNOWN:
                return None if known is None else [a.copy() for a in known]
    try:
        proto = ir.serde.serialize_node(node)
        names = [f"in{i}" if a is not None else "" for i, a in enumerate(arrays)]
        del proto.input[:]
        proto.input.extend(names)
        del proto.output[:]
        proto.output.extend(f"out{i}" for i in range(len(node.outputs)))
    except Exception:
        return None
    feeds = {n: a for n, a in zip(names, arrays, strict=True) if a is not None}
    results = _reference_result(proto, feeds, opset)
    if key is not None:
        _EVALUATED.put(key, None if results is None else [a.copy() for a in results])
    return results


_EVALUATED_INPUT_BYTES = 1 << 12  # folds of inputs up to this size are remembered ...
_EVALUATED: BoundedMemo[list[np.ndarray] | None] = BoundedMemo(4096)  # ... this many at most
_UNKNOWN: Any = object()


def _reference_result(
    proto: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int
) -> list[np.ndarray] | None:
    try:
        inputs = [
            onnx.helper.make_tensor_value_info(
                n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
            )
            for n, a in feeds.items()
        ]
        outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in proto.output]
        graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception:
        return None
    return [np.asarray(r) for r in results]
