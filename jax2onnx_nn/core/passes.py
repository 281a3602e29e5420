"""Clean-up after lowering: exact constant folding, dead nodes, common subexpressions, and
types for every value."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common
from onnx.reference import ReferenceEvaluator

from jax2onnx_nn.core.graph import dtype_name, is_required, numpy_tensor, tensor_bytes
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.opset_forms import schema

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
# Split: exact, and what a cell's weights go through to become a GRU's W / R (the gate order)
_FOLDABLE = _MOVING_OPS | _INTEGER_OPS | {"Split"}
_FOLD_GROWTH_BYTES = 1024  # a folded result may be larger than its inputs by this much (iota: a Range)
_MERGE_MIN_BYTES = 1 << 16  # equal initializers at least this large are stored once
_SHARED_WEIGHT_BYTES = 1 << 16  # above this, a weight also read elsewhere is not folded into a copy


def rewrites(acts_on: frozenset[str] | set[str], creates: frozenset[str] | set[str] = frozenset()) -> Any:
    """Declare the op types of the default domain a pass rewrites (``acts_on``: with none of
    them in the model it changes nothing) and the op types it may add (``creates``), so
    that :func:`run_if_present` can skip it on a model whose :func:`op_census` lacks them."""

    def declare(pass_: Any) -> Any:
        pass_.acts_on, pass_.creates = frozenset(acts_on), frozenset(creates)
        return pass_

    return declare


def op_census(model: ir.Model) -> set[str]:
    """The op types of the default domain anywhere in ``model`` (main graph, bodies, function
    bodies), in one walk: what the passes declared with :func:`rewrites` are asked against,
    instead of each walking the whole model to find nothing to do."""
    return {n.op_type for n, _ in all_nodes(model) if n.domain in ("", "ai.onnx")}


def run_if_present(pass_: Any, model: ir.Model, census: set[str]) -> Any:
    """``pass_(model)`` when the model holds an op type it rewrites (else None, nothing
    walked); the op types it may add join ``census``, which stays a superset of the
    model's op types while passes only remove, move or add declared ones."""
    if census.isdisjoint(pass_.acts_on):
        return None
    census |= pass_.creates
    return pass_(model)


def _exact_dtype(dtype: ir.DataType | None) -> bool:
    return dtype is not None and (dtype.is_integer() or dtype == ir.DataType.BOOL)


@rewrites(_FOLDABLE, creates={"Constant"})
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


def _is_constant(v: ir.Value, graph: ir.Graph, in_function: bool) -> bool:
    """Whether ``v`` is a constant of ``graph`` itself: an initializer of the main graph, or
    the output of a Constant node of the graph (a function body's own, or one hoisted out of
    a loop body into the main graph)."""
    if v.const_value is None:
        return False
    producer = v.producer()
    if producer is None:
        return not in_function and graph.initializers.get(v.name) is v
    return producer.op_type == "Constant" and producer.domain == "" and producer.graph is graph


def _fold_graph(model: ir.Model, graph: ir.Graph, in_function: bool, opset: int) -> int:
    outputs = {id(v) for v in graph.outputs}
    folded = 0
    for node in list(graph):
        if node.domain != "" or node.op_type not in _FOLDABLE or not node.inputs:
            continue
        inputs = [v for v in node.inputs if v is not None]
        if not all(_is_constant(v, graph, in_function) for v in inputs):
            continue
        if any(id(out) in outputs for out in node.outputs):
            continue
        # a Cast of bools or integers to floats is exact when every value converts back (a mask
        # or an identity made of iota comparisons, as jnp.eye is)
        exact_cast = node.op_type == "Cast" and _exact_dtype(inputs[0].dtype)
        if node.op_type in _INTEGER_OPS and not exact_cast and not all(_exact_dtype(v.dtype) for v in (*inputs, *node.outputs)):
            continue
        with np.errstate(over="ignore", invalid="ignore"):  # an int beyond the float: inf, which does not convert back
            results = _evaluate(node, opset)
            if results is None or len(results) != len(node.outputs):
                continue
            if exact_cast:
                source = inputs[0].const_value.numpy()
                if not np.array_equal(results[0].astype(source.dtype), source):
                    continue
        result_bytes = sum(r.nbytes for r in results)
        if result_bytes > sum(v.const_value.nbytes for v in inputs) + _FOLD_GROWTH_BYTES:
            continue
        if result_bytes > _SHARED_WEIGHT_BYTES and any(len(v.uses()) > 1 for v in inputs if v.const_value.nbytes > _SHARED_WEIGHT_BYTES):
            continue  # a large weight read elsewhere too: folding would store it twice
        source = node.inputs[0]
        names = [out.name for out in node.outputs]
        renamed = (
            not in_function and (node.op_type in _MOVING_OPS or exact_cast) and source is not None and len(source.uses()) == 1
            and source.name and graph.initializers.get(source.name) is source
        )
        if renamed and len(names) == 1:
            # a rearranged (or exactly converted) weight keeps the weight's name (``bn.mean``,
            # an integer counter read as a float); the original is dropped
            names[0], source.name = source.name, _unused_name(graph, f"{source.name}/original")
        elif renamed:  # the parts of a split weight are named after it
            names = [_unused_name(graph, f"{source.name}_{i}") for i in range(len(names))]
        constants = []
        for out, result in zip(node.outputs, results, strict=True):
            if in_function:
                constant = _new_constant(model, node, result, True)
                constant.type = out.type
            else:
                constant = ir.Value(name=None, shape=ir.Shape(result.shape), type=out.type, const_value=numpy_tensor(result))
            ir.convenience.replace_all_uses_with(out, constant)
            constants.append(constant)
        graph.remove(node, safe=True)
        if not in_function and source is not None and graph.initializers.get(source.name) is source and not source.uses():
            graph.initializers.pop(source.name)
        for constant, name in zip(constants, names, strict=True):
            constant.name = name
            if not in_function:
                graph.register_initializer(constant)
        folded += 1
    return folded


def _unused_name(graph: ir.Graph, name: str) -> str:
    candidate, i = name, 0
    while candidate in graph.initializers:
        i += 1
        candidate = f"{name}_{i}"
    return candidate


def _evaluate(node: ir.Node, opset: int) -> list[np.ndarray] | None:
    """The node's results (one per output) on its constant inputs, by ONNX's reference implementation; None
    for an op, dtype or case it does not cover (the node then stays).

    Folds of small inputs (index arithmetic, shapes, a loop's bounds) are remembered by the
    op, its attributes and the inputs' bytes: each export of a model makes the same ones, and
    the reference evaluator costs ~0.3 ms a node (the node is serialized only when it runs)."""
    try:
        arrays = [None if v is None else v.const_value.numpy() for v in node.inputs]
    except Exception:  # noqa: BLE001 - an input that does not convert is not folded
        return None
    given = [a for a in arrays if a is not None]
    key = None
    if sum(a.nbytes for a in given) <= _EVALUATED_INPUT_BYTES and all(a.dtype.kind != "O" for a in given):
        attributes = _attributes_key(node)  # (strings: no bytes to compare)
        if attributes is not None:
            key = (opset, node.op_identifier(), len(node.outputs), attributes,
                   *(None if a is None else (a.dtype, a.shape, a.tobytes()) for a in arrays))
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
    except Exception:  # noqa: BLE001 - a node that does not convert is not folded
        return None
    feeds = {n: a for n, a in zip(names, arrays, strict=True) if a is not None}
    results = _reference_result(proto, feeds, opset)
    if key is not None:
        _EVALUATED.put(key, None if results is None else [a.copy() for a in results])
    return results


_EVALUATED_INPUT_BYTES = 1 << 12  # folds of inputs up to this size are remembered ...
_EVALUATED: BoundedMemo[list[np.ndarray] | None] = BoundedMemo(4096)  # ... this many at most
_UNKNOWN: Any = object()


def _reference_result(proto: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    try:
        inputs = [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ]
        outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in proto.output]
        graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - the reference's coverage decides, not ours
        return None
    return [np.asarray(r) for r in results]


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
    return _same_dims(a.shape, b.shape)


def _static_dims(v: ir.Value) -> tuple[int, ...] | None:
    if v.shape is None or not all(isinstance(d, int) for d in v.shape):
        return None
    return tuple(int(d) for d in v.shape)


def _shortcut(node: ir.Node, model: ir.Model | None) -> ir.Value | None:
    """What ``node`` (a layout op fed by another one) computes, from the chain's source: the
    source itself when the pair is the identity, a new single node's output, or None. A new
    Reshape's shape is an initializer of ``model``, or a Constant node without one (in a
    function body)."""
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
    if dims is None or 0 in dims:  # a 0 in a Reshape's shape reads as "copy the input dim"
        return None
    if model is not None:
        return _insert_before(node, "Reshape", [x, _new_constant(model, node, np.asarray(dims, np.int64), False)], {}, out)
    shape = ir.Value(name=None, shape=ir.Shape([len(dims)]), type=ir.TensorType(ir.DataType.INT64),
                     const_value=numpy_tensor(np.asarray(dims, np.int64)))
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


@rewrites({"Transpose", "Cast", *_SHAPE_OPS}, creates={"Transpose", "Cast", "Reshape", "Constant"})
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
        for node in graph_nodes(graph):
            if node.domain != "" or node.op_type not in {"Transpose", "Cast", *_SHAPE_OPS} or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            if not node.inputs or node.inputs[0] is None or is_required(node):
                continue
            replacement = _shortcut(node, model if graph is model.graph else None)
            if replacement is None or replacement is out:
                continue
            if out.is_graph_output() and not _renamable(replacement, node.graph):
                continue
            _take_place(out, replacement)
            bypassed += 1
    return bypassed


def _take_place(old: ir.Value, new: ir.Value) -> None:
    """``new`` replaces ``old`` for every reader, and as a graph output under ``old``'s name."""
    was_output = old.is_graph_output()
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if was_output:
        name, old.name = old.name, None
        new.name = name


def _renamable(v: ir.Value, graph: ir.Graph | None) -> bool:
    """``v`` can take the place (and the name) of an output of ``graph``: the result of one of
    its nodes that is not an output already (a graph input, an initializer or a value of an
    enclosing graph keeps its name)."""
    producer = v.producer()
    return producer is not None and producer.graph is graph and not v.is_graph_output()


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
    dims = [None] * len(perm)  # the input's dims, from the output's (a rule may leave the input unshaped)
    for i, p in enumerate(perm):
        dims[p] = out.shape[i]
    kept = [p for p in perm if dims[p] != 1]
    if kept != sorted(kept) or any(isinstance(d, int) and d == 0 for d in out.shape):
        return None
    target: list[int] = []
    for i, d in enumerate(out.shape):
        if isinstance(d, int):
            target.append(d)
        elif _same_dim(dims[i], d):
            target.append(0)
        else:
            target.append(-1)
    if target.count(-1) > 1 or (-1 in target and 0 in target):
        return None
    return target


@rewrites({"Transpose"}, creates={"Reshape", "Constant"})
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
        if node.domain != "" or node.op_type != "Transpose" or is_required(node) or node.inputs[0] is None:
            continue
        target = _relabelling_shape(node)
        if target is None:
            continue
        shape = _new_constant(model, node, np.asarray(target, np.int64), in_function)
        out = node.outputs[0]
        reshape = ir.Node("", "Reshape", [node.inputs[0], shape], name=node.name or None)
        reshape.outputs[0].shape, reshape.outputs[0].type = out.shape, out.type
        reshape.outputs[0].name = f"{out.name}/relabelled" if out.name else None
        node.graph.insert_before(node, reshape)
        _take_place(out, reshape.outputs[0])
        replaced += 1
    if replaced:
        cancel_layout_chains(model)
        remove_unused_nodes(model)
    return replaced


_REDUCTIONS = frozenset(["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"])


def _reduced_axes(node: ir.Node, rank: int) -> list[int] | None:
    """The axes ``node`` (a Reduce*) reduces, non-negative and sorted; None when unknown."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:  # axes as an input (ReduceSum 13, the rest 18)
        axes = _const_array(node.inputs[1])
        if axes is None:
            return None
        axes = axes.reshape(-1).tolist()
    elif (attr := node.attributes.get("axes")) is not None:
        axes = list(attr.as_ints())
    else:
        axes = []
    if not axes:  # no axes: all of them, unless noop_with_empty_axes
        return None if node.attributes.get_int("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a % rank for a in axes)


@rewrites(_REDUCTIONS)
def keep_reduced_dims(model: ir.Model) -> int:
    """``ReduceX(keepdims=0)`` read only by an ``Unsqueeze`` of exactly the reduced axes (JAX's
    ``keepdims=True``: a reduction then a broadcast_in_dim/expand_dims) becomes one
    ``ReduceX(keepdims=1)``; same values, same shape. Returns the number of Unsqueezes removed
    (left unread for the clean-up)."""
    removed = 0
    for node, _ in all_nodes(model):
        if node.domain != "" or node.op_type != "Unsqueeze" or len(node.inputs) < 2 or is_required(node):
            continue
        source, out = node.inputs[0], node.outputs[0]
        reduce = source.producer() if source is not None else None
        if (reduce is None or reduce.domain != "" or reduce.op_type not in _REDUCTIONS or is_required(reduce)
                or reduce.attributes.get_int("keepdims", 1) != 0 or _one_reader(source) is not node
                or out.shape is None or reduce.inputs[0] is None):
            continue
        rank = len(out.shape)
        unsqueezed = _const_array(node.inputs[1])
        if unsqueezed is None or reduce.inputs[0].shape is not None and len(reduce.inputs[0].shape) != rank:
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

def graph_nodes(graph: ir.Graph | ir.Function) -> list[ir.Node]:
    """Every node of ``graph`` and of its body graphs, each node before the nodes of its
    bodies: the order of ``ir.traversal.RecursiveGraphIterator``, at half its cost (it makes
    a generator per node; the passes walk the whole model several times per export)."""
    nodes: list[ir.Node] = []

    def walk(g: Any) -> None:
        for node in g:
            nodes.append(node)
            for body in node_bodies(node):
                walk(body)

    walk(graph)
    return nodes


# The ops of the default domain that have graph attributes: any other op of that domain has
# none, which spares the passes a look at every attribute of every node on each walk.
_BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def node_bodies(node: ir.Node) -> list[ir.Graph]:
    """The graphs in ``node``'s attributes: a Loop's or Scan's body, an If's branches (none for
    a reference to a function's attribute)."""
    if node.op_type not in _BODY_OPS and node.domain in ("", "ai.onnx"):
        return []
    bodies: list[ir.Graph] = []
    for attr in node.attributes.values():
        if attr.is_ref():
            continue
        if attr.type == ir.AttributeType.GRAPH:
            bodies.append(attr.value)
        elif attr.type == ir.AttributeType.GRAPHS:
            bodies.extend(attr.value)
    return bodies


def all_nodes(model: ir.Model) -> list[tuple[ir.Node, bool]]:
    """Every node of the main graph (with its subgraphs) and of the function bodies, with
    whether it lives in a function (whose constants must be Constant nodes of its own)."""
    nodes = [(n, False) for n in graph_nodes(model.graph)]
    for function in model.functions.values():
        nodes.extend((n, True) for n in graph_nodes(function))
    return nodes


def _new_constant(model: ir.Model, before: ir.Node, array: np.ndarray, in_function: bool) -> ir.Value:
    """``array`` as a value ``before`` can read: an initializer of the main graph (bodies read
    the enclosing scope), or a Constant node in a function body."""
    tensor = numpy_tensor(array)
    if in_function:
        node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", tensor)])
        out = node.outputs[0]
        out.shape, out.type, out.const_value = ir.Shape(array.shape), ir.TensorType(tensor.dtype), tensor
        before.graph.insert_before(before, node)
        return out
    value = ir.Value(name=_unused_name(model.graph, f"const_{dtype_name(array.dtype)}"), shape=ir.Shape(array.shape),
                     type=ir.TensorType(tensor.dtype), const_value=tensor)
    model.graph.register_initializer(value)
    return value


def _same_dim(a: Any, b: Any) -> bool:
    """Equal ints, or equal named symbolic dims."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return isinstance(a, ir.SymbolicDim) and a.value is not None and a == b


def _same_dims(a: ir.Shape | None, b: ir.Shape | None) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(_same_dim(x, y) for x, y in zip(a, b, strict=True))


def _shape_of(v: ir.Value) -> ir.Shape | None:
    """``v``'s shape; for a value a rule made without one (only equation results are
    stamped before :func:`fill_missing_types`), that of a broadcasting op between one value
    of known shape and size-1 constants of no larger rank."""
    if v.shape is not None:
        return v.shape
    node = v.producer()
    if node is None or node.domain != "" or node.op_type not in _BROADCASTING:
        return None
    shaped = [u for u in node.inputs if u is not None and _const_array(u) is None]
    if len(shaped) != 1 or shaped[0].shape is None:
        return None
    rank = len(shaped[0].shape)
    if any(c is not None and c is not shaped[0] and (_const_array(c).size != 1 or _const_array(c).ndim > rank) for c in node.inputs):
        return None
    return shaped[0].shape


def _const_array(v: ir.Value | None) -> np.ndarray | None:
    return v.const_value.numpy() if v is not None and v.const_value is not None else None


def _identity_operand(node: ir.Node) -> ir.Value | None:
    """The operand ``x`` when ``node`` is ``x * 1``, ``x / 1``, ``x - 0`` or ``x + 0`` by a
    constant that broadcasts to nothing new (all ones dims, rank at most ``x``'s). Exact only:
    for floats ``x + 0`` needs the constant ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``) and ``x - 0``
    the constant ``+0.0``; integers any zero."""
    if node.domain != "" or node.op_type not in ("Add", "Sub", "Mul", "Div") or len(node.inputs) != 2:
        return None
    out = node.outputs[0]
    for i in (0, 1) if node.op_type in ("Add", "Mul") else (0,):
        x, c = node.inputs[i], node.inputs[1 - i]
        array = _const_array(c)
        if x is None or array is None or array.size != 1 or x.dtype != out.dtype or not _same_shape(x, out):
            continue
        if x.shape is None or array.ndim > len(x.shape):
            continue
        value = array.reshape(()).item()
        integer = _exact_dtype(out.dtype)
        if node.op_type in ("Mul", "Div") and value == 1:
            return x
        if node.op_type == "Add" and value == 0 and (integer or np.signbit(array).all()):
            return x
        if node.op_type == "Sub" and value == 0 and (integer or not np.signbit(array).any()):
            return x
    return None


_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Where", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})


def _leading_unsqueeze_source(v: ir.Value | None) -> ir.Value | None:
    """The source of ``v = Unsqueeze(source, [0, ..., k-1])`` or of a Reshape that only puts
    size-1 axes in front (new leading axes only)."""
    node = v.producer() if v is not None else None
    if node is None or node.domain != "" or len(node.inputs) != 2 or v.shape is None or is_required(node):
        return None
    source = node.inputs[0]
    if node.op_type == "Reshape":
        if source is None or source.shape is None or len(source.shape) > len(v.shape):
            return None
        k = len(v.shape) - len(source.shape)
        fits = all(d == 1 for d in v.shape[:k]) and _same_dims(ir.Shape(list(v.shape)[k:]), source.shape)
        return source if fits else None
    if node.op_type != "Unsqueeze":
        return None
    axes = _const_array(node.inputs[1])
    if axes is None:
        return None
    rank = len(v.shape)
    if sorted(int(a) % rank for a in axes.reshape(-1)) != list(range(axes.size)):
        return None
    return source


def _lower_bound(v: ir.Value | None) -> int | None:
    """A provable lower bound of the integer values of ``v``: ``Range(start, n, step)`` with
    constant ``start`` and ``step > 0`` is at least ``start``; a Cast of it to an integer type
    too when ``n`` is a dim (``Squeeze(Shape(..))``: a dim is below 2**31, so an int32 cast of
    a count up to it does not wrap)."""
    node = v.producer() if v is not None else None
    if node is None or node.domain != "":
        return None
    if node.op_type == "Cast" and _exact_dtype(v.dtype) and v.dtype != ir.DataType.BOOL:
        source = node.inputs[0].producer() if node.inputs[0] is not None else None
        limit = source.inputs[1].producer() if source is not None and source.op_type == "Range" and source.inputs[1] is not None else None
        shape = limit.inputs[0].producer() if limit is not None and limit.op_type == "Squeeze" and limit.inputs[0] is not None else None
        if shape is None or shape.op_type != "Shape" or ir.DataType(node.attributes["to"].value).itemsize < 4:
            return None
        return _lower_bound(node.inputs[0])
    if node.op_type == "Range":
        start, step = (_const_array(node.inputs[i]) for i in (0, 2))
        if start is not None and step is not None and start.size == 1 and step.size == 1 and step.item() > 0:
            return int(start.item())
    return None


def _always_true(v: ir.Value | None) -> bool:
    """``v = GreaterOrEqual(x, c)`` with ``c`` a constant at most :func:`_lower_bound` of ``x``."""
    node = v.producer() if v is not None else None
    if node is None or node.domain != "" or node.op_type != "GreaterOrEqual":
        return False
    bound, limit = _lower_bound(node.inputs[0]), _const_array(node.inputs[1])
    return bound is not None and limit is not None and limit.size == 1 and bound >= limit.item()


def _copied_dims_shape(node: ir.Node) -> np.ndarray | None:
    """A constant shape for ``Reshape(x, computed_shape)``: 0 (copy) where an output dim is
    the input's symbolic dim at that position, the int where it is static; None when a dim
    is neither or is a static 0 (0 means "copy" without allowzero)."""
    if node.domain != "" or node.op_type != "Reshape" or len(node.inputs) != 2 or is_required(node):
        return None
    x, shape = node.inputs
    out = node.outputs[0]
    if x is None or shape is None or shape.const_value is not None or x.shape is None or out.shape is None:
        return None
    dims: list[int] = []
    for i, d in enumerate(out.shape):
        if isinstance(d, int) and d >= 1:
            dims.append(d)
        elif not isinstance(d, int) and i < len(x.shape) and _same_dim(x.shape[i], d):
            dims.append(0)
        else:
            return None
    return np.asarray(dims, np.int64)


def simplify_plumbing(model: ir.Model) -> int:
    """Remove the arithmetic and shape computations a lowering writes that compute nothing new:

    - ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0`` (exact cases only, :func:`_identity_operand`),
      as ``jnp.arange`` over a symbolic length writes ``0 + 1 * iota``;
    - ``And(x >= c, y)`` when ``x >= c`` holds for every element (positions from a ``Range``
      checked against a table's lower bound, :func:`_always_true`) is ``y``;
    - an ``Unsqueeze`` (or Reshape) adding leading axes before an op that broadcasts (numpy
      rules add them anyway) when another operand has at least that rank;
    - a ``Reshape`` whose shape is computed at run time (``Concat`` of ``Shape`` pieces for a
      symbolic batch) gets a constant shape when each dim is static or copies the input's
      dim at its position (ONNX's 0), so the computation goes.

    One walk over the main graph, its subgraphs and the function bodies. Returns the number
    of rewrites; the nodes left unused are removed by the clean-up."""
    rewritten = 0
    for node, in_function in all_nodes(model):
        if node.graph is None:
            continue
        out = node.outputs[0] if node.outputs else None
        x = _identity_operand(node)
        if x is not None and not out.is_graph_output():
            out.replace_all_uses_with(x)
            rewritten += 1
            continue
        if node.domain == "" and node.op_type == "And" and not out.is_graph_output():
            kept = [b for a, b in (node.inputs, node.inputs[::-1]) if _always_true(a) and _same_dims(_shape_of(b), _shape_of(a))]
            if kept:
                out.replace_all_uses_with(kept[0])
                rewritten += 1
                continue
        if node.domain == "" and node.op_type in _BROADCASTING and out is not None and out.shape is not None:
            for i, v in enumerate(node.inputs):
                source = _leading_unsqueeze_source(v)
                others = [u for j, u in enumerate(node.inputs) if j != i and u is not None]
                if source is None or not all(u.shape is not None for u in others):
                    continue
                if max((len(u.shape) for u in others), default=0) >= len(v.shape):
                    node.replace_input_with(i, source)
                    rewritten += 1
        dims = _copied_dims_shape(node)
        if dims is not None:
            node.replace_input_with(1, _new_constant(model, node, dims, in_function))
            if "allowzero" in node.attributes:
                del node.attributes["allowzero"]
            rewritten += 1
    return rewritten


def _one_reader(v: ir.Value) -> ir.Node | None:
    uses = v.uses()
    if len(uses) != 1 or v.is_graph_output():
        return None
    return uses[0].node


def _split_heads_reshape(split: ir.Node, readers: list[ir.Node]) -> tuple[list[int], list[int]] | None:
    """For Split outputs each reshaped to ``pre + [n_i] + tail`` (``pre`` the dims before the
    split axis, ``tail`` static and the same for all): the shape ``[0] * len(pre) + [sum n] +
    tail`` of one Reshape before the Split, and the split sizes ``n_i``. The row-major order
    makes this the same: each output is a contiguous block of the flattened axis and what
    follows it."""
    x = split.inputs[0]
    axis = _axis(split, x)
    if axis is None:
        return None
    post = x.shape[axis + 1:]
    if not all(isinstance(d, int) for d in post):
        return None
    tail = None
    sizes = []
    for out, reader in zip(split.outputs, readers, strict=True):
        y = reader.outputs[0]
        if y.shape is None or len(y.shape) < axis + 1 or out.shape is None or not isinstance(out.shape[axis], int):
            return None
        if not all(_same_dim(a, b) for a, b in zip(x.shape[:axis], y.shape[:axis], strict=False)):
            return None
        this_tail = list(y.shape[axis + 1:])
        n = y.shape[axis]
        if not isinstance(n, int) or n < 1 or not all(isinstance(d, int) and d >= 1 for d in this_tail):
            return None
        if tail is not None and this_tail != tail:
            return None
        tail = this_tail
        if n * int(np.prod(tail, dtype=np.int64)) != out.shape[axis] * int(np.prod(post, dtype=np.int64)):
            return None
        sizes.append(n)
    return [0] * axis + [sum(sizes)] + list(tail or []), sizes


def _axis(split: ir.Node, x: ir.Value | None) -> int | None:
    if x is None or x.shape is None:
        return None
    axis = split.attributes["axis"].value if "axis" in split.attributes else 0
    rank = len(x.shape)
    return axis % rank if -rank <= axis < rank else None


def _hoist_over_split(model: ir.Model, split: ir.Node, in_function: bool) -> ir.Node | None:
    """Rewrite one Split whose every output is read once, by a Reshape (all of them) or a
    Transpose (most with the same perm): the layout op runs once on the Split's input. Returns
    the new Split, None when nothing was rewritten."""
    if split.domain != "" or split.op_type != "Split" or any(o.is_graph_output() for o in split.outputs):
        return None
    readers = [_one_reader(o) for o in split.outputs]
    if len(readers) < 2 or any(r is None or r.domain != "" or is_required(r) for r in readers):
        return None
    kinds = {r.op_type for r in readers}
    x = split.inputs[0]
    axis = _axis(split, x)
    if axis is None or any(o.shape is None or not isinstance(o.shape[axis], int) for o in split.outputs):
        return None
    graph = split.graph
    if kinds == {"Reshape"}:
        plan = _split_heads_reshape(split, readers)
        if plan is None:
            return None
        shape, sizes = plan
        target = _new_constant(model, split, np.asarray(shape, np.int64), in_function)
        moved = ir.Node("", "Reshape", [x, target], name=readers[0].name or None)
        moved.outputs[0].name = f"{readers[0].outputs[0].name}/before_split" if readers[0].outputs[0].name else None
        moved.outputs[0].type = x.type
        moved.outputs[0].shape = ir.Shape([*x.shape[:axis], int(sum(sizes)), *shape[axis + 1:]])
        new_axis, finals = axis, [r.outputs[0] for r in readers]
        residual: list[list[int] | None] = [None] * len(readers)
    elif kinds == {"Transpose"}:
        if any("perm" not in r.attributes for r in readers):
            return None
        perms = [list(r.attributes["perm"].value) for r in readers]
        perm = max(perms, key=perms.count)
        if perms.count(perm) < 2:
            return None
        inverse = [perm.index(i) for i in range(len(perm))]
        moved = ir.Node("", "Transpose", [x], attributes=[ir.AttrInt64s("perm", perm)], name=readers[0].name or None)
        moved.outputs[0].name = f"{readers[0].outputs[0].name}/before_split" if readers[0].outputs[0].name else None
        moved.outputs[0].type = x.type
        moved.outputs[0].shape = ir.Shape([x.shape[p] for p in perm])
        new_axis, finals = inverse[axis], [r.outputs[0] for r in readers]
        sizes = [o.shape[axis] for o in split.outputs]
        residual = [None if p == perm else [inverse[q] for q in p] for p in perms]
    else:
        return None
    graph.insert_before(split, moved)
    counts = _new_constant(model, split, np.asarray(sizes, np.int64), in_function)
    new_split = ir.Node("", "Split", [moved.outputs[0], counts], attributes=[ir.AttrInt64("axis", new_axis)],
                        num_outputs=len(sizes), name=split.name or None)
    graph.insert_before(split, new_split)
    for piece, final, rest, old in zip(new_split.outputs, finals, residual, split.outputs, strict=True):
        piece.type = final.type
        if rest is None:
            piece.shape = final.shape
            final.replace_all_uses_with(piece)
            if final.name:  # the value a reader sees keeps its name
                piece.name, final.name = final.name, f"{final.name}/replaced"
            continue
        piece.shape = ir.Shape([old.shape[p] for p in perm])
        fix = ir.Node("", "Transpose", [piece], attributes=[ir.AttrInt64s("perm", rest)])
        fix.outputs[0].type, fix.outputs[0].shape = final.type, final.shape
        graph.insert_before(split, fix)
        final.replace_all_uses_with(fix.outputs[0])
    return new_split


@rewrites({"Split"}, creates={"Split", "Reshape", "Transpose", "Constant"})
def hoist_layout_over_split(model: ir.Model) -> int:
    """A Split whose outputs are each reshaped the same way (attention's heads:
    ``split(qkv, 3)`` then each ``(B, T, C) -> (B, T, N, H)``) or transposed mostly by one perm
    becomes one Reshape or Transpose before a Split: ``k`` layout ops become one (plus a
    Transpose for each output whose perm differs, from the moved perm to its own). Exact (only
    elements move). Repeated on the new Split, so a Reshape and then a Transpose both move.
    Returns the number of Splits rewritten."""
    rewritten = 0
    for node, in_function in all_nodes(model):
        split = node if node.graph is not None and node.op_type == "Split" else None
        while split is not None:
            split = _hoist_over_split(model, split, in_function)
            rewritten += split is not None
    return rewritten


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
        weight.const_value = numpy_tensor(w_new, name=weight.name)
        if bias_value is None:
            bias_value = ir.Value(name=f"{weight.name}/folded_bias", shape=ir.Shape([channels]), type=weight.type)
            bias_value.const_value = numpy_tensor(b_new, name=bias_value.name)
            graph.register_initializer(bias_value)
            producer.resize_inputs(3)
            producer.replace_input_with(2, bias_value)
        else:
            bias_value.const_value = numpy_tensor(b_new, name=bias_value.name)
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
    "Constant", "Identity", "Split", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Concat", "Cast", "Shape",
    "Add", "Sub", "Mul", "Neg", "Abs", "Min", "Max", "Exp", "Sqrt", "Reciprocal", "Not", "And", "Or",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Where", "Expand", "Range", "Slice",
})


@rewrites({"Loop", "Scan"})
def hoist_loop_invariants(model: ir.Model) -> int:
    """Move nodes of a ``Loop`` or ``Scan`` body whose inputs all come from outside the body
    (constants, values of the enclosing graph, or such nodes) in front of the loop, so that
    they run once instead of once per iteration. Only ops without side effects or failure
    modes (:data:`_HOISTABLE`) move, and never a node making a body output. One walk over
    each body, inner loops first, so that work invariant in every loop around it moves out of
    all of them (into the main graph, where constant folding sees it: the shift amounts of a
    ``jax.random`` kernel in a ``while_loop`` in a ``lax.map``). The main graph and function
    bodies. Returns the number of nodes moved."""
    moved = 0
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    for graph in graphs:
        # the traversal meets a loop before the loops in its body: reversed, inner ones first
        for loop in reversed(graph_nodes(graph)):
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


# -- dead loop state: carries and stacked outputs nobody reads ---------------------------

_DEAD_STATE_ROUNDS = 3  # walks over nested loops (each round drops what the last one left unread)


def _reads(node: ir.Node) -> list[ir.Value]:
    """The values ``node`` reads: its inputs and, for a node with bodies, every input of the
    nodes in them (a superset of what the bodies capture from around the node)."""
    reads = [v for v in node.inputs if v is not None]
    for body in node_bodies(node):
        reads.extend(v for inner in graph_nodes(body) for v in inner.inputs if v is not None)
    return reads


_LOOP_OPS = frozenset({"Loop", "Scan"})


def _loop_layout(loop: ir.Node) -> tuple[int, int, int, int] | None:
    """(number of states, index of the first state among the node's inputs, among its body's
    inputs, among its body's outputs) of a ``Loop`` or ``Scan``; None for another node or a
    body that does not match the node."""
    body = loop.attributes.get("body")
    if loop.domain != "" or loop.op_type not in ("Loop", "Scan") or not isinstance(body, ir.Attr) or body.is_ref():
        return None
    if loop.op_type == "Loop":
        layout = (len(loop.inputs) - 2, 2, 2, 1)
    else:
        layout = (len(loop.inputs) - loop.attributes["num_scan_inputs"].as_int(), 0, 0, 0)
    n_states, _, first_body_input, first_body_output = layout
    if len(body.value.inputs) < first_body_input + n_states or len(body.value.outputs) != first_body_output + len(loop.outputs):
        return None
    return layout


def _live_body_outputs(loop: ir.Node, used: list[bool]) -> tuple[list[bool], set[int]]:
    """Which body outputs of ``loop`` (laid out as :func:`_loop_layout` says) stay when the
    node outputs flagged ``used`` are read, and the ids of the values the body then needs (the
    values it captures included). A state whose body input feeds a live body output is live
    too (grown to a fixed point); a Loop's condition always is."""
    n_states, _, first_body_input, first_body_output = _loop_layout(loop)  # type: ignore[misc]
    body = loop.attributes["body"].value
    live = [True] * first_body_output + list(used)
    state_of_input = {id(body.inputs[first_body_input + k]): k for k in range(n_states)}
    while True:
        needed = {id(v) for v, keep in zip(body.outputs, live, strict=True) if keep}
        for node in reversed(list(body)):
            if any(id(o) in needed for o in node.outputs):
                needed |= _needed_reads(node, needed)
        grown = False
        for value_id, k in state_of_input.items():
            if value_id in needed and not live[first_body_output + k]:
                live[first_body_output + k] = grown = True
        if not grown:
            return live, needed


def _needed_reads(node: ir.Node, needed: set[int]) -> set[int]:
    """The ids of the values ``node`` reads to compute its outputs whose ids are in
    ``needed``. A Loop or Scan needs its trip count, condition and scanned inputs, the initial
    values of its live states only, and what its body needs for them: so a state of an inner
    loop that only feeds a dead state of the loop around it is dead too (vectors rotated
    alongside a matrix in rounds inside a convergence loop, when only the matrix is read).
    Any other node needs all it reads (:func:`_reads`)."""
    layout = _loop_layout(node)
    if layout is None:
        return {id(v) for v in _reads(node)}
    n_states, first_input, _, first_body_output = layout
    live, body_needs = _live_body_outputs(node, [id(o) in needed for o in node.outputs])
    dead_input = lambda i: first_input <= i < first_input + n_states and not live[first_body_output + i - first_input]  # noqa: E731
    return body_needs | {id(v) for i, v in enumerate(node.inputs) if v is not None and not dead_input(i)}


def _prune_loop(loop: ir.Node) -> int:
    """:func:`remove_dead_loop_state` on one ``Loop`` or ``Scan`` and the loops in its body:
    returns the number of states and stacked outputs removed."""
    layout = _loop_layout(loop)
    if layout is None:
        return 0
    n_states, first_input, first_body_input, first_body_output = layout
    body = loop.attributes["body"].value
    is_loop = loop.op_type == "Loop"
    used = [bool(o.uses()) or o.is_graph_output() for o in loop.outputs]
    live, _ = _live_body_outputs(loop, used)
    dead = [i for i, keep in enumerate(live[first_body_output:]) if not keep]  # node output indices
    if not dead:
        return 0
    # the body: its outputs, then the nodes only they needed, the dead states of the loops
    # in it (which read the states' inputs), what those needed, then the states' inputs
    for i in reversed(dead):
        body.outputs.pop(first_body_output + i)
    _remove_unused_in(body, None)
    removed = sum(_prune_loop(inner) for inner in reversed(list(body)) if _loop_layout(inner) is not None)
    if removed:
        _remove_unused_in(body, None)
    dead_states = [i for i in dead if i < n_states]
    dead_scans = [i - n_states for i in dead if i >= n_states]
    for k in reversed(dead_states):
        body.inputs.pop(first_body_input + k)
    # the node: a new one without the dead inputs and outputs, its outputs taking the old ones' place
    inputs = [v for i, v in enumerate(loop.inputs) if not (first_input <= i < first_input + n_states and i - first_input in dead_states)]
    attributes = dict(loop.attributes)
    if not is_loop:
        for name in ("scan_output_axes", "scan_output_directions"):
            if name in attributes:
                kept = [x for j, x in enumerate(attributes[name].as_ints()) if j not in dead_scans]
                attributes[name] = ir.AttrInt64s(name, kept)
    kept_outputs = [o for i, o in enumerate(loop.outputs) if i not in dead]
    graph = loop.graph
    pruned = ir.Node(loop.domain, loop.op_type, inputs, attributes.values(), num_outputs=len(kept_outputs),
                     version=loop.version, doc_string=loop.doc_string, metadata_props=dict(loop.metadata_props))
    pruned.meta.update(loop.meta)
    graph.insert_before(loop, pruned)
    names = []
    for old, new in zip(kept_outputs, pruned.outputs, strict=True):
        new.type, new.shape = old.type, old.shape
        new.meta.update(old.meta)
        names.append(old.name)
        old.replace_all_uses_with(new, replace_graph_outputs=True)
    graph.remove(loop, safe=True)
    pruned.name = loop.name
    for name, new in zip(names, pruned.outputs, strict=True):
        new.name = name
    return len(dead) + removed


@rewrites({"Loop", "Scan"})
def remove_dead_loop_state(model: ir.Model) -> int:
    """Drop the states of ``Loop`` and ``Scan`` nodes whose final value nobody reads and
    which feed nothing kept inside the body (another kept state, a Loop's condition, a kept
    stacked output), and the stacked outputs nobody reads, with the body nodes only they
    needed (a ``lax.scan`` whose caller reads some of its carries; a loop counter nothing
    reads). ``jax.make_jaxpr`` keeps such carries, and dead-node removal cannot see them (the body
    updates them each trip). Loops in the main graph, in bodies and in function bodies; a
    loop's liveness looks through the loops in its body (an inner loop reads the initial
    values of its live states only), and dropping an outer state drops the inner states that
    fed only it. A dead state of an inner loop can leave one of the outer loop's states dead: with
    nested loops, a few rounds. Returns the number of states and stacked outputs removed."""
    removed = 0
    for _round in range(_DEAD_STATE_ROUNDS):
        loops = [n for n, _ in all_nodes(model) if n.op_type in _LOOP_OPS and _loop_layout(n) is not None]
        found = sum(_prune_loop(loop) for loop in loops if loop.graph is not None)
        removed += found
        if not found or len(loops) == 1:
            break
    return removed


# -- unused nodes, with what the bodies of removed nodes read ----------------------------

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
    _remove_unused_in(graph, graph.opset_imports.get(""))
    kept = {id(v) for v in (*graph.outputs, *graph.inputs)}
    for value in list(graph.initializers.values()):
        if not value.uses() and id(value) not in kept:
            graph.initializers.pop(value.name)
    for function in model.functions.values():
        _remove_unused_in(function, function.opset_imports.get(""))
    for body in _graphs(model)[1:]:
        for value in list(body.initializers.values()):
            if not value.uses() and not value.is_graph_output():
                body.initializers.pop(value.name)


def _remove_unused_in(graph: ir.Graph | ir.Function, opset: int | None) -> None:
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
            _remove_unused_in(body, opset)


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
        if mode is not None and (mode.is_ref() or mode.type != ir.AttributeType.INT or mode.as_int() != 0):
            return
        node.attributes.pop("training_mode", None)
    if optional is None:
        return
    outs = node.outputs
    for i, out in enumerate(outs[:len(optional)]):
        if optional[i] and not out.uses() and id(out) not in graph_outputs:
            out.name = ""
    count = len(outs)
    while count and not outs[count - 1].name:
        count -= 1
    if count != len(outs):
        node.resize_outputs(count)


# -- common subexpressions, in every graph -----------------------------------------------

_NON_DETERMINISTIC = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Bernoulli"})
_CSE_TENSOR_ELEMENTS = 64  # Constant nodes up to this size are merged by value


def _graphs(model: ir.Model) -> list[ir.Graph]:
    """The main graph, the function bodies, and every subgraph (Loop/Scan/If bodies) in them."""
    graphs: list[ir.Graph] = []
    pending = [model.graph, *(f.graph for f in model.functions.values())]
    while pending:
        graph = pending.pop()
        graphs.append(graph)
        for node in graph:
            pending.extend(node_bodies(node))
    return graphs


def _attributes_key(node: ir.Node) -> tuple[Any, ...] | None:
    """The node's attributes as a hashable value (sorted by name); None when one cannot be
    compared by value (a graph, a reference to a function's attribute, a large tensor)."""
    attrs = []
    for name, attr in sorted(node.attributes.items()):
        if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) or attr.is_ref():
            return None
        value = attr.value
        if attr.type == ir.AttributeType.TENSOR:
            if value.size > _CSE_TENSOR_ELEMENTS:
                return None
            array = value.numpy()
            value = (array.dtype, array.shape, array.tobytes())
        elif isinstance(value, (list, tuple)):
            value = tuple(value)
        elif attr.type not in (ir.AttributeType.INT, ir.AttributeType.FLOAT, ir.AttributeType.STRING):
            return None
        attrs.append((name, attr.type, value))
    return tuple(attrs)


def _node_key(node: ir.Node) -> tuple[Any, ...] | None:
    """What makes two nodes compute the same values: op, inputs (by identity) and
    attributes; None for a node that is never merged (a body, randomness, a large tensor)."""
    if node.op_type in _NON_DETERMINISTIC:
        return None
    attrs = _attributes_key(node)
    if attrs is None:
        return None
    return (node.op_identifier(), len(node.outputs), tuple(id(v) for v in node.inputs), attrs)


def eliminate_common_subexpressions(model: ir.Model) -> int:
    """Nodes of one graph computing the same op on the same inputs with the same attributes
    become one (the first): in the main graph, in function bodies and in Loop/Scan/If bodies,
    where a duplicate runs once per iteration (``u[1:-1]`` read twice by a stencil). A node
    making a graph output stays (the output keeps its own value). One walk per graph, nodes in
    order, so a chain of duplicates merges at once. Returns the number of nodes merged."""
    merged = 0
    for graph in _graphs(model):
        seen: dict[tuple[Any, ...], ir.Node] = {}
        for node in list(graph):
            key = _node_key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node)
            if first is node or any(o.is_graph_output() for o in node.outputs):
                continue
            for old, new in zip(node.outputs, first.outputs, strict=True):
                old.replace_all_uses_with(new)
            graph.remove(node, safe=True)
            merged += 1
    return merged


def cleanup(model: ir.Model, *, fold_weights: bool = False, loop_state: bool = True) -> None:
    """The clean-up passes in order; ``fold_weights``: also :func:`fold_into_weights`;
    ``loop_state=False``: keep unread loop states (:func:`remove_dead_loop_state` is left
    out, for the clean-up after target rewrites that add such states on purpose: tract's
    counter state)."""
    census = op_census(model)  # the passes that rewrite op types the model lacks are skipped
    run_if_present(hoist_loop_invariants, model, census)
    run_if_present(fold_constants, model, census)
    simplify_plumbing(model)
    run_if_present(hoist_layout_over_split, model, census)
    run_if_present(cancel_layout_chains, model, census)
    run_if_present(keep_reduced_dims, model, census)
    remove_unused_nodes(model)  # the folding below needs exact reader counts
    if loop_state and run_if_present(remove_dead_loop_state, model, census):
        remove_unused_nodes(model)  # what fed the dropped states' initial values
    if fold_weights:
        fold_into_weights(model)
        remove_unused_nodes(model)
    # Neither of these leaves a node unread (a merged duplicate reads what the kept one
    # reads), so no removal pass follows them: each costs a walk of the whole model.
    merge_duplicate_initializers(model)
    eliminate_common_subexpressions(model)
    if model.functions:  # (the pass walks every node even when there are none)
        common.RemoveUnusedFunctionsPass()(model)


@rewrites({"MatMul"})
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


def _all_values(graph: ir.Graph) -> list[ir.Value]:
    values: list[ir.Value] = []
    for node in graph_nodes(graph):
        values.extend(node.outputs)
    return values


def fill_missing_types(model: ir.Model) -> None:
    """Give every value without a full type a dtype and shape from ONNX shape inference.

    Rules stamp each equation's outputs from the jaxpr; values made inside a rule are left to
    this pass. Each node making such a value is inferred on its own first: the common ops from
    a small table of ONNX's own shape rules (same shape, broadcasting, MatMul, Transpose,
    Shape, Concat, (Un)Squeeze, Gather, Split, Reshape and Range on constants, Conv and
    pools), the others by onnx's per-op inference over their inputs' types and small
    constant inputs (a serialization of the node and its input types each: ~0.1 ms); so a
    few such nodes cost a few node inferences, not a serialization of the whole graph. A result is kept only when every dim is known, which whole-graph inference could not
    tell otherwise (it only adds data, which only refines unknown dims). What is left (a shape
    computed from another shape at run time, a node with a body graph, a function call) gets
    whole-graph inference with data propagation.
    """
    missing = [v for v in _all_values(model.graph) if v.name and (v.type is None or v.shape is None)]
    if missing and not _infer_node_by_node(model, missing):
        _infer_whole_graph(model, [v for v in missing if v.type is None or v.shape is None])


# ONNX ops whose outputs have the shape of their first input
_SAME_SHAPE_OPS = frozenset({
    "Abs", "Acos", "Asin", "Atan", "Ceil", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu",
    "HardSigmoid", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Log", "LogSoftmax", "Neg", "Not",
    "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus",
    "Softsign", "Sqrt", "Tan", "Tanh", "Cast",
})
# ONNX ops with multidirectional (numpy) broadcasting of all their inputs
_BROADCAST_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor",
})


def _broadcast(shapes: list[list[int | str]]) -> list[int | str | None]:
    """ONNX's multidirectional broadcast of ``shapes`` (its shape inference's rule): a dim
    above 1 wins, else the one symbolic dim, else 1; two different symbolic dims are unknown
    (``None``)."""
    rank = max(len(shape) for shape in shapes)
    out: list[int | str | None] = []
    for i in range(rank):
        value, symbols = 1, set()
        for shape in shapes:
            j = i - rank + len(shape)
            if j < 0:
                continue
            d = shape[j]
            if isinstance(d, str):
                symbols.add(d)
            elif d != 1:
                if value not in (1, d):
                    return [None]  # incompatible: ONNX refuses; left to whole-graph inference
                value = d
        out.append(value if value != 1 or not symbols else next(iter(symbols)) if len(symbols) == 1 else None)
    return out


def _table_shape(node: ir.Node, shapes: list[list[int | str]]) -> list[int | str | None] | None:
    """The first output's shape from the table above, ``None`` for an op it does not hold."""
    op = node.op_type
    if op in _SAME_SHAPE_OPS and len(node.outputs) == 1:
        return shapes[0]
    if op in _BROADCAST_OPS:
        return _broadcast(shapes)
    if op == "MatMul" and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
        k, k2 = shapes[0][-1], shapes[1][-2]
        if isinstance(k, int) and isinstance(k2, int) and k != k2:
            return [None]  # ONNX refuses
        return [*_broadcast([shapes[0][:-2], shapes[1][:-2]]), shapes[0][-2], shapes[1][-1]]
    if op == "Transpose":
        perm = node.attributes.get("perm")
        order = list(perm.value) if perm is not None else list(range(len(shapes[0])))[::-1]
        return [shapes[0][p] for p in order]
    if op == "Shape":
        rank = len(shapes[0])
        start, end = (node.attributes.get_int(name, default) for name, default in (("start", 0), ("end", rank)))
        start, end = (min(max(i + rank if i < 0 else i, 0), rank) for i in (start, end))
        return [max(end - start, 0)]
    if op == "Concat":
        axis = node.attributes.get_int("axis", 0)
        axis += len(shapes[0]) if axis < 0 else 0
        sizes = [shape[axis] for shape in shapes]
        others = {(*shape[:axis], *shape[axis + 1:]) for shape in shapes}
        if not all(isinstance(size, int) for size in sizes) or len(others) != 1:
            return None  # ONNX merges unequal dims its own way: its per-node inference decides
        return [*shapes[0][:axis], sum(sizes), *shapes[0][axis + 1:]]  # type: ignore[arg-type]
    if op == "Unsqueeze" and len(node.inputs) == 2 and node.inputs[1].const_value is not None:
        rank = len(shapes[0]) + node.inputs[1].const_value.size
        axes = sorted(int(a) % rank for a in node.inputs[1].const_value.numpy().reshape(-1))
        dims = iter(shapes[0])
        return [1 if i in axes else next(dims) for i in range(rank)]
    if op == "Squeeze":
        return _squeeze_shape(node, shapes[0])
    if op == "Gather":
        data, indices = shapes[0], shapes[1]
        axis = node.attributes.get_int("axis", 0)
        if not -len(data) <= axis < len(data):
            return None
        axis %= len(data)
        return [*data[:axis], *indices, *data[axis + 1:]]
    if op == "Reshape" and len(node.inputs) == 2:
        return _reshape_shape(node, shapes[0])
    if op == "Range":
        return _range_shape(node)
    if op in ("Conv", "AveragePool", "MaxPool") and len(node.outputs) == 1:
        return _window_shape(node, shapes)
    return None


def _split_shapes(node: ir.Node, shapes: list[list[int | str]]) -> list[list[int | str]] | None:
    """The shape of each output of a Split with constant sizes along ``axis`` (the input's
    size there static, and their sum); other Splits go to onnx's own inference."""
    sizes = _const_ints(node.inputs[1]) if len(node.inputs) > 1 else node.attributes.get_ints("split", None)
    dims = shapes[0]
    axis = node.attributes.get_int("axis", 0)
    if sizes is None or len(sizes) != len(node.outputs) or not -len(dims) <= axis < len(dims):
        return None
    axis %= len(dims)
    if not isinstance(dims[axis], int) or sum(sizes) != dims[axis] or min(sizes) < 0:
        return None
    return [[*dims[:axis], size, *dims[axis + 1:]] for size in sizes]


def _recurrent_shapes(node: ir.Node, shapes: list[list[int | str]]) -> list[list[int | str]] | None:
    """The outputs of a GRU, LSTM or RNN: ``Y`` [seq, directions, batch, hidden], ``Y_h`` (and
    an LSTM's ``Y_c``) [directions, batch, hidden]; batch first with ``layout=1``. onnx's own
    inference of one GRU node costs half a millisecond."""
    hidden = node.attributes.get_int("hidden_size", None)
    if hidden is None or len(shapes[0]) != 3 or len(node.outputs) > 3:
        return None
    directions = 2 if node.attributes.get_string("direction", "forward") == "bidirectional" else 1
    if node.attributes.get_int("layout", 0) == 0:
        seq, batch = shapes[0][:2]
        return [[seq, directions, batch, hidden], [directions, batch, hidden], [directions, batch, hidden]][:len(node.outputs)]
    batch, seq = shapes[0][:2]
    return [[batch, seq, directions, hidden], [batch, directions, hidden], [batch, directions, hidden]][:len(node.outputs)]


# ops with several outputs whose shapes the table knows
_MULTI_OUTPUT_SHAPES = {"Split": _split_shapes, "GRU": _recurrent_shapes, "LSTM": _recurrent_shapes, "RNN": _recurrent_shapes}


def _const_ints(value: ir.Value | None) -> list[int] | None:
    """The integers of a constant input (an initializer or a Constant's output), else None."""
    tensor = None if value is None else value.const_value
    if tensor is None or not np.issubdtype(tensor.dtype.numpy(), np.integer):
        return None
    return [int(v) for v in tensor.numpy().reshape(-1)]


def _squeeze_shape(node: ir.Node, dims: list[int | str]) -> list[int | str] | None:
    """Squeeze with its axes given (an input from opset 13, an attribute before); without
    axes, or with an axis whose size is known not to be 1, onnx's own inference decides."""
    axes = _const_ints(node.inputs[1]) if len(node.inputs) > 1 else node.attributes.get_ints("axes", None)
    if axes is None or not all(-len(dims) <= a < len(dims) for a in axes):
        return None
    drop = {a % len(dims) for a in axes}
    if any(dims[a] != 1 and isinstance(dims[a], int) for a in drop):
        return None
    return [d for i, d in enumerate(dims) if i not in drop]


def _reshape_shape(node: ir.Node, dims: list[int | str]) -> list[int | str] | None:
    """Reshape to a constant shape: 0 copies the input's dim (unless ``allowzero``), one -1
    takes the rest when every size is static; other cases go to onnx's own inference."""
    target = _const_ints(node.inputs[1])
    if target is None:
        return None
    allowzero = node.attributes.get_int("allowzero", 0)
    out: list[int | str] = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(dims):
                return None
            out.append(dims[i])
        elif t >= -1:
            out.append(t)
        else:
            return None
    static = all(isinstance(d, int) for d in (*dims, *out))
    if -1 in out:
        rest = [d for d in out if d != -1]
        if out.count(-1) > 1 or not static or 0 in rest or math.prod(dims) % math.prod(rest):
            return None
        out[out.index(-1)] = math.prod(dims) // math.prod(rest)
    elif static and math.prod(dims) != math.prod(out):  # type: ignore[arg-type]
        return None
    return out


def _range_shape(node: ir.Node) -> list[int | str] | None:
    """Range over constant integer scalars: ``max(ceil((limit - start) / delta), 0)`` elements."""
    bounds = [_const_ints(v) for v in node.inputs]
    if len(bounds) != 3 or any(b is None or len(b) != 1 for b in bounds):
        return None
    (start,), (limit,), (delta,) = bounds  # type: ignore[misc]
    if delta == 0:
        return None
    return [max(-((start - limit) // delta), 0)]


def _window_shape(node: ir.Node, shapes: list[list[int | str]]) -> list[int | str] | None:
    """Conv / AveragePool / MaxPool with explicit pads (or none) over static spatial dims:
    ``floor((size + pads - ((kernel - 1) * dilation + 1)) / stride) + 1`` per spatial axis;
    ``auto_pad``, ``ceil_mode`` and symbolic sizes go to onnx's own inference."""
    x = shapes[0]
    n = len(x) - 2
    attrs = node.attributes
    if n < 1 or attrs.get_string("auto_pad", "NOTSET") != "NOTSET" or attrs.get_int("ceil_mode", 0):
        return None
    if node.op_type == "Conv":
        if len(shapes) < 2 or len(shapes[1]) != n + 2:
            return None
        kernel, channels = attrs.get_ints("kernel_shape", None) or shapes[1][2:], shapes[1][0]
    else:
        kernel, channels = attrs.get_ints("kernel_shape", None), x[1]
    strides = attrs.get_ints("strides", None) or [1] * n
    dilations = attrs.get_ints("dilations", None) or [1] * n
    pads = attrs.get_ints("pads", None) or [0] * (2 * n)
    if kernel is None or not len(kernel) == len(strides) == len(dilations) == n or len(pads) != 2 * n:
        return None
    spatial: list[int | str] = []
    for i, (size, k) in enumerate(zip(x[2:], kernel, strict=True)):
        if not isinstance(size, int) or not isinstance(k, int):
            return None
        room = size + pads[i] + pads[i + n] - ((k - 1) * dilations[i] + 1)
        if room < 0 or strides[i] < 1:
            return None
        spatial.append(room // strides[i] + 1)
    return [x[0], channels, *spatial]


def _infer_node_by_node(model: ir.Model, missing: list[ir.Value]) -> bool:
    """Type ``missing`` node by node, in graph order; ``False`` as soon as a node cannot be
    inferred on its own to a full type (what was typed so far stays: it is what whole-graph
    inference gives)."""
    opset = model.opset_imports.get("", 1)
    for node in dict.fromkeys(v.producer() for v in missing):
        if node is None or node.domain not in ("", "ai.onnx") or any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()
        ):
            return False
        inputs = [v for v in node.inputs if v is not None]
        if any(v.type is None or v.shape is None for v in inputs):
            return False
        shapes = [[d if isinstance(d, int) else d.value for d in v.shape] for v in inputs]
        known = all(d is not None for shape in shapes for d in shape)
        if node.op_type in _MULTI_OUTPUT_SHAPES:
            each = _MULTI_OUTPUT_SHAPES[node.op_type](node, shapes) if known else None
            named = [(out, shape) for out, shape in zip(node.outputs, each or (), strict=False) if out.name]
            if each is not None and all(out.type is not None for out, _ in named):
                for out, shape in named:
                    out.shape = out.shape or ir.Shape(shape)
                continue
        shape = _table_shape(node, shapes) if known and inputs else None
        if shape is not None and node.outputs[0].type is not None:
            if any(d is None for d in shape):
                return False
            node.outputs[0].shape = node.outputs[0].shape or ir.Shape(shape)
            continue
        if not _infer_node(model, node, opset):
            return False
    return True


def _infer_node(model: ir.Model, node: ir.Node, opset: int) -> bool:
    """Type ``node``'s untyped outputs by onnx's inference of this one node; ``False`` when it
    cannot say every dim."""
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for value in node.inputs:
        if value is None:
            continue
        types[value.name] = ir.serde.serialize_value(value).type
        tensor = value.const_value
        if value.is_initializer() and tensor is not None and tensor.size <= _INFERENCE_CONST_SIZE:
            data[value.name] = ir.serde.serialize_tensor(tensor)
    op_schema = schema(node.op_type, opset)
    if op_schema is None:
        return False
    try:
        opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()]
        inferred = onnx.shape_inference.infer_node_outputs(
            op_schema, ir.serde.serialize_node(node), types, data, opset_imports=opsets,
            ir_version=model.ir_version,
        )
    except Exception:  # inference refused: whole-graph inference decides
        return False
    for value in node.outputs:
        if not value.name or (value.type is not None and value.shape is not None):
            continue
        dtype, shape = _type_of(inferred.get(value.name))
        if dtype is None or shape is None or any(d is None for d in shape):
            return False
        value.type = value.type or ir.TensorType(dtype)
        value.shape = value.shape or ir.Shape(shape)
    return True


def _type_of(t: onnx.TypeProto | None) -> tuple[ir.DataType | None, list[int | str | None] | None]:
    """(dtype, dims) of a tensor TypeProto; ``None`` for what it does not say (an unknown dim is
    ``None`` in the dims)."""
    if t is None or not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
        return None, None
    if not t.tensor_type.HasField("shape"):
        return ir.DataType(t.tensor_type.elem_type), None
    dims: list[int | str | None] = []
    for d in t.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None)
    return ir.DataType(t.tensor_type.elem_type), dims


def _infer_whole_graph(model: ir.Model, missing: list[ir.Value]) -> None:
    """ONNX shape inference with data propagation over a copy of the whole graph without the
    data of large initializers (the cost does not grow with the weights; small ones: axes,
    pads, shapes keep their data, which inference needs)."""
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
        dtype, dims = _type_of(known.get(v.name))
        if dtype is None:
            continue
        if v.type is None:
            v.type = ir.TensorType(dtype)
        if v.shape is None and dims is not None:
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
    used = {n.domain for n in graph_nodes(model.graph)}
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
