"""Equinox pools (``MaxPool``, ``AvgPool``, ``AdaptivePool``) as MaxPool / AveragePool."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.layers.pool import fits_window, pool
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    coarse_patch,
    eqx_lowering,
    flatten_batch,
    float_arrays,
    has_empty,
    operand_shape,
    out_dtype,
    plain,
    unflatten_batch,
)

# -- pools: MaxPool / AveragePool ----------------------------------------------------------

_MAX_POOLS = (eqx.nn.MaxPool1d, eqx.nn.MaxPool2d, eqx.nn.MaxPool3d)
_AVG_POOLS = (eqx.nn.AvgPool1d, eqx.nn.AvgPool2d, eqx.nn.AvgPool3d)
_POOL_CLASSES = (*_MAX_POOLS, *_AVG_POOLS)


def _pool_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    cls = next((c for c in _POOL_CLASSES if type(module) is c or plain(module, c)), None)
    if (
        cls is None
        or not plain(module, cls)
        or not float_arrays(x)
        or x.ndim != module.num_spatial_dims + 1
    ):
        return NotApplicable
    kind = "max" if cls in _MAX_POOLS else "avg"
    if module.operation is not (jax.lax.max if kind == "max" else jax.lax.add) or module.init != (
        -np.inf if kind == "max" else 0
    ):
        return NotApplicable
    padding = module._update_padding_for_ceil(x.shape) if module.use_ceil else module.padding
    kernel = tuple(int(k) for k in module.kernel_size)
    pairs = [tuple(int(v) for v in p) for p in padding]
    pads = tuple(p[0] for p in pairs) + tuple(p[1] for p in pairs)
    if not fits_window(pads, kernel):
        return NotApplicable
    return CoarseCall(
        "eqx_pool",
        inputs={"x": x},
        params={
            "kind": kind,
            "kernel": kernel,
            "strides": tuple(int(s) for s in module.stride),
            "pads": pads,
        },
    )


@eqx_lowering(
    "eqx_pool",
    onnx_ops=(
        "MaxPool",
        "AveragePool",
        "IsNaN",
        "Equal",
        "Greater",
        "Where",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
    ),
    covers=(
        "eqx.nn.MaxPool1d",
        "eqx.nn.MaxPool2d",
        "eqx.nn.MaxPool3d",
        "eqx.nn.AvgPool1d",
        "eqx.nn.AvgPool2d",
        "eqx.nn.AvgPool3d",
        "eqx.nn.AdaptiveAvgPool1d",
        "eqx.nn.AdaptiveAvgPool2d",
        "eqx.nn.AdaptiveAvgPool3d",
        "eqx.nn.AdaptiveMaxPool1d",
        "eqx.nn.AdaptiveMaxPool2d",
        "eqx.nn.AdaptiveMaxPool3d",
    ),
)
def _pool_rule(
    ctx: LoweringContext,
    ops: Operands,
    *,
    kind: str,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
) -> Any:
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = out_dtype(ctx)
    if not levels.full("x") or not kernels.supports(
        "MaxPool" if kind == "max" else "AveragePool", dtype
    ):
        return NotApplicable
    example = operand_shape(ops, "x")[len(levels) :]
    x = flatten_batch(ctx, ops["x"], example, len(levels))
    y = pool(ctx, x, kind, dtype, kernel=kernel, strides=strides, pads=pads)
    return unflatten_batch(ctx, y, len(levels), ctx.aval_out)


def _adaptive_pool_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if (
        not plain(module, eqx.nn.AdaptivePool)
        or not float_arrays(x)
        or x.ndim != len(module.target_shape) + 1
    ):
        return NotApplicable
    kind = {id(jax.numpy.mean): "avg", id(jax.numpy.max): "max"}.get(id(module.operation))
    spatial = x.shape[1:]
    if kind is None or any(jxi.is_symbolic_dim(d) for d in spatial):
        return NotApplicable
    targets = tuple(int(t) for t in module.target_shape)
    if any(t <= 0 or int(d) % t for d, t in zip(spatial, targets, strict=True)):
        return NotApplicable  # uneven windows (eqx's own split): the lax path
    kernel = tuple(int(d) // t for d, t in zip(spatial, targets, strict=True))
    return CoarseCall(
        "eqx_pool",
        inputs={"x": x},
        params={
            "kind": kind,
            "kernel": kernel,
            "strides": kernel,
            "pads": (0,) * (2 * len(kernel)),
        },
    )


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the pools."""
    return [
        *[coarse_patch(cls, _pool_handler) for cls in _POOL_CLASSES],
        coarse_patch(eqx.nn.AdaptivePool, _adaptive_pool_handler),
    ]
