"""Flax Linen exports: weights named by variable path, and :func:`export_onnx`.

A Linen model's arrays live in its variables (``{"params": {"Dense_0": {"kernel": ...}}}``),
outside the module. Whatever the exported callable reaches them through (a lambda calling
``module.apply(variables, x)``, a bound module ``module.bind(variables)``, a default, a
partial's argument: ``core/reach.py``), each array is named by its variable path
(``params/Dense_0/kernel``, ``batch_stats/BatchNorm_0/mean``) instead of ``weight_N``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import onnx

from jax2onnx_nn.core import reach
from jax2onnx_nn.core.calls import is_array

COLLECTIONS = ("params", "batch_stats", "cache", "constants", "spectral", "intermediates")
"""The collection names that mark a mapping as a Linen variables dict (its top-level keys)."""


def _bound_variables(value: Any) -> Mapping[str, Any] | None:
    from flax import linen

    if isinstance(value, linen.Module) and value.scope is not None:
        return value.variables
    return None


def _is_variables(value: Any) -> bool:
    """A Linen variables dict (top-level keys collections, arrays at the leaves) or a bound
    Linen module."""
    if _bound_variables(value) is not None:
        return True
    if not isinstance(value, Mapping) or not value or not any(k in COLLECTIONS for k in value):
        return False
    return all(isinstance(k, str) and isinstance(v, Mapping) for k, v in value.items())


def _holds(value: Any) -> bool:
    return reach.containers_hold(value, _is_variables)


def variable_names(fn: Any) -> dict[int, str]:
    """id(array) -> variable path (``params/Dense_0/kernel``) for the arrays of every Linen
    variables dict or bound module ``fn`` reaches; the first path wins for a shared array."""
    _, roots = reach.retarget(fn, _holds, lambda value: value)
    names: dict[int, str] = {}

    def walk(value: Any) -> None:
        bound = _bound_variables(value)
        if bound is not None or _is_variables(value):
            leaves, _ = jax.tree_util.tree_flatten_with_path(
                dict(bound if bound is not None else value)
            )
            for path, leaf in leaves:
                if is_array(leaf):
                    names.setdefault(id(leaf), "/".join(_key(k) for k in path))
        elif isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for value in roots.values():
        walk(value)
    return names


def _key(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def export_onnx(
    module: Any,
    variables: Mapping[str, Any],
    inputs: Sequence[Any],
    method: Any = None,
    mutable: Any = False,
    **options: Any,
) -> onnx.ModelProto:
    """Export ``module.apply(variables, *inputs, method=method, mutable=mutable)``.

    ``inputs``: the input specs of :func:`jax2onnx_nn.to_onnx` (shapes with named dims,
    ``jax.ShapeDtypeStruct``, arrays); ``options``: those of ``to_onnx`` (opset, verify,
    target, ...). Weights are named by variable path (``params/Dense_0/kernel``). The module
    runs as called: a ``BatchNorm`` whose ``use_running_average`` is a call argument needs it
    in ``method`` or a ``functools.partial`` (``mutable=False`` keeps ``batch_stats`` read-only,
    as inference is). With ``mutable`` collections the model also returns the updated ones.

    Example::

        model = export_onnx(nn.Dense(4), variables, [("B", 3)])
    """
    from jax2onnx_nn.core.api import to_onnx

    def apply(*args: Any) -> Any:
        return module.apply(variables, *args, method=method, mutable=mutable)

    return to_onnx(apply, list(inputs), **options)


__all__ = ["COLLECTIONS", "export_onnx", "variable_names"]
