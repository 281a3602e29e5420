"""onnxruntime's grouped-query attention with a cache: a decoder's past-taking ONNX
``Attention`` under a causal mask as one ``com.microsoft.GroupQueryAttention``."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array, same_dim

CONTRIB = "com.microsoft"
_ATTRIBUTES = frozenset({"q_num_heads", "kv_num_heads", "scale", "is_causal"})
# a fill this low: a logit plus it rounds to it, its weight exp(fill - max) is 0
_LOWEST_FILL = -1e30
_PASS_THROUGH = frozenset({"Cast", "Squeeze", "Identity"})


@rewrite("Attention", creates=())
def group_query_attention(node: ir.Node, edit: Editor) -> Replacement:
    """``Attention(q, k, v, mask, past_key, past_value)`` (``[B, S, heads * head_dim]``
    queries, new keys and values, the past ``[B, kv_heads, P, head_dim]``, as
    :func:`~jax2onnx_nn.core.passes.fuse_attention.attention` writes a decoder's cache) whose
    float mask keeps no key after the query's position (``slot <= P + row`` one of the
    conditions it keeps by) -> ``com.microsoft.GroupQueryAttention(q, k, v, past_key,
    past_value, seqlens_k = P + S - 1, total_sequence_length = P + S, attention_bias = mask)``.

    Every row sees the whole ``P + S`` slots (``seqlens_k`` alike for the batch): the mask
    carries the padding onnxruntime-genai puts on the left, GQA's own causal masking only
    drops the slots the mask's causal condition gives ``fill`` (weight 0 either way), and it
    writes the present as ``Attention`` does (the past, then the new keys). The same numbers
    for every query that keeps a key; a query the mask hides from every key (a pad token of
    a left-padded row, whose result no kept token reads) averages the values of the slots up
    to it where ``Attention`` averages all. Opt-in (``WITH_GROUP_QUERY_ATTENTION`` in
    core/targets/onnxruntime.py): onnxruntime 1.32's CPU kernel is not faster than ONNX
    ``Attention`` taking the past (0.98-1.07x its time for a 64-256-token prefill, 1.0-1.3x
    per decode step, the op alone; 0.22-0.26x / 0.41-0.64x only against the older form, the
    cache scattered into the whole buffer, ``benchmarks/gqa_bench.py``). It kills the process
    on a batch of 0, so the op stays in the ``If`` that guards ``Attention`` against an empty
    batch or length. float32 only (not measured at 16 bits), no softcap (not compared)."""
    if len(node.inputs) != 6 or len(node.outputs) != 3 or edit.graph is None:
        return None
    q, k, v, mask, past_key, past_value = node.inputs
    attrs = node.attributes
    if not set(attrs) <= _ATTRIBUTES or attrs.get_int("is_causal", 0) != 0:
        return None
    heads, kv_heads = attrs.get_int("q_num_heads", 0), attrs.get_int("kv_num_heads", 0)
    values = (q, k, v, past_key, past_value)
    if not heads or not kv_heads or mask is None or any(x is None for x in values):
        return None
    assert q is not None and k is not None and v is not None  # (checked)
    assert past_key is not None and past_value is not None
    # (the rules' own values, the query and key rotated, may have no type yet: Attention
    # with q_num_heads takes them 3-D, of the values' type)
    if any(x.dtype != ir.DataType.FLOAT for x in (v, past_key, past_value)):
        return None
    if v.shape is None or past_key.shape is None or len(v.shape) != 3 or len(past_key.shape) != 4:
        return None
    if heads % kv_heads or past_key.shape[1] != kv_heads:
        return None
    if not _causal(mask, query=v.shape[1], past=past_key.shape[2]):
        return None
    scale = attrs["scale"].as_float() if "scale" in attrs else None
    # total = P + S and seqlens_k = total - 1 for every row, int32
    lengths = [edit.op("Shape", past_key, start=2, end=3), edit.op("Shape", v, start=1, end=2)]
    total = edit.op("Cast", edit.op("Add", *lengths), to=ir.DataType.INT32)
    last = edit.op("Sub", total, edit.const(np.ones(1, np.int32)))
    seqlens = edit.op("Expand", last, edit.op("Shape", v, start=0, end=1))
    total_scalar = edit.op("Squeeze", total, edit.const(np.zeros(1, np.int64)))
    gqa_attrs: dict[str, int | float] = {"num_heads": heads, "kv_num_heads": kv_heads}
    if scale is not None:
        gqa_attrs["scale"] = scale
    gqa = ir.Node(
        CONTRIB,
        "GroupQueryAttention",
        [q, k, v, past_key, past_value, seqlens, total_scalar, None, None, None, mask],
        ir.convenience.convert_attributes(gqa_attrs),
        num_outputs=3,
        name=f"{node.name or 'attention'}/gqa",
        doc_string=node.doc_string,
    )
    edit.graph.insert_before(edit.anchor, gqa)
    model_graph = edit.main if edit.main is not None else edit.graph
    model_graph.opset_imports[CONTRIB] = 1
    for new, old in zip(gqa.outputs, node.outputs, strict=True):
        new.shape, new.type = old.shape, old.type
    return list(gqa.outputs)


def _causal(mask: ir.Value, *, query: object, past: object) -> bool:
    """Whether ``mask`` is ``Where(keep, 0, fill)`` (expanded or not) with ``fill`` a constant
    low enough that a logit plus it rounds to it, and ``keep`` ``slot <= past + row`` and
    what else (``And``): ``slot`` the key slots ``Range(0, past + query)`` on the last axis,
    ``row`` the queries' ``Range(0, query)`` on the one before."""
    where = mask.producer()
    if where is not None and where.op_type == "Expand" and where.domain == "":
        where = where.inputs[0].producer() if where.inputs[0] is not None else None
    if where is None or where.op_type != "Where" or where.domain != "":
        return False
    keep, zero, fill = where.inputs
    zeros, fills = constant_array(zero), constant_array(fill)
    if zeros is None or fills is None or zeros.size != 1 or float(zeros.reshape(-1)[0]) != 0:
        return False
    if zeros.dtype != np.float32 or fills.dtype != np.float32:
        return False
    if not fills.size or float(fills.max()) > _LOWEST_FILL:
        return False
    return any(_slot_at_most_position(c, query, past) for c in _conjuncts(keep))


def _conjuncts(keep: ir.Value | None) -> list[ir.Value]:
    """The conditions an ``And`` tree keeps by (``keep`` itself without one)."""
    if keep is None:
        return []
    node = keep.producer()
    if node is None or node.op_type != "And" or node.domain != "":
        return [keep]
    return [c for x in node.inputs for c in _conjuncts(x)]


def _slot_at_most_position(cond: ir.Value, query: object, past: object) -> bool:
    """``cond`` is ``slot <= past + row`` (or ``past + row >= slot``), broadcast ``[S, T]``."""
    node = cond.producer()
    if node is None or node.domain != "" or node.op_type not in ("LessOrEqual", "GreaterOrEqual"):
        return False
    slot, position = node.inputs if node.op_type == "LessOrEqual" else node.inputs[::-1]
    if slot is None or position is None:
        return False
    # the slots: a 1-D Range over the last axis; the positions: one along the axis before
    column = _unsqueezed_column(position)
    slots = _range_length(slot)
    if column is None or slots is None or Counter(slots) != Counter([_Dim(past), _Dim(query)]):
        return False
    add = _through(column).producer()
    if add is None or add.op_type != "Add" or add.domain != "":
        return False
    for offset, rows in (add.inputs, add.inputs[::-1]):
        if rows is None or offset is None:
            continue
        if _range_length(rows) == [query] and _dims(offset) == [past]:
            return True
    return False


def _unsqueezed_column(v: ir.Value) -> ir.Value | None:
    """The 1-D value ``v`` makes a column of (``Unsqueeze`` at axis 1 or -1), else None."""
    node = _through(v).producer()
    if node is None or node.op_type != "Unsqueeze" or node.domain != "" or node.inputs[0] is None:
        return None
    axes = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    source = node.inputs[0]
    # (1-D: _slot_at_most_position reads it as a Range plus one number)
    if axes is None:
        return None
    return source if [int(a) for a in axes.reshape(-1)] in ([1], [-1]) else None


def _through(v: ir.Value) -> ir.Value:
    """``v`` before the casts and squeezes that make it (they keep its values)."""
    node = v.producer()
    while node is not None and node.op_type in _PASS_THROUGH and node.domain == "":
        if node.inputs[0] is None:
            break
        v = node.inputs[0]
        node = v.producer()
    return v


def _range_length(v: ir.Value) -> list[object] | None:
    """The dims whose sum is the length of ``Range(0, length, 1)`` that makes ``v``, else
    None."""
    node = _through(v).producer()
    if node is None or node.op_type != "Range" or node.domain != "" or len(node.inputs) != 3:
        return None
    start, limit, delta = node.inputs
    starts, deltas = constant_array(start), constant_array(delta)
    if starts is None or deltas is None or starts.size != 1 or deltas.size != 1:
        return None
    if int(starts.reshape(-1)[0]) != 0 or int(deltas.reshape(-1)[0]) != 1 or limit is None:
        return None
    return _dims(limit)


def _dims(v: ir.Value) -> list[object] | None:
    """The dims whose sum ``v`` (one number) is: ``Shape(x, start=i, end=i + 1)`` reads
    ``x``'s dim ``i``, ``Add`` sums; None for anything else."""
    node = _through(v).producer()
    if node is None or node.domain != "":
        return None
    if node.op_type == "Add":
        parts = [_dims(x) if x is not None else None for x in node.inputs]
        if parts[0] is None or parts[1] is None:
            return None
        return [*parts[0], *parts[1]]
    if node.op_type != "Shape" or node.inputs[0] is None or node.inputs[0].shape is None:
        return None
    shape = node.inputs[0].shape
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", len(shape))
    dims = list(shape)[start:end]
    return [_Dim(dims[0])] if len(dims) == 1 else None


class _Dim:
    """A dim compared as :func:`same_dim` compares (a named symbolic dim or an int)."""

    def __init__(self, dim: object) -> None:
        self.dim = dim

    def __eq__(self, other: object) -> bool:
        other_dim = other.dim if isinstance(other, _Dim) else other
        return same_dim(self.dim, other_dim)

    def __hash__(self) -> int:
        return hash(str(self.dim))
