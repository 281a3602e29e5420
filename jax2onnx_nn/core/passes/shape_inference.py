"""Types and shapes for every value: a table of ONNX's shape rules, onnx's inference for the
rest."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir

from jax2onnx_nn.core.ir.walk import graph_nodes
from jax2onnx_nn.core.opset_forms import schema

_INFERENCE_CONST_SIZE = 1024  # initializers up to this many elements keep their data for inference


def _all_values(graph: ir.Graph) -> list[ir.Value]:
    values: list[ir.Value] = []
    for node in graph_nodes(graph):
        values.extend(node.outputs)
    return values


def fill_missing_types(model: ir.Model) -> None:
    """Give every value without a full type a dtype and shape from ONNX shape inference.

    Rules stamp each equation's outputs from the jaxpr; values made inside a rule are left to this
    pass. Each node making such a value is inferred on its own first: the common ops from a small
    table of ONNX's own shape rules (same shape, broadcasting, MatMul, Transpose, Shape, Concat,
    (Un)Squeeze, Gather, Split, Reshape and Range on constants, Conv and pools), the others by
    onnx's per-op inference over their inputs' types and small constant inputs (a serialization of
    the node and its input types each: ~0.1 ms); so a few such nodes cost a few node inferences, not
    a serialization of the whole graph. A result is kept only when every dim is known, which
    whole-graph inference could not tell otherwise (it only adds data, which only refines unknown
    dims). What is left (a shape computed from another shape at run time, a node with a body graph,
    a function call) gets whole-graph inference with data propagation."""
    missing = [
        v for v in _all_values(model.graph) if v.name and (v.type is None or v.shape is None)
    ]
    if missing and not _infer_node_by_node(model, missing):
        _infer_whole_graph(model, [v for v in missing if v.type is None or v.shape is None])


# ONNX ops whose outputs have the shape of their first input
_SAME_SHAPE_OPS = frozenset(
    {
        "Abs",
        "Acos",
        "Asin",
        "Atan",
        "Ceil",
        "Cos",
        "Cosh",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "Gelu",
        "HardSigmoid",
        "Identity",
        "IsInf",
        "IsNaN",
        "LeakyRelu",
        "Log",
        "LogSoftmax",
        "Neg",
        "Not",
        "Reciprocal",
        "Relu",
        "Round",
        "Selu",
        "Sigmoid",
        "Sign",
        "Sin",
        "Sinh",
        "Softmax",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Tan",
        "Tanh",
        "Cast",
    }
)
# ONNX ops with multidirectional (numpy) broadcasting of all their inputs
_BROADCAST_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Max",
        "Min",
        "Mod",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Where",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
    }
)


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
        out.append(
            value
            if value != 1 or not symbols
            else next(iter(symbols))
            if len(symbols) == 1
            else None
        )
    return out


def _table_shape(node: ir.Node, shapes: list[list[int | str]]) -> Sequence[int | str | None] | None:
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
        start, end = (
            node.attributes.get_int(name, default)
            for name, default in (("start", 0), ("end", rank))
        )
        start, end = (min(max(i + rank if i < 0 else i, 0), rank) for i in (start, end))
        return [max(end - start, 0)]
    if op == "Concat":
        axis = node.attributes.get_int("axis", 0)
        axis += len(shapes[0]) if axis < 0 else 0
        sizes = [size for shape in shapes if isinstance(size := shape[axis], int)]
        others = {(*shape[:axis], *shape[axis + 1 :]) for shape in shapes}
        if len(sizes) != len(shapes) or len(others) != 1:
            return None  # ONNX merges unequal dims its own way: its per-node inference decides
        return [*shapes[0][:axis], sum(sizes), *shapes[0][axis + 1 :]]
    if (
        op == "Unsqueeze"
        and len(node.inputs) == 2
        and (added := _const_ints(node.inputs[1])) is not None
    ):
        rank = len(shapes[0]) + len(added)
        axes = sorted(a % rank for a in added)
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
        return [*data[:axis], *indices, *data[axis + 1 :]]
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
    sizes = (
        _const_ints(node.inputs[1])
        if len(node.inputs) > 1
        else node.attributes.get_ints("split", None)
    )
    dims = shapes[0]
    axis = node.attributes.get_int("axis", 0)
    if sizes is None or len(sizes) != len(node.outputs) or not -len(dims) <= axis < len(dims):
        return None
    axis %= len(dims)
    if not isinstance(dims[axis], int) or sum(sizes) != dims[axis] or min(sizes) < 0:
        return None
    return [[*dims[:axis], size, *dims[axis + 1 :]] for size in sizes]


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
        return [
            [seq, directions, batch, hidden],
            [directions, batch, hidden],
            [directions, batch, hidden],
        ][: len(node.outputs)]
    batch, seq = shapes[0][:2]
    return [
        [batch, seq, directions, hidden],
        [batch, directions, hidden],
        [batch, directions, hidden],
    ][: len(node.outputs)]


# ops with several outputs whose shapes the table knows
_MULTI_OUTPUT_SHAPES = {
    "Split": _split_shapes,
    "GRU": _recurrent_shapes,
    "LSTM": _recurrent_shapes,
    "RNN": _recurrent_shapes,
}


def _const_ints(value: ir.Value | None) -> list[int] | None:
    """The integers of a constant input (an initializer or a Constant's output), else None."""
    tensor = None if value is None else value.const_value
    if tensor is None or not np.issubdtype(tensor.dtype.numpy(), np.integer):
        return None
    return [int(v) for v in tensor.numpy().reshape(-1)]


def _squeeze_shape(node: ir.Node, dims: list[int | str]) -> list[int | str] | None:
    """Squeeze with its axes given (an input from opset 13, an attribute before); without
    axes, or with an axis whose size is known not to be 1, onnx's own inference decides."""
    axes = (
        _const_ints(node.inputs[1])
        if len(node.inputs) > 1
        else node.attributes.get_ints("axes", None)
    )
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
    static_dims = [d for d in dims if isinstance(d, int)]
    static_out = [d for d in out if isinstance(d, int)]
    static = len(static_dims) == len(dims) and len(static_out) == len(out)
    size = math.prod(static_dims)
    if -1 in out:
        rest = [d for d in static_out if d != -1]
        if out.count(-1) > 1 or not static or 0 in rest or size % math.prod(rest):
            return None
        out[out.index(-1)] = size // math.prod(rest)
    elif static and size != math.prod(static_out):
        return None
    return out


def _range_shape(node: ir.Node) -> list[int | str] | None:
    """Range over constant integer scalars: ``max(ceil((limit - start) / delta), 0)`` elements."""
    bounds = [_const_ints(v) for v in node.inputs]
    scalars = [b[0] for b in bounds if b is not None and len(b) == 1]
    if len(bounds) != 3 or len(scalars) != 3:
        return None
    start, limit, delta = scalars
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
    if (
        n < 1
        or attrs.get_string("auto_pad", "NOTSET") != "NOTSET"
        or attrs.get_int("ceil_mode", 0) != 0
    ):
        return None
    kernel: Sequence[int | str] | None
    if node.op_type == "Conv":
        if len(shapes) < 2 or len(shapes[1]) != n + 2:
            return None
        kernel, channels = attrs.get_ints("kernel_shape", None) or shapes[1][2:], shapes[1][0]
    else:
        kernel, channels = attrs.get_ints("kernel_shape", None), x[1]
    strides = attrs.get_ints("strides", None) or [1] * n
    dilations = attrs.get_ints("dilations", None) or [1] * n
    pads = attrs.get_ints("pads", None) or [0] * (2 * n)
    if (
        kernel is None
        or not len(kernel) == len(strides) == len(dilations) == n
        or len(pads) != 2 * n
    ):
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
        if (
            node is None
            or node.domain not in ("", "ai.onnx")
            or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                for a in node.attributes.values()
            )
        ):
            return False
        inputs = [v for v in node.inputs if v is not None]
        typed = [v.shape for v in inputs if v.type is not None and v.shape is not None]
        if len(typed) != len(inputs):
            return False
        # the dims of each input: a static size or a symbolic dim's name (known: no dim unnamed)
        named = [[d if isinstance(d, int) else d.value for d in shape] for shape in typed]
        shapes = [[d for d in dims if d is not None] for dims in named]
        known = all(len(s) == len(dims) for s, dims in zip(shapes, named, strict=True))
        if node.op_type in _MULTI_OUTPUT_SHAPES:
            each = _MULTI_OUTPUT_SHAPES[node.op_type](node, shapes) if known else None
            outputs = [
                (out, out_shape)
                for out, out_shape in zip(node.outputs, each or (), strict=False)
                if out.name
            ]
            if each is not None and all(out.type is not None for out, _ in outputs):
                for out, out_shape in outputs:
                    out.shape = out.shape or ir.Shape(out_shape)
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
        if value.name is None:  # onnx's inference reads the inputs' types by name
            return False
        types[value.name] = ir.serde.serialize_value(value).type
        tensor = value.const_value
        if value.is_initializer() and tensor is not None and tensor.size <= _INFERENCE_CONST_SIZE:
            data[value.name] = ir.serde.serialize_tensor(tensor)
    op_schema = schema(node.op_type, opset)
    if op_schema is None:
        return False
    try:
        opsets = [
            onnx.helper.make_opsetid(domain, version)
            for domain, version in model.opset_imports.items()
        ]
        inferred = onnx.shape_inference.infer_node_outputs(
            op_schema,
            ir.serde.serialize_node(node),
            types,
            data,
            opset_imports=opsets,
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
        dims.append(
            d.dim_value
            if d.HasField("dim_value")
            else d.dim_param
            if d.HasField("dim_param")
            else None
        )
    return ir.DataType(t.tensor_type.elem_type), dims


def _infer_whole_graph(model: ir.Model, missing: list[ir.Value]) -> None:
    """ONNX shape inference with data propagation over a copy of the whole graph without the
    data of large initializers (the cost does not grow with the weights; small ones: axes,
    pads, shapes keep their data, which inference needs)."""
    graph = model.graph
    order = list(graph.initializers.values())
    large = {
        name: v
        for name, v in graph.initializers.items()
        if v.const_value is None or v.const_value.size > _INFERENCE_CONST_SIZE
    }
    initializers = list(large.values())
    saved = [(v, v.const_value) for v in initializers]
    try:
        for name, v in large.items():
            v.const_value = None
            graph.initializers.pop(name)
        graph.inputs.extend(initializers)
        proto = ir.serde.serialize_model(model)
    finally:
        del graph.inputs[len(graph.inputs) - len(initializers) :]
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
        dtype, dims = _type_of(known.get(v.name) if v.name is not None else None)
        if dtype is None:
            continue
        if v.type is None:
            v.type = ir.TensorType(dtype)
        if v.shape is None and dims is not None:
            v.shape = ir.Shape(dims)
