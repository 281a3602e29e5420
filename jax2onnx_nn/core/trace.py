"""Callable + parsed specs -> ClosedJaxpr over the flat list of input leaves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from jax2onnx_nn.core.specs import InputSpecs


@dataclass
class Traced:
    closed_jaxpr: Any
    in_names: list[str]
    in_avals: list[jax.ShapeDtypeStruct]
    out_tree: Any
    out_avals: list[Any]


def trace(fn: Callable[..., Any], specs: InputSpecs) -> Traced:
    """Trace ``fn(*args, **kwargs)`` with symbolic shapes; closed-over arrays become consts."""
    pairs, treedef = specs.flat()
    leaves = [leaf for _, leaf in pairs]

    def flat_fn(*flat_args: Any) -> Any:
        args, kwargs = jax.tree_util.tree_unflatten(treedef, flat_args)
        return fn(*args, **kwargs)

    closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*leaves)
    out_leaves, out_tree = jax.tree_util.tree_flatten(out_shapes)
    return Traced(closed, [name for name, _ in pairs], leaves, out_tree, out_leaves)
