"""Callable + parsed specs -> ClosedJaxpr over the flat list of input leaves."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import ConversionError, SpecError
from jax2onnx_nn.core.specs import InputSpecs

# Errors JAX raises when the shapes or the number of the inputs do not fit the function
# (dot_general contracting dims, broadcasting, reshape sizes, an undecidable comparison of
# symbolic dims, a wrong number of arguments); the function itself is fine for other specs.
_SHAPE_ERRORS = (TypeError, ValueError, IndexError, jax.errors.InconclusiveDimensionOperation)
# Errors about values that are not known while tracing: not a spec problem.
_VALUE_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                 jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
        raise _value_error(err, specs, arg_names) from None
    except (SpecError, ConversionError):
        raise
    except _SHAPE_ERRORS as err:
        raise _spec_error(err, specs, arg_names) from None
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_shapes)
    return Traced(closed, [name for name, _ in pairs], leaves, out_tree, out_leaves)


def _spec_error(err: BaseException, specs: InputSpecs, arg_names: Sequence[str]) -> SpecError:
    """A SpecError for a shape error raised while tracing: what JAX said, where, with which
    inputs. The JAX error stays reachable as ``.jax_error`` (not chained, so no traceback from
    inside JAX is printed)."""
    # the first lines of JAX's message (frameworks wrap it: Keras puts its own line first)
    text = _ANSI.sub("", str(err))  # Keras bolds its message with terminal escapes
    message = [line.strip() for line in text.strip().splitlines() if line.strip()][:4] or [type(err).__name__]
    where = user_frame(err.__traceback__)
    lines = [f"the inputs do not fit the function: {type(err).__name__}: {message[0].rstrip('.')}"]
    lines += [f"  {line}" for line in message[1:]]
    if where:
        lines.append(f"  at {where}")
    lines.append("input specs:")
    lines += [f"  {line}" for line in specs.describe(arg_names)]
    if isinstance(err, jax.errors.InconclusiveDimensionOperation):
        lines.append("A comparison of symbolic dims is not decided by the specs: add constraints=(\"B >= 2\",) "
                     "for what the function assumes, or give that dim a fixed size.")
    else:
        lines.append("Change the specs (rank, sizes, dtypes, number of inputs) to what the function expects.")
    spec_error = SpecError("\n".join(lines))
    spec_error.jax_error = err  # type: ignore[attr-defined]
    return spec_error


def _value_error(err: BaseException, specs: InputSpecs, arg_names: Sequence[str]) -> ConversionError:
    """A ConversionError for Python control flow on a graph input (``if deterministic:``,
    ``int(n)``): where the user's code does it, and the two ways out. The JAX error stays
    reachable as ``.jax_error``."""
    where = user_frame(err.__traceback__)
    text = _ANSI.sub("", str(err)).strip().splitlines()
    lines = [
        "a graph input is used as a Python value while tracing (an ONNX graph cannot branch in Python): "
        f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": "),
    ]
    if where:
        lines.append(f"  at {where}")
    lines.append("inputs of the graph:")
    lines += [f"  {line}" for line in specs.describe(arg_names)]
    lines.append(
        "Fix: compute both branches with jnp.where(flag, a, b) or lax.cond(flag, ...), so the flag "
        "stays a runtime input (`not flag` is a Python branch too: jnp.logical_not(flag); Dropout "
        "and BatchNorm flags of Flax and Equinox layers may be runtime inputs); or make it static: "
        "leave it out of input_params and bind it with functools.partial(fn, deterministic=True)."
    )
    error = ConversionError("\n".join(lines))
    error.jax_error = err  # type: ignore[attr-defined]
    return error


def user_frame(tb: Any) -> str:
    """``file:line (function)`` of the innermost frame of a traceback in the user's code
    (outside JAX, this package and the frameworks), or ""."""
    return _innermost_user_frame(traceback.extract_tb(tb))


def calling_user_frame() -> str:
    """:func:`user_frame` of the running code: the user's line that led here (for errors an
    adapter raises while tracing)."""
    return _innermost_user_frame(traceback.extract_stack())


def _innermost_user_frame(frames: traceback.StackSummary) -> str:
    library = jxi.library_dirs()
    for frame in reversed(frames):
        if not frame.filename.startswith((*library, "<frozen")):
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return ""
