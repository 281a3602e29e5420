"""A call traced over its array arguments: what coarse ops and ONNX functions bind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi


def is_array(x: Any) -> bool:
    """True for JAX/numpy arrays and tracers (call arguments that become operands)."""
    return isinstance(x, (jax.Array, np.ndarray))


def _is_container(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict)) or x is None


def split_arrays(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Callable[[list[Any]], tuple[tuple[Any, ...], dict[str, Any]]]]:
    """The array arguments of a call (through lists, tuples, dicts) and a function that puts
    other arrays in their places. Anything else (modules, flags, ...) stays as it is."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=lambda x: not _is_container(x))
    positions = [i for i, leaf in enumerate(leaves) if is_array(leaf)]

    def rebuild(arrays: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        filled = list(leaves)
        for i, a in zip(positions, arrays, strict=True):
            filled[i] = a
        new_args, new_kwargs = jax.tree_util.tree_unflatten(treedef, filled)
        return tuple(new_args), dict(new_kwargs)

    return [leaves[i] for i in positions], rebuild


def trace_call(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Any, list[Any], Any, int]:
    """Trace ``original(*args, **kwargs)`` over its array arguments.

    Returns (array arguments, body, operands, output treedef, number of consts): the body is a
    ClosedJaxpr taking the closed-over arrays (weights) first and the array arguments after;
    ``operands`` are those values in that order.
    """
    arrays, rebuild = split_arrays(args, kwargs)

    def run(*xs: Any) -> Any:
        a, k = rebuild(list(xs))
        return original(*a, **k)

    closed, out_shape = jax.make_jaxpr(run, return_shape=True)(*arrays)
    body, consts = jxi.hoist_consts(closed)
    return arrays, body, [*consts, *arrays], jax.tree_util.tree_structure(out_shape), len(consts)


__all__ = ["is_array", "split_arrays", "trace_call"]
