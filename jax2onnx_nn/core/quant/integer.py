"""Integer matmuls of 8-bit operands as ``MatMulInteger``.

A dynamic-range quantized layer (Keras ``quantize("int8")``, qwix dynamic-range) multiplies
int8 activations by int8 weights into int32 (``dot_general`` with
``preferred_element_type=int32``). Lowered, that is ``MatMul`` of two ``Cast``s to int32: the
weight is widened to int32 in the session and the product runs on int32 kernels.
``MatMulInteger`` takes the 8-bit operands as they are and gives the same int32 result (the
products and their sum are exact in int32, as in JAX).
"""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement

_EIGHT_BIT = (ir.DataType.INT8, ir.DataType.UINT8)


def _eight_bit_source(value: ir.Value | None) -> ir.Value | None:
    """The 8-bit value that ``value`` is a Cast of, if it is one."""
    node = value.producer() if value is not None else None
    if node is None or node.op_type != "Cast" or not node.inputs:
        return None
    source = node.inputs[0]
    return source if source is not None and source.dtype in _EIGHT_BIT else None


@rewrite("MatMul", creates=("MatMulInteger",))
def matmul_integer(node: ir.Node, edit: Editor) -> Replacement:
    """``MatMul(Cast(a: 8-bit -> int32), Cast(b: 8-bit -> int32))`` becomes
    ``MatMulInteger(a, b)``: the same int32 product, on the 8-bit operands."""
    out = node.outputs[0]
    if out.dtype != ir.DataType.INT32:
        return None
    a, b = (_eight_bit_source(v) for v in node.inputs[:2])
    if a is None or b is None:
        return None
    return edit.op("MatMulInteger", a, b, dtype=ir.DataType.INT32)


__all__ = ["matmul_integer"]
