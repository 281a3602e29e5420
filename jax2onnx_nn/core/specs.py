"""Input specs -> ``jax.ShapeDtypeStruct`` leaves, all symbolic dims in one scope.

A spec for one argument of the exported callable is any of:

* a shape tuple of ints and dim names: ``(3, 4)``, ``("B", 30)``, ``("B", "2*B")``;
* a ``jax.ShapeDtypeStruct`` (symbolic shapes from ``jax.export.symbolic_shape`` allowed);
* a concrete array (numpy or JAX): its shape and dtype;
* a ``(shape, dtype)`` pair: ``(("B", 30), "int32")``;
* a Python scalar (``2.0``, ``3``, ``True``): a runtime scalar input of that kind;
* a pytree (dict, list, tuple) of the above.

Floats default to float32 (float64 with ``enable_double_precision``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import SpecError


@dataclass(frozen=True)
class _ShapeSpec:
    """A parsed shape tuple waiting for its dims to be made symbolic in the export's scope."""

    dims: tuple[int | str, ...]
    dtype: Any


def _is_dim(d: Any) -> bool:
    return isinstance(d, (int, np.integer, str)) or jxi.is_symbolic_dim(d)


def _is_shape(value: Any) -> bool:
    return isinstance(value, tuple) and all(_is_dim(d) for d in value)


def _as_dtype(dtype: Any, where: str) -> np.dtype:
    try:
        return jnp.dtype(dtype)
    except TypeError as err:
        raise SpecError(f"{where}: {dtype!r} is not a dtype") from err


def _is_dtype_like(value: Any) -> bool:
    if isinstance(value, (str, np.dtype, type)):
        try:
            jnp.dtype(value)
            return True
        except TypeError:
            return False
    return hasattr(value, "dtype") and isinstance(value.dtype, np.dtype) and not hasattr(value, "shape")


def _leaf_spec(value: Any, where: str, float_dtype: np.dtype) -> Any:
    """One leaf of a user spec -> ShapeDtypeStruct or _ShapeSpec (symbolic dims pending)."""
    if isinstance(value, jax.ShapeDtypeStruct):
        return value
    if isinstance(value, bool):
        return jax.ShapeDtypeStruct((), jnp.bool_)
    if isinstance(value, int):  # a Python int; numpy scalars keep their dtype (below)
        return jax.ShapeDtypeStruct((), jnp.dtype("int64" if jax.config.jax_enable_x64 else "int32"))
    if isinstance(value, float):
        return jax.ShapeDtypeStruct((), float_dtype)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return jax.ShapeDtypeStruct(tuple(value.shape), value.dtype)
    if _is_shape(value):
        return _ShapeSpec(tuple(value), float_dtype)
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and _is_shape(value[0])
        and (_is_dtype_like(value[1]) or isinstance(value[1], str))
    ):
        return _ShapeSpec(tuple(value[0]), _as_dtype(value[1], where))
    raise SpecError(
        f"{where}: expected a shape tuple like ('B', 30), a (shape, dtype) pair, a "
        f"jax.ShapeDtypeStruct, an array or a Python scalar; got {value!r}"
    )


def _is_spec_leaf(value: Any) -> bool:
    if isinstance(value, (jax.ShapeDtypeStruct, bool, int, float, np.integer)):
        return True
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return True
    if _is_shape(value):
        return True
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and _is_shape(value[0])
        and (_is_dtype_like(value[1]) or isinstance(value[1], str))
    )


@dataclass
class InputSpecs:
    """The parsed specs of one export: one pytree of ShapeDtypeStructs per argument."""

    args: list[Any]
    kwargs: dict[str, Any]
    scope: Any

    def flat(self) -> tuple[list[tuple[str, jax.ShapeDtypeStruct]], Any]:
        """(path name, leaf) pairs in flattening order, and the treedef of (args, kwargs)."""
        pairs, treedef = jax.tree_util.tree_flatten_with_path((self.args, self.kwargs))
        return [(_path_name(p), leaf) for p, leaf in pairs], treedef


def _path_name(path: tuple[Any, ...]) -> str:
    parts = []
    for entry in path[1:]:  # drop the (args, kwargs) level
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(str(entry.idx))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        else:
            parts.append(str(entry).strip(".[]'\""))
    return "/".join(parts)


def parse_specs(
    inputs: Sequence[Any],
    *,
    input_params: dict[str, Any] | None = None,
    enable_double_precision: bool = False,
    constraints: Sequence[str] = (),
) -> InputSpecs:
    """Turn user input specs into ShapeDtypeStructs, one symbolic scope for the export."""
    if not isinstance(inputs, (list, tuple)):
        raise SpecError(
            f"inputs must be a list with one spec per positional argument, got {type(inputs).__name__}"
        )
    if isinstance(inputs, tuple) and any(isinstance(d, str) for d in inputs) and _is_shape(inputs):
        raise SpecError(
            f"inputs must be a list with one spec per positional argument; {inputs!r} looks like "
            f"a single shape: did you mean [{inputs!r}]?"
        )
    float_dtype = jnp.dtype("float64" if enable_double_precision else "float32")

    def parse_tree(tree: Any, where: str) -> Any:
        return jax.tree_util.tree_map_with_path(
            lambda p, leaf: _leaf_spec(leaf, where + jax.tree_util.keystr(p), float_dtype),
            tree,
            is_leaf=_is_spec_leaf,
        )

    args = [parse_tree(spec, f"inputs[{i}]") for i, spec in enumerate(inputs)]
    kwargs = {
        name: parse_tree(value, f"input_params[{name!r}]")
        for name, value in (input_params or {}).items()
    }
    scope = _common_scope((args, kwargs), tuple(constraints))
    resolve = _Resolver(scope)
    args, kwargs = jax.tree_util.tree_map(
        resolve, (args, kwargs), is_leaf=lambda x: isinstance(x, _ShapeSpec)
    )
    return InputSpecs(args, kwargs, scope)


def _common_scope(tree: Any, constraints: tuple[str, ...]) -> Any:
    """The scope of user-made symbolic dims if any (all must agree), else a new one."""
    scopes = []
    for leaf in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, _ShapeSpec)):
        if isinstance(leaf, jax.ShapeDtypeStruct):
            scopes.extend(jxi.symbolic_scope(d) for d in leaf.shape if jxi.is_symbolic_dim(d))
    if not scopes:
        return jxi.new_symbolic_scope(constraints)
    first = scopes[0]
    if any(s is not first for s in scopes):
        raise SpecError(
            "symbolic dims of the inputs come from different jax.export.symbolic_shape calls; "
            "create them with one call (or one SymbolicScope) so equal names mean equal dims"
        )
    if constraints:
        raise SpecError("constraints= cannot be combined with user-made symbolic dims; put them in their scope")
    return first


class _Resolver:
    """Parses string dims of shape specs in the export's one symbolic scope."""

    def __init__(self, scope: Any) -> None:
        self.scope = scope
        self._cache: dict[str, Any] = {}

    def __call__(self, leaf: Any) -> Any:
        if not isinstance(leaf, _ShapeSpec):
            return leaf
        dims = []
        for d in leaf.dims:
            if isinstance(d, str):
                if d not in self._cache:
                    try:
                        (self._cache[d],) = jxi.parse_symbolic_shape(d, self.scope)
                    except Exception as err:
                        raise SpecError(f"cannot parse the symbolic dim {d!r}: {err}") from err
                dims.append(self._cache[d])
            elif isinstance(d, (int, np.integer)):
                if d < 0:
                    raise SpecError(f"negative dim {d} in the shape spec {leaf.dims}")
                dims.append(int(d))
            else:
                dims.append(d)
        return jax.ShapeDtypeStruct(tuple(dims), leaf.dtype)
