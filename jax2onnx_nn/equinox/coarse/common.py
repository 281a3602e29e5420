"""Equinox layers as coarse ONNX ops: the shared checks, the vmap levels, the batch-dim helpers
and the patch makers every layer family of this package uses."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    Handler,
    Operands,
    coarse_lowering,
    coarse_wrapper,
    is_array,
    overrides_nothing,
)
from jax2onnx_nn.core.precision import LOW_FLOATS
from jax2onnx_nn.core.symbolic import has_zero
from jax2onnx_nn.equinox.functions import without_named_scope

MakeWrapper = Callable[[Any], Any]

_F32_F64 = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_ALLOWED_OVERRIDES = frozenset(
    {"__init__", "__call__", "__check_init__", "__post_init__", "__init_subclass__"}
)


def eqx_lowering(
    primitive: str,
    *,
    onnx_ops: tuple[str, ...] = (),
    min_opset: int = 1,
    covers: tuple[str, ...] = (),
) -> Callable[[Any], Any]:
    """:func:`coarse_lowering` for a primitive that vmap re-binds on batched operands."""
    jxi.rebind_under_vmap(primitive)
    return coarse_lowering(primitive, onnx_ops=onnx_ops, min_opset=min_opset, covers=covers)


# -- shared checks and helpers -------------------------------------------------------------


def plain(module: Any, cls: type) -> bool:
    """True when ``module`` is a ``cls`` whose subclasses (if any) override no method."""
    return overrides_nothing(module, cls, _ALLOWED_OVERRIDES)


def float_arrays(*arrays: Any) -> bool:
    """All arrays (None for absent ones) of one float32 / float64 dtype, or of one bfloat16 /
    float16 dtype (computed in float32 where the target has no kernel: core/precision.py)."""
    present = [a for a in arrays if a is not None]
    if not all(is_array(a) for a in present):
        return False
    dtypes = {np.dtype(a.dtype) for a in present}
    return len(dtypes) == 1 and (dtypes <= _F32_F64 or dtypes <= LOW_FLOATS)


class Levels:
    """Which operands of a coarse op carry which vmap dims (see ``jxi.rebind_under_vmap``)."""

    def __init__(self, ctx: LoweringContext) -> None:
        params = ctx.eqn.params
        self.levels: tuple[tuple[bool, ...], ...] = tuple(params.get("vmap_levels", ()))
        self.index = dict(params["roles"])

    def __len__(self) -> int:
        return len(self.levels)

    def of(self, role: str) -> tuple[bool, ...]:
        i = self.index[role]
        return tuple(level[i] for level in self.levels)

    def full(self, role: str) -> bool:
        """The role's operand carries every vmap dim."""
        return all(self.of(role))

    def unbatched(self, *roles: str) -> bool:
        return all(not any(self.of(r)) for r in roles if r in self.index)

    def aligned(self, ctx: LoweringContext, role: str, value: ir.Value) -> ir.Value:
        """The operand with a size-1 dim for each vmap dim it lacks, so that it broadcasts
        against operands that carry them (numpy broadcasting aligns trailing dims)."""
        missing = [i for i, has in enumerate(self.of(role)) if not has]
        if not missing or all(not has for has in self.of(role)):
            return value  # all dims or none: trailing alignment is right
        return ctx.op.Unsqueeze(value, ctx.ints(missing))


def has_empty(ctx: LoweringContext) -> bool:
    """Some operand or result has a size-0 dim (onnxruntime's Conv/pools reject those; the
    lax path handles them)."""
    return any(has_zero(aval.shape) for aval in (*ctx.avals_in, *ctx.avals_out))


def out_dtype(ctx: LoweringContext) -> np.dtype:
    """The numpy dtype of the coarse op's (first) result."""
    return onnx_aval(ctx.aval_out)[0]


def operand_shape(ops: Operands, role: str) -> tuple[Any, ...]:
    """The shape of the operand that plays ``role``."""
    return tuple(ops.aval(role).shape)


# -- batch dims: ops that take exactly one batch dim (Conv, pools, norms, RNN cells) --------


def flatten_batch(
    ctx: LoweringContext,
    x: ir.Value,
    per_example: Sequence[Any],
    n_levels: int,
    front: Sequence[int] = (),
) -> ir.Value:
    """``x`` (vmap dims, then one example) as ``[*front, N, *example]`` with all vmap dims in N."""
    if n_levels == 1 and not front:
        return x
    if n_levels <= 1:
        return ctx.op.Unsqueeze(x, ctx.ints(list(range(len(front) + 1 - n_levels))))
    if any(jxi.is_symbolic_dim(d) for d in per_example):
        return ctx.op.Reshape(
            x, ctx.op.Concat(ctx.ints([*front, -1]), ctx.shape_tensor(list(per_example)), axis=0)
        )
    return ctx.op.Reshape(x, ctx.ints([*front, -1, *(int(d) for d in per_example)]))


def unflatten_batch(
    ctx: LoweringContext, y: ir.Value, n_levels: int, aval: Any, front: int = 0
) -> ir.Value:
    """The inverse of :func:`flatten_batch` for an output of aval ``aval``."""
    if n_levels == 1 and not front:
        return y
    if n_levels <= 1:
        return ctx.op.Squeeze(y, ctx.ints(list(range(front + 1 - n_levels))))
    return ctx.reshape(y, aval.shape)


def coarse_patch(cls: type, handler: Handler) -> tuple[Any, str, MakeWrapper]:
    """The patch of ``cls.__call__`` by the coarse wrapper of ``handler`` (outside the
    layer's named scope)."""
    return (
        cls,
        "__call__",
        lambda original: coarse_wrapper(handler)(without_named_scope(original, cls)),
    )


def coarse_patch_with_original(cls: type, handler: Handler) -> tuple[Any, str, MakeWrapper]:
    """For a handler that also needs the original method: ``handler(original, module, ...)``."""

    def make(original: Any) -> Any:
        inner = without_named_scope(original, cls)
        return coarse_wrapper(functools.partial(handler, inner))(inner)

    return cls, "__call__", make
