"""The float32 twin of a low-precision program: what verify compares an export against besides
JAX itself ("error vs JAX in float32"), the program re-run with bfloat16 / float16 values
computed in float32."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi

_DTYPE_PARAMS = ("new_dtype", "preferred_element_type", "dtype")
_INLINED_CALLS = (
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "remat",
    "checkpoint",
)


def eval_widened(fn: Any, args: list[Any], low: frozenset[np.dtype]) -> list[Any]:
    """``fn(*args)``'s flat results with every value of a dtype in ``low`` (bfloat16, float16)
    computed in float32 instead: its weights, inputs, literals, casts and dtype params. Calls
    (jit, custom_jvp/vjp, remat) are interpreted through; any other body (scan, while, cond)
    runs in its own dtypes on rounded inputs, its results widened."""
    closed = jax.make_jaxpr(fn)(*args)
    return _eval_widened(
        closed.jaxpr, list(closed.consts), list(jax.tree_util.tree_leaves(args)), low
    )


def _widen(value: Any, low: frozenset[np.dtype]) -> Any:
    dtype = getattr(value, "dtype", None)
    if dtype is not None and np.dtype(dtype) in low:
        return jax.numpy.asarray(value, np.float32)
    return value


def _eval_widened(
    jaxpr: Any, consts: list[Any], args: list[Any], low: frozenset[np.dtype]
) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(atom: Any) -> Any:
        if jxi.is_literal(atom):
            return _widen(np.asarray(jxi.literal_value(atom), dtype=atom.aval.dtype), low)
        return env[atom]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = _widen(value, low)
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = _widen(value, low)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        subs = jxi.subjaxprs_of(eqn.params)
        if eqn.primitive.name in _INLINED_CALLS and len(subs) == 1:
            body = jxi.as_closed(subs[0])
            outs = _eval_widened(body.jaxpr, list(body.consts), invals, low)
        elif subs:  # a body of its own dtypes: its inputs rounded back, its results widened
            rounded = [
                jax.numpy.asarray(v, var.aval.dtype) if hasattr(var.aval, "dtype") else v
                for v, var in zip(invals, eqn.invars, strict=True)
            ]
            outs = [_widen(o, low) for o in jxi.bind_equation(eqn, rounded)]
        else:
            params = {
                k: (
                    np.dtype(np.float32)
                    if k in _DTYPE_PARAMS and v is not None and np.dtype(v) in low
                    else v
                )
                for k, v in eqn.params.items()
            }
            outs = eqn.primitive.bind(*invals, **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]
