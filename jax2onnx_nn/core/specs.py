"""Input specs -> ``jax.ShapeDtypeStruct`` leaves, all symbolic dims in one scope.

A spec for one argument of the exported callable is any of:

* a shape tuple of ints and dim names: ``(3, 4)``, ``("B", 30)``, ``("B", "2*B")``;
* a ``jax.ShapeDtypeStruct``: its dims may be names and expressions too (``("batch", 224,
  224, 3)``, as Keras passes them) or symbolic dims from ``jax.export.symbolic_shape``;
* a concrete array (numpy or JAX): its shape and dtype;
* a ``(shape, dtype)`` pair: ``(("B", 30), "int32")``;
* a Python scalar (``2.0``, ``3``, ``True``): a runtime scalar input of that kind;
* a pytree (dict, list, tuple) of the above.

Floats default to float32 (float64 with ``enable_double_precision``). Without
``enable_double_precision`` a 64-bit dtype is traced as its 32-bit twin, as ``jax.jit`` does
with x64 off, and one warning says so. A spec that cannot be understood raises
:class:`SpecError` naming the argument (index, name and pytree path), what was given and
what was expected.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.errors import SpecError, user_stacklevel
from jax2onnx_nn.core.memo import BoundedMemo

# What JAX computes a 64-bit dtype as when x64 is off (jax.dtypes.canonicalize_dtype, without
# reading the global flag: the export's own enable_double_precision decides).
_NARROWED = {
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("complex128"): np.dtype("complex64"),
}
_DIM_HELP = "a dim is an int >= 0 or a name / expression such as 'B' or '2*B'"


@dataclass(frozen=True)
class _ShapeSpec:
    """A parsed shape waiting for its dims to be made symbolic in the export's scope."""

    dims: tuple[int | str, ...]
    dtype: Any
    where: str
    weak_type: bool = False


def _is_dim(d: Any) -> bool:
    if isinstance(d, bool):
        return False
    return isinstance(d, (int, np.integer, str)) or jxi.is_symbolic_dim(d)


def _looks_like_shape(value: Any) -> bool:
    """A tuple meant as a shape: scalar-like entries, at least one of them an int or a name.

    ``(None, 3)`` and ``(2.5, 3)`` are shapes with a bad dim (reported), not pytrees of
    scalars; ``(1.0, 2.0)`` (no int, no name) stays a tuple of two runtime scalars.
    """
    if not isinstance(value, tuple) or type(value) is not tuple:  # namedtuples are pytrees
        return False
    if not all(
        d is None
        or isinstance(d, (int, float, np.integer, np.floating, str))
        or jxi.is_symbolic_dim(d)
        for d in value
    ):
        return False
    return value == () or any(_is_dim(d) for d in value)


def _is_dtype_like(value: Any) -> bool:
    if isinstance(value, (str, np.dtype)) or (
        isinstance(value, type) and not issubclass(value, tuple)
    ):
        return True
    return (
        hasattr(value, "dtype")
        and isinstance(value.dtype, np.dtype)
        and not hasattr(value, "shape")
    )


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and _looks_like_shape(value[0])
        and _is_dtype_like(value[1])
    )


def _is_spec_leaf(value: Any) -> bool:
    if isinstance(value, (jax.ShapeDtypeStruct, bool, int, float, complex, np.generic)):
        return True
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return True
    return _looks_like_shape(value) or _is_pair(value)


class _Parser:
    """Parses the leaves of one export's specs; collects 64-bit dtypes narrowed on the way."""

    def __init__(self, enable_double_precision: bool) -> None:
        self.x64 = enable_double_precision
        self.float_dtype = np.dtype("float64" if enable_double_precision else "float32")
        self.narrowed: list[str] = []

    def dtype(self, dtype: Any, where: str, *, explicit: bool = True) -> Any:
        """``dtype`` as the export computes it (64-bit narrowed without x64)."""
        if jxi.is_extended_dtype(dtype):
            return dtype
        try:
            dt = jnp.dtype(dtype)
        except TypeError as err:
            raise SpecError(
                f"{where}: {dtype!r} is not a dtype; expected e.g. 'float32', 'int32', 'bool'"
            ) from err
        if isinstance(dtype, type) and dtype in (float, int, complex):
            explicit = False  # Python's float/int mean the default width, as in jnp.zeros(3, float)
            dt = {
                float: self.float_dtype,
                int: np.dtype("int64" if self.x64 else "int32"),
                complex: np.dtype("complex128" if self.x64 else "complex64"),
            }[dtype]
        if not self.x64 and dt in _NARROWED:
            if explicit:
                self.narrowed.append(f"{where} {dt.name} -> {_NARROWED[dt].name}")
            dt = _NARROWED[dt]
        return dt

    def dims(self, dims: Sequence[Any], where: str) -> tuple[Any, ...]:
        """Check each dim of a shape; names stay strings until the scope is known."""
        out: list[Any] = []
        for i, d in enumerate(dims):
            here = f"{where}, dim {i}"
            if isinstance(d, str):
                if not d.strip():
                    raise SpecError(
                        f"{here}: the empty string is not a dim name in {tuple(dims)!r}; "
                        f"{_DIM_HELP}"
                    )
                out.append(d.strip())
            elif isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)):
                if d < 0:
                    raise SpecError(f"{here}: negative dim {d} in {tuple(dims)!r}; {_DIM_HELP}")
                out.append(int(d))
            elif jxi.is_symbolic_dim(d):
                out.append(d)
            else:
                hint = " (use a name such as 'B' for a dim that varies)" if d is None else ""
                raise SpecError(f"{here}: {d!r} is not a dim in {tuple(dims)!r}; {_DIM_HELP}{hint}")
        return tuple(out)

    def leaf(self, value: Any, where: str) -> Any:
        """One leaf of a user spec -> ShapeDtypeStruct or _ShapeSpec (names pending)."""
        if isinstance(value, jax.ShapeDtypeStruct):
            dims = self.dims(value.shape, where)
            return _ShapeSpec(dims, self.dtype(value.dtype, where), where, bool(value.weak_type))
        if isinstance(value, (bool, np.bool_)):
            return jax.ShapeDtypeStruct((), np.dtype(np.bool_))
        if isinstance(value, int):  # a Python int; numpy scalars keep their dtype (below)
            return jax.ShapeDtypeStruct((), self.dtype(int, where))
        if isinstance(value, float):
            return jax.ShapeDtypeStruct((), self.float_dtype)
        if isinstance(value, complex):
            return jax.ShapeDtypeStruct((), self.dtype(complex, where))
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            return jax.ShapeDtypeStruct(tuple(value.shape), self.dtype(value.dtype, where))
        if _looks_like_shape(value):
            return _ShapeSpec(self.dims(value, where), self.float_dtype, where)
        if _is_pair(value):
            return _ShapeSpec(self.dims(value[0], where), self.dtype(value[1], where), where)
        raise SpecError(
            f"{where}: expected a shape tuple like ('B', 30), a (shape, dtype) pair, a "
            f"jax.ShapeDtypeStruct, an array or a Python scalar; got {value!r}"
        )


@dataclass
class InputSpecs:
    """The parsed specs of one export: one pytree of ShapeDtypeStructs per argument."""

    args: list[Any]
    kwargs: dict[str, Any]
    scope: Any
    _flat: tuple[list[tuple[str, jax.ShapeDtypeStruct]], Any] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def flat(self) -> tuple[list[tuple[str, jax.ShapeDtypeStruct]], Any]:
        """(path name, leaf) pairs in flattening order, and the treedef of (args, kwargs)."""
        if self._flat is None:  # (once: each export of the same specs asks again)
            leaves, treedef = jax.tree_util.tree_flatten_with_path((self.args, self.kwargs))
            self._flat = [(_path_name(p), leaf) for p, leaf in leaves], treedef
        pairs, treedef = self._flat
        return list(pairs), treedef

    def describe(self, arg_names: Sequence[str] = ()) -> list[str]:
        """One line per flat input, ``x: float32[B, 30]``, for error messages."""
        lines = []
        for path, leaf in self.flat()[0]:
            head, _, rest = path.partition("/")
            if head.isdigit():  # positional argument i, named as the graph input will be
                i = int(head)
                path = "/".join(
                    p for p in (arg_names[i] if i < len(arg_names) else f"input_{i}", rest) if p
                )
            dims = ", ".join(str(d) for d in leaf.shape)
            lines.append(f"{path or 'input'}: {getattr(leaf.dtype, 'name', leaf.dtype)}[{dims}]")
        return lines


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
    arg_names: Sequence[str] = (),
    warn: bool = True,
) -> InputSpecs:
    """Turn user input specs into ShapeDtypeStructs, one symbolic scope for the export.

    ``arg_names`` (the callable's positional parameter names) only make messages clearer.
    ``warn``: say once (one warning for the whole export) which 64-bit inputs are traced
    at 32 bits because ``enable_double_precision`` is off.

    Specs made of plain values (shape tuples of ints and names, dtype names or types, Python
    scalars, in lists / tuples / dicts) are parsed once per process: a warm export of the
    same specs gets the same ``InputSpecs`` (which nothing changes).

    Raises:
        SpecError: naming the argument (``inputs[1] (w)['params']``), what was given and
            what was expected.
    """
    key = _specs_key(inputs, input_params, enable_double_precision, constraints, arg_names)
    specs, narrowed = _PARSED.get_or_make(
        key,
        lambda: _parse_specs(inputs, input_params, enable_double_precision, constraints, arg_names),
    )
    if warn and narrowed:  # (every export that narrows says so, parsed now or before)
        warnings.warn(
            "enable_double_precision is off, so these inputs are traced at 32 bits, as jax.jit "
            f"computes them with x64 off: {'; '.join(narrowed)}. Pass "
            "enable_double_precision=True (CLI: --f64) to keep 64 bits.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return specs


_PARSED: BoundedMemo[tuple[InputSpecs, list[str]]] = BoundedMemo(256)
_PLAIN = (int, float, complex, bool, str, type(None))


def _plain_key(value: Any) -> Any:
    """``value`` as a hashable key that tells every spec apart (types included: ``1``, ``1.0``
    and ``True`` are different specs), or None for anything but plain values in plain
    containers (arrays, ShapeDtypeStructs and symbolic dims are parsed each time)."""
    if type(value) in _PLAIN or isinstance(value, (np.dtype, type)):
        return (type(value), value)
    if type(value) in (list, tuple):
        items = tuple(_plain_key(v) for v in value)
        return None if any(i is None for i in items) else (type(value), items)
    if type(value) is dict:
        items = tuple((_plain_key(k), _plain_key(v)) for k, v in value.items())
        return None if any(k is None or v is None for k, v in items) else (dict, items)
    return None


def _specs_key(
    inputs: Any, input_params: Any, enable_double_precision: bool, constraints: Any, arg_names: Any
) -> Any:
    parts = (
        _plain_key(inputs),
        _plain_key(input_params or {}),
        _plain_key(constraints),
        _plain_key(tuple(arg_names)),
    )
    return None if any(p is None for p in parts) else (*parts, bool(enable_double_precision))


def _parse_specs(
    inputs: Sequence[Any],
    input_params: dict[str, Any] | None,
    enable_double_precision: bool,
    constraints: Sequence[str],
    arg_names: Sequence[str],
) -> tuple[InputSpecs, list[str]]:
    """:func:`parse_specs` without its memo: the specs and the 64-bit inputs narrowed."""
    if not isinstance(inputs, (list, tuple)):
        raise SpecError(
            "inputs must be a list with one spec per positional argument, got "
            f"{type(inputs).__name__}"
        )
    if (
        isinstance(inputs, tuple)
        and any(isinstance(d, str) for d in inputs)
        and _looks_like_shape(inputs)
    ):
        raise SpecError(
            f"inputs must be a list with one spec per positional argument; {inputs!r} looks like "
            f"a single shape: did you mean [{inputs!r}]?"
        )
    if isinstance(constraints, str):
        raise SpecError(
            f"constraints must be a sequence of strings, got the string {constraints!r}: write "
            f"({constraints!r},)"
        )
    parser = _Parser(enable_double_precision)

    def parse_tree(tree: Any, where: str) -> Any:
        return jax.tree_util.tree_map_with_path(
            lambda p, leaf: parser.leaf(leaf, where + jax.tree_util.keystr(p)),
            tree,
            is_leaf=_is_spec_leaf,
        )

    def arg(i: int) -> str:
        return f"inputs[{i}] ({arg_names[i]})" if i < len(arg_names) else f"inputs[{i}]"

    args = [parse_tree(spec, arg(i)) for i, spec in enumerate(inputs)]
    kwargs = {
        name: parse_tree(value, f"input_params[{name!r}]")
        for name, value in (input_params or {}).items()
    }
    scope = _common_scope((args, kwargs), tuple(constraints))
    resolve = _Resolver(scope)
    args, kwargs = jax.tree_util.tree_map(
        resolve, (args, kwargs), is_leaf=lambda x: isinstance(x, _ShapeSpec)
    )
    return InputSpecs(args, kwargs, scope), parser.narrowed


def _common_scope(tree: Any, constraints: tuple[str, ...]) -> Any:
    """The scope of user-made symbolic dims if any (all must agree), else a new one."""
    scopes: list[Any] = []
    for leaf in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, _ShapeSpec)):
        dims = leaf.dims if isinstance(leaf, _ShapeSpec) else leaf.shape
        scopes.extend(jxi.symbolic_scope(d) for d in dims if jxi.is_symbolic_dim(d))
    if not scopes:
        return _new_scope(constraints)
    first = scopes[0]
    if any(s is not first for s in scopes):
        raise SpecError(
            "symbolic dims of the inputs come from different jax.export.symbolic_shape calls; "
            "create them with one call (or one SymbolicScope) so equal names mean equal dims"
        )
    if constraints:
        raise SpecError(
            "constraints= cannot be combined with user-made symbolic dims; put them in their scope"
        )
    return first


@functools.lru_cache(maxsize=64)
def _new_scope(constraints: tuple[str, ...]) -> Any:
    """The symbolic scope for ``constraints``, one per distinct tuple in the process: equal specs
    then give equal avals in every export, so JAX's own trace caches (``jnp`` functions are
    jitted) hit on a second export instead of re-tracing each of them in a fresh scope."""
    for i, c in enumerate(constraints):
        try:
            jxi.new_symbolic_scope((c,))
        except Exception as err:
            raise SpecError(
                f"constraints[{i}] {c!r} is not a constraint: {str(err).rstrip('.')}. Write "
                "comparisons of dim "
                "expressions such as 'B >= 2', 'T <= 512' or 'N == 2*B'"
            ) from None
    try:
        return jxi.new_symbolic_scope(constraints)
    except Exception as err:
        raise SpecError(f"constraints {list(constraints)!r} do not go together: {err}") from None


@functools.lru_cache(maxsize=1024)
def _parsed_dims(spec: str, scope: Any) -> tuple[Any, ...]:
    """``jax.export.symbolic_shape(spec, scope=scope)``, once per spec and scope in the process
    (JAX tokenizes the text each time: a tenth of a small model's warm export). Scopes are
    one per distinct ``constraints`` (:func:`_new_scope`), so equal specs give the same dims."""
    return jxi.parse_symbolic_shape(spec, scope)


class _Resolver:
    """Parses string dims of shape specs in the export's one symbolic scope."""

    def __init__(self, scope: Any) -> None:
        self.scope = scope
        self._cache: dict[str, Any] = {}

    def __call__(self, leaf: Any) -> Any:
        if not isinstance(leaf, _ShapeSpec):
            return leaf
        dims = tuple(self._dim(d, leaf) for d in leaf.dims)
        return jax.ShapeDtypeStruct(dims, leaf.dtype, weak_type=leaf.weak_type)

    def _dim(self, d: Any, leaf: _ShapeSpec) -> Any:
        if not isinstance(d, str):
            return d
        if d not in self._cache:
            try:
                parsed = _parsed_dims(d, self.scope)
            except Exception as err:
                raise SpecError(
                    f"{leaf.where}: cannot parse the symbolic dim {d!r} in {leaf.dims!r}: {err}; "
                    f"{_DIM_HELP}"
                ) from None
            if len(parsed) != 1:
                raise SpecError(
                    f"{leaf.where}: {d!r} holds {len(parsed)} dims; give one dim per entry, as in "
                    f"{tuple(p.strip() for p in d.split(','))!r}"
                )
            (self._cache[d],) = parsed
        return self._cache[d]
