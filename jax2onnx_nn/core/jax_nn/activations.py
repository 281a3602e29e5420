"""The activations of ``jax.nn`` (``relu``, ``gelu``, ``softmax``, ...) as coarse ops: the table
(:data:`ACTIVATIONS`: each one's ONNX op, dtypes and opset), the handler of a call and the rule
that emits the op."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.calls import is_array
from jax2onnx_nn.core.coarse import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    coarse_lowering,
)
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.precision import is_low_float

_F32: frozenset[np.dtype] = frozenset({np.dtype(np.float32)})
_F32_F64: frozenset[np.dtype] = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


# -- activations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    """An activation: its keyword config (name -> default), its ONNX rule and the ops it emits.

    The rule takes ``ctx``, ``x`` and the config's keys but ``where`` by name (a masked call
    is not the coarse op: the handler leaves it to the body)."""

    config: dict[str, Any]
    rule: Callable[..., Any]
    onnx_ops: tuple[str, ...]
    dtypes: frozenset[np.dtype] = _F32_F64
    min_opset: int = 1


def _op(op_type: str, **attrs: Any) -> Callable[..., Any]:
    return lambda ctx, x: getattr(ctx.op, op_type)(x, **attrs)


def _gelu(ctx: LoweringContext, x: ir.Value, *, approximate: bool) -> Any:
    return ctx.op.Gelu(x, approximate="tanh" if approximate else "none")


def _clip(low: float, high: float) -> Callable[..., Any]:
    def rule(ctx: LoweringContext, x: ir.Value) -> Any:
        dtype = x.dtype.numpy() if x.dtype is not None else np.float32
        return ctx.op.Clip(x, ctx.const(low, dtype=dtype), ctx.const(high, dtype=dtype))

    return rule


# dtypes: where onnxruntime has a kernel that matches JAX (measured: no float64 kernel for
# Elu, Selu, LeakyRelu, Softplus, HardSigmoid; float64 Gelu and LogSoftmax lose precision).
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation({}, _op("Relu"), ("Relu",)),
    "sigmoid": Activation({}, _op("Sigmoid"), ("Sigmoid",)),
    "gelu": Activation({"approximate": True}, _gelu, ("Gelu",), dtypes=_F32, min_opset=20),
    "silu": Activation({}, lambda ctx, x: ctx.op.Mul(x, ctx.op.Sigmoid(x)), ("Sigmoid", "Mul")),
    "swish": Activation({}, lambda ctx, x: ctx.op.Mul(x, ctx.op.Sigmoid(x)), ("Sigmoid", "Mul")),
    "softmax": Activation(
        {"axis": -1, "where": None},
        lambda ctx, x, *, axis: ctx.op.Softmax(x, axis=axis),
        ("Softmax",),
    ),
    "log_softmax": Activation(
        {"axis": -1, "where": None},
        lambda ctx, x, *, axis: ctx.op.LogSoftmax(x, axis=axis),
        ("LogSoftmax",),
        dtypes=_F32,
    ),
    "elu": Activation(
        {"alpha": 1.0}, lambda ctx, x, *, alpha: ctx.op.Elu(x, alpha=alpha), ("Elu",), dtypes=_F32
    ),
    "celu": Activation(
        {"alpha": 1.0}, lambda ctx, x, *, alpha: ctx.op.Celu(x, alpha=alpha), ("Celu",), dtypes=_F32
    ),
    "selu": Activation({}, _op("Selu"), ("Selu",), dtypes=_F32),
    "leaky_relu": Activation(
        {"negative_slope": 0.01},
        lambda ctx, x, *, negative_slope: ctx.op.LeakyRelu(x, alpha=negative_slope),
        ("LeakyRelu",),
        dtypes=_F32,
    ),
    "softplus": Activation({}, _op("Softplus"), ("Softplus",), dtypes=_F32),
    "mish": Activation({}, _op("Mish"), ("Mish",), dtypes=_F32, min_opset=18),
    "hard_sigmoid": Activation(
        {}, _op("HardSigmoid", alpha=1.0 / 6.0, beta=0.5), ("HardSigmoid",), dtypes=_F32
    ),
    "hard_silu": Activation({}, _op("HardSwish"), ("HardSwish",), dtypes=_F32),
    "hard_swish": Activation({}, _op("HardSwish"), ("HardSwish",), dtypes=_F32),
    "hard_tanh": Activation({}, _clip(-1.0, 1.0), ("Clip",)),
    "relu6": Activation({}, _clip(0.0, 6.0), ("Clip",)),
}


def activation_handler(name: str, activation: Activation, original: Callable[..., Any]) -> Handler:
    """The handler of a call of the activation ``name`` (``original`` is the function the
    patch replaces): its coarse op where the table models the call, else ``NotApplicable``."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def handler(*args: Any, **kwargs: Any) -> Any:
        if signature is None:
            return NotApplicable
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return NotApplicable
        values = list(bound.arguments.values())
        x, given = values[0], dict(list(bound.arguments.items())[1:])
        if (
            not is_array(x)
            or not _takes(activation, x.dtype)
            or set(given) - set(activation.config)
        ):
            return NotApplicable
        config = {**activation.config, **given}
        if config.get("where", None) is not None:
            return NotApplicable
        config.pop("where", None)
        if "axis" in config:
            axis = config["axis"]
            if (
                not isinstance(axis, int)
                or isinstance(axis, bool)
                or x.ndim == 0
                or not -x.ndim <= axis < x.ndim
            ):
                return NotApplicable
            config["axis"] = (
                axis - x.ndim if axis >= 0 else axis
            )  # counted from the end: vmap adds dims in front
        if any(
            isinstance(v, bool) is False and not isinstance(v, (int, float))
            for v in config.values()
        ):
            return NotApplicable
        return CoarseCall(
            f"jax_nn_{name}",
            inputs={"x": x},
            params={k: plain_number(v) for k, v in config.items()},
        )

    return handler


def _takes(activation: Activation, dtype: Any) -> bool:
    """Whether the activation's rule takes ``dtype``: its own dtypes, and bfloat16 / float16,
    which the coarse op computes in float32 where the target has no kernel (core/precision.py)."""
    return np.dtype(dtype) in activation.dtypes or is_low_float(dtype)


def plain_number(v: Any) -> Any:
    """``v`` as a plain Python float or int where it is a subclass of one (``np.float64``),
    anything else unchanged: a static param of the coarse op."""
    return (
        v
        if isinstance(v, bool)
        else float(v)
        if isinstance(v, float)
        else int(v)
        if isinstance(v, int)
        else v
    )


def emit_activation(
    ctx: LoweringContext, activation: Activation, x: ir.Value, config: dict[str, Any]
) -> Any:
    """The activation's op on ``x`` (``config`` without ``where``, an axis counted from the end)."""
    if "axis" in config:  # a negative axis (see the handler): right under vmap too
        return activation.rule(ctx, x, **config)
    producer = x.producer()
    if (
        producer is not None
        and producer.op_type == "Transpose"
        and producer.domain == ""
        and "perm" in producer.attributes
    ):
        # elementwise: act before the layout transpose, so the next coarse op can undo it
        return ctx.op.Transpose(
            activation.rule(ctx, producer.inputs[0], **config),
            perm=list(producer.attributes["perm"].value),
        )
    return activation.rule(ctx, x, **config)


def _register_activation(name: str, activation: Activation) -> None:
    def rule(ctx: LoweringContext, ops: Operands, **config: Any) -> Any:
        return emit_activation(ctx, activation, ops["x"], config)

    coarse_lowering(
        f"jax_nn_{name}",
        onnx_ops=activation.onnx_ops,
        min_opset=activation.min_opset,
        covers=(f"jax.nn.{name}",),
    )(rule)
    jxi.rebind_under_vmap(f"jax_nn_{name}")  # the rules act on the trailing dims only


for _name, _activation in ACTIVATIONS.items():
    _register_activation(_name, _activation)
