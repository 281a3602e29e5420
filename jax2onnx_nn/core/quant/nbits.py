"""onnxruntime's ``MatMulNBits``: a matmul by a 4-bit weight that stays 4-bit in memory.

onnxruntime runs ``DequantizeLinear -> MatMul`` by fusing it into ``MatMulNBits`` itself when
the session loads, at its session option ``session.qdq_matmulnbits_accuracy_level`` (4 by
default: the activations quantized to int8 per block, 0.035 abs error measured on a
2048-wide int4 matmul, 0.55 on an int8 one, where JAX's numbers are float32's). Written here
with ``accuracy_level=1`` (float32 arithmetic) the numbers are JAX's to float32 rounding
(a matmul's summation order) whatever the session options, and at batch 1 it runs at
0.53x the float MatMul's latency (0.33 vs 0.62 ms, 2048x2048, one thread). Its 8-bit kernel
at that accuracy dequantizes the whole weight per run (21 ms, 35x the float MatMul), so
8-bit weights are left to :func:`float_int8_matmul`.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement, one_reader, unused_name
from jax2onnx_nn.core.ir.values import constant_array
from jax2onnx_nn.core.quant.dequantize import add_initializer, as_arithmetic

ACCURACY_LEVEL = 1
"""MatMulNBits' ``accuracy_level``: 1 computes in float32, as JAX's dequantized matmul does."""

_FOUR_BIT = (ir.DataType.INT4, ir.DataType.UINT4)
_EIGHT_BIT = (ir.DataType.INT8, ir.DataType.UINT8)
_MAX_BLOCK = 128


@rewrite("MatMul", creates=())
def matmul_nbits(node: ir.Node, edit: Editor) -> Replacement:
    """A ``MatMul`` by a ``DequantizeLinear`` of a 4-bit weight [K, N] quantized along K (per
    tensor, per column, or in blocks of K) becomes ``com.microsoft.MatMulNBits`` with
    ``accuracy_level=1``: the weight stays packed 4-bit in the session (onnxruntime would
    otherwise fuse the pair at accuracy level 4, int8 activations, not JAX's numbers)."""
    a, b = node.inputs[0], node.inputs[1]
    graph = node.graph
    dq = b.producer() if b is not None else None
    if (
        a is None
        or dq is None
        or dq.op_type != "DequantizeLinear"
        or graph is None
        or dq.inputs[0] is None
        or dq.inputs[0].graph is not graph  # (a body reads the main graph's initializers)
        or a.shape is None
        or len(a.shape) < 2
        or a.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16)
    ):
        return None
    packed = _packed(dq, a.dtype)
    if packed is None:
        return None
    weights, scales, zero_points, k, n, block = packed
    q = dq.inputs[0]
    assert q is not None
    base = q.name or "weight"
    if (
        len(q.uses()) == 1 and b is not None and one_reader(b) is node
    ):  # the dequantization goes: free its names
        q.name = unused_name(graph, f"{base}/int4")
        for extra in dq.inputs[1:]:
            if extra is not None and extra.is_initializer():
                extra.name = unused_name(graph, f"{extra.name}/dequantize")
    inputs = [
        a,
        add_initializer(graph, base, weights),
        add_initializer(graph, f"{base}.scale", scales),
    ]
    if zero_points is not None:
        inputs.append(add_initializer(graph, f"{base}.zero_point", zero_points))
    out = ir.Node(
        "com.microsoft",
        "MatMulNBits",
        inputs,
        [
            ir.AttrInt64("K", k),
            ir.AttrInt64("N", n),
            ir.AttrInt64("bits", 4),
            ir.AttrInt64("block_size", block),
            ir.AttrInt64("accuracy_level", ACCURACY_LEVEL),
        ],
        name=f"{node.name}/MatMulNBits",
        doc_string=node.doc_string,
    )
    graph.insert_before(node, out)
    graph.opset_imports["com.microsoft"] = 1
    return out.outputs[0]


def _packed(
    dq: ir.Node, dtype: ir.DataType
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int, int] | None:
    """MatMulNBits' B (uint8 [N, blocks, block / 2]), scales ([N, blocks]) and zero points
    (None: its default, 8; else uint8 [N * ceil(blocks / 2)], two per byte) for the
    dequantization ``dq`` of a 4-bit weight [K, N], its K, N and block; None when
    MatMulNBits cannot hold the same numbers."""
    q_value, scale_value = dq.inputs[0], dq.inputs[1]
    zp_value = dq.inputs[2] if len(dq.inputs) > 2 else None
    q = constant_array(q_value)
    scale = constant_array(scale_value)
    zp = constant_array(zp_value) if zp_value is not None else np.zeros((), np.int8)
    if q is None or scale is None or zp is None or q_value is None or q.ndim != 2:
        return None
    if q_value.dtype not in _FOUR_BIT or scale_value is None or scale_value.dtype != dtype:
        return None
    k, n = q.shape
    full_scale = _full(scale, dq, (k, n))
    full_zp = _full(zp, dq, (k, n))
    block = _block(full_scale, full_zp, k)
    if block is None:
        return None
    values = q.astype(np.int16) - full_zp.astype(np.int16)
    zero_points = None
    if values.min() < -8 or values.max() > 7:
        # (q - zero point) is not a 4-bit value: MatMulNBits' explicit zero points, q and zero
        # point as unsigned nibbles (an asymmetric scheme, Keras's int4)
        offset = 8 if q_value.dtype == ir.DataType.INT4 else 0
        values = q.astype(np.int16) + offset - 8
        zp_u = (full_zp[::block].astype(np.int16) + offset).astype(np.uint8).T  # [N, blocks]
        if zp_u.shape[1] % 2:
            zp_u = np.concatenate([zp_u, np.zeros((n, 1), np.uint8)], axis=1)
        zero_points = (zp_u[:, 0::2] | (zp_u[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    scales = full_scale[::block]  # [K / block, N]
    u = (values + 8).astype(np.uint8).T.reshape(n, k // block, block // 2, 2)
    weights = (u[..., 0] | (u[..., 1] << 4)).astype(np.uint8)
    return weights, np.ascontiguousarray(scales.T), zero_points, k, n, block


def _full(field: np.ndarray, dq: ir.Node, shape: tuple[int, int]) -> np.ndarray:
    """A DequantizeLinear scale or zero point at every element of the weight."""
    if field.ndim == 0:
        return np.broadcast_to(field, shape)
    axis = dq.attributes["axis"].as_int() if "axis" in dq.attributes else 1
    axis = axis + 2 if axis < 0 else axis
    block = dq.attributes["block_size"].as_int() if "block_size" in dq.attributes else 0
    if block:
        return np.repeat(field, block, axis=axis)[: shape[0], : shape[1]]
    return np.broadcast_to(field[:, None] if axis == 0 else field[None, :], shape)


def _block(scale: np.ndarray, zero_point: np.ndarray, k: int) -> int | None:
    """The largest power of two from 128 down to 16 dividing K over whose blocks along K the
    scale and zero point are constant; None if none is."""
    block = _MAX_BLOCK
    while block >= 16:
        if k % block == 0 and all(
            np.array_equal(np.repeat(f[::block], block, axis=0), np.broadcast_to(f, scale.shape))
            for f in (scale, zero_point)
        ):
            return block
        block //= 2
    return None


@rewrite("DequantizeLinear", creates=("Cast", "Sub", "Mul", "Reshape"))
def float_int8_matmul(node: ir.Node, edit: Editor) -> Replacement:
    """A ``DequantizeLinear`` of an 8-bit weight that a ``MatMul`` reads becomes ``Cast ->
    Mul`` on the integer weight (kept 8-bit in the file, float in the session): onnxruntime
    fuses ``DequantizeLinear -> MatMul`` into an 8-bit ``MatMulNBits`` at accuracy level 4
    (0.55 abs error on a 2048-wide matmul), and at level 1 that kernel runs at 35x the float
    MatMul's latency; the folded float weight gives JAX's numbers at the float speed."""
    q, scale = node.inputs[0], node.inputs[1]
    readers = [use.node.op_type for use in node.outputs[0].uses()]
    if q is None or scale is None or q.dtype not in _EIGHT_BIT or "MatMul" not in readers:
        return None
    if "block_size" in node.attributes:
        return None
    return as_arithmetic(node, edit)


__all__ = ["ACCURACY_LEVEL", "float_int8_matmul", "matmul_nbits"]
