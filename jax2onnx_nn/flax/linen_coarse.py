"""Linen layers as coarse ops: ``Dense``, ``DenseGeneral`` (Dense-shaped), ``Conv``,
``ConvTranspose``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm``, ``BatchNorm``
(inference), ``Embed`` and ``Embed.attend``, and ``flax.linen.dot_product_attention`` (what
``MultiHeadDotProductAttention`` and ``SelfAttention`` call).

A bound Linen layer reads its arrays from its variables (``module.variables["params"]``), so
a handler finds them there and binds the primitive of the NNX layer of the same arithmetic
(``nnx_linear``, ``nnx_conv``, ...): one lowering rule, on core's layer emitters, for both
APIs. A call the op does not model (init, a dtype or precision option, a custom dot_general,
a mask, batch statistics in training mode, a subclass overriding a method, boxed or
partitioned params) returns :data:`NotApplicable` and runs the original, lowered op by op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import jax
import numpy as np
import onnx_ir as ir
from flax import linen
from flax.linen import attention as linen_attention
from flax.linen import dtypes as linen_dtypes

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.jax_nn.in_place import patched_in_place
from jax2onnx_nn.core.layers.attention import attention, lowest_mask_value
from jax2onnx_nn.core.layers.conv import conv_pads, conv_transpose_padding, conv_transpose_pads
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    active_options,
    add_session_patch,
    also_covers,
    coarse_lowering,
    coarse_wrapper,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.flax import coarse  # noqa: F401 (the rules of the primitives bound here)
from jax2onnx_nn.flax.coarse.common import canonical_axes

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_ALLOWED_OVERRIDES = frozenset({"__init__", "__init_subclass__", "__call__", "__post_init__"})


def _params(
    module: Any, cls: type, names: set[str], required: set[str]
) -> Mapping[str, Any] | None:
    """The arrays of a bound, plain ``cls`` layer's ``params`` (``required`` present, nothing
    outside ``names``); None for anything else (init, a subclass, boxed params)."""
    if not overrides_nothing(module, cls, _ALLOWED_OVERRIDES) or module.scope is None:
        return None
    if module.is_initializing():
        return None
    params = module.variables.get("params")
    if not isinstance(params, Mapping) or not required <= set(params) <= names:
        return None
    if not all(is_array(params[k]) and np.dtype(params[k].dtype) in _FLOATS for k in params):
        return None
    return params


def _x(args: tuple[Any, ...], kwargs: dict[str, Any], allowed: dict[str, Any] | None = None) -> Any:
    """The single positional float input, if keywords have their allowed values."""
    allowed = allowed or {}
    if len(args) != 1 or not is_array(args[0]) or np.dtype(args[0].dtype) not in _FLOATS:
        return NotApplicable
    if any(k not in allowed or v is not allowed[k] for k, v in kwargs.items()):
        return NotApplicable
    return args[0]


def _same_dtypes(module: Any, x: Any, params: Mapping[str, Any]) -> bool:
    """No compute dtype and params of the input's dtype: the layer computes in that dtype."""
    return module.dtype is None and all(params[k].dtype == x.dtype for k in params)


def _default_promote(module: Any) -> bool:
    return (
        getattr(module, "promote_dtype", linen_dtypes.promote_dtype) is linen_dtypes.promote_dtype
    )


def _dense_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _x(args, kwargs)
    params = (
        None if x is NotApplicable else _params(module, linen.Dense, {"kernel", "bias"}, {"kernel"})
    )
    if (
        params is None
        or x.ndim < 1
        or not _same_dtypes(module, x, params)
        or not _default_promote(module)
    ):
        return NotApplicable
    if (
        module.precision is not None
        or module.dot_general is not None
        or module.dot_general_cls is not None
    ):
        return NotApplicable
    if module.use_bias != ("bias" in params):
        return NotApplicable
    return CoarseCall(
        "nnx_linear",
        inputs={"x": x},
        weights={"kernel": params["kernel"], "bias": params.get("bias")},
    )


def _dense_general_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """A ``DenseGeneral`` that is a ``Dense`` (one feature axis, the input's last axis
    contracted, no batch dims) as ``nnx_linear``; a multi-axis one keeps JAX's one
    ``Einsum`` (+ ``Add``), in the layer's name scope."""
    x = _x(args, kwargs)
    params = (
        None
        if x is NotApplicable
        else _params(module, linen.DenseGeneral, {"kernel", "bias"}, {"kernel"})
    )
    if params is None or not _same_dtypes(module, x, params) or not _default_promote(module):
        return NotApplicable
    features = module.features
    features = (
        features[0] if isinstance(features, (tuple, list)) and len(features) == 1 else features
    )
    if (
        not isinstance(features, int)
        or not x.ndim >= 1
        or canonical_axes(module.axis, x.ndim) != (x.ndim - 1,)
        or canonical_axes(module.batch_dims, x.ndim) != ()
        or module.precision is not None
        or module.dot_general is not None
        or module.dot_general_cls is not None
        or module.use_bias != ("bias" in params)
        or params["kernel"].ndim != 2
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_linear",
        inputs={"x": x},
        weights={"kernel": params["kernel"], "bias": params.get("bias")},
    )


def _per_axis(v: Any, n: int) -> tuple[int, ...] | None:
    v = 1 if v is None else v
    v = (v,) * n if isinstance(v, int) else tuple(v)
    return v if len(v) == n and all(isinstance(i, int) and i >= 1 for i in v) else None


@dataclass(frozen=True)
class _ConvCall:
    """What a call of Linen's Conv or ConvTranspose gives both coarse ops."""

    x: Any
    params: Mapping[str, Any]
    kernel_size: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: Any  # "SAME", "VALID" or explicit pads


def _conv_call(module: Any, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The :class:`_ConvCall` of a plain ``cls`` (``linen.Conv`` / ``linen.ConvTranspose``)
    call; ``NotApplicable`` for what the coarse ops do not model (an unbatched input, a mask,
    a precision, custom promotion, CIRCULAR padding...: the body)."""
    x = _x(args, kwargs)
    params = None if x is NotApplicable else _params(module, cls, {"kernel", "bias"}, {"kernel"})
    if params is None or not _same_dtypes(module, x, params) or not _default_promote(module):
        return NotApplicable
    kernel_size = (
        (module.kernel_size,) if isinstance(module.kernel_size, int) else tuple(module.kernel_size)
    )
    n = len(kernel_size)
    if (
        x.ndim != n + 2
        or module.mask is not None
        or module.precision is not None
        or module.use_bias != ("bias" in params)
        or params["kernel"].shape[:n] != kernel_size
    ):
        return NotApplicable
    strides, dilation = _per_axis(module.strides, n), _per_axis(module.kernel_dilation, n)
    if strides is None or dilation is None:
        return NotApplicable
    padding = module.padding
    if isinstance(padding, str) and padding.upper() not in ("SAME", "VALID"):
        return NotApplicable  # CIRCULAR, CAUSAL, REFLECT...: Linen pads the input itself
    return _ConvCall(x, params, kernel_size, strides, dilation, padding)


def _conv_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    call = _conv_call(module, linen.Conv, args, kwargs)
    if call is NotApplicable:
        return NotApplicable
    n = len(call.kernel_size)
    if module.conv_general_dilated is not None or module.conv_general_dilated_cls is not None:
        return NotApplicable
    if _per_axis(module.input_dilation, n) != (1,) * n:
        return NotApplicable
    pads = conv_pads(
        call.padding, call.x.shape[1:-1], call.kernel_size, call.strides, call.dilation
    )
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "nnx_conv",
        inputs={"x": call.x},
        weights={"kernel": call.params["kernel"], "bias": call.params.get("bias")},
        params={
            "strides": call.strides,
            "dilations": call.dilation,
            "pads": pads,
            "group": int(module.feature_group_count),
        },
    )


def _last_axis(axes: Any, rank: int) -> bool:
    axes = (
        (axes,)
        if isinstance(axes, int)
        else tuple(axes)
        if isinstance(axes, (tuple, list))
        else None
    )
    return (
        axes is not None
        and len(axes) == 1
        and isinstance(axes[0], int)
        and axes[0] in (-1, rank - 1)
    )


def _norm_ok(module: Any, x: Any, params: Mapping[str, Any]) -> bool:
    return (
        x.ndim >= 1
        and _same_dtypes(module, x, params)
        and module.axis_name is None
        and module.axis_index_groups is None
    )


def _layer_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _x(args, kwargs, {"mask": None})
    if x is NotApplicable:
        return NotApplicable
    params = _params(module, linen.LayerNorm, {"scale", "bias"}, set())
    if (
        params is None
        or not _norm_ok(module, x, params)
        or not _last_axis(module.reduction_axes, x.ndim)
        or not _last_axis(module.feature_axes, x.ndim)
    ):
        return NotApplicable
    if module.use_scale != ("scale" in params) or module.use_bias != ("bias" in params):
        return NotApplicable
    return CoarseCall(
        "nnx_layer_norm",
        inputs={"x": x},
        weights={"scale": params.get("scale"), "bias": params.get("bias")},
        params={"epsilon": float(module.epsilon), "size": int(x.shape[-1])},
    )


def _rms_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _x(args, kwargs, {"mask": None})
    if x is NotApplicable:
        return NotApplicable
    params = _params(module, linen.RMSNorm, {"scale"}, set())
    if (
        params is None
        or not _norm_ok(module, x, params)
        or not _last_axis(module.reduction_axes, x.ndim)
        or not _last_axis(module.feature_axes, x.ndim)
    ):
        return NotApplicable
    if module.use_scale != ("scale" in params):
        return NotApplicable
    return CoarseCall(
        "nnx_rms_norm",
        inputs={"x": x},
        weights={"scale": params.get("scale")},
        params={"epsilon": float(module.epsilon), "size": int(x.shape[-1])},
    )


def _batch_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """Inference only: ``use_running_average`` as the module or the call sets it (never
    changed by the export); training mode computes batch statistics, op by op."""
    if (
        not args
        or len(args) > 2
        or set(kwargs) - {"use_running_average", "mask"}
        or kwargs.get("mask") is not None
    ):
        return NotApplicable
    x = _x(args[:1], {})
    use_running_average = args[1] if len(args) == 2 else kwargs.get("use_running_average")
    if use_running_average is None:
        use_running_average = module.use_running_average
    if x is NotApplicable or use_running_average is not True or x.ndim < 2:
        return NotApplicable
    params = _params(module, linen.BatchNorm, {"scale", "bias"}, set())
    stats = module.variables.get("batch_stats") if params is not None else None
    if (
        params is None
        or not _norm_ok(module, x, params)
        or not isinstance(stats, Mapping)
        or set(stats) != {"mean", "var"}
    ):
        return NotApplicable
    if module.use_scale != ("scale" in params) or module.use_bias != ("bias" in params):
        return NotApplicable
    axis = (
        module.axis
        if isinstance(module.axis, int)
        else module.axis[0]
        if len(module.axis) == 1
        else None
    )
    if (
        not isinstance(axis, int)
        or not -x.ndim <= axis < x.ndim
        or not all(is_array(stats[k]) and stats[k].dtype == x.dtype for k in stats)
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_batch_norm",
        inputs={"x": x},
        weights={
            "mean": stats["mean"],
            "var": stats["var"],
            "scale": params.get("scale"),
            "bias": params.get("bias"),
        },
        params={"axis": axis % x.ndim, "epsilon": float(module.epsilon)},
    )


def _embed_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """Integer indices into the table (JAX's ``take``: NaN rows out of range), as ``nnx.Embed``."""
    if (
        len(args) != 1
        or kwargs
        or not is_array(args[0])
        or np.dtype(args[0].dtype).kind not in "iu"
    ):
        return NotApplicable
    params = _params(module, linen.Embed, {"embedding"}, {"embedding"})
    if params is None or module.num_embeddings == 1 or not _default_promote(module):
        return NotApplicable
    if module.dtype is not None and np.dtype(module.dtype) != params["embedding"].dtype:
        return NotApplicable
    return CoarseCall(
        "nnx_embed", inputs={"x": args[0]}, weights={"embedding": params["embedding"]}
    )


def _attend_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """``Embed.attend``: ``query @ embedding.T``, the table read where the ``Gather`` reads
    it (one initializer, transposed by a node where the query is not a matrix)."""
    x = _x(args, kwargs)
    params = (
        None if x is NotApplicable else _params(module, linen.Embed, {"embedding"}, {"embedding"})
    )
    if params is None or not _same_dtypes(module, x, params) or not _default_promote(module):
        return NotApplicable
    return CoarseCall(
        "nnx_embed_attend", inputs={"x": x}, weights={"embedding": params["embedding"]}
    )


def _conv_transpose_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    call = _conv_call(module, linen.ConvTranspose, args, kwargs)
    if call is NotApplicable or module.preferred_element_type is not None:
        return NotApplicable
    kernel_size, strides, dilation = call.kernel_size, call.strides, call.dilation
    padding = conv_transpose_padding(call.padding, kernel_size, strides, dilation)
    pads = None if padding is None else conv_transpose_pads(padding, kernel_size, strides, dilation)
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "nnx_conv_transpose",
        inputs={"x": call.x},
        weights={"kernel": call.params["kernel"], "bias": call.params.get("bias")},
        params={
            "strides": strides,
            "dilations": dilation,
            "pads": pads[0],
            "output_padding": pads[1],
            "transpose_kernel": bool(module.transpose_kernel),
        },
    )


def _group_norm_call(module: Any, x: Any, params: Mapping[str, Any], num_groups: int) -> Any:
    """GroupNormalization over every axis but the batch's, channels last (opset 21)."""
    size = int(x.shape[-1])
    if module.use_scale != ("scale" in params) or module.use_bias != ("bias" in params):
        return NotApplicable
    return CoarseCall(
        "nnx_group_norm",
        inputs={"x": x},
        weights={"scale": params.get("scale"), "bias": params.get("bias")},
        params={"epsilon": float(module.epsilon), "num_groups": num_groups, "size": size},
    )


def _group_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _x(args, kwargs, {"mask": None})
    if x is NotApplicable:
        return NotApplicable
    params = _params(module, linen.GroupNorm, {"scale", "bias"}, set())
    if (
        params is None
        or not _norm_ok(module, x, params)
        or x.ndim < 2
        or jxi.is_symbolic_dim(x.shape[-1])
    ):
        return NotApplicable
    channels = int(x.shape[-1])
    num_groups = module.num_groups
    if module.group_size is not None:
        if num_groups is not None or channels % module.group_size:
            return NotApplicable  # (Linen's own error)
        num_groups = channels // module.group_size
    if not isinstance(num_groups, int) or num_groups < 1 or channels % num_groups:
        return NotApplicable
    if module.reduction_axes is not None and canonical_axes(module.reduction_axes, x.ndim) != tuple(
        range(1, x.ndim)
    ):
        return NotApplicable
    return _group_norm_call(module, x, params, num_groups)


def _instance_norm_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """Per channel over the spatial axes: GroupNormalization with one channel per group."""
    x = _x(args, kwargs, {"mask": None})
    if x is NotApplicable:
        return NotApplicable
    params = _params(module, linen.InstanceNorm, {"scale", "bias"}, set())
    if (
        params is None
        or not _norm_ok(module, x, params)
        or x.ndim < 3
        or jxi.is_symbolic_dim(x.shape[-1])
    ):
        return NotApplicable
    if not _last_axis(module.feature_axes, x.ndim):
        return NotApplicable
    return _group_norm_call(module, x, params, int(x.shape[-1]))


# -- flax.linen.dot_product_attention: the attention core, the query divided first ---------


def _linen_attention_handler(original: Any) -> Any:
    """Linen's attention: ``softmax(where(mask, (q / sqrt(d)) @ k + bias, finfo.min)) @ v``
    over ``[B, T, N, H]`` inputs, without dropout, sown weights or custom einsums."""
    signature = inspect.signature(original)

    def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            a = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return NotApplicable
        q, k, v, bias, mask = (a.get(n) for n in ("query", "key", "value", "bias", "mask"))
        if q is None or k is None or v is None:  # (required: bind checked them)
            return NotApplicable
        if not all(is_array(t) and t.ndim == 4 and t.dtype == np.float32 for t in (q, k, v)):
            return NotApplicable
        if bias is not None and not (is_array(bias) and bias.ndim == 4 and bias.dtype == q.dtype):
            return NotApplicable
        if mask is not None and not (
            is_array(mask) and mask.ndim == 4 and np.dtype(mask.dtype).kind in "biuf"
        ):
            return NotApplicable  # (a float mask keeps where it is not 0: nn.make_causal_mask's)
        rate = a.get("dropout_rate", 0.0)
        if (
            not (isinstance(rate, (int, float)) and rate == 0.0)
            and a.get("deterministic") is not True
        ):
            return NotApplicable  # attention dropout in training mode: JAX's body
        dtype = a.get("dtype")
        if dtype is not None and np.dtype(dtype) != np.float32:
            return NotApplicable
        for name in (
            "precision",
            "module",
            "einsum_dot_general",
            "qk_attn_weights_einsum",
            "attn_weights_value_einsum",
        ):
            if a.get(name) is not None:
                return NotApplicable
        depth = q.shape[-1]
        if jxi.is_symbolic_dim(depth) or k.shape[-1] != depth or q.shape[-2] != k.shape[-2]:
            return NotApplicable
        inputs = {"query": q, "key": k, "value": v}
        if bias is not None:
            inputs["bias"] = bias
        if mask is not None:
            inputs["mask"] = mask
        return CoarseCall(
            "linen_dot_product_attention",
            inputs=inputs,
            params={"query_divisor": float(np.sqrt(np.float32(depth)))},
        )

    return handler


@coarse_lowering(
    "linen_dot_product_attention",
    onnx_ops=("Transpose", "Div", "MatMul", "Add", "Where", "Softmax", "Cast"),
    covers=("flax.linen.dot_product_attention",),
)
def _linen_attention(ctx: LoweringContext, ops: Operands, *, query_divisor: float) -> Any:
    dtype = onnx_aval(ctx.aval_out)[0]
    if dtype != np.float32:
        return NotApplicable
    q = ctx.op.Transpose(ops["query"], perm=[0, 2, 1, 3])  # B N T H
    k_t = ctx.op.Transpose(ops["key"], perm=[0, 2, 3, 1])  # B N H S
    v = ctx.op.Transpose(ops["value"], perm=[0, 2, 1, 3])  # B N S H
    y: ir.Value = attention(
        ctx,
        q,
        k_t,
        v,
        dtype=dtype,
        mask_value=lowest_mask_value(dtype),
        query_divisor=query_divisor,
        bias=ops["bias"] if "bias" in ops else None,
        keep=None if "mask" not in ops else ctx.cast(ops["mask"], np.dtype(np.bool_)),
    )
    return ctx.op.Transpose(y, perm=[0, 2, 1, 3])


@contextlib.contextmanager
def patched_functions() -> Iterator[None]:
    """For one export: ``flax.linen.dot_product_attention`` as its coarse op however it is
    reached (a module's ``attention_fn`` field holds the function object itself)."""
    # (a plain Python function, whose code is what is patched)
    function = cast(types.FunctionType, linen_attention.dot_product_attention)
    with patched_in_place(function, _linen_attention_handler):
        yield


def _scoped(handler: Any) -> Any:
    """A ``make_wrapper``: the coarse wrapper of ``handler``, called in a name scope of the
    layer's name (``Conv_0``), so its nodes are named by module path (``M/Conv_0/Conv``)."""

    def make(original: Any) -> Any:
        wrapped = coarse_wrapper(handler)(original)

        @functools.wraps(original)
        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            name = getattr(module, "name", None)
            if active_options() is None or not isinstance(name, str) or not name:
                return wrapped(module, *args, **kwargs)
            with jax.named_scope(name):
                return wrapped(module, *args, **kwargs)

        return call

    return make


def _weights_at_export_time(original: Any) -> Any:
    """A ``make_wrapper`` for ``SpectralNorm`` / ``WeightNorm``: the normalized weights of the
    inference call are computed by JAX while exporting (``jax.ensure_compile_time_eval``:
    what reads only arrays known at export time runs eagerly), so the layer they wrap gets
    constant weights and is its own coarse op; params given as graph inputs (``input_params``)
    are traced and the normalization stays in the graph, op by op."""

    @functools.wraps(original)
    def call(module: Any, *args: Any, **kwargs: Any) -> Any:
        if active_options() is None:
            return original(module, *args, **kwargs)
        with jax.ensure_compile_time_eval():
            return original(module, *args, **kwargs)

    return call


add_session_patch(linen.SpectralNorm, "__call__", _weights_at_export_time)
add_session_patch(linen.WeightNorm, "__call__", _weights_at_export_time)

for _cls, _handler, _primitive in (
    (linen.Dense, _dense_handler, "nnx_linear"),
    (linen.DenseGeneral, _dense_general_handler, "nnx_linear"),
    (linen.Conv, _conv_handler, "nnx_conv"),
    (linen.LayerNorm, _layer_norm_handler, "nnx_layer_norm"),
    (linen.RMSNorm, _rms_norm_handler, "nnx_rms_norm"),
    (linen.BatchNorm, _batch_norm_handler, "nnx_batch_norm"),
    (linen.Embed, _embed_handler, "nnx_embed"),
    (linen.ConvTranspose, _conv_transpose_handler, "nnx_conv_transpose"),
    (linen.GroupNorm, _group_norm_handler, "nnx_group_norm"),
    (linen.InstanceNorm, _instance_norm_handler, "nnx_group_norm"),
):
    add_session_patch(_cls, "__call__", _scoped(_handler))
    also_covers(_primitive, f"linen.{_cls.__name__}")
add_session_patch(linen.Embed, "attend", _scoped(_attend_handler))
also_covers("nnx_embed_attend", "linen.Embed.attend")

__all__ = ["patched_functions"]
