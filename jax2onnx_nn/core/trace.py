"""Callable + parsed specs -> ClosedJaxpr over the flat list of input leaves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from jax2onnx_nn.core.errors import ConversionError, SpecError
from jax2onnx_nn.core.specs import InputSpecs
from jax2onnx_nn.core.trace_errors import is_value_error, spec_error, value_error

# Errors JAX raises when the shapes or the number of the inputs do not fit the function
# (dot_general contracting dims, broadcasting, reshape sizes, an undecidable comparison of
# symbolic dims, a wrong number of arguments); the function itself is fine for other specs.
_SHAPE_ERRORS = (TypeError, ValueError, IndexError, jax.errors.InconclusiveDimensionOperation)
# Errors about values that are not known while tracing: not a spec problem.
_VALUE_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerBoolConversionError,
)


@dataclass
class Traced:
    closed_jaxpr: Any
    in_names: list[str]
    in_avals: list[jax.ShapeDtypeStruct]
    out_tree: Any
    out_avals: list[Any]


def trace(fn: Callable[..., Any], specs: InputSpecs, arg_names: Sequence[str] = ()) -> Traced:
    """Trace ``fn(*args, **kwargs)`` with symbolic shapes; closed-over arrays become consts.

    Raises:
        ConversionError: the function uses a graph input as a Python bool / int / array
            (``if deterministic:``); the message names the user's line and the fix.
        SpecError: JAX rejected the shapes while tracing (``dot_general requires contracting
            dimensions ...``); the message lists the input specs and the user's source line.
    """
    pairs, treedef = specs.flat()
    leaves = [leaf for _, leaf in pairs]

    def flat_fn(*flat_args: Any) -> Any:
        args, kwargs = jax.tree_util.tree_unflatten(treedef, flat_args)
        return fn(*args, **kwargs)

    try:
        closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*leaves)
    except _VALUE_ERRORS as err:
        raise value_error(err, specs, arg_names) from None
    except (SpecError, ConversionError):
        raise
    except _SHAPE_ERRORS as err:
        if is_value_error(err):
            raise value_error(err, specs, arg_names) from None
        raise spec_error(err, specs, arg_names) from None
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_shapes)
    return Traced(closed, [name for name, _ in pairs], leaves, out_tree, out_leaves)
