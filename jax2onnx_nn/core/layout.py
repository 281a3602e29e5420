"""Channels-first graph inputs/outputs for channels-last models, and Transpose folding.

JAX image models are usually written NHWC; most ONNX consumers feed NCHW. With
``inputs_as_nchw`` / ``outputs_as_nchw`` the graph takes and returns NCHW tensors: a
Transpose is put at the boundary, and :func:`fold_transposes` merges it with the Transpose a
channels-last Conv (or pooling, BatchNorm, ...) already starts with, so both disappear.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.ir.edit import graph_of
from jax2onnx_nn.core.ir.walk import all_nodes, graph_nodes
from jax2onnx_nn.core.signature import model_signature

Selection = Sequence[str | int] | None

INPUTS_KEY = "jax2onnx_nn.inputs_as_nchw"
OUTPUTS_KEY = "jax2onnx_nn.outputs_as_nchw"


def to_channels_first(rank: int) -> list[int]:
    """The perm taking N<spatial>C to NC<spatial>."""
    return [0, rank - 1, *range(1, rank - 1)]


def to_channels_last(rank: int) -> list[int]:
    """The perm taking NC<spatial> to N<spatial>C."""
    return [0, *range(2, rank), 1]


def resolve(selection: Selection, names: Sequence[str], option: str) -> list[int]:
    """Positions of the selected graph inputs/outputs (names or indices, negative allowed)."""
    positions: list[int] = []
    for item in selection or ():
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not -len(names) <= item < len(names):
                raise SpecError(
                    f"{option}: index {item} is out of range for {len(names)} ({list(names)})"
                )
            positions.append(int(item) % len(names))
        elif isinstance(item, str) and item in names:
            positions.append(list(names).index(item))
        else:
            raise SpecError(f"{option}: {item!r} is neither an index nor one of {list(names)}")
    return sorted(set(positions))


def apply_layout(
    model: ir.Model, inputs_as_nchw: Selection = None, outputs_as_nchw: Selection = None
) -> None:
    """Make the selected graph inputs/outputs channels-first, then fold Transpose pairs.

    The selected values keep their names; each must have rank >= 3. The positions are
    recorded in the model metadata (``jax2onnx_nn.inputs_as_nchw`` / ``..outputs_as_nchw``).
    """
    graph = model.graph
    ins = resolve(inputs_as_nchw, [v.name or "" for v in graph.inputs], "inputs_as_nchw")
    outs = resolve(outputs_as_nchw, [v.name or "" for v in graph.outputs], "outputs_as_nchw")
    if ins or outs:  # (naming walks the whole graph: only when something is moved)
        _move_to_channels_first(graph, ins, outs)
    if ins:
        model.metadata_props[INPUTS_KEY] = ",".join(map(str, ins))
    if outs:
        model.metadata_props[OUTPUTS_KEY] = ",".join(map(str, outs))
    fold_transposes(model)


def _move_to_channels_first(graph: ir.Graph, ins: list[int], outs: list[int]) -> None:
    """Transposes at the selected inputs (to NHWC) and outputs (to NCHW); the values keep
    their names."""
    names = _Names(graph)
    first = graph.node(0) if graph.num_nodes() else None
    for i in ins:
        nhwc = graph.inputs[i]
        rank = _rank(nhwc, "inputs_as_nchw")
        nchw = ir.Value(
            name=nhwc.name, type=nhwc.type, shape=_permuted(nhwc.shape, to_channels_first(rank))
        )
        nhwc.name = names.fresh(f"{nhwc.name}_nhwc")
        node = ir.Node(
            "",
            "Transpose",
            [nchw],
            [ir.AttrInt64s("perm", to_channels_last(rank))],
            name=names.fresh(f"{nchw.name}/to_nhwc"),
        )
        transposed = node.outputs[0]
        transposed.name, transposed.type, transposed.shape = (
            names.fresh(f"{nchw.name}/nhwc"),
            nhwc.type,
            nhwc.shape,
        )
        nhwc.replace_all_uses_with(transposed)
        graph.inputs[i] = nchw
        if first is None:
            graph.append(node)
        else:
            graph.insert_before(first, node)
    for j in outs:
        nhwc = graph.outputs[j]
        rank = _rank(nhwc, "outputs_as_nchw")
        node = ir.Node(
            "",
            "Transpose",
            [nhwc],
            [ir.AttrInt64s("perm", to_channels_first(rank))],
            name=names.fresh(f"{nhwc.name}/to_nchw"),
        )
        nchw = node.outputs[0]
        nchw.type, nchw.shape = nhwc.type, _permuted(nhwc.shape, to_channels_first(rank))
        name = nhwc.name
        nhwc.name = names.fresh(f"{name}_nhwc")
        nchw.name = name
        graph.append(node)
        graph.outputs[j] = nchw


# Ops that act element by element (with numpy broadcasting), so they commute with a Transpose
# when their other operands are transposed too.
ELEMENTWISE = frozenset(
    "Abs Add Cast Ceil Clip Div Elu Erf Exp Floor Gelu HardSigmoid HardSwish Identity LeakyRelu "
    "Log Max Min Mul Neg Pow PRelu Reciprocal Relu Round Selu Sigmoid Sign Softplus Sqrt Sub "
    "Tanh Where".split()
)


def fold_transposes(model: ir.Model) -> int:
    """Fold ``Transpose(f(Transpose(x, p1)), p2)`` into ``Transpose(f(x), p1∘p2)`` (nothing for
    the identity), where ``f`` is a chain of elementwise ops whose other operands are
    constants (permuted copies are added as initializers). Returns how many Transposes were
    folded; orphaned first Transposes are left for the dead-node pass."""
    folded = 0
    names: _Names | None = None
    for node, in_function in list(all_nodes(model)):
        graph = node.graph
        if graph is None or not _is_transpose(node):
            continue
        chain = _elementwise_chain(node.inputs[0])
        if chain is None:
            continue
        first, ops = chain
        data = first.inputs[0]
        if data is None:
            continue
        p1 = _perm(first)
        if not all(_can_permute(op, len(p1), not in_function) for op in ops):
            continue
        inverse = np.argsort(p1).tolist()
        tail = ops[-1].outputs[0] if ops else None
        tail_shape = None if tail is None else tail.shape
        for op in ops:
            _permute_operands(op, first.outputs[0], data, inverse, model.graph)
        if tail is not None and (
            tail.is_graph_output() or any(use.node is not node for use in tail.uses())
        ):
            names = names or _Names(model)
            _restore_layout(tail, ops[-1], tail_shape, p1, node, names)
        source = ops[-1].outputs[0] if ops else data
        composed = [p1[p] for p in _perm(node)]
        folded += 1
        if composed == sorted(composed) and _bypass(node, graph, source):
            continue
        node.replace_input_with(0, source)
        node.attributes["perm"] = ir.AttrInt64s("perm", composed)
    return folded


def _restore_layout(
    value: ir.Value,
    producer: ir.Node,
    shape: ir.Shape | None,
    perm: list[int],
    folded: ir.Node,
    names: _Names,
) -> None:
    """Give every consumer of ``value`` (an output of ``producer``) except ``folded`` (other
    nodes, the graph's or the function's outputs) the layout it had before its producer was
    rewritten to work on un-transposed data: a ``Transpose(value, perm)`` in front of them. A
    graph output keeps its name on the restored value."""
    graph = graph_of(producer)
    node = ir.Node(
        "",
        "Transpose",
        [value],
        [ir.AttrInt64s("perm", perm)],
        name=names.fresh(f"{producer.name or 'value'}/restore_layout"),
    )
    restored = node.outputs[0]
    restored.type, restored.shape = value.type, shape
    graph.insert_after(producer, node)
    for use in list(value.uses()):
        if use.node is not folded and use.node is not node:
            use.node.replace_input_with(use.idx, restored)
    if value.is_graph_output():
        restored.name = value.name
        value.name = names.fresh(f"{value.name}_transposed")
        for i, output in enumerate(graph.outputs):
            if output is value:
                graph.outputs[i] = restored
    else:
        restored.name = names.fresh(f"{value.name or 'value'}_restored")


def _bypass(node: ir.Node, graph: ir.Graph, source: ir.Value) -> bool:
    """Remove a node of ``graph`` computing the identity of ``source``; a graph output it
    produces is then ``source`` itself, renamed (unless ``source`` is an input or output
    already)."""
    output = node.outputs[0]
    if output.is_graph_output():
        if source.producer() is None or source.is_graph_output() or source.graph is not graph:
            return False
        name = output.name
        output.replace_all_uses_with(source, replace_graph_outputs=True)
        output.name = None
        source.name = name
    else:
        output.replace_all_uses_with(source)
    graph.remove(node, safe=True)
    return True


def _elementwise_chain(value: ir.Value | None) -> tuple[ir.Node, list[ir.Node]] | None:
    """(the Transpose, the elementwise ops after it, in order) that ``value`` comes from; each
    value between the ops feeds only the next op."""
    ops: list[ir.Node] = []
    while value is not None and (producer := value.producer()) is not None:
        if _is_transpose(producer):  # it may have other uses: they keep it
            return producer, ops[::-1]
        if ops and (len(value.uses()) != 1 or value.is_graph_output()):
            return None
        if (
            producer.op_type not in ELEMENTWISE
            or producer.domain != ""
            or len(producer.outputs) != 1
        ):
            return None
        variables = {id(v): v for v in producer.inputs if v is not None and _constant(v) is None}
        if len(variables) != 1:
            return None
        ops.append(producer)
        value = next(iter(variables.values()))
    return None


def _constant(value: ir.Value) -> np.ndarray | None:
    """The data of a constant, or of an Unsqueeze / Reshape of one (how broadcast operands
    such as biases arrive); None for anything computed at run time."""
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if (
        node is None
        or node.domain != ""
        or node.op_type not in ("Unsqueeze", "Reshape")
        or len(node.inputs) != 2
    ):
        return None
    data, second = (None if v is None else _constant(v) for v in node.inputs)
    if data is None or second is None:
        return None
    if node.op_type == "Unsqueeze":
        rank = data.ndim + second.size
        return np.expand_dims(data, tuple(sorted(int(a) % rank for a in second.ravel())))
    allowzero = node.attributes["allowzero"].value if "allowzero" in node.attributes else 0
    shape = [
        data.shape[i] if d == 0 and not allowzero else int(d) for i, d in enumerate(second.ravel())
    ]
    return data.reshape(shape)


def _can_permute(op: ir.Node, rank: int, may_add_constants: bool) -> bool:
    """Every constant operand broadcasts within ``rank`` dims, and is all-ones-shaped or may be
    replaced by a permuted copy (not inside a function body, which has no initializers)."""
    for value in op.inputs:
        array = None if value is None else _constant(value)
        if array is None:
            continue
        if array.ndim > rank or (any(d != 1 for d in array.shape) and not may_add_constants):
            return False
    return op.outputs[0].shape is None or len(op.outputs[0].shape) == rank


def _permute_operands(
    op: ir.Node, old: ir.Value, new: ir.Value, inverse: list[int], main: ir.Graph
) -> None:
    """Rewrite one op of a chain to work on the un-transposed data: ``old`` becomes ``new``,
    constants are permuted by ``inverse`` (new initializers of ``main``), and so is the
    output's shape."""
    for i, value in enumerate(op.inputs):
        if value is None:
            continue
        if value is old:
            op.replace_input_with(i, new)
            continue
        array = _constant(value)
        if array is not None and any(d != 1 for d in array.shape):
            full = array.reshape((1,) * (len(inverse) - array.ndim) + array.shape)
            root = value
            # name it after the constant, not the Unsqueeze (whose inputs _constant checked)
            while (producer := root.producer()) is not None:
                data = producer.inputs[0]
                if data is None:
                    break
                root = data
            op.replace_input_with(
                i,
                _initializer(
                    main, f"{root.name}_transposed", np.ascontiguousarray(full.transpose(inverse))
                ),
            )
    output = op.outputs[0]
    output.shape = _permuted(output.shape, inverse)


def _initializer(graph: ir.Graph, base: str, array: np.ndarray) -> ir.Value:
    name, n = base, 1
    while name in graph.initializers:
        name, n = f"{base}_{n}", n + 1
    tensor = ir.Tensor(array)
    value = ir.Value(
        name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape), const_value=tensor
    )
    graph.register_initializer(value)
    return value


def nchw_reference(
    fn: Any, inputs: Sequence[Any], model: Any, **parse_options: Any
) -> tuple[Any, list[Any]]:
    """The JAX callable and input specs that match a model exported with layout options.

    Returns ``(reference, specs)``: ``reference`` takes the graph's NCHW inputs, transposes
    them back to what ``fn`` takes and its selected outputs to NCHW; ``specs`` are ``inputs``
    with the selected flat inputs permuted. With no layout metadata: ``(fn, inputs)``.
    ``parse_options`` are passed to the spec parser (``input_params``, ``enable_double_precision``).
    """
    ins, outs = recorded_layout(model_signature(model).metadata)
    return layout_reference(fn, inputs, ins, outs, **parse_options)


def recorded_layout(metadata: Mapping[str, str]) -> tuple[set[int], set[int]]:
    """The positions of the channels-first graph inputs and outputs an export recorded in
    the model's metadata."""
    return _positions(metadata.get(INPUTS_KEY)), _positions(metadata.get(OUTPUTS_KEY))


def layout_reference(
    fn: Any,
    inputs: Sequence[Any],
    ins: Collection[int],
    outs: Collection[int],
    **parse_options: Any,
) -> tuple[Any, list[Any]]:
    """:func:`nchw_reference` for the flat input positions ``ins`` and output positions
    ``outs`` that are channels-first in the graph."""
    from jax2onnx_nn.core.specs import parse_specs

    if not ins and not outs:
        return fn, list(inputs)
    specs = parse_specs(inputs, warn=False, **parse_options)
    leaves, treedef = jax.tree_util.tree_flatten((specs.args, specs.kwargs))
    leaves = [
        _permuted_struct(leaf, to_channels_first(len(leaf.shape))) if i in ins else leaf
        for i, leaf in enumerate(leaves)
    ]
    n_args = len(jax.tree_util.tree_leaves(specs.args))
    if any(i >= n_args for i in ins):
        raise NotImplementedError("nchw_reference: a channels-first input among input_params")
    args, _ = jax.tree_util.tree_unflatten(treedef, leaves)

    def reference(*call_args: Any, **call_kwargs: Any) -> Any:
        flat, tree = jax.tree_util.tree_flatten((call_args, call_kwargs))
        flat = [
            x.transpose(to_channels_last(x.ndim)) if i in ins else x for i, x in enumerate(flat)
        ]
        a, k = jax.tree_util.tree_unflatten(tree, flat)
        out_flat, out_tree = jax.tree_util.tree_flatten(fn(*a, **k))
        out_flat = [
            y.transpose(to_channels_first(y.ndim)) if j in outs else y
            for j, y in enumerate(out_flat)
        ]
        return jax.tree_util.tree_unflatten(out_tree, out_flat)

    return reference, list(args)


# -- helpers --------------------------------------------------------------------------------


class _Names:
    """Fresh value/node names for a graph that is already built."""

    def __init__(self, graph_or_model: ir.Graph | ir.Model) -> None:
        graph = graph_or_model.graph if isinstance(graph_or_model, ir.Model) else graph_or_model
        self._taken: set[str] = {v.name for v in graph.inputs if v.name}
        self._taken.update(v.name for v in graph.initializers.values() if v.name)
        nodes: Any = graph_nodes(graph)
        if isinstance(graph_or_model, ir.Model):
            nodes = (node for node, _ in all_nodes(graph_or_model))
            for function in graph_or_model.functions.values():
                self._taken.update(v.name for v in function.inputs if v.name)
        for node in nodes:
            if node.name:
                self._taken.add(node.name)
            self._taken.update(v.name for v in node.outputs if v.name)

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken.add(name)
        return name


def _is_transpose(node: ir.Node) -> bool:
    return node.op_type == "Transpose" and node.domain == "" and "perm" in node.attributes


def _perm(node: ir.Node) -> list[int]:
    return [int(p) for p in node.attributes["perm"].value]


def _rank(value: ir.Value, option: str) -> int:
    if value.shape is None or len(value.shape) < 3:
        shape = None if value.shape is None else list(value.shape)
        raise SpecError(
            f"{option}: {value.name!r} has shape {shape}; channels-first needs rank >= 3"
        )
    return len(value.shape)


def _permuted(shape: ir.Shape | None, perm: list[int]) -> ir.Shape | None:
    return None if shape is None else ir.Shape([shape[p] for p in perm])


def _permuted_struct(leaf: jax.ShapeDtypeStruct, perm: list[int]) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(leaf.shape[p] for p in perm), leaf.dtype)


def _positions(text: str | None) -> set[int]:
    return {int(t) for t in text.split(",")} if text else set()
