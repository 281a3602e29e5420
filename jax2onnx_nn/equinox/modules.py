"""Finding the Equinox modules an exported callable holds, and preparing them for export.

An Equinox module is a pytree: its arrays are the weights, everything else is static config
(``eqx.filter`` semantics). Exported callables hold modules in a few ways: the callable is a
module, a bound method of one (``model.encode``), or a function that closes over one
(``lambda x: model(x)``, ``jax.vmap(model)``, ``jax.jit(model)``), a global or a default
argument it names, a partial's argument. :func:`retarget` finds them, puts a copy in
export mode in their place (``eqx.nn.inference_mode`` unless training is asked for), and
:func:`array_names` names every array by its pytree path (``layers.0.weight``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core import reach
from jax2onnx_nn.core.jax_nn.namespaces import substitute

Convert = Callable[[Any], Any]


def _is_module(x: Any) -> bool:
    return isinstance(x, eqx.Module)


def _has_modules(tree: Any) -> bool:
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=_is_module)
    return any(_is_module(leaf) for leaf in leaves)


def export_copy(tree: Any, training: bool) -> Any:
    """``tree`` with every module in inference mode (or training mode), numpy weights as JAX
    arrays (so that they are recognised as weights when traced), and captured ``jax.nn``
    functions (``eqx.nn.MLP(activation=jax.nn.gelu)``) patched for the export; arrays are
    shared."""
    tree = eqx.nn.inference_mode(tree, value=not training)
    return jax.tree_util.tree_map(_for_export, tree)


def _for_export(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        return jnp.asarray(leaf)
    return substitute(leaf) if callable(leaf) else leaf


def _holds(value: Any) -> bool:
    return _has_modules(value) or isinstance(value, eqx.nn.State)


def _owner(value: Any) -> Any:
    """An eqx BoundMethod (a module holding its owner) stands for its owner module."""
    owner = getattr(value, "__self__", None)
    return owner if _is_module(value) and _is_module(owner) else value


def retarget(fn: Any, convert: Convert) -> tuple[Any, dict[str, Any]]:
    """``fn`` rebuilt around converted copies of the modules it reaches (see
    :func:`jax2onnx_nn.core.reach.retarget`), and those copies by name (``""`` for the
    callable's own module, else the variable's name). Callables reaching no module come
    back unchanged with no roots."""
    new, roots = reach.retarget(fn, _holds, convert)
    roots = {name: _owner(root) for name, root in roots.items()}
    if len(roots) == 1:  # one module in a dict / list: named as if it were passed itself
        ((name, root),) = roots.items()
        leaves = jax.tree_util.tree_leaves(
            root, is_leaf=lambda x: _is_module(x) or isinstance(x, eqx.nn.State)
        )
        modules = [leaf for leaf in leaves if _is_module(leaf)]
        if len(modules) == 1 and not any(isinstance(leaf, eqx.nn.State) for leaf in leaves):
            roots = {name: modules[0]}
    return new, roots


# -- names ------------------------------------------------------------------------------------


def _key_name(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key).strip(".[]'\"")


def path_name(path: tuple[Any, ...]) -> str:
    """A pytree path as a dotted name: ``layers.0.weight``."""
    return ".".join(_key_name(k) for k in path)


def prefixes(roots: dict[str, Any]) -> dict[str, str]:
    """Root name -> prefix of its array names: none when a single module is exported."""
    modules = [name for name, root in roots.items() if _has_modules(root)]
    if len(modules) <= 1:
        return {name: "" if name in modules or not modules else name for name in roots}
    return {name: name for name in roots}


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


# What the tuple a StateIndex holds means, for layers whose state is a known pair.
_STATE_PARTS = {"ema_state_index": ("mean", "var"), "batch_state_index": ("mean", "var")}


def _state_index_names(roots: dict[str, Any], prefix_of: dict[str, str]) -> dict[Any, str]:
    """StateIndex marker -> dotted path of the index in its module (``bn.ema_state_index``)."""
    names: dict[Any, str] = {}
    for root_name, root in roots.items():
        pairs, _ = jax.tree_util.tree_flatten_with_path(
            root, is_leaf=lambda x: isinstance(x, eqx.nn.StateIndex)
        )
        for path, leaf in pairs:
            if isinstance(leaf, eqx.nn.StateIndex):
                names.setdefault(leaf.marker, _join(prefix_of[root_name], path_name(path)))
    return names


def _state_arrays(
    state: eqx.nn.State, markers: dict[Any, str], prefix: str
) -> Iterator[tuple[str, Any]]:
    values, keys = state.tree_flatten()
    for i, (marker, value) in enumerate(zip(keys, values, strict=True)):
        base = markers.get(marker) or _join(prefix, f"state.{i}")
        pairs, _ = jax.tree_util.tree_flatten_with_path(value)
        parts = _STATE_PARTS.get(base.rsplit(".", 1)[-1])
        for path, leaf in pairs:
            suffix = path_name(path)
            if parts is not None and len(pairs) == len(parts) and path:
                suffix = parts[int(_key_name(path[0]))]
            yield _join(base, suffix), leaf


def array_names(roots: dict[str, Any]) -> dict[int, str]:
    """id(array) -> initializer name, for every array of the roots (first name wins)."""
    prefix_of = prefixes(roots)
    markers = _state_index_names(roots, prefix_of)
    names: dict[int, str] = {}
    for root_name, root in roots.items():
        prefix = prefix_of[root_name]
        for state in _states(root):
            for name, leaf in _state_arrays(state, markers, prefix):
                if eqx.is_array(leaf):
                    names.setdefault(id(leaf), name)
        pairs, _ = jax.tree_util.tree_flatten_with_path(root)
        for path, leaf in pairs:
            if eqx.is_array(leaf):
                names.setdefault(id(leaf), _join(prefix, path_name(path)) or "weight")
    return names


def _states(tree: Any) -> list[eqx.nn.State]:
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, eqx.nn.State))
    return [leaf for leaf in leaves if isinstance(leaf, eqx.nn.State)]


def submodules(root: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, module) for every module in ``root`` (itself included, path ``()``)."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if _is_module(node):
            yield path, node
        pairs, _ = jax.tree_util.tree_flatten_with_path(
            node, is_leaf=lambda x, node=node: x is not node and _is_module(x)
        )
        children = [
            (path + tuple(_key_name(k) for k in p), leaf)
            for p, leaf in pairs
            if _is_module(leaf) and leaf is not node
        ]
        stack.extend(reversed(children))


__all__ = ["array_names", "export_copy", "path_name", "prefixes", "retarget", "submodules"]
