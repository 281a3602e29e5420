"""Every use of JAX internals lives here, so that JAX upgrades touch one file.

jax2onnx_nn supports the JAX that Python 3.11 gets (0.10.x) and the one newer Pythons get
(0.12.x). Public JAX API is used everywhere else; what public API does not expose (the
structure of symbolic dimension expressions, source locations of equations, extended key
dtypes) is reached through the small functions below.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.extend as jex
import numpy as np
from jax import export as jax_export

Jaxpr = jex.core.Jaxpr
ClosedJaxpr = jex.core.ClosedJaxpr
JaxprEqn = jex.core.JaxprEqn
Literal = jex.core.Literal
Var = jex.core.Var
Primitive = jex.core.Primitive

try:  # DropVar moved between modules across versions
    DropVar = jex.core.DropVar
except AttributeError:  # pragma: no cover - depends on the JAX version
    from jax._src.core import DropVar  # type: ignore[no-redef]

from jax._src import source_info_util as _source_info_util  # noqa: E402


def is_literal(atom: Any) -> bool:
    return isinstance(atom, Literal)


def literal_value(atom: Any) -> Any:
    return atom.val


def is_symbolic_dim(d: Any) -> bool:
    """True for a symbolic dimension expression (B, 2*B, B//2, ...)."""
    return not isinstance(d, (int, np.integer)) and hasattr(d, "_sorted_terms")


def symbolic_scope(d: Any) -> Any:
    return d.scope


def new_symbolic_scope(constraints: tuple[str, ...] = ()) -> Any:
    return jax_export.SymbolicScope(constraints)


def parse_symbolic_shape(spec: str, scope: Any) -> tuple[Any, ...]:
    return tuple(jax_export.symbolic_shape(spec, scope=scope))


def dim_structure(d: Any) -> list[tuple[list[tuple[Any, int]], int]]:
    """A symbolic dim as a sum of coefficient * product of factors.

    Returns ``[(factors, coeff), ...]`` where ``factors`` is ``[(factor, exponent), ...]``
    (empty for the constant term). Use ``factor_var`` / ``factor_operation`` on a factor.
    """
    terms = []
    for term, coeff in d._sorted_terms:
        terms.append(([(f, e) for f, e in term._factors], int(coeff)))
    return terms


def factor_var(factor: Any) -> str | None:
    return factor.var


def factor_operation(factor: Any) -> tuple[str, tuple[Any, ...]]:
    """('floordiv' | 'mod' | 'max' | 'min', operands) of a non-variable factor."""
    return factor.operation, tuple(factor.operands)


def dim_vars(d: Any) -> set[str]:
    return set(d._get_vars()) if is_symbolic_dim(d) else set()


def source_line(eqn: Any) -> str:
    """The user's source location of an equation, like ``model.py:12 (__call__)``."""
    try:
        return _source_info_util.summarize(eqn.source_info)
    except Exception:  # pragma: no cover - defensive: source info is best effort
        return "<unknown location>"


def name_stack(eqn: Any) -> str:
    try:
        return str(eqn.source_info.name_stack)
    except Exception:  # pragma: no cover
        return ""


@contextlib.contextmanager
def x64(enabled: bool) -> Iterator[None]:
    """Trace with jax_enable_x64 set as asked, restoring the previous value afterwards."""
    previous = bool(jax.config.jax_enable_x64)
    if previous == enabled:
        yield
        return
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def is_key_dtype(dtype: Any) -> bool:
    """True for the extended dtype of typed PRNG keys (``jax.random.key``)."""
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def key_data_shape(dtype: Any) -> tuple[int, ...]:
    """Trailing shape of the uint32 data behind one key of this key dtype."""
    return tuple(dtype._impl.key_shape)


def key_impl(dtype: Any) -> Any:
    return dtype._impl


def subjaxprs_of(params: dict[str, Any]) -> list[Any]:
    """Jaxprs (open or closed) among an equation's params, in param order."""
    found = []
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, (Jaxpr, ClosedJaxpr)):
                found.append(v)
    return found


def as_closed(jaxpr: Any) -> Any:
    if isinstance(jaxpr, ClosedJaxpr):
        return jaxpr
    return ClosedJaxpr(jaxpr, ())


def primitive_impl_jaxpr(prim: Any, params: dict[str, Any], avals: list[Any]) -> Any | None:
    """Trace a primitive's Python implementation, for primitives defined by libraries.

    Returns the ClosedJaxpr of the implementation, or None when the implementation is not
    itself JAX code (it binds the same primitive again, or cannot be traced).
    """
    impl = getattr(prim, "impl", None)
    if impl is None:
        return None
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    try:
        closed = jax.make_jaxpr(lambda *args: impl(*args, **params))(*specs)
    except Exception:
        return None
    if any(e.primitive is prim for e in closed.jaxpr.eqns):
        return None
    return closed


def is_extended_dtype(dtype: Any) -> bool:
    return isinstance(dtype, jax.dtypes.ExtendedDType)


def evaluate_dim(d: Any, sizes: dict[str, int], default: int) -> int:
    """A dim (int or symbolic) as an int, symbolic variables taken from ``sizes``."""
    if not is_symbolic_dim(d):
        return int(d)
    total = 0
    for factors, coeff in dim_structure(d):
        term = coeff
        for factor, exponent in factors:
            var = factor_var(factor)
            if var is not None:
                value = sizes.get(var, default)
            else:
                operation, operands = factor_operation(factor)
                a, b = (evaluate_dim(o, sizes, default) for o in operands)
                value = {"floordiv": a // b if b else 0, "mod": a % b if b else 0, "max": max(a, b), "min": min(a, b)}[operation]
            term *= value**exponent
        total += term
    return total
