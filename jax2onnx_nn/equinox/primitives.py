"""Lowerings for what Equinox's internals put in a jaxpr.

Equinox defines its own primitives (``unvmap_any``/``all``/``max``, ``nonbatchable``,
``nondifferentiable_backward``, ``select_if_vmap``, ``maybe_set``, the filter primitives of
``eqxi.filter_primitive_def``, ...). Each has a JAX implementation, and the interpreter lowers
primitives without a rule through it (``core/lower.py``), so they need no rule here; the tests
of this package check that they export exactly.

Two do need a rule here. ``noinline`` (``eqxi.noinline``) looks its function up by an index
operand that is a constant of the export, so it is lowered through its implementation with
that index filled in. And ``eqx.error_if``: its error branch runs a ``jax.pure_callback`` that
raises in Python. An ONNX model cannot raise, so the exported model does what Equinox does
with ``EQX_ON_ERROR=nan``: where JAX would raise, the checked values come out as NaN (the
largest value for integers, True for booleans). Other Python callbacks stay unsupported.

``lax.nextafter`` (diffrax steps to ``eqxi.nextafter(t)``) has no rule in the core yet; the
exact lowering below is registered only where none is. It takes some fifty nodes, and an
adaptive diffrax solve calls ``eqxi.nextafter`` / ``eqxi.prevbefore`` a hundred times, so
while an export runs those two are ONNX functions: one FunctionProto, a call node per use.
The ``nextafter`` rule itself lives in core/lowerings/elementwise.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.functions import call_function
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import active_options
from jax2onnx_nn.core.registry import (
    Registration,
    builtin,
    builtin_rules,
    register,
)

_ERROR_MODULE = "equinox._errors"


def error_fill(dtype: np.dtype) -> np.ndarray:
    """What ``EQX_ON_ERROR=nan`` puts in place of a value of this dtype."""
    if np.issubdtype(dtype, np.inexact):
        return np.array(np.nan, dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        return np.array(np.iinfo(dtype).max, dtype=dtype)
    return np.array(True, dtype=dtype)


def _pure_callback(
    previous: Registration | None,
    ctx: LoweringContext,
    *operands: ir.Value,
    callback: Any,
    **params: Any,
) -> list[ir.Value]:
    fn = jxi.callback_function(callback)
    if getattr(fn, "__module__", None) == _ERROR_MODULE:
        return [ctx.full(aval, error_fill(onnx_aval(aval)[0])) for aval in ctx.avals_out]
    if previous is not None:
        result = previous.rule(ctx, *operands, callback=callback, **params)
        return [result] if isinstance(result, ir.Value) else list(result)
    # listed like any primitive without a rule, with the Python function it calls
    module = getattr(fn, "__module__", None)
    called = (
        f"{module + '.' if module else ''}{getattr(fn, '__qualname__', None) or type(fn).__name__}"
    )
    ctx.lowerer.unsupported["pure_callback"].append(f"{ctx.builder.doc_string} (calls {called})")
    return [
        ir.Value(name=ctx.builder.names.fresh("unsupported_pure_callback")) for _ in ctx.avals_out
    ]


def _unsupported(ctx: LoweringContext, name: str) -> list[ir.Value]:
    """Like any primitive without a rule: listed in the ConversionError of the export."""
    ctx.lowerer.unsupported[name].append(ctx.builder.doc_string or "")
    return [ir.Value(name=ctx.builder.names.fresh(f"unsupported_{name}")) for _ in ctx.avals_out]


def _noinline(
    ctx: LoweringContext, index: ir.Value, *operands: ir.Value, **params: Any
) -> list[ir.Value]:
    const = index.const_value
    if const is None:
        return _unsupported(ctx, "noinline")
    concrete = const.numpy()
    impl = ctx.eqn.primitive.impl

    def run(*args: Any) -> Any:
        return impl(concrete, *args, **params)

    closed = jax.make_jaxpr(run)(
        *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_in[1:]]
    )
    return ctx.lower_sub(closed, list(operands))


def _as_function(name: str) -> Callable[[Any], Any]:
    """A ``make_wrapper``: calls during exports become calls of one ONNX function."""

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if active_options() is None:
                return original(*args, **kwargs)
            return call_function(original, args, kwargs, name=name, key=original)

        return call

    return make


def patches() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """(owner, attribute, make_wrapper) of the patches applied while an export runs."""
    import equinox.internal as eqxi

    return [
        (eqxi, name, _as_function(name))
        for name in ("nextafter", "prevbefore")
        if hasattr(eqxi, name)
    ]


_REGISTERED = False


def register_rules() -> None:
    """Register the rules of this module once, as built-ins (``pure_callback`` wraps ours)."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    previous = builtin("pure_callback")
    with builtin_rules():
        register(
            "pure_callback",
            functools.partial(_pure_callback, previous),
            onnx_ops=("ConstantOfShape",),
            only="Equinox's eqx.error_if check, NaN where it fails; any other callback is refused",
        )
        register("noinline", _noinline)


__all__ = ["error_fill", "patches", "register_rules"]
