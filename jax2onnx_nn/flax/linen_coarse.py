"""Linen layers as coarse ops: ``Dense``, ``Conv``, ``LayerNorm``, ``RMSNorm``, ``BatchNorm``
(inference), ``Embed``.

A bound Linen layer reads its arrays from its variables (``module.variables["params"]``), so
a handler finds them there and binds the primitive of the NNX layer of the same arithmetic
(``nnx_linear``, ``nnx_conv``, ...): one lowering rule, on core's layer emitters, for both
APIs. A call the op does not model (init, a dtype or precision option, a custom dot_general,
a mask, batch statistics in training mode, a subclass overriding a method, boxed or
partitioned params) returns :data:`NotApplicable` and runs the original, lowered op by op.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from flax import linen
from flax.linen import dtypes as linen_dtypes

from jax2onnx_nn.core.layers.conv import conv_pads
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    active_options,
    add_session_patch,
    also_covers,
    coarse_wrapper,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.flax import coarse  # noqa: F401 (the rules of the primitives bound here)

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


def _per_axis(v: Any, n: int) -> tuple[int, ...] | None:
    v = 1 if v is None else v
    v = (v,) * n if isinstance(v, int) else tuple(v)
    return v if len(v) == n and all(isinstance(i, int) and i >= 1 for i in v) else None


def _conv_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = _x(args, kwargs)
    params = (
        None if x is NotApplicable else _params(module, linen.Conv, {"kernel", "bias"}, {"kernel"})
    )
    if params is None or not _same_dtypes(module, x, params) or not _default_promote(module):
        return NotApplicable
    kernel_size = (
        (module.kernel_size,) if isinstance(module.kernel_size, int) else tuple(module.kernel_size)
    )
    n = len(kernel_size)
    if x.ndim != n + 2 or module.mask is not None or module.precision is not None:
        return NotApplicable  # (an unbatched input: the body)
    if module.conv_general_dilated is not None or module.conv_general_dilated_cls is not None:
        return NotApplicable
    if module.use_bias != ("bias" in params) or params["kernel"].shape[:n] != kernel_size:
        return NotApplicable
    strides, input_dilation, dilation = (
        _per_axis(v, n) for v in (module.strides, module.input_dilation, module.kernel_dilation)
    )
    if strides is None or dilation is None or input_dilation != (1,) * n:
        return NotApplicable
    padding = module.padding
    if isinstance(padding, str) and padding.upper() not in ("SAME", "VALID"):
        return NotApplicable  # CIRCULAR, CAUSAL, REFLECT...: Linen pads the input itself
    pads = conv_pads(padding, x.shape[1:-1], kernel_size, strides, dilation)
    if pads is None:
        return NotApplicable
    return CoarseCall(
        "nnx_conv",
        inputs={"x": x},
        weights={"kernel": params["kernel"], "bias": params.get("bias")},
        params={
            "strides": strides,
            "dilations": dilation,
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


def _norm_ok(module: Any, x: Any, params: Mapping[str, Any] | None) -> bool:
    return (
        params is not None
        and x.ndim >= 1
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
        not _norm_ok(module, x, params)
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
        not _norm_ok(module, x, params)
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
        not _norm_ok(module, x, params)
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


for _cls, _handler, _primitive in (
    (linen.Dense, _dense_handler, "nnx_linear"),
    (linen.Conv, _conv_handler, "nnx_conv"),
    (linen.LayerNorm, _layer_norm_handler, "nnx_layer_norm"),
    (linen.RMSNorm, _rms_norm_handler, "nnx_rms_norm"),
    (linen.BatchNorm, _batch_norm_handler, "nnx_batch_norm"),
    (linen.Embed, _embed_handler, "nnx_embed"),
):
    add_session_patch(_cls, "__call__", _scoped(_handler))
    also_covers(_primitive, f"linen.{_cls.__name__}")

__all__: list[str] = []
