"""Names for the JAX objects the interpreter and the lowering rules handle, for annotations.

They say what a parameter is where ``Any`` said nothing. ``Eqn`` and ``ClosedJaxpr`` are
JAX's public classes (``jax.extend.core``, the same on JAX 0.10 and 0.12); an aval and a dim
stay ``Any`` to the type checker: a dim is an ``int`` or a symbolic dim expression of
``jax.export`` (no public class covers both), and an aval is a ``ShapedArray`` whose shape
holds such dims, or an ``AbstractToken``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

from jax.extend.core import ClosedJaxpr, JaxprEqn, Literal, Var

Eqn: TypeAlias = JaxprEqn  # primitive, params, invars, outvars, source_info
Aval: TypeAlias = Any  # ShapedArray (shape, dtype, weak_type) or AbstractToken
Dim: TypeAlias = Any  # int, or a symbolic dim expression (jax.export.symbolic_shape)
Dims: TypeAlias = tuple[Dim, ...]  # an aval's shape


def aval(atom: Var | Literal) -> Aval:
    """``atom.aval`` as an :data:`Aval`: JAX annotates it as the abstract base class, which
    declares neither shape nor dtype."""
    return atom.aval


def avals(atoms: Iterable[Var | Literal]) -> list[Aval]:
    """The avals of ``atoms`` (an equation's invars or outvars), as :func:`aval`."""
    return [atom.aval for atom in atoms]


__all__ = ["Aval", "ClosedJaxpr", "Dim", "Dims", "Eqn", "aval", "avals"]
