"""Low-precision floats (bfloat16, float16): coarse ops computed in float32 where the target
has no kernel for them.

onnxruntime's CPU provider has almost no bfloat16 kernels (and computes float16 through its
own Casts), so the builder widens every elementwise node it writes for such a dtype to float32
with a Cast in and a Cast out (``core/kernels.py``). For a coarse op (a layer or ``jax.nn``
function as one ONNX op) that is the wrong grain: the op's rule refused the dtype and its
traced body, spelled out op by op, became a Cast pair per op. Here the whole coarse op is
widened instead: its low-precision operands become float32 once (a weight becomes a float32
initializer, no node), the rule runs as for float32 (it sees float32 avals), and each result
is rounded back to the dtype JAX gives by one Cast. Between two coarse ops the value is
rounded, as in JAX; inside one it is rounded once where JAX may round after each of its
sub-ops (``docs/precision.md`` gives the measured differences: about one ulp of the dtype).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval

LOW_FLOATS = frozenset({np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)})
"""The 16-bit floats that a coarse op computes in float32 where the target lacks kernels."""

_F32 = np.dtype(np.float32)


def is_low_float(dtype: Any) -> bool:
    """bfloat16 or float16."""
    try:
        return np.dtype(dtype) in LOW_FLOATS
    except TypeError:
        return False


def _low_dtypes(avals: Sequence[Any]) -> set[np.dtype]:
    return {np.dtype(a.dtype) for a in avals if hasattr(a, "dtype") and is_low_float(a.dtype)}


def widening_for(avals: Sequence[Any], onnx_ops: Sequence[str]) -> np.dtype | None:
    """float32 when a coarse op over ``avals`` reads or makes a low-precision float that one of
    its ONNX ops has no kernel for on the running export's target; None otherwise (also for a
    target whose kernels take the dtype: the rule then sees the dtype as it is)."""
    low = _low_dtypes(avals)
    if not low:
        return None
    ops = [op for op in onnx_ops if op in kernels.table()] or ["MatMul"]
    if all(kernels.supports(op, dtype) for op in ops for dtype in low):
        return None
    return _F32


def _widened_aval(aval: Any) -> Any:
    if hasattr(aval, "dtype") and is_low_float(aval.dtype):
        return jax.ShapeDtypeStruct(tuple(aval.shape), _F32)
    return aval


class WidenedContext(LoweringContext):
    """A rule's context in which every bfloat16 / float16 aval reads as float32."""

    @property
    def avals_in(self) -> list[Any]:
        return [_widened_aval(v.aval) for v in self.eqn.invars]

    @property
    def avals_out(self) -> list[Any]:
        return [_widened_aval(v.aval) for v in self.eqn.outvars]

    @property
    def aval_in(self) -> Any:
        return _widened_aval(self.eqn.invars[0].aval)

    @property
    def aval_out(self) -> Any:
        return _widened_aval(self.eqn.outvars[0].aval)

    def within(self, builder: Any) -> LoweringContext:
        return WidenedContext(self.lowerer, self.eqn, builder)


def widened_context(ctx: LoweringContext) -> WidenedContext:
    """``ctx`` with its low-precision avals read as float32."""
    return WidenedContext(ctx.lowerer, ctx.eqn, ctx.builder)


def widen_operand(ctx: LoweringContext, value: ir.Value, aval: Any, call_dtype: np.dtype | None) -> ir.Value:
    """An operand of a widened coarse op in float32.

    A weight (an initializer) becomes a float32 initializer, no node; a float32 weight of a
    low-precision call is rounded to the call's dtype first, as the rule would cast it (Flax's
    ``param_dtype=float32`` under ``dtype=bfloat16`` promotes the weight to bfloat16). Any other
    low-precision value is one Cast.
    """
    dtype = np.dtype(aval.dtype) if hasattr(aval, "dtype") else None
    weight = value.const_value is not None and value.producer() is None
    if dtype is None or not (is_low_float(dtype) or (weight and dtype == _F32 and call_dtype is not None)):
        return value
    if not weight:
        return ctx.cast(value, _F32)
    low = dtype if is_low_float(dtype) else call_dtype
    return ctx.derived_weight(
        value, ("float32 via", low.name),
        lambda a: np.asarray(a).astype(low).astype(np.float32),
        lambda v: ctx.cast(ctx.cast(v, low), _F32),
    )


def call_dtype(avals_out: Sequence[Any]) -> np.dtype | None:
    """The low-precision dtype a coarse op's results have (None: none of them is low)."""
    low = _low_dtypes(avals_out)
    return next(iter(low)) if len(low) == 1 else None


def narrow_results(ctx: LoweringContext, results: Any, avals_out: Sequence[Any]) -> Any:
    """A widened rule's float32 results rounded back to the dtypes JAX gives (one Cast each)."""
    single = isinstance(results, ir.Value)
    values = [results] if single else list(results)
    narrowed = [
        ctx.cast(v, onnx_aval(aval)[0]) if is_low_float(onnx_aval(aval)[0]) else v
        for v, aval in zip(values, avals_out, strict=True)
    ]
    return narrowed[0] if single else narrowed


__all__ = [
    "LOW_FLOATS", "WidenedContext", "call_dtype", "is_low_float", "narrow_results", "widen_operand",
    "widened_context", "widening_for",
]
