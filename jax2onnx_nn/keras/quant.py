"""Keras 3 quantized ``Dense`` layers (``model.quantize("int8" | "int4")``) as compact coarse ops.

**int8** (``Dense._int8_call``): Keras quantizes the activations at run time, per row,
symmetric (``keras.quantizers.abs_max_quantize``)::

    s = hi / (max(|x|, axis=-1) + epsilon)          # float32, (-127, 127) and 1e-7 by default
    q = int8(clip(round(x * s), lo, hi))            # round half to even; NaN -> 0
    y = float32(q @ kernel) / (kernel_scale * s) + bias

written as ``Abs -> ReduceMax -> Add -> Div -> Mul -> QuantizeLinear -> MatMulInteger ->
DequantizeLinear -> Div -> Add`` (for onnxruntime ``MatMulInteger -> DequantizeLinear`` is its
``MatMulIntegerToFloat``: the same numbers in one node). ``q`` is Keras's bit for bit: the
product ``x * s`` is rounded as Keras rounds it (not ``x / (1 / s)``), and ``QuantizeLinear``
with scale 1 is ``round`` and ``Cast`` in one op (half to even, as ``jnp.round``); its
saturation to ``[-128, 127]`` stands for the clip, which never binds on finite values
(``|x * s| <= hi * max / (max + eps)``, so ``lo <= -hi`` is required). The output scale is
``acc * (1 / kernel_scale) / s`` (the int32 sum dequantized per column, then divided per row),
Keras's ``acc / (kernel_scale * s)`` to two roundings (within 3e-7 relative). The int8 row
is written as uint8 with zero point 128 (exact: the same int32 products), onnxruntime's fast
kernels being u8 x s8. An ``Abs`` of a
``Relu``'s output is the output itself and is left out: a Dense(relu) -> Dense model is 20
nodes (49 lowered op by op).

Non-finite rows: in JAX a row holding a NaN or an infinity gives a NaN row (its scale is NaN,
or 0 with every product ``0 / 0``). onnxruntime's, OpenVINO's and tract's ``ReduceMax`` skip
NaNs and their ``QuantizeLinear`` turns NaN into -128 (tract: 0), so the row's NaN is carried
by one more node: ``x @ zeros(K, 1) + epsilon`` (``Gemm``; 0 + epsilon for a finite row, NaN
otherwise) takes the place of the ``epsilon`` constant.

**int4** (``Dense._int4_call``, weight only): the kernel is stored as int8 bytes of two packed
nibbles along the output axis. The nibbles are unpacked at export time into an ONNX ``INT4``
initializer, and the layer is ``DequantizeLinear -> MatMul``. Keras's default
(``block_size=128``) is asymmetric per block of input rows, with an int4 zero point: blocked
``DequantizeLinear`` (per output channel where one block spans the input), the dequantized
weights Keras's bit for bit. ``block_size=None`` (or -1) is symmetric per output channel and
Keras divides the product by ``kernel_scale``: the scale is ``1 / kernel_scale`` (equal to
float32 rounding). The onnxruntime targets write a symmetric 4-bit ``DequantizeLinear ->
MatMul`` as ``MatMulNBits`` (:mod:`jax2onnx_nn.core.quant.nbits`); an asymmetric one stays
``DequantizeLinear -> MatMul``.

Anything else (LoRA, a custom quantizer config, training mode, float16 compute, a kernel that is
not a constant of the export) runs Keras's own call, lowered op by op.
"""

from __future__ import annotations

from typing import Any

import keras
import ml_dtypes
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    coarse_lowering,
    is_array,
    map_calls,
)
from jax2onnx_nn.keras.coarse import (
    ACTIVATION_OPS,
    ALLOWED_OVERRIDES,
    activate,
    activation_name,
    variable_array,
)

L = keras.layers
_F32 = np.dtype(np.float32)


def _quantized(layer: Any, mode: str) -> bool:
    """A Keras ``Dense`` (or a subclass overriding nothing a call runs) quantized in ``mode``,
    without LoRA weights."""
    from jax2onnx_nn.core.patching import overrides_nothing

    return (
        overrides_nothing(layer, L.Dense, ALLOWED_OVERRIDES)
        and getattr(layer, "quantization_mode", None) == mode
        and not getattr(layer, "lora_enabled", False)
    )


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The float32 input of ``_intN_call(inputs, training=None)`` in inference."""
    if len(args) != 1 or set(kwargs) - {"training"} or kwargs.get("training"):
        return NotApplicable
    x = args[0]
    if not is_array(x) or np.dtype(x.dtype) != _F32 or x.ndim < 1:
        return NotApplicable
    return x


def _inverse(a: np.ndarray) -> np.ndarray:
    """``1 / a`` as float32, flat (Keras divides by its scales; DequantizeLinear multiplies)."""
    with np.errstate(divide="ignore"):  # (the shape is taken from zeros)
        return (np.float32(1) / a.astype(_F32)).reshape(-1)


def _const(value: ir.Value) -> np.ndarray | None:
    """The data of a weight that is an initializer (a graph input has none at export time)."""
    tensor = value.const_value
    if tensor is None or value.producer() is not None or value.name is None:
        return None
    return tensor.numpy()


# -- int8: dynamic-range activations, MatMulInteger ------------------------------------------


def _abs_max_config(layer: Any) -> tuple[float, float, float] | None:
    """``(lo, hi, epsilon)`` of the layer's activation quantizer if it is Keras's default kind
    (absmax over the last axis into int8, a range the saturation of int8 can stand for)."""
    quantizer: Any = getattr(layer, "inputs_quantizer", None)
    if type(quantizer) is not keras.quantizers.AbsMaxQuantizer:
        return None
    if quantizer.axis not in (None, (-1,)) or quantizer.output_dtype != "int8":
        return None
    lo, hi = (float(v) for v in quantizer.value_range)
    if not (0 < hi <= 127 and -128 <= lo <= -hi):
        return None
    return lo, hi, float(quantizer.epsilon)


@map_calls(L.Dense, "_int8_call")
def _int8_dense_call(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = _input(args, kwargs)
    activation = activation_name(layer)
    config = _abs_max_config(layer)
    if x is NotApplicable or activation is NotApplicable or config is None:
        return NotApplicable
    if not _quantized(layer, "int8") or layer.compute_dtype != "float32":
        return NotApplicable
    _, hi, epsilon = config
    return CoarseCall(
        "keras_int8_dense",
        inputs={"x": x},
        weights={
            "kernel": variable_array(layer._kernel),
            "kernel_scale": variable_array(layer.kernel_scale),
            "bias": variable_array(layer.bias),
        },
        params={"hi": hi, "epsilon": epsilon, "activation": activation},
    )


def _row_absmax(ctx: LoweringContext, x: ir.Value) -> ir.Value:
    """``max(|x|)`` over the last axis, kept (NaNs as the runtime's ReduceMax takes them)."""
    node = x.producer()
    magnitude = x if node is not None and node.op_type == "Relu" else ctx.op.Abs(x)
    return ctx.reduce("ReduceMax", magnitude, [-1], keepdims=1)


def _epsilon_or_nan(ctx: LoweringContext, x: ir.Value, k: int, epsilon: float) -> ir.Value:
    """``epsilon`` per row, NaN for a row holding a NaN or an infinity: ``x @ 0 + epsilon``."""
    zeros = ctx.const(np.zeros((k, 1), _F32))
    eps = ctx.const(np.full((1,), epsilon, _F32))
    if len(x.shape or ()) == 2:
        return ctx.op.Gemm(x, zeros, eps)
    return ctx.op.Add(ctx.op.MatMul(x, zeros), eps)


@coarse_lowering(
    "keras_int8_dense",
    onnx_ops=(
        "Abs",
        "ReduceMax",
        "Gemm",
        "MatMul",
        "Add",
        "Div",
        "Mul",
        "QuantizeLinear",
        "MatMulInteger",
        "DequantizeLinear",
        "MatMulIntegerToFloat",
        *ACTIVATION_OPS,
    ),
    min_opset=13,
    covers=('keras.layers.Dense quantize("int8")',),
)
def _int8_dense(
    ctx: LoweringContext, ops: Operands, *, hi: float, epsilon: float, activation: str
) -> Any:
    x, kernel_scale = ops["x"], ops["kernel_scale"]
    scales = _const(kernel_scale)
    if scales is None or ops.aval("kernel").ndim != 2 or np.dtype(ops.aval("x").dtype) != _F32:
        return NotApplicable
    k = int(ops.aval("kernel").shape[0])
    inverse = ctx.derived_weight(
        kernel_scale,
        ("keras_int8_inverse_scale",),
        _inverse,
        lambda v: v,  # (not reached: the scale is an initializer)
    )
    den = ctx.op.Add(_row_absmax(ctx, x), _epsilon_or_nan(ctx, x, k, epsilon))
    scale = ctx.op.Div(ctx.const(np.float32(hi)), den)
    # the int8 row as uint8 with zero point 128 (round(x * s) + 128, exact): onnxruntime's
    # u8 x s8 kernels ran 20x faster than its s8 x s8 ones (2048 x 2048, batch 1, one thread)
    zero, one = ctx.const(np.uint8(128)), ctx.const(np.float32(1))
    q = ctx.op.QuantizeLinear(ctx.op.Mul(x, scale), one, zero)
    if ctx.has_kernel("MatMulIntegerToFloat", "com.microsoft"):  # (the same numbers)
        y = ctx.op.MatMulIntegerToFloat(
            q, ops["kernel"], one, inverse, zero, _domain="com.microsoft"
        )
        y.type = ir.TensorType(ir.DataType.FLOAT)
    else:
        acc = ctx.op.MatMulInteger(q, ops["kernel"], zero)
        y = ctx.op.DequantizeLinear(acc, inverse, axis=-1)
    y = ctx.op.Div(y, scale)
    if "bias" in ops:
        y = ctx.op.Add(y, ctx.cast(ops["bias"], _F32))
    return activate(ctx, y, activation)


# -- int4: weight only, the nibbles unpacked at export time ----------------------------------


def _unpack_int4(packed: np.ndarray, n: int) -> np.ndarray:
    """Keras's int8 bytes of two nibbles along the last axis (low nibble first) as int4."""
    b = packed.astype(np.int8)
    low = (b << 4) >> 4  # sign-extended low nibble
    high = b >> 4
    both = np.stack([low, high], axis=-1).reshape(*b.shape[:-1], -1)
    return both[..., :n].astype(ml_dtypes.int4)


@map_calls(L.Dense, "_int4_call")
def _int4_dense_call(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = _input(args, kwargs)
    activation = activation_name(layer)
    if x is NotApplicable or activation is NotApplicable or not _quantized(layer, "int4"):
        return NotApplicable
    if getattr(layer, "inputs_quantizer", None) is not None or layer.compute_dtype != "float32":
        return NotApplicable
    block = getattr(layer, "_int4_block_size", None)
    block = None if block is None or block == -1 else int(block)
    weights = {
        "kernel": variable_array(layer._kernel),
        "kernel_scale": variable_array(layer.kernel_scale),
    }
    if block is not None:
        k = int(layer._orig_input_dim)
        g_idx = np.asarray(variable_array(layer.g_idx))
        if not np.array_equal(g_idx, np.arange(k) // block):
            return NotApplicable  # a permuted grouping (act order) is a Gather of the scales
        weights["kernel_zero"] = variable_array(layer.kernel_zero)
    weights["bias"] = variable_array(layer.bias)
    return CoarseCall(
        "keras_int4_dense",
        inputs={"x": x},
        weights=weights,
        params={
            "units": int(layer._orig_output_dim),
            "block": block,
            "activation": activation,
        },
    )


@coarse_lowering(
    "keras_int4_dense",
    onnx_ops=("DequantizeLinear", "MatMul", "Add", *ACTIVATION_OPS),
    min_opset=21,
    covers=('keras.layers.Dense quantize("int4")',),
)
def _int4_dense(
    ctx: LoweringContext, ops: Operands, *, units: int, block: int | None, activation: str
) -> Any:
    kernel, kernel_scale = ops["kernel"], ops["kernel_scale"]
    packed, scales = _const(kernel), _const(kernel_scale)
    if packed is None or scales is None or ctx.builder.isolated:
        return NotApplicable
    q = ctx.derived_weight(
        kernel, ("keras_int4_unpacked", units), lambda a: _unpack_int4(a, units), lambda v: v
    )
    if block is None:
        scale = ctx.derived_weight(
            kernel_scale,
            ("keras_int4_inverse_scale",),
            _inverse,
            lambda v: v,
        )
        w = ctx.op.DequantizeLinear(q, scale, axis=1)
    else:
        zero = _const(ops["kernel_zero"])
        if zero is None or zero.min() < -8 or zero.max() > 7:
            return NotApplicable
        k = int(packed.shape[0])
        if k > block and k % block:
            return NotApplicable  # (OpenVINO takes whole blocks only)
        one = k <= block  # one block: per output channel
        zero_point = ctx.derived_weight(
            ops["kernel_zero"],
            ("keras_int4_zero", one),
            lambda a: a.astype(ml_dtypes.int4).reshape(-1 if one else a.shape),
            lambda v: v,
        )
        scale = ctx.derived_weight(
            kernel_scale,
            ("keras_int4_scale", one),
            lambda a: a.astype(_F32).reshape(-1 if one else a.shape),
            lambda v: v,
        )
        if one:
            w = ctx.op.DequantizeLinear(q, scale, zero_point, axis=1)
        else:
            w = ctx.op.DequantizeLinear(q, scale, zero_point, axis=0, block_size=block)
    y = ctx.op.MatMul(ops["x"], w)
    if "bias" in ops:
        y = ctx.op.Add(y, ctx.cast(ops["bias"], _F32))
    return activate(ctx, y, activation)


__all__: list[str] = []
