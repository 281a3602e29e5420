"""Per-channel scales and shifts folded into the weights of the op before them."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import numpy_tensor

FOLD = "jax2onnx_nn.fold_into_weights"
"""The meta key a rule sets on a BatchNormalization it writes for a layer that frameworks fold
(Keras's BatchNormalization after a convolution): folded even without ``fold_weights=True``."""


def _initializer_array(v: ir.Value | None, graph: ir.Graph) -> np.ndarray | None:
    if (
        v is None
        or v.producer() is not None
        or v.name not in graph.initializers
        or v.const_value is None
    ):
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


class _Foldable(NamedTuple):
    """A Conv or Gemm a per-channel step after it folds into, with its weight and bias
    initializers and their data (``bias`` and ``b`` None when it has no bias)."""

    node: ir.Node
    weight: ir.Value
    w: np.ndarray
    bias: ir.Value | None
    b: np.ndarray | None


def _foldable_producer(value: ir.Value, graph: ir.Graph) -> _Foldable | None:
    """The Conv or plain Gemm (alpha = beta = 1, A not transposed) making ``value``, when
    ``value`` has no other reader and the weight is an initializer read by that node alone."""
    node = value.producer()
    if (
        node is None
        or node.domain != ""
        or node.graph is not graph
        or len(value.uses()) != 1
        or value.is_graph_output()
    ):
        return None
    if node.op_type == "Conv":
        weight = node.inputs[1]
    elif node.op_type == "Gemm":
        attrs = node.attributes
        if (
            attrs.get("transA") is not None
            and attrs["transA"].value
            or any(attrs.get(k) is not None and attrs[k].value != 1.0 for k in ("alpha", "beta"))
        ):
            return None
        weight = node.inputs[1]
    else:
        return None
    w = _initializer_array(weight, graph)
    if weight is None or w is None or len(weight.uses()) != 1:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    b = _initializer_array(bias, graph)
    if bias is not None and (b is None or len(bias.uses()) != 1):
        return None
    return _Foldable(node, weight, w, bias, b)


def _scale_shift(
    node: ir.Node, graph: ir.Graph, rank: int | None
) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """(scale, shift) per channel of an inference BatchNormalization, a Mul or an Add by a
    constant; None for anything else."""
    if node.domain != "":
        return None
    if node.op_type == "BatchNormalization" and len(node.outputs) == 1:
        found = [_initializer_array(v, graph) for v in node.inputs[1:5]]
        arrays = [a for a in found if a is not None]
        if (
            len(arrays) != len(found)
            or node.attributes.get("training_mode") is not None
            and node.attributes["training_mode"].value
        ):
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


def fold_marked_into_weights(model: ir.Model) -> int:
    """:func:`fold_into_weights` of the nodes their rule marked with :data:`FOLD` only."""
    return fold_into_weights(model, marked_only=True)


def fold_into_weights(model: ir.Model, *, marked_only: bool = False) -> int:
    """A BatchNormalization in inference mode, or a Mul / Add by a per-channel constant, right
    after a Conv or Gemm with constant weights is folded into that node's weight and bias, so a
    convolution with its BatchNorm is one Conv and ``linear(x) * g + b`` one Gemm.

    Not bit-exact: the folded weights are rounded once to their dtype (computed in float64),
    where JAX rounds the convolution's result and then each affine step, so results differ
    from JAX by about one ulp of the result (checked at 1e-5 relative in float32). Only the
    main graph; a weight or result read by another node is left alone (folding would copy
    the weight). ``marked_only``: only the nodes marked :data:`FOLD`. Returns the number of
    nodes folded."""
    graph = model.graph
    folded = 0
    for node in list(graph):
        if not node.inputs or node.inputs[0] is None or node.graph is not graph:
            continue
        if marked_only and not node.meta.get(FOLD):
            continue
        x = (
            node.inputs[0]
            if node.op_type == "BatchNormalization"
            else next((v for v in node.inputs if v is not None and v.producer() is not None), None)
        )
        foldable = _foldable_producer(x, graph) if x is not None else None
        if (
            x is None
            or foldable is None
            or node.outputs[0].dtype
            not in (
                ir.DataType.FLOAT,
                ir.DataType.DOUBLE,
                ir.DataType.FLOAT16,
            )
        ):
            continue
        producer = foldable.node
        rank = 2 if producer.op_type == "Gemm" else len(x.shape) if x.shape is not None else None
        affine = _scale_shift(node, graph, rank)
        if affine is None:
            continue
        weight, w = foldable.weight, foldable.w
        channels = (
            w.shape[0]
            if producer.op_type == "Conv"
            else w.shape[1]
            if not (
                producer.attributes.get("transB") is not None
                and producer.attributes["transB"].value
            )
            else w.shape[0]
        )
        scale, shift = affine
        if any(v is not None and v.size not in (1, channels) for v in (scale, shift)):
            continue
        scale = np.ones(channels) if scale is None else np.broadcast_to(scale, (channels,))
        shift = np.zeros(channels) if shift is None else np.broadcast_to(shift, (channels,))
        bias_value = foldable.bias
        b = np.zeros(channels) if foldable.b is None else foldable.b.astype(np.float64)
        if b.size not in (1, channels):
            continue
        # the scale rounded once to the weight's dtype: no float64 copy of a large weight
        if (
            producer.op_type == "Conv"
            or producer.attributes.get("transB") is not None
            and producer.attributes["transB"].value
        ):
            w_new = w * scale.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            w_new = w * scale.astype(w.dtype).reshape(1, -1)
        b_new = (np.broadcast_to(b, (channels,)) * scale + shift).astype(w.dtype)
        weight.const_value = numpy_tensor(w_new, name=weight.name)
        if bias_value is None:
            bias_value = ir.Value(
                name=f"{weight.name}/folded_bias", shape=ir.Shape([channels]), type=weight.type
            )
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
