"""Flax NNX layers as coarse ONNX ops: the checks and helpers every layer family of this package
shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir
from flax.nnx.nn import dtypes as nnx_dtypes

from jax2onnx_nn.core.layers.norm import (
    weight_or_fill,
)
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    NotApplicable,
    Operands,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.core.symbolic import has_zero

F32_F64 = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_ALLOWED_OVERRIDES = frozenset({"__init__", "__init_subclass__", "__call__"})


# -- shared checks and helpers -------------------------------------------------------------


def plain(module: Any, cls: type) -> bool:
    """True when ``module`` is a ``cls`` whose subclasses (if any) override no method."""
    return overrides_nothing(module, cls, _ALLOWED_OVERRIDES)


def one_input(args: tuple[Any, ...], kwargs: dict[str, Any], allowed: dict[str, Any]) -> Any:
    """The single positional array argument, if the other keywords have their allowed values."""
    if len(args) != 1 or not is_array(args[0]):
        return NotApplicable
    for key, value in kwargs.items():
        if key not in allowed or value is not allowed[key]:
            return NotApplicable
    return args[0]


def variable_value(variable: Any) -> Any:
    """An NNX variable's array; None for an absent one (``use_bias=False``)."""
    return None if variable is None else variable.get_value()


def default_promote(module: Any) -> bool:
    """The module promotes dtypes as NNX does by default (no custom ``promote_dtype``)."""
    return getattr(module, "promote_dtype", nnx_dtypes.promote_dtype) is nnx_dtypes.promote_dtype


def out_dtype(ctx: LoweringContext) -> np.dtype:
    """The numpy dtype of the coarse op's (first) result."""
    return onnx_aval(ctx.aval_out)[0]


def cast_or_fill(
    ctx: LoweringContext, ops: Operands, role: str, dtype: np.dtype, size: int, fill: float
) -> ir.Value:
    """An optional per-feature weight (in ``dtype``), or a constant ``fill`` vector where it is
    absent."""
    return weight_or_fill(
        ctx, ctx.cast(ops[role], dtype) if role in ops else None, (size,), dtype, fill
    )


def has_empty_dim(*avals: Any) -> bool:
    """Some aval has a size-0 dim (onnxruntime's kernels reject those; the lax path does not)."""
    return any(has_zero(a.shape) for a in avals)


def canonical_axes(axes: Any, rank: int) -> tuple[int, ...] | None:
    """``axes`` (an int or a sequence) as sorted non-negative axes; None where not valid."""
    axes = (
        (axes,)
        if isinstance(axes, int)
        else tuple(axes)
        if isinstance(axes, (tuple, list))
        else None
    )
    if axes is None or not all(isinstance(a, int) and -rank <= a < rank for a in axes):
        return None
    return tuple(sorted(a % rank for a in axes))


MakeWrapper = Callable[[Any], Any]
