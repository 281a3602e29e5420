"""``jax.nn`` functions as coarse ONNX ops, in every export (with or without a framework).

While an export runs, the activations of ``jax.nn`` (``relu``, ``gelu``, ``softmax``, ...) and
``jax.nn.dot_product_attention`` are patched: a call the table models binds one coarse
primitive, lowered to one ONNX op (``Relu``, ``Gelu``, ``Softmax``) or the attention core
(MatMul / Softmax / MatMul), and any other call (an unknown keyword, a dtype onnxruntime has no
exact kernel for, ``where=``) runs the original and is lowered op by op.

Functions captured before the export (``eqx.nn.MLP(activation=jax.nn.gelu)``,
``self.act = nnx.relu``) are not reached through the namespace: adapters swap them for the
patched version on the export's own copy of the model with :func:`substitute`. One patched
function serves every namespace an original is reachable through (``nnx.relu is jax.nn.relu``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
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
    coarse_wrapper,
)
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.layers.attention import (
    CONTRIB,
    attention,
    attention_op,
    causal_keep,
    jax_nn_mask_value,
    multi_head_attention_op,
)
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval, recognize_calls
from jax2onnx_nn.core.precision import is_low_float
from jax2onnx_nn.core.session import Prepared, patches, register_adapter
from jax2onnx_nn.core.symbolic import has_zero, same_dim

MakeWrapper = Callable[[Any], Any]

_F32 = frozenset({np.dtype(np.float32)})
_F32_F64 = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


# -- attention: jax.nn.dot_product_attention (what nnx.MultiHeadAttention calls) -----------


def _attention_handler(original: Callable[..., Any]) -> Handler:
    signature = inspect.signature(original)

    def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return NotApplicable
        return _attention_call(bound.arguments)

    return handler


def _attention_call(a: dict[str, Any]) -> Any:
    q, k, v, bias, mask = (a.get(n) for n in ("query", "key", "value", "bias", "mask"))
    if not all(is_array(t) and t.ndim == 4 for t in (q, k, v)):
        return NotApplicable
    if any(t is not None and not (is_array(t) and t.ndim == 4) for t in (bias, mask)):
        return NotApplicable
    if not (q.dtype == k.dtype == v.dtype and (q.dtype == np.float32 or is_low_float(q.dtype))):
        return NotApplicable  # (float64: the lax path)
    heads, kv_heads = q.shape[2], k.shape[2]
    if (
        any(map(jxi.is_symbolic_dim, (heads, kv_heads)))
        or kv_heads != v.shape[2]
        or heads % kv_heads
    ):
        return NotApplicable  # (JAX's own error for heads that do not group)
    if mask is not None and mask.dtype != np.bool_:
        return NotApplicable
    for name in ("query_seq_lengths", "key_value_seq_lengths", "local_window_size"):
        if a.get(name) is not None:
            return NotApplicable
    # cudnn is a GPU kernel of the same attention: the body is traced with JAX's portable one
    if a.get("implementation") not in (None, "xla", "cudnn") or a.get("return_residual", False):
        return NotApplicable
    if not _without_extras(a):
        return NotApplicable
    scale = a.get("scale")
    head_dim = q.shape[-1]
    if scale is None:
        if jxi.is_symbolic_dim(head_dim):
            return NotApplicable
        scale = 1.0 / np.sqrt(head_dim)
    if not isinstance(scale, (int, float)):
        return NotApplicable
    inputs = {"query": q, "key": k, "value": v}
    if bias is not None:
        inputs["bias"] = bias
    if mask is not None:
        inputs["mask"] = mask
    portable = {"implementation": None} if a.get("implementation") == "cudnn" else {}
    return CoarseCall(
        "jax_dot_product_attention",
        inputs=inputs,
        params={"scale": float(scale), "is_causal": bool(a.get("is_causal", False))},
        call_kwargs=portable,
    )


def _without_extras(a: dict[str, Any]) -> bool:
    """Whether the arguments of a framework's own attention function (``flax.nnx``'s adds
    dropout, a compute dtype, precision and a module to sow weights into) ask for nothing the
    coarse op leaves out: attention dropout in training mode keeps JAX's body (and its mask)."""
    rate = a.get("dropout_rate", 0.0)
    dropout = (
        not (isinstance(rate, (int, float)) and rate == 0.0)
        and a.get("deterministic", False) is not True
    )
    dtype = a.get("dtype")
    return (
        not dropout
        and (dtype is None or np.dtype(dtype) == np.float32 or is_low_float(dtype))
        and a.get("precision") is None
        and a.get("module") is None
    )


@coarse_lowering(
    "jax_dot_product_attention",
    onnx_ops=(
        "Transpose",
        "MatMul",
        "Softmax",
        "Where",
        "Mul",
        "Add",
        "And",
        "LessOrEqual",
        "Range",
        "Squeeze",
        "Unsqueeze",
        "Attention",
        "Expand",
        "Reshape",
        "Concat",
        "Shape",
        "Size",
        "Equal",
        "Or",
        "If",
        "Identity",
        "MultiHeadAttention",
    ),
    covers=("jax.nn.dot_product_attention",),
)
def _attention(ctx: LoweringContext, ops: Operands, *, scale: float, is_causal: bool) -> Any:
    """ONNX Attention where the target has its kernel (:func:`attention_op`), else the attention
    core's ops; a symbolic dim chooses at run time (onnxruntime's Attention refuses a batch of
    0).

    Attention takes JAX's ``[B, T, N, H]`` reshaped to ``[B, T, N*H]`` (no transposes; the
    reshapes stay outside the run-time choice, where they cancel against the model's own),
    or, with a symbolic head size, transposed to ``[B, N, T, H]``."""
    dims = [d for role in ("query", "key", "value") for d in ops.aval(role).shape]
    (_, t, n, h), (_, _, kv, _) = ops.aval("query").shape, ops.aval("key").shape
    hv = ops.aval("value").shape[3]
    flat = not any(map(jxi.is_symbolic_dim, (h, hv)))
    fused = _attention_op if ctx.has_kernel("Attention") else None
    if (
        fused is None
        and flat
        and n == kv
        and not ("mask" in ops or "bias" in ops)  # (its rows masked everywhere are zeros)
        and ctx.has_kernel("MultiHeadAttention", CONTRIB)
    ):
        fused = _multi_head_attention_op
    if fused is None or has_zero(dims):
        return _attention_decomposed(ctx, ops, scale=scale, is_causal=is_causal)
    if flat:
        # Reshape's 0 copies the batch and sequence dims
        qkv = [
            ctx.op.Reshape(ops[role], ctx.ints([0, 0, heads * size]))
            for role, heads, size in (("query", n, h), ("key", kv, h), ("value", kv, hv))
        ]
    else:
        qkv = [ctx.op.Transpose(ops[role], perm=[0, 2, 1, 3]) for role in ("query", "key", "value")]
    b = ops.aval("query").shape[0]
    y_type = onnx_aval(ctx.aval_out)
    if flat:
        y_type = (y_type[0], (b, t, n * hv))
    symbolic = list({str(d): d for d in dims if jxi.is_symbolic_dim(d)}.values())
    (y,) = ctx.unless_empty(
        symbolic,
        [y_type],
        lambda full: [fused(full, ops, qkv, scale=scale, is_causal=is_causal, flat=flat)],
        lambda empty: [
            _flat(
                empty,
                _attention_decomposed(empty, ops, scale=scale, is_causal=is_causal),
                n * hv if flat else None,
            )
        ],
    )
    return ctx.op.Reshape(y, ctx.ints([0, 0, n, hv])) if flat else y


def _flat(ctx: LoweringContext, y: ir.Value, width: int | None) -> ir.Value:
    """``[B, T, N, H]`` as ``[B, T, N*H]`` (``width``) where the Attention op's result is flat."""
    return y if width is None else ctx.op.Reshape(y, ctx.ints([0, 0, width]))


def _attention_op(
    ctx: LoweringContext,
    ops: Operands,
    qkv: list[ir.Value],
    *,
    scale: float,
    is_causal: bool,
    flat: bool,
) -> ir.Value:
    """ONNX Attention on ``qkv``: ``[B, T, N*H]`` (``flat``) or ``[B, N, T, H]``; the result in
    the same layout, ``[B, T, N, H]`` when not flat."""
    dtype = np.dtype(np.float32)
    (b, t, n, _), (_, s, kv, _) = ops.aval("query").shape, ops.aval("key").shape
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    keep = ops["mask"] if "mask" in ops else None
    mask_shapes = [ops.aval(role).shape for role in ("mask", "bias") if role in ops]
    if is_causal and keep is not None:
        keep = ctx.op.And(keep, causal_keep(ctx, t, s))
        mask_shapes.append((1, 1, t, s))
    y = attention_op(
        ctx,
        *qkv,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        bias=bias,
        keep=keep,
        causal=is_causal and keep is None,
        logits_shape=(b, n, t, s),
        mask_shape=broadcast_dims(mask_shapes),
        heads=(n, kv) if flat else None,
    )
    return y if flat else ctx.op.Transpose(y, perm=[0, 2, 1, 3])


def _multi_head_attention_op(
    ctx: LoweringContext,
    ops: Operands,
    qkv: list[ir.Value],
    *,
    scale: float,
    is_causal: bool,
    flat: bool,
) -> ir.Value:
    """onnxruntime's ``com.microsoft.MultiHeadAttention`` on the flat ``qkv`` (as many key as
    query heads): below opset 23 its time is 0.92x the decomposition's (8x64x8x32 causal, one
    thread). Its causal mask is JAX's where the keys are as many as the queries; otherwise the
    causal mask is given as floats added to the logits (a row keeps its first key). Not for a
    mask or bias: it answers a row masked everywhere with zeros, JAX with the mean of the
    values."""
    del flat  # (always: the op takes [B, T, N*H] only)
    dtype = np.dtype(np.float32)
    (b, t, n, _), s = ops.aval("query").shape, ops.aval("key").shape[1]
    unidirectional = is_causal and same_dim(t, s)
    keep = None
    if is_causal and not unidirectional:  # (its attention_bias is [B|1, N|1, T, S])
        keep = ctx.op.Unsqueeze(causal_keep(ctx, t, s), ctx.ints([0, 1]))
    return multi_head_attention_op(
        ctx,
        *qkv,
        heads=n,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        keep=keep,
        causal=unidirectional,
        logits_shape=(b, n, t, s),
        mask_shape=(1, 1, t, s),
    )


def _attention_decomposed(
    ctx: LoweringContext, ops: Operands, *, scale: float, is_causal: bool
) -> ir.Value:
    dtype = np.dtype(np.float32)
    q = ctx.op.Transpose(ops["query"], perm=[0, 2, 1, 3])  # B N T H
    _, s, _, h = ops.aval("key").shape
    k = _repeat_heads(ctx, ctx.op.Transpose(ops["key"], perm=[0, 2, 3, 1]), ops, (h, s))  # B N H S
    v = _repeat_heads(
        ctx, ctx.op.Transpose(ops["value"], perm=[0, 2, 1, 3]), ops, (s, ops.aval("value").shape[3])
    )  # B N S H
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    keep = ops["mask"] if "mask" in ops else None
    if is_causal:
        causal = causal_keep(ctx, ops.aval("query").shape[1], ops.aval("key").shape[1])
        keep = causal if keep is None else ctx.op.And(keep, causal)
    y = attention(
        ctx,
        q,
        k,
        v,
        dtype=dtype,
        mask_value=jax_nn_mask_value(dtype),
        scale=scale,
        bias=bias,
        keep=keep,
    )
    return ctx.op.Transpose(y, perm=[0, 2, 1, 3])


def _repeat_heads(
    ctx: LoweringContext, x: ir.Value, ops: Operands, tail: tuple[Any, Any]
) -> ir.Value:
    """Grouped heads: keys or values ``[B, K, *tail]`` of K heads for N query heads, each head
    repeated N / K times in a row, as JAX groups them (query head n uses head n // (N / K))."""
    heads, kv_heads = ops.aval("query").shape[2], ops.aval("key").shape[2]
    if heads == kv_heads:
        return x
    groups = ctx.op.Expand(
        ctx.op.Unsqueeze(x, ctx.ints([2])), ctx.ints([1, 1, heads // kv_heads, 1, 1])
    )
    return ctx.reshape(groups, [ops.aval("key").shape[0], heads, *tail])


def broadcast_dims(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The broadcast of same-rank shapes: per axis the dim that is not a static 1."""
    if not shapes:
        return ()
    return tuple(
        next((d for d in dims if not (isinstance(d, int) and d == 1)), 1)
        for dims in zip(*shapes, strict=True)
    )


# -- activations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    """An activation: its keyword config (name -> default), its ONNX rule and the ops it emits."""

    config: dict[str, Any]
    rule: Callable[..., Any]
    onnx_ops: tuple[str, ...]
    dtypes: frozenset[np.dtype] = _F32_F64
    min_opset: int = 1


def _op(op_type: str, **attrs: Any) -> Callable[..., Any]:
    return lambda ctx, x, **_: getattr(ctx.op, op_type)(x, **attrs)


def _gelu(ctx: LoweringContext, x: ir.Value, *, approximate: bool) -> Any:
    return ctx.op.Gelu(x, approximate="tanh" if approximate else "none")


def _clip(low: float, high: float) -> Callable[..., Any]:
    def rule(ctx: LoweringContext, x: ir.Value, **_: Any) -> Any:
        dtype = x.dtype.numpy() if x.dtype is not None else np.float32
        return ctx.op.Clip(x, ctx.const(low, dtype=dtype), ctx.const(high, dtype=dtype))

    return rule


# dtypes: where onnxruntime has a kernel that matches JAX (measured: no float64 kernel for
# Elu, Selu, LeakyRelu, Softplus, HardSigmoid; float64 Gelu and LogSoftmax lose precision).
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation({}, _op("Relu"), ("Relu",)),
    "sigmoid": Activation({}, _op("Sigmoid"), ("Sigmoid",)),
    "gelu": Activation({"approximate": True}, _gelu, ("Gelu",), dtypes=_F32, min_opset=20),
    "silu": Activation(
        {}, lambda ctx, x, **_: ctx.op.Mul(x, ctx.op.Sigmoid(x)), ("Sigmoid", "Mul")
    ),
    "swish": Activation(
        {}, lambda ctx, x, **_: ctx.op.Mul(x, ctx.op.Sigmoid(x)), ("Sigmoid", "Mul")
    ),
    "softmax": Activation(
        {"axis": -1, "where": None},
        lambda ctx, x, *, axis, **_: ctx.op.Softmax(x, axis=axis),
        ("Softmax",),
    ),
    "log_softmax": Activation(
        {"axis": -1, "where": None},
        lambda ctx, x, *, axis, **_: ctx.op.LogSoftmax(x, axis=axis),
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


def _activation_handler(name: str, activation: Activation, original: Callable[..., Any]) -> Handler:
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
            params={k: _plain_number(v) for k, v in config.items()},
        )

    return handler


def _takes(activation: Activation, dtype: Any) -> bool:
    """Whether the activation's rule takes ``dtype``: its own dtypes, and bfloat16 / float16,
    which the coarse op computes in float32 where the target has no kernel (core/precision.py)."""
    return np.dtype(dtype) in activation.dtypes or is_low_float(dtype)


def _plain_number(v: Any) -> Any:
    return (
        v
        if isinstance(v, bool)
        else float(v)
        if isinstance(v, float)
        else int(v)
        if isinstance(v, int)
        else v
    )


def _emit(ctx: LoweringContext, activation: Activation, x: ir.Value, config: dict[str, Any]) -> Any:
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
        return _emit(ctx, activation, ops["x"], config)

    coarse_lowering(
        f"jax_nn_{name}",
        onnx_ops=activation.onnx_ops,
        min_opset=activation.min_opset,
        covers=(f"jax.nn.{name}",),
    )(rule)
    jxi.rebind_under_vmap(f"jax_nn_{name}")  # the rules act on the trailing dims only


for _name, _activation in ACTIVATIONS.items():
    _register_activation(_name, _activation)


# -- the patches ---------------------------------------------------------------------------

_PATCHED: dict[int, tuple[Any, Any]] = {}
"""id(original function) -> (original, patched), filled while an export's patches are applied."""

_MADE: dict[int, tuple[Any, Any]] = {}
"""id(original function) -> (original, patched) for every export: a patched function reads the
export's options when called, so it is made once per original (its signature read once), not
once per export (19 ``inspect.signature`` calls, ~2 ms an export)."""


def shared(handler_for: Callable[[Any], Handler]) -> MakeWrapper:
    """A ``make_wrapper`` for :func:`patch` of a function: one patched function per original
    (``coarse_wrapper(handler_for(original))``), whatever namespace it is reached through, so
    that :func:`substitute` finds it for a captured original."""

    def make(original: Any) -> Any:
        if id(original) not in _PATCHED:
            made = _MADE.get(id(original))
            if (
                made is None or made[0] is not original
            ):  # the original is held: its id is not reused
                made = _MADE[id(original)] = (
                    original,
                    coarse_wrapper(handler_for(original))(original),
                )
            _PATCHED[id(original)] = made
        return _PATCHED[id(original)][1]

    return make


def namespace_patches(namespace: Any) -> list[tuple[Any, str, MakeWrapper]]:
    """(namespace, name, make_wrapper) for each function of the table ``namespace`` holds
    (``jax.nn``, or a framework's re-export of it such as ``flax.nnx``). Made once per
    namespace: every export applies them (``make_wrapper`` looks the original up then)."""
    known = _NAMESPACE_PATCHES.get(id(namespace))
    if known is None or known[0] is not namespace:
        known = _NAMESPACE_PATCHES[id(namespace)] = (namespace, _make_namespace_patches(namespace))
    return list(known[1])


_NAMESPACE_PATCHES: dict[int, tuple[Any, list[tuple[Any, str, MakeWrapper]]]] = {}


def _make_namespace_patches(namespace: Any) -> list[tuple[Any, str, MakeWrapper]]:
    result: list[tuple[Any, str, MakeWrapper]] = []
    for name, activation in ACTIVATIONS.items():
        function = getattr(namespace, name, None)
        if callable(function) and _in_place_entry(function) is None:  # (those are patched in place)
            result.append(
                (namespace, name, shared(functools.partial(_activation_handler, name, activation)))
            )
    if callable(getattr(namespace, "dot_product_attention", None)):
        result.append((namespace, "dot_product_attention", shared(_attention_handler)))
    return result


def substitute(value: Any) -> Any:
    """``value`` with a captured original function (also inside a ``functools.partial``)
    replaced by its patched version, while an export runs; ``value`` itself otherwise."""
    hit = _PATCHED.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if isinstance(value, functools.partial):
        func = substitute(value.func)
        if func is not value.func:
            return functools.partial(func, *value.args, **value.keywords)
    return value


# -- activations however they are reached ------------------------------------------------
#
# A name bound before the export (``from jax.nn import gelu``, ``flax.linen.gelu``, an alias, a
# ``functools.partial``, a module field, a dict) holds the original function object, which a
# namespace patch does not reach. Two mechanisms that do not depend on the name:
# * a plain Python function (``gelu`` and ``softmax`` on JAX 0.10) is patched in place: for
#   the export its ``__code__`` is a trampoline to the coarse wrapper of a copy of it, so every
#   reference to the object calls the wrapper;
# * a jitted function (``jax.jit``-ed or ``custom_jvp`` around a ``jit``) leaves a ``jit``
#   equation named after it in the jaxpr; :func:`_recognize_jitted` lowers one to the op when
#   its body is, text for text, the body JAX traces for the original with some configuration.

_IN_PLACE_GLOBAL = "__jax2onnx_nn_in_place__"
_IN_PLACE: dict[int, Callable[..., Any]] = {}
"""id(function) -> its coarse wrapper; the trampolines look their wrapper up here (as a
global of the function's module, which gets this dict under ``_IN_PLACE_GLOBAL``)."""


@dataclass(frozen=True)
class _InPlace:
    function: types.FunctionType
    code: types.CodeType
    trampoline: types.CodeType


_IN_PLACE_ENTRIES: dict[int, _InPlace] = {}


def _in_place_entry(function: Any) -> _InPlace | None:
    entry = _IN_PLACE_ENTRIES.get(id(function))
    return entry if entry is not None and entry.function is function else None


def _make_in_place(function: types.FunctionType, handler_for: Callable[[Any], Handler]) -> _InPlace:
    """The trampoline of ``function`` (made once): its calls go to the coarse wrapper of a copy
    of the original (the copy keeps the original code, defaults and signature)."""
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__, copy.__module__, copy.__doc__ = (
        function.__qualname__,
        function.__module__,
        function.__doc__,
    )
    _IN_PLACE[id(function)] = coarse_wrapper(handler_for(copy))(copy)
    namespace: dict[str, Any] = {}
    parameters, arguments = _forwarding(function.__code__)
    exec(
        f"def {function.__name__}({parameters}):\n"
        f"    return {_IN_PLACE_GLOBAL}[{id(function)}]({arguments})\n",
        {},
        namespace,
    )
    trampoline = namespace[function.__name__].__code__.replace(
        co_qualname=function.__qualname__, co_filename=function.__code__.co_filename
    )  # (library code)
    function.__globals__.setdefault(_IN_PLACE_GLOBAL, _IN_PLACE)
    entry = _IN_PLACE_ENTRIES[id(function)] = _InPlace(function, function.__code__, trampoline)
    return entry


def _forwarding(code: types.CodeType) -> tuple[str, str]:
    """The parameter list of ``code`` and the arguments that pass each parameter on: the
    trampoline has the original's signature (its defaults stay on the function object), so
    what reads the function's code and defaults still sees them agree."""
    names = code.co_varnames
    n, n_pos, n_kw = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    params, args = list(names[:n]), list(names[:n])
    if n_pos:
        params.insert(n_pos, "/")
    i = n + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        params.append(f"*{names[i]}")
        args.append(f"*{names[i]}")
        i += 1
    elif n_kw:
        params.append("*")
    params += names[n : n + n_kw]
    args += [f"{k}={k}" for k in names[n : n + n_kw]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(f"**{names[i]}")
        args.append(f"**{names[i]}")
    return ", ".join(params), ", ".join(args)


def _in_place_patchable(function: Any) -> bool:
    return isinstance(function, types.FunctionType) and not function.__closure__


def _in_place_entries() -> list[_InPlace]:
    """The activations of ``jax.nn`` that are plain functions, each made in place once (read
    at import, before any export patches the namespace)."""
    result = []
    for name, activation in ACTIVATIONS.items():
        function = getattr(jax.nn, name, None)
        if not _in_place_patchable(function):
            continue
        entry = _in_place_entry(function)
        if entry is None:
            entry = _make_in_place(
                function, functools.partial(_activation_handler, name, activation)
            )
        result.append(entry)
    return result


@contextlib.contextmanager
def _patched_in_place(entries: list[_InPlace]) -> Iterator[None]:
    done: list[_InPlace] = []
    try:
        for entry in entries:
            entry.function.__code__ = entry.trampoline
            done.append(entry)
        yield
    finally:
        for entry in done:
            entry.function.__code__ = entry.code


def patched_in_place(
    function: types.FunctionType, handler_for: Callable[[Any], Handler]
) -> contextlib.AbstractContextManager[None]:
    """While the block runs, every reference to the plain Python ``function`` (a name bound
    before the export, a module field holding it) calls the coarse wrapper of
    ``handler_for(copy of function)``: what the activations get, for an adapter's function
    (``flax.linen.dot_product_attention``)."""
    if not _in_place_patchable(function):
        return contextlib.nullcontext()
    entry = _in_place_entry(function) or _make_in_place(function, handler_for)
    return _patched_in_place([entry])


_REFERENCE_TEXTS: dict[tuple[Any, ...], str | None] = {}


def _jitted_activations() -> dict[str, list[tuple[Activation, Any]]]:
    """jit name -> (activation, original) for the jitted activations of ``jax.nn``."""
    result: dict[str, list[tuple[Activation, Any]]] = {}
    for name, activation in ACTIVATIONS.items():
        original = getattr(jax.nn, name, None)
        if original is None or _in_place_patchable(original):
            continue
        jit_name = getattr(original, "__name__", name)
        if all(o is not original for _, o in result.get(jit_name, [])):
            result.setdefault(jit_name, []).append((activation, original))
    return result


def _reference_text(
    original: Any, aval: Any, values: tuple[Any, ...], static: tuple[tuple[str, Any], ...]
) -> str | None:
    """The text of the body of the ``jit`` equation JAX traces for ``original(x, *values,
    **static)`` on ``aval``; None if it traces no such equation (or fails)."""
    key = (id(original), tuple(aval.shape), str(aval.dtype), aval.weak_type, values, static)
    if key in _REFERENCE_TEXTS:
        return _REFERENCE_TEXTS[key]
    try:
        spec = jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
        closed = jax.make_jaxpr(lambda x: original(x, *values, **dict(static)))(spec)
        text = _jit_body_text(closed.jaxpr, getattr(original, "__name__", None))
    except Exception:  # a configuration the original refuses: no match
        text = None
    _REFERENCE_TEXTS[key] = text
    return text


def _jit_body_text(jaxpr: Any, name: str | None) -> str | None:
    if len(jaxpr.eqns) != 1:
        return None
    (eqn,) = jaxpr.eqns
    if eqn.primitive.name in ("jit", "pjit") and eqn.params.get("name") == name:
        body = eqn.params["jaxpr"]
        return None if body.consts else jxi.jaxpr_text(body)
    if eqn.primitive.name == "custom_jvp_call":
        return _jit_body_text(eqn.params["call_jaxpr"].jaxpr, name)
    return None


def _configs(
    activation: Activation, ndim: int, values: list[Any]
) -> Iterator[tuple[tuple[Any, ...], tuple[tuple[str, Any], ...], dict[str, Any]]]:
    """(positional values, static keywords, the rule's config) for each configuration a
    ``jit`` equation of the activation may have been traced with: its literal operands are
    the numeric parameters in order, a static axis or flag one of its values."""
    numeric = [
        k
        for k, v in activation.config.items()
        if k not in ("axis", "where") and not isinstance(v, bool)
    ]
    flags = [k for k, v in activation.config.items() if isinstance(v, bool)]
    if len(values) > len(numeric) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        return
    given = dict(zip(numeric, values, strict=False))
    base = {k: v for k, v in activation.config.items() if k != "where"} | given
    statics: list[dict[str, Any]] = [{}]
    if "axis" in activation.config:
        statics = [{"axis": a} for a in range(-1, -ndim - 1, -1)] if ndim else []
    for flag in flags:
        statics = [
            s | {flag: value}
            for s in statics
            for value in (activation.config[flag], not activation.config[flag])
        ]
    for static in statics:
        yield (
            tuple(values),
            tuple(sorted(static.items())),
            {k: _plain_number(v) for k, v in (base | static).items()},
        )


def _recognize_jitted(ctx: LoweringContext, inputs: list[ir.Value]) -> list[ir.Value] | None:
    """A ``jit`` equation of a ``jax.nn`` activation as its one op, however the function was
    reached (see above); None (lower its body) for anything else."""
    eqn = ctx.eqn
    entries = _JITTED.get(str(eqn.params.get("name")))
    if not entries or len(eqn.outvars) != 1 or not eqn.invars or jxi.is_literal(eqn.invars[0]):
        return None
    if not all(jxi.is_literal(v) for v in eqn.invars[1:]):
        return None
    values = [
        jxi.literal_value(v).item()
        if hasattr(jxi.literal_value(v), "item")
        else jxi.literal_value(v)
        for v in eqn.invars[1:]
    ]
    aval = eqn.invars[0].aval
    body = eqn.params["jaxpr"]
    if body.consts or aval.shape != eqn.outvars[0].aval.shape:
        return None
    text = jxi.jaxpr_text(body)
    for activation, original in entries:
        if np.dtype(aval.dtype) not in activation.dtypes or ctx.opset < activation.min_opset:
            continue
        for positional, static, config in _configs(activation, aval.ndim, values):
            if _reference_text(original, aval, positional, static) == text:
                return [_emit(ctx, activation, inputs[0], config)]
    return None


# read at import, while ``jax.nn`` holds the originals
_IN_PLACE_FUNCTIONS = _in_place_entries()
_JITTED = _jitted_activations()
recognize_calls(_recognize_jitted)


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    """The adapter of ``jax.nn`` (see ``core/session.py``): its patches, for every export
    (an exported ``jax.nn.gelu`` itself is one of the captured functions)."""
    if not options.coarse_ops:
        yield prepared
        return
    with contextlib.ExitStack() as stack:
        stack.callback(_PATCHED.clear)
        stack.enter_context(_patched_in_place(_IN_PLACE_FUNCTIONS))
        stack.enter_context(patches(namespace_patches(jax.nn)))
        yield Prepared(substitute(prepared.fn), prepared.const_names)


register_adapter("jax", __name__)  # its patches apply to every export

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "export_session",
    "namespace_patches",
    "patched_in_place",
    "shared",
    "substitute",
]
