"""onnxruntime's packed self-attention: the query, key and value projections of one input and
the attention after them as one ``com.microsoft.Attention``; a causal one as the one packed
projection and a softmax written out to keep onnxruntime's ``Exp`` on its fast path."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array, same_dim, same_dims
from jax2onnx_nn.core.quant.dequantize import add_initializer

CONTRIB = "com.microsoft"
# the nodes of an If branch that gives zeros of a shape (ctx.unless_empty's empty branch)
_ZEROS_BRANCH = frozenset({"ConstantOfShape", "Concat", "Shape", "Constant", "Unsqueeze"})
# the attributes of a self-attention node the packed op computes alike
_ONNX_ATTENTION = frozenset({"q_num_heads", "kv_num_heads", "is_causal", "scale"})
_MULTI_HEAD = frozenset({"num_heads", "unidirectional", "scale", "mask_filter_value"})


@rewrite("If", creates=())
def packed_attention(node: ir.Node, edit: Editor) -> Replacement:
    """``If(a dim is 0, zeros, attention(x @ Wq + bq, x @ Wk + bk, x @ Wv + bv))``: ONNX
    ``Attention`` or ``com.microsoft.MultiHeadAttention`` on ``[B, T, N*H]`` projections of one
    ``x`` by constant weights (one ``[D, 3*N*H]`` MatMul split in three, as GPT-2 writes it, or
    three), as many key as query heads, causal or not, without mask, bias or cache ->
    ``com.microsoft.Attention(x, [Wq Wk Wv], [bq bk bv])``.

    The op multiplies the input by the packed weights once and writes the heads where its
    attention reads them (no Split, no transposes), and it answers a batch or a length of 0
    with an empty result, so the ``If`` that guards the other ops against them goes. The
    4-layer GPT of ``benchmarks/attention_bench.py`` (d=256, 8 heads, batch 8 of 64 tokens,
    CPU time on one thread, rounds alternated with ``jax.jit``'s): 0.99x jit's time, against
    1.05-1.11x with MultiHeadAttention in the If (opset 21) and 1.02-1.05x with ONNX
    Attention in it (opset 23); the same numbers (max abs error against JAX 4.05e-6 all
    three). A causal one is :func:`_causal_attention` instead."""
    if len(node.outputs) != 1 or len(node.inputs) != 1:
        return None
    branches = {name: node.attributes[name].as_graph() for name in ("then_branch", "else_branch")}
    empty, full = branches["then_branch"], branches["else_branch"]
    if any(n.op_type not in _ZEROS_BRANCH or n.domain != "" for n in empty):
        return None
    nodes = list(full)
    if len(nodes) != 1 or len(full.outputs) != 1 or nodes[0].outputs[0] is not full.outputs[0]:
        return None
    packed = _packed(nodes[0], node.outputs[0], edit)
    if packed is not None:  # the If goes: its branches stop reading the enclosing graph
        for branch in branches.values():
            for inner in branch:
                for i in range(len(inner.inputs)):
                    inner.replace_input_with(i, None)
    return packed


@rewrite("Attention", creates=())
def packed_onnx_attention(node: ir.Node, edit: Editor) -> Replacement:
    """ONNX ``Attention`` outside an ``If`` (static batch and lengths) on projections of one
    input: :func:`packed_attention`'s ``com.microsoft.Attention``, for the same reason."""
    return _packed(node, node.outputs[0], edit) if node.graph is not None else None


@rewrite("MultiHeadAttention", domain=CONTRIB, creates=())
def packed_multi_head_attention(node: ir.Node, edit: Editor) -> Replacement:
    """``com.microsoft.MultiHeadAttention`` outside an ``If`` on projections of one input:
    :func:`packed_attention`'s ``com.microsoft.Attention``, for the same reason."""
    return _packed(node, node.outputs[0], edit) if node.graph is not None else None


def _packed(attention: ir.Node, out: ir.Value, edit: Editor) -> ir.Value | None:
    """``com.microsoft.Attention`` for ``attention`` (ONNX's or MultiHeadAttention) on the
    projections of one input, ``out`` the value it gives; None where it does not compute
    the same."""
    heads_causal = _heads_and_causal(attention)
    if heads_causal is None or edit.graph is None:
        return None
    heads, causal, scale = heads_causal
    projections = [_projection(v) for v in attention.inputs[:3]]
    found = [p for p in projections if p is not None]
    if len(found) != 3 or any(p[0] is not found[0][0] for p in found):
        return None
    x, weights, biases = found[0][0], [p[1] for p in found], [p[2] for p in found]
    width = weights[0].shape[1]
    if any(w.shape != (weights[0].shape[0], width) for w in weights) or width % heads:
        return None
    if x.shape is None or not x.shape or x.shape[-1] != weights[0].shape[0]:
        return None
    # (float32 only: measured there; a 16-bit float model keeps the ops its rules chose)
    if x.dtype != ir.DataType.FLOAT or any(w.dtype != np.float32 for w in weights):
        return None
    if out.shape is not None and (len(out.shape) != 3 or out.shape[-1] != width):
        return None
    dtype = weights[0].dtype
    packed_w = np.concatenate(weights, axis=1)
    packed_b = np.concatenate(
        [np.zeros(width, dtype) if b is None else b.reshape(width) for b in biases]
    ).astype(dtype)
    if causal and len(x.shape) == 3 and edit.opset >= 14:  # (Trilu: opset 14)
        return _causal_attention(x, packed_w, packed_b, heads, scale, edit)
    graph = edit.graph
    base = attention.name or "attention"
    result = ir.Node(
        CONTRIB,
        "Attention",
        [
            x,
            add_initializer(graph, f"{base}/qkv_weight", packed_w),
            add_initializer(graph, f"{base}/qkv_bias", packed_b),
        ],
        [
            ir.AttrInt64("num_heads", heads),
            ir.AttrInt64("unidirectional", int(causal)),
            ir.AttrFloat32("scale", scale),
        ],
        name=f"{base}/packed",
        doc_string=attention.doc_string,
    )
    graph.insert_before(edit.anchor, result)
    graph.opset_imports[CONTRIB] = 1
    return result.outputs[0]


def _causal_attention(
    x: ir.Value, weight: np.ndarray, bias: np.ndarray, heads: int, scale: float, edit: Editor
) -> ir.Value:
    """Causal self-attention on ``x @ weight + bias`` (the packed ``[D, 3*N*H]`` projection)
    in ops whose softmax keeps onnxruntime's ``Exp`` on its fast path.

    onnxruntime's exponential (MLAS, as in its Softmax and every fused attention kernel) takes
    15-20x its time on an argument below about -87.3, where the result is below the smallest
    normal float: the masked logits (-inf or -10000 less the row's max) are all such
    arguments, so a causal attention of 8x64 tokens, 8 heads, spends two thirds of its time in
    them (CPU time on one thread: contrib ``Attention`` 3.06 ms with its projection, ONNX
    ``Attention`` 23 the same). Here the softmax is written out with the argument clamped at
    -87 (``exp(-87)`` is normal) and the masked weights zeroed after it: 2.62 ms. A clamped
    visible weight was below ``exp(-87)`` of the row's largest, under any float32 rounding of
    a sum that is at least 1; the masked ones are exactly 0, as in JAX."""
    width = weight.shape[1] // 3
    head = width // heads
    qkv = edit.op("MatMul", x, weight)
    if np.any(bias):
        qkv = edit.op("Add", qkv, bias)
    # [B, T, 3N, H] -> [B, 3N, T, H]: q, k and v are the thirds of the heads axis
    heads_first = edit.op(
        "Transpose",
        edit.op("Reshape", qkv, np.array([0, 0, 3 * heads, head], np.int64)),
        perm=[0, 2, 1, 3],
    )
    split = ir.Node(
        "",
        "Split",
        [heads_first, edit.const(np.array([heads] * 3, np.int64))],
        [ir.AttrInt64("axis", 1)],
        outputs=[ir.Value(name=f"{heads_first.name}/{part}") for part in "qkv"],
        name=f"{heads_first.name}/Split",
    )
    assert edit.graph is not None
    edit.graph.insert_before(edit.anchor, split)
    q, k, v = split.outputs
    logits = edit.op(
        "Mul",
        edit.op("MatMul", q, edit.op("Transpose", k, perm=[0, 1, 3, 2])),
        np.array(scale, np.float32),
    )
    # -inf above the diagonal of the logits' [T, T], 0 on and below it
    square = edit.op("Shape", logits, start=-2)
    minus_inf = ir.tensor(np.array([-np.inf], np.float32))
    blocked = edit.op(
        "Trilu",
        edit.op("ConstantOfShape", square, value=minus_inf),
        np.array(1, np.int64),
        upper=1,
    )
    masked = edit.op("Add", logits, blocked)
    row_max = _reduce(edit, "ReduceMax", masked)
    shifted = edit.op("Max", edit.op("Sub", masked, row_max), np.array(-87.0, np.float32))
    # (the masked weights, exp(-87) here, are 0 in JAX, and a denormal probability would slow
    # the MatMul after it as much)
    weights = edit.op("Trilu", edit.op("Exp", shifted), upper=0)
    probabilities = edit.op("Div", weights, _reduce(edit, "ReduceSum", weights))
    out = edit.op("Transpose", edit.op("MatMul", probabilities, v), perm=[0, 2, 1, 3])
    return edit.op("Reshape", out, np.array([0, 0, width], np.int64))


def _reduce(edit: Editor, op_type: str, x: ir.Value) -> ir.Value:
    """``op_type`` over the last axis, kept (axes an input from opset 18, ReduceSum's 13)."""
    axes = np.array([-1], np.int64)
    if edit.opset >= 18 or (op_type == "ReduceSum" and edit.opset >= 13):
        return edit.op(op_type, x, axes, keepdims=1)
    return edit.op(op_type, x, axes=[-1], keepdims=1)


def _heads_and_causal(node: ir.Node) -> tuple[int, bool, float] | None:
    """``(heads, causal, scale)`` of a self-attention node without mask, bias, cache or extra
    outputs (as many key as query heads), else None."""
    extra = [v for v in node.inputs[3:] if v is not None]
    if extra or len(node.outputs) != 1:
        return None
    attrs = node.attributes
    if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
        if not set(attrs) <= _ONNX_ATTENTION or "scale" not in attrs:
            return None
        heads = attrs["q_num_heads"].as_int() if "q_num_heads" in attrs else 0
        if heads == 0 or attrs["kv_num_heads"].as_int() != heads:
            return None
        causal = "is_causal" in attrs and attrs["is_causal"].as_int() == 1
        return heads, causal, attrs["scale"].as_float()
    if node.op_type == "MultiHeadAttention" and node.domain == CONTRIB:
        if not set(attrs) <= _MULTI_HEAD or "scale" not in attrs:
            return None
        causal = "unidirectional" in attrs and attrs["unidirectional"].as_int() == 1
        return attrs["num_heads"].as_int(), causal, attrs["scale"].as_float()
    return None


def _projection(v: ir.Value | None) -> tuple[ir.Value, np.ndarray, np.ndarray | None] | None:
    """``(x, W, b)`` where ``v`` is ``x @ W (+ b)`` (reshaped back to its own shape or not), or
    one third along the last axis of a ``Split`` of ``x @ W (+ b)`` (then ``W`` and ``b`` are
    that third's columns); ``W`` a constant ``[D, E]``, ``b`` a constant ``[E]``."""
    if v is None:
        return None
    shape, root = v.shape, _before_reshapes(v)
    node = root.producer()
    third = None
    if node is not None and node.op_type == "Split" and node.domain == "":
        third = _third(node, root)
        product = node.inputs[0]
        node = product.producer() if third is not None and product is not None else None
    bias = None
    if node is not None and node.op_type == "Add" and node.domain == "":
        for product, b in (node.inputs, node.inputs[::-1]):
            array = constant_array(b)
            made = product.producer() if product is not None else None
            if array is not None and made is not None and made.op_type == "MatMul":
                bias, node = array, made
                break
        else:
            return None
    if node is None or node.op_type != "MatMul" or node.domain != "":
        return None
    x, w_value = node.inputs
    weight = constant_array(w_value)
    if x is None or x.shape is None or weight is None or weight.ndim != 2:
        return None
    if bias is not None and bias.size != weight.shape[1]:
        return None
    if third is not None:
        width = weight.shape[1] // 3
        columns = slice(third * width, (third + 1) * width)
        weight = weight[:, columns]
        bias = None if bias is None else bias.reshape(-1)[columns]
    # (the shapes of values between rules may be unknown here: the reshapes' result is checked
    # against the product's shape, which x and W give)
    product_shape = ir.Shape([*x.shape[:-1], weight.shape[1]])
    if root is not v and not same_dims(shape, product_shape):
        return None
    return x, weight, bias


def _before_reshapes(v: ir.Value) -> ir.Value:
    """The value the Reshapes that make ``v`` start from (``v`` itself without one)."""
    node = v.producer()
    while node is not None and node.op_type == "Reshape" and node.domain == "":
        if node.inputs[0] is None:
            break
        v = node.inputs[0]
        node = v.producer()
    return v


def _third(split: ir.Node, v: ir.Value) -> int | None:
    """Which third of its input's last axis the Split output ``v`` is (equal thirds only)."""
    x = split.inputs[0]
    if x is None or x.shape is None or len(split.outputs) != 3:
        return None
    axis = split.attributes["axis"].as_int() if "axis" in split.attributes else 0
    if axis % len(x.shape) != len(x.shape) - 1 or not isinstance(x.shape[-1], int):
        return None
    sizes = constant_array(split.inputs[1]) if len(split.inputs) > 1 else None
    third = x.shape[-1] // 3
    if sizes is not None and list(sizes.reshape(-1)) != [third] * 3:
        return None
    if sizes is None and "num_outputs" not in split.attributes:
        return None
    index = list(split.outputs).index(v)
    return index if all(same_dim(o.shape[-1], third) for o in split.outputs if o.shape) else None
