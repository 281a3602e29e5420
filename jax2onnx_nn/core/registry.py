"""The table of lowering rules: primitive name -> rule.

Rules are keyed by primitive *name* so that the same table serves every JAX version (the
Python objects behind ``lax.add_p`` move between modules; their names do not) and so that a
plugin can register a rule for a primitive it only knows by name.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Rule = Callable[..., Any]  # rule(ctx, *operand_values, **eqn.params) -> Value | Sequence[Value]


@dataclass(frozen=True)
class Registration:
    rule: Rule
    min_opset: int
    onnx_ops: tuple[str, ...]  # the ONNX ops the rule emits, for the support table
    key_data: bool = False  # the rule itself handles typed PRNG keys (given as their uint32 data)
    complex_pairs: bool = False  # the rule itself handles complex values (given as float pairs)


_RULES: dict[str, Registration] = {}
_PLUGINS_LOADED = False


def primitive_name(prim: Any) -> str:
    return prim if isinstance(prim, str) else prim.name


def register(
    prim: Any, rule: Rule, *, min_opset: int = 1, onnx_ops: tuple[str, ...] = (), key_data: bool = False,
    complex_pairs: bool = False,
) -> Rule:
    """Register ``rule`` for ``prim`` (a Primitive or its name); later registrations win.

    Operands and results that are typed PRNG keys reach rules as their uint32 data. Ops that
    only rearrange keys (slice, reshape, gather, ...) are lowered on that data by the
    interpreter, not by their rule, unless the rule says ``key_data=True`` (it handles keys).
    Complex operands and results reach rules as float (real, imag) pairs; complex equations
    are lowered on the pairs by the interpreter (``core/complex.py``), not by their rule,
    unless the rule says ``complex_pairs=True``.
    """
    _RULES[primitive_name(prim)] = Registration(rule, min_opset, tuple(onnx_ops), key_data, complex_pairs)
    return rule


def lowering(
    prim: Any, *, min_opset: int = 1, onnx_ops: tuple[str, ...] = (), key_data: bool = False,
    complex_pairs: bool = False,
) -> Callable[[Rule], Rule]:
    """Decorator form of :func:`register`.

    Example::

        @lowering(lax.integer_pow_p, onnx_ops=("Pow",))
        def _integer_pow(ctx, x, *, y):
            return ctx.op.Pow(x, ctx.const(y, like=x))
    """

    def decorate(rule: Rule) -> Rule:
        return register(prim, rule, min_opset=min_opset, onnx_ops=onnx_ops, key_data=key_data, complex_pairs=complex_pairs)

    return decorate


def load_builtin_and_plugins() -> None:
    """Import our lowering families once, then lowerings shipped by other packages."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from jax2onnx_nn.core import lowerings  # noqa: F401  (registers on import)

    for entry in importlib.metadata.entry_points(group="jax2onnx_nn.lowerings"):
        loaded = entry.load()
        if callable(loaded):
            loaded()


def lookup(name: str, overrides: Mapping[str, Registration] | None = None) -> Registration | None:
    load_builtin_and_plugins()
    if overrides and name in overrides:
        return overrides[name]
    return _RULES.get(name)


def normalize_overrides(lowerings: Mapping[Any, Rule] | None) -> dict[str, Registration]:
    return {primitive_name(p): Registration(r, 1, ()) for p, r in (lowerings or {}).items()}


def registered() -> dict[str, Registration]:
    """All registered rules by primitive name (for the support table and the CLI)."""
    load_builtin_and_plugins()
    return dict(sorted(_RULES.items()))
