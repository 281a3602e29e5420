"""Attention written out by the model (``softmax(mask(q @ k.T * scale)) @ v``) -> ONNX
``Attention``, grouped-query heads and a logit soft-cap included."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement, one_reader, take_place
from jax2onnx_nn.core.ir.values import constant_array, same_dim
from jax2onnx_nn.core.layers.attention import jax_nn_mask_value

_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})
# a fill below this is a mask (JAX writes finfo.min or -inf); a logit plus it rounds to it
_MASK_FILL = -1e30


def _only(v: ir.Value | None, op_type: str) -> ir.Node | None:
    """The node of ``op_type`` (default domain) making ``v``, which nothing else reads."""
    if v is None:
        return None
    node = v.producer()
    if node is None or node.op_type != op_type or node.domain != "" or one_reader(v) is None:
        return None
    return node


def _scalar(v: ir.Value | None) -> float | None:
    """The value of a constant holding one number (any shape of size 1)."""
    array = constant_array(v)
    return None if array is None or array.size != 1 else float(array.reshape(()))


def _fill(v: ir.Value | None) -> float | None:
    """The fill of a masked logit: a constant of one value, expanded or not (JAX's ``where``)."""
    node = v.producer() if v is not None else None
    if node is not None and node.op_type == "Expand" and node.domain == "":
        v = node.inputs[0]
    array = constant_array(v)
    if array is None or array.size == 0 or not (array == array.flat[0]).all():
        return None
    value = float(array.flat[0])
    # (-inf: JAX's row masked everywhere is NaN, onnxruntime's zeros: left written out)
    return value if np.isfinite(value) and value <= _MASK_FILL else None


def _grouped(v: ir.Value | None) -> ir.Value | None:
    """``[B, K, T, H]`` keys or values as Attention takes them: ``v`` itself, or the tensor
    ``jnp.repeat(kv, N // K, axis=1)`` repeats (Unsqueeze at 2, Expand, Reshape), whose
    head ``n`` reads kv head ``n // (N // K)``: ONNX's grouping."""
    if v is None or v.shape is None or len(v.shape) != 4:
        return None
    reshape = _only(v, "Reshape")
    expand = _only(reshape.inputs[0], "Expand") if reshape is not None else None
    unsqueeze = _only(expand.inputs[0], "Unsqueeze") if expand is not None else None
    if unsqueeze is None or expand is None:
        return v
    kv = unsqueeze.inputs[0]
    axes, sizes = constant_array(unsqueeze.inputs[1]), constant_array(expand.inputs[1])
    if kv is None or kv.shape is None or len(kv.shape) != 4 or axes is None or sizes is None:
        return v
    heads, kv_heads = v.shape[1], kv.shape[1]
    if list(axes.reshape(-1)) != [2] or not isinstance(heads, int) or not isinstance(kv_heads, int):
        return v
    if sizes.size != 5 or any(s != 1 for i, s in enumerate(sizes) if i != 2):
        return v
    if heads != kv_heads * int(sizes[2]) or not all(
        same_dim(kv.shape[i], v.shape[i]) for i in (0, 2, 3)
    ):
        return v
    return kv


def _scores(v: ir.Value | None) -> tuple[ir.Value, ir.Value, float, float | None] | None:
    """``(q, k, scale, softcap)`` where ``v`` is ``q @ k.T`` scaled (``/ c`` or ``* c``), then
    soft-capped (``cap * tanh(logits / cap)``) or not."""
    softcap = None
    outer = _only(v, "Mul")
    if outer is not None:
        for tanh_out, cap_in in (outer.inputs, outer.inputs[::-1]):
            tanh = _only(tanh_out, "Tanh")
            cap = _scalar(cap_in)
            divide = _only(tanh.inputs[0], "Div") if tanh is not None else None
            if divide is not None and cap is not None and _scalar(divide.inputs[1]) == cap:
                softcap, v = cap, divide.inputs[0]
                break
    scale = 1.0
    node = v.producer() if v is not None else None
    if v is not None and node is not None and node.domain == "" and node.op_type in ("Div", "Mul"):
        factor = _scalar(node.inputs[1])
        if factor is not None and factor != 0 and one_reader(v) is not None:
            scale = 1.0 / factor if node.op_type == "Div" else factor
            v = node.inputs[0]
    product = _only(v, "MatMul")
    transpose = _only(product.inputs[1], "Transpose") if product is not None else None
    if product is None or transpose is None or product.inputs[0] is None:
        return None
    perm = transpose.attributes.get("perm")
    if perm is None or list(perm.value) != [0, 1, 3, 2] or transpose.inputs[0] is None:
        return None
    return product.inputs[0], transpose.inputs[0], scale, softcap


@rewrite("MatMul", creates=("Attention", "Where", "Expand", "Shape", "Concat"))
def attention(node: ir.Node, edit: Editor) -> Replacement:
    """``softmax(where(keep, q @ k.T * scale, fill)) @ v`` over ``[B, N, T, H]`` queries and
    ``[B, N, S, H]`` keys and values (those repeated from ``K`` kv heads by ``jnp.repeat``
    read unrepeated: grouped-query attention), the logits soft-capped or not, the mask
    optional -> ``Attention(q, k, v, mask, scale=, softcap=)``.

    What JAX computes is kept exactly as :func:`~jax2onnx_nn.core.layers.attention.
    attention_op` keeps it: the mask goes in as floats added to the logits, ``0`` where kept
    and JAX's ``fill`` elsewhere (a logit plus ``fill`` rounds to ``fill``), so a row masked
    everywhere averages the values as JAX's does (ONNX's boolean mask gives zeros there).
    Where a batch or length may be 0 at run time the op sits in an ``If`` (onnxruntime refuses
    it there), whose other branch gives JAX's zeros."""
    out = node.outputs[0]
    if out.dtype not in _FLOATS or out.shape is None or len(out.shape) != 4:
        return None
    softmax = _only(node.inputs[0], "Softmax")
    if softmax is None or int(softmax.attributes.get_int("axis", -1)) % 4 != 3:
        return None
    logits, where, fill = softmax.inputs[0], _only(softmax.inputs[0], "Where"), None
    if where is not None:
        _, a, b = where.inputs
        fills = _fill(a), _fill(b)
        if where.inputs[0] is None or (fills[0] is None) == (fills[1] is None):
            return None
        logits, fill = (b, fills[0]) if fills[0] is not None else (a, fills[1])
    scores = _scores(logits)
    if scores is None:
        return None
    q, k_used, scale, softcap = scores
    k, v = _grouped(k_used), _grouped(node.inputs[1])
    if k is None or v is None or logits is None or not _fits(q, k, v, out):
        return None
    mask = None
    if where is not None and fill is not None:
        mask = _additive_mask(edit, where, logits, np.asarray(fill, out.dtype.numpy()), q, k)
    attrs: dict[str, Any] = {"scale": float(scale)}
    if softcap is not None:
        attrs["softcap"] = float(softcap)
    with_past = _with_past(edit, node, q, k, v, mask, attrs)
    if with_past is not None:
        return with_past
    tests = _length_tests(edit, node, [(q, 0), (q, 2), (k, 2)])
    if tests is None:
        return None
    if not tests:
        return edit.op("Attention", q, k, v, mask, **attrs)
    return _unless_empty(
        edit,
        tests,
        q,
        v,
        ir.Node(
            "",
            "Attention",
            [q, k, v, mask],
            ir.convenience.convert_attributes(attrs),
            name=f"{node.name}/Attention",
        ),
    )


def _fits(q: ir.Value, k: ir.Value, v: ir.Value, out: ir.Value) -> bool:
    """Rank-4 ``q``, ``k``, ``v`` of one type, their heads grouping, batch and lengths agreeing."""
    shapes = [t.shape for t in (q, k, v)]
    if any(s is None or len(s) != 4 for s in shapes) or len({t.dtype for t in (q, k, v)}) != 1:
        return False
    (b, n, t, h), (_, kv, s, hk), (_, kv_v, s_v, _) = shapes  # type: ignore[misc]
    return (
        isinstance(n, int)
        and isinstance(kv, int)
        and kv > 0
        and n % kv == 0
        and same_dim(kv, kv_v)
        and same_dim(h, hk)
        and same_dim(s, s_v)
        and all(same_dim(x, b) for x in (k.shape[0], v.shape[0]))  # type: ignore[index]
        and same_dim(out.shape[2], t)  # type: ignore[index]
    )


def _full_rows(cond: ir.Value, logits: ir.Value) -> bool:
    """Whether the mask's last two dims are the logits' (onnxruntime broadcasts a mask's
    leading dims only)."""
    if cond.shape is None or logits.shape is None or len(cond.shape) < 2:
        return False
    return all(same_dim(cond.shape[i], logits.shape[i]) for i in (-2, -1))


def _additive_mask(
    edit: Editor, where: ir.Node, logits: ir.Value, fill: np.ndarray, q: ir.Value, k: ir.Value
) -> ir.Value:
    """The Where with the logits replaced by 0: 0 where kept, the fill elsewhere, its last two
    dims the logits' (onnxruntime broadcasts a mask's leading dims only).

    onnxruntime takes a mask of ``finfo.min`` for ``-inf`` (a row masked everywhere gives
    zeros), so that fill becomes ``jax.nn``'s ``-0.7 * finfo.max``: a logit plus either
    rounds to it, the same weights. A fill given as a full tensor stays one."""
    cond, a, b = where.inputs
    assert cond is not None and a is not None and b is not None  # (matched)
    given = a if b is logits else b
    cond, negated = _mask_condition(cond, logits)
    if negated:
        a, b = b, a
    value = fill if fill > np.finfo(fill.dtype).min else jax_nn_mask_value(fill.dtype)
    full_cond, full_fill = _full_rows(cond, logits), _full_rows(given, logits)
    filler = given if full_fill and value == fill else edit.const(value)
    if full_fill and not full_cond and value != fill:
        filler = _refilled(edit, given, value)
    zero = edit.const(np.zeros((), fill.dtype))
    mask = edit.op("Where", cond, *((filler, zero) if b is logits else (zero, filler)))
    if full_cond or full_fill:
        return mask
    rows = [edit.op("Shape", t, start=2, end=3) for t in (q, k)]
    return edit.op(
        "Expand", mask, edit.op("Concat", edit.const(np.ones(2, np.int64)), *rows, axis=0)
    )


def _mask_condition(cond: ir.Value, logits: ir.Value) -> tuple[ir.Value, bool]:
    """The mask's condition before its negation (``Xor`` with True, ``Not``: the Where's
    cases swap) and before an ``Expand`` over its leading dims (Attention broadcasts those:
    ``jnp.where`` broadcasting a ``[B, 1, T, S]`` mask to the heads); and whether negated."""
    negated = False
    node = cond.producer()
    if node is not None and node.domain == "" and node.op_type in ("Not", "Xor"):
        operands = list(node.inputs)
        if node.op_type == "Xor":
            trues = [x for x in operands if (arr := constant_array(x)) is not None and arr.all()]
            operands = [x for x in operands if x not in trues] if len(trues) == 1 else []
        if len(operands) == 1 and operands[0] is not None:
            cond, negated = operands[0], True
    node = cond.producer()
    if node is not None and node.domain == "" and node.op_type == "Expand":
        source = node.inputs[0]
        if source is not None and _full_rows(source, logits):
            cond = source
    return cond, negated


def _refilled(edit: Editor, given: ir.Value, value: np.ndarray) -> ir.Value:
    """``given`` (a constant of one value, or one expanded) holding ``value`` instead."""
    node = given.producer()
    if node is not None and node.op_type == "Expand" and node.domain == "":
        return edit.op("Expand", edit.const(value), node.inputs[1])
    array = constant_array(given)
    assert array is not None  # (_fill read it)
    return edit.const(np.full(array.shape, value, array.dtype))


def _length_tests(
    edit: Editor, node: ir.Node, dims: list[tuple[ir.Value, int]]
) -> list[ir.Value] | None:
    """The batch and lengths that may be 0 at run time, each as a 1-element tensor (read from
    a graph input of that dim where there is one: one read for every layer); None where one is
    0 (nothing to fuse). onnxruntime's Attention refuses a batch or a length of 0."""
    inputs = node.graph.inputs if node.graph is not None else []
    tests = []
    for value, axis in dims:
        assert value.shape is not None
        dim = value.shape[axis]
        if isinstance(dim, int):
            if dim == 0:
                return None
            continue
        source = next(
            (
                (given, i)
                for given in inputs
                if given.shape is not None
                for i, d in enumerate(given.shape)
                if same_dim(d, dim)
            ),
            (value, axis),
        )
        tests.append(edit.op("Shape", source[0], start=source[1], end=source[1] + 1))
    return tests


def _unless_empty(
    edit: Editor, tests: list[ir.Value], q: ir.Value, v: ir.Value, attention: ir.Node
) -> ir.Value:
    """``attention``'s result, or zeros where a batch or length of ``tests`` is 0 (JAX's
    result there: empty, or a sum over no keys), one ``If``."""
    sizes = tests[0] if len(tests) == 1 else edit.op("Concat", *tests, axis=0)
    least = edit.op("ReduceMin", sizes, keepdims=0)
    full = edit.op("Greater", least, edit.const(np.zeros((), np.int64)))
    (y,) = attention.outputs
    then = ir.Graph([], [y], nodes=[attention], name=f"{attention.name}/then")
    shape_nodes = [
        ir.Node("", "Shape", [q], ir.convenience.convert_attributes({"start": 0, "end": 3})),
        ir.Node("", "Shape", [v], ir.convenience.convert_attributes({"start": 3, "end": 4})),
    ]
    zero = ir.Node(
        "",
        "Constant",
        [],
        ir.convenience.convert_attributes(
            {"value": ir.tensor(np.zeros((), v.dtype.numpy() if v.dtype else np.float32))}
        ),
    )
    shape = ir.Node(
        "",
        "Concat",
        [n.outputs[0] for n in shape_nodes],
        ir.convenience.convert_attributes({"axis": 0}),
    )
    zeros = ir.Node("", "Expand", [zero.outputs[0], shape.outputs[0]])
    otherwise = ir.Graph(
        [],
        [zeros.outputs[0]],
        nodes=[*shape_nodes, zero, shape, zeros],
        name=f"{attention.name}/else",
    )
    y.name, zeros.outputs[0].name = f"{attention.name}_output", f"{attention.name}_empty"
    for name, value in (
        (f"{attention.name}/Shape_q", shape_nodes[0].outputs[0]),
        (f"{attention.name}/Shape_v", shape_nodes[1].outputs[0]),
        (f"{attention.name}/zero", zero.outputs[0]),
        (f"{attention.name}/shape", shape.outputs[0]),
    ):
        value.name = name
    return edit.op("If", full, then_branch=then, else_branch=otherwise)


@dataclass(frozen=True)
class _Heads:
    """A ``[B, N, S, H]`` query, key or value as the ``[B, S, M*H]`` tensor ``flat`` it was
    split from (a Reshape to ``[B, S, M, H]`` and a Transpose ``0 2 1 3``, as models split
    heads), ``part`` where a Split then cut ``N`` of the ``M`` heads out (its index, and the
    sizes of its parts along the last axis of ``flat``: a fused qkv projection), and the
    ``RotaryEmbedding`` after (None: no rotation)."""

    flat: ir.Value
    part: tuple[int, tuple[int, ...]] | None
    rotary: ir.Node | None

    def value(self, edit: Editor) -> ir.Value:
        """The ``[B, S, N*H]`` tensor (a Split of ``flat`` along its last axis, where cut)."""
        if self.part is None:
            return self.flat
        index, sizes = self.part
        parts = edit.op_results(
            "Split", len(sizes), self.flat, edit.const(np.asarray(sizes, np.int64)), axis=2
        )
        return parts[index]


def _heads_of(x: ir.Value | None) -> _Heads | None:
    """``x`` as :class:`_Heads`, or None where it is not split from a 3D tensor so."""
    rotary = None
    node = x.producer() if x is not None else None
    if node is not None and node.op_type == "RotaryEmbedding" and node.domain == "":
        if len(node.inputs) != 3 or node.attributes.get_int("num_heads") or not node.inputs[0]:
            return None
        rotary, x, node = node, node.inputs[0], node.inputs[0].producer()
    part = None
    if node is not None and node.op_type == "Split" and node.domain == "" and x is not None:
        cut = _head_split(node, x)
        if cut is None:
            return None
        part, node = cut, node.inputs[0].producer() if node.inputs[0] is not None else None
    if node is None or node.op_type != "Transpose" or node.domain != "" or not node.inputs[0]:
        return None
    perm = node.attributes.get("perm")
    reshape = node.inputs[0].producer()
    if perm is None or list(perm.value) != [0, 2, 1, 3] or reshape is None:
        return None
    flat = reshape.inputs[0] if reshape.op_type == "Reshape" and reshape.domain == "" else None
    split = reshape.outputs[0].shape
    if flat is None or flat.shape is None or len(flat.shape) != 3 or split is None:
        return None
    if len(split) != 4 or not all(map(same_dim, flat.shape[:2], split[:2])):
        return None
    if part is not None:
        if not isinstance(split[3], int):
            return None
        part = (part[0], tuple(n * split[3] for n in part[1]))
    return _Heads(flat, part, rotary)


def _head_split(node: ir.Node, x: ir.Value) -> tuple[int, tuple[int, ...]] | None:
    """(``x``'s index, the heads of each part) of a Split along the heads (axis 1 of 4) whose
    sizes are a constant input."""
    sizes = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    if sizes is None or node.attributes.get_int("axis", 0) % 4 != 1 or x not in node.outputs:
        return None
    return list(node.outputs).index(x), tuple(int(n) for n in sizes)


def _only_concat(v: ir.Value) -> ir.Node | None:
    """The two-input Concat along the time axis (2 of 4) making ``v``."""
    node = v.producer()
    if node is None or node.op_type != "Concat" or node.domain != "" or len(node.inputs) != 2:
        return None
    if node.attributes.get_int("axis", 0) % 4 != 2 or any(x is None for x in node.inputs):
        return None
    return node


def _only_reads(node: ir.Node, values: list[ir.Value], stops: set[ir.Value]) -> bool:
    """Whether every node reading ``values`` is one the attention at ``node`` replaces (a node
    it is computed from, up to ``stops``), or a graph output: they can take the place of
    values the fused node computes later."""
    pattern: set[ir.Node] = {node}
    todo = [x for x in node.inputs if x is not None]
    while todo:
        value = todo.pop()
        producer = value.producer()
        if value in stops or producer is None or producer in pattern:
            continue
        if producer.graph is not node.graph:
            continue
        pattern.add(producer)
        todo.extend(x for x in producer.inputs if x is not None)
    return all(use.node in pattern for value in values for use in value.uses())


def _rotate_3d(edit: Editor, x: ir.Value, heads: int, rotary: ir.Node) -> ir.Value:
    """``rotary``'s rotation of ``[B, S, heads * H]`` ``x`` (its 3D form: ``num_heads``)."""
    attrs = {a.name: a.value for a in rotary.attributes.values()}
    return edit.op("RotaryEmbedding", x, *rotary.inputs[1:], **attrs, num_heads=heads)


def _with_past(
    edit: Editor,
    node: ir.Node,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    mask: ir.Value | None,
    attrs: dict[str, Any],
) -> Replacement:
    """Attention over keys and values that are the past ones with the new ones concatenated
    (a decoder's cache, the concatenation also its present) -> one ``Attention`` taking the
    past and returning the present, its query, new keys and values the ``[B, S, heads *
    head_dim]`` projections the model split into heads (rotated by a 3D RotaryEmbedding where
    the model rotated them; ``q_num_heads``/``kv_num_heads``): the splits and the
    concatenations go, and the merge of the heads after it cancels. None where the pattern
    differs."""
    concats = [_only_concat(t) for t in (k, v)]
    if concats[0] is None or concats[1] is None or q.shape is None or k.shape is None:
        return None
    split = [_heads_of(t) for t in (q, concats[0].inputs[1], concats[1].inputs[1])]
    dims = [d for d in (q.shape[1], k.shape[1], q.shape[3]) if isinstance(d, int)]
    if v.shape is None or len(dims) != 3:
        return None
    heads, kv_heads, head_dim = dims
    if k.shape[3] != head_dim or v.shape[3] != head_dim:  # (the zeros and merge below)
        return None
    if not _only_reads(node, [c.outputs[0] for c in concats], {q, k, v}):  # type: ignore[union-attr]
        return None
    if any(found is None for found in split):
        return None
    # (the keys' length is the past's and the queries': a batch or query length of 0 is
    # what onnxruntime refuses; a past of 0 it takes)
    tests = _length_tests(edit, node, [(q, 0), (q, 2)])
    if tests is None:
        return None
    flat = []
    for found, n in zip(split, (heads, kv_heads, kv_heads), strict=True):
        assert found is not None
        x = found.value(edit)
        flat.append(x if found.rotary is None else _rotate_3d(edit, x, n, found.rotary))
    past: list[ir.Value] = [c.inputs[0] for c in concats]  # type: ignore[union-attr,misc]
    attention = ir.Node(
        "",
        "Attention",
        [*flat, mask, *past],
        ir.convenience.convert_attributes(
            {**attrs, "q_num_heads": heads, "kv_num_heads": kv_heads}
        ),
        num_outputs=3,
        name=f"{node.name}/Attention",
    )
    if tests:
        y, *present = _unless_empty_with_past(edit, tests, attention, flat, past, kv_heads)
    else:
        assert edit.graph is not None
        edit.graph.insert_before(node, attention)
        y, *present = attention.outputs
    for concat, new in zip(concats, present, strict=True):
        new.shape, new.type = concat.outputs[0].shape, concat.outputs[0].type  # type: ignore[union-attr]
        take_place(concat.outputs[0], new)  # type: ignore[union-attr]
    rows = split[0].flat.shape  # type: ignore[union-attr]
    assert rows is not None  # (_heads_of: rank 3)
    y.shape, y.type = ir.Shape([*rows[:2], heads * head_dim]), q.type
    split_y = edit.op("Reshape", y, np.asarray([0, 0, heads, head_dim], np.int64))
    return edit.op("Transpose", split_y, perm=[0, 2, 1, 3])


def _unless_empty_with_past(
    edit: Editor,
    tests: list[ir.Value],
    attention: ir.Node,
    flat: list[ir.Value],
    past: list[ir.Value],
    kv_heads: int,
) -> list[ir.Value]:
    """``attention``'s three results, or, where a batch or length of ``tests`` is 0, zeros
    for the output and the past with the new keys and values (split into heads) for the
    present: one ``If`` of three results."""
    sizes = tests[0] if len(tests) == 1 else edit.op("Concat", *tests, axis=0)
    least = edit.op("ReduceMin", sizes, keepdims=0)
    full = edit.op("Greater", least, edit.const(np.zeros((), np.int64)))
    then = ir.Graph([], list(attention.outputs), nodes=[attention], name=f"{attention.name}/then")
    q = flat[0]
    dtype = q.dtype.numpy() if q.dtype else np.float32
    nodes: list[ir.Node] = []

    def add(op_type: str, *inputs: ir.Value, **node_attrs: Any) -> ir.Value:
        made = ir.Node(
            "",
            op_type,
            list(inputs),
            ir.convenience.convert_attributes(node_attrs),
            name=f"{attention.name}/empty/{op_type}_{len(nodes)}",
        )
        nodes.append(made)
        made.outputs[0].name = f"{made.name}_output"
        return made.outputs[0]

    zero = add("Constant", value=ir.tensor(np.zeros((), dtype)))
    outputs = [add("Expand", zero, add("Shape", q))]
    for new, old in zip(flat[1:], past, strict=True):
        assert old.shape is not None  # (_fits: rank 4)
        # (no -1: a batch or length of 0 makes it ambiguous)
        shape = np.asarray([0, 0, kv_heads, old.shape[3]], np.int64)
        split = add("Constant", value=ir.tensor(shape))
        heads = add("Transpose", add("Reshape", new, split), perm=[0, 2, 1, 3])
        outputs.append(add("Concat", old, heads, axis=2))
    otherwise = ir.Graph([], outputs, nodes=nodes, name=f"{attention.name}/else")
    for i, value in enumerate(attention.outputs):
        value.name = f"{attention.name}_output_{i}"
    results = edit.op_results("If", 3, full, then_branch=then, else_branch=otherwise)
    return results
