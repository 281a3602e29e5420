"""Graph rewrites that make a runtime's ops compute JAX's numbers, named by target profiles.

Each rewrite replaces nodes whose result on that runtime differs from ONNX's (and JAX's)
semantics by nodes it computes exactly; profiles in core/targets.py list the rewrites they
need. All of them run after lowering, on every graph of the model (Loop/Scan/If bodies too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir


class _Editor:
    """Adds nodes before ``anchor`` in its graph and replaces its outputs by new values."""

    def __init__(self, anchor: ir.Node, counter: list[int]) -> None:
        self.anchor = anchor
        self.graph = anchor.graph
        self.counter = counter

    def op(self, op_type: str, *inputs: ir.Value | np.ndarray, dtype: ir.DataType | None = None, **attrs: Any) -> ir.Value:
        values = [x if isinstance(x, ir.Value) else self.const(x) for x in inputs]
        self.counter[0] += 1
        base = f"{self.anchor.name}/target{self.counter[0]}"
        node = ir.Node("", op_type, values, ir.convenience.convert_attributes(attrs), name=f"{base}/{op_type}", doc_string=self.anchor.doc_string)
        out = node.outputs[0]
        out.name = f"{base}_output"
        if dtype is not None:
            out.type = ir.TensorType(dtype)
        assert self.graph is not None
        self.graph.insert_before(self.anchor, node)
        return out

    def const(self, array: np.ndarray) -> ir.Value:
        return self.op("Constant", value=ir.tensor(np.asarray(array)), dtype=ir.DataType.from_numpy(np.asarray(array).dtype))

    def replace(self, new: ir.Value) -> None:
        """The anchor's only output becomes ``new`` (keeping its name, type and shape)."""
        (old,) = self.anchor.outputs
        new.type, new.shape = old.type, old.shape
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        name = old.name
        old.name = f"{name}/replaced"
        new.name = name
        assert self.graph is not None
        self.graph.remove(self.anchor, safe=True)


def _constant(value: ir.Value | None) -> np.ndarray | None:
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
        return producer.attributes["value"].as_tensor().numpy()
    return None


# -- NaN in Max / Min -------------------------------------------------------------------------
def _nan_propagating_max_min(node: ir.Node, edit: _Editor) -> bool:
    """JAX's max/min give NaN when either operand is NaN; OpenVINO and tract return the other
    operand. Where either is NaN, ``a + b`` is NaN (with the broadcast shape Max has)."""
    if node.op_type not in ("Max", "Min") or len(node.inputs) < 2:
        return False
    dtype = node.outputs[0].dtype
    if dtype is None or not dtype.is_floating_point():
        return False
    result = node.inputs[0]
    assert result is not None
    for other in node.inputs[1:]:
        assert other is not None
        plain = edit.op(node.op_type, result, other, dtype=dtype)
        nan = edit.op("Or", edit.op("IsNaN", result), edit.op("IsNaN", other), dtype=ir.DataType.BOOL)
        result = edit.op("Where", nan, edit.op("Add", result, other, dtype=dtype), plain, dtype=dtype)
    edit.replace(result)
    return True


# -- uint32 arithmetic as int32 ---------------------------------------------------------------
_U32, _I32 = ir.DataType.UINT32, ir.DataType.INT32
_SAME_BITS = frozenset({"Add", "Sub", "Mul", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"})
_COMPARE = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
_SIGN = np.array(np.iinfo(np.int32).min, np.int32)


def _uint32_as_int32(node: ir.Node, edit: _Editor) -> bool:
    """OpenVINO's CPU plugin computes uint32 Add and BitShift through float32 (so values above
    2**24 lose bits, and every ``jax.random`` bit kernel goes wrong), while its int32 Add, Mul
    and bitwise ops wrap exactly. So uint32 arithmetic is done on the same bits as int32:
    wrapping ops as they are, comparisons with the sign bit flipped, shifts by constant
    amounts as a multiply (left) or an exact float split (right, see ``_shift_right``)."""
    if node.domain != "" or not node.inputs or node.inputs[0] is None or node.inputs[0].dtype != _U32:
        return False
    op = node.op_type
    if op in _SAME_BITS or op in _COMPARE:
        args = [edit.op("Cast", v, to=_I32, dtype=_I32) for v in node.inputs if v is not None]
        if op in _COMPARE:
            args = [edit.op("BitwiseXor", a, _SIGN, dtype=_I32) for a in args]
            edit.replace(edit.op(op, *args, dtype=ir.DataType.BOOL))
        else:
            edit.replace(edit.op("Cast", edit.op(op, *args, dtype=_I32), to=_U32, dtype=_U32))
        return True
    if op == "BitShift":
        amount = _constant(node.inputs[1])
        if amount is None:
            return False  # a shift by a runtime amount stays as it is
        x = edit.op("Cast", node.inputs[0], to=_I32, dtype=_I32)
        amount = amount.astype(np.int64)
        if node.attributes["direction"].as_string() == "LEFT":
            factor = np.where(amount < 32, np.left_shift(1, np.minimum(amount, 31)), 0).astype(np.uint32).view(np.int32)
            shifted = edit.op("Mul", x, factor, dtype=_I32)
        else:
            shifted = _shift_right(edit, x, amount)
        edit.replace(edit.op("Cast", shifted, to=_U32, dtype=_U32))
        return True
    return False


def _shift_right(edit: _Editor, x: ir.Value, amount: np.ndarray) -> ir.Value:
    """Logical right shift of int32 bits by constant amounts, from ops OpenVINO computes exactly:
    the low 31 bits in two pieces of at most 16 significant bits (exact in float32, so the
    scaling by 2**-s and Floor are exact), plus 2**(31 - s) where the sign bit was set."""
    scale = np.ldexp(np.float32(1), -np.minimum(amount, 64)).astype(np.float32)

    def part(mask: int) -> ir.Value:
        piece = edit.op("Cast", edit.op("BitwiseAnd", x, np.array(mask, np.int32), dtype=_I32), to=ir.DataType.FLOAT, dtype=ir.DataType.FLOAT)
        return edit.op("Cast", edit.op("Floor", edit.op("Mul", piece, scale)), to=_I32, dtype=_I32)

    top = np.where(amount < 32, np.left_shift(1, np.clip(31 - amount, 0, 31)), 0).astype(np.uint32).view(np.int32)
    sign = edit.op("Where", edit.op("Less", x, np.array(0, np.int32), dtype=ir.DataType.BOOL), top, np.zeros_like(top), dtype=_I32)
    return edit.op("Add", edit.op("Add", part(0x7FFF0000), part(0xFFFF), dtype=_I32), sign, dtype=_I32)


REWRITES: dict[str, Callable[[ir.Node, _Editor], bool]] = {
    "nan_propagating_max_min": _nan_propagating_max_min,
    "uint32_as_int32": _uint32_as_int32,
}


def apply_rewrites(model: ir.Model, names: Sequence[str]) -> int:
    """Run the named rewrites over every node of every graph; returns how many nodes changed."""
    rules = [REWRITES[n] for n in names]
    if not rules:
        return 0
    counter = [0]
    changed = 0
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        for rule in rules:
            if rule(node, _Editor(node, counter)):
                changed += 1
                break
    return changed
