"""The table of lowering rules: primitive name -> rule, in layers that decide who wins.

Rules are keyed by primitive *name* so that the same table serves every JAX version (the
Python objects behind ``lax.add_p`` move between modules; their names do not) and so that a
plugin can register a rule for a primitive it only knows by name.

A lookup asks, in this order, and the first layer that has the name wins:

1. ``lowerings=`` of the export being run (:func:`lookup`'s ``overrides``),
2. user registrations (:func:`lowering` / :func:`register` called by user code),
3. entry-point plugins (group ``jax2onnx_nn.lowerings``, loaded on the first lookup),
4. built-ins (this package's rules, registered when the package is imported: its composition
   root, ``jax2onnx_nn/__init__.py``, imports the lowering families inside
   :func:`builtin_rules`; this module imports no rule).

The layer a registration goes to is given by who registers, not by when: our own modules
register inside :func:`builtin_rules`, plugins are loaded inside the plugin layer, and
everything else is a user registration. So a user rule for ``tanh`` registered before the
first export is the one every export uses; within one layer the later registration wins.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Rule = Callable[..., Any]  # rule(ctx, *operand_values, **eqn.params) -> Value | Sequence[Value]

BUILTIN, PLUGIN, USER = "builtin", "plugin", "user"
_LAYERS = (USER, PLUGIN, BUILTIN)  # lookup order, the winner first


@dataclass(frozen=True)
class Registration:
    rule: Rule
    min_opset: int
    onnx_ops: tuple[str, ...]  # the ONNX ops the rule emits, for the support table
    key_data: bool = False  # the rule itself handles typed PRNG keys (given as their uint32 data)
    complex_pairs: bool = False  # the rule itself handles complex values (given as float pairs)
    only: str = (
        ""  # the uses the rule serves where it is not every use (shown in the support table)
    )


_TABLES: dict[str, dict[str, Registration]] = {layer: {} for layer in _LAYERS}
_RULES = _TABLES[BUILTIN]  # our rules (tests take one out to see a primitive unsupported)
_CURRENT_LAYER: contextvars.ContextVar[str] = contextvars.ContextVar(
    "jax2onnx_nn_layer", default=USER
)
_PLUGINS_LOADED = False


def primitive_name(prim: Any) -> str:
    return prim if isinstance(prim, str) else prim.name


@contextlib.contextmanager
def builtin_rules() -> Iterator[None]:
    """Registrations made in this block are built-ins (our modules, on their import)."""
    with _layer(BUILTIN):
        yield


@contextlib.contextmanager
def _layer(layer: str) -> Iterator[None]:
    token = _CURRENT_LAYER.set(layer)
    try:
        yield
    finally:
        _CURRENT_LAYER.reset(token)


def register(
    prim: Any,
    rule: Rule,
    *,
    min_opset: int = 1,
    onnx_ops: tuple[str, ...] = (),
    key_data: bool = False,
    complex_pairs: bool = False,
    only: str = "",
) -> Rule:
    """Register ``rule`` for ``prim`` (a Primitive or its name).

    A user registration overrides the built-in and plugin rules for every later export;
    registering the same name again replaces the earlier registration.

    Operands and results that are typed PRNG keys reach rules as their uint32 data. Ops that
    only rearrange keys (slice, reshape, gather, ...) are lowered on that data by the
    interpreter, not by their rule, unless the rule says ``key_data=True`` (it handles keys).
    Complex operands and results reach rules as float (real, imag) pairs; complex equations
    are lowered on the pairs by the interpreter (``core/complex.py``), not by their rule,
    unless the rule says ``complex_pairs=True``. ``only`` says which uses of the primitive the
    rule serves when it refuses the others (the support table shows it).
    """
    _TABLES[_CURRENT_LAYER.get()][primitive_name(prim)] = Registration(
        rule, min_opset, tuple(onnx_ops), key_data, complex_pairs, only
    )
    return rule


def lowering(
    prim: Any,
    *,
    min_opset: int = 1,
    onnx_ops: tuple[str, ...] = (),
    key_data: bool = False,
    complex_pairs: bool = False,
) -> Callable[[Rule], Rule]:
    """Decorator form of :func:`register`.

    Example::

        @lowering(lax.integer_pow_p, onnx_ops=("Pow",))
        def _integer_pow(ctx, x, *, y):
            return ctx.op.Pow(x, ctx.const(y, like=x))
    """

    def decorate(rule: Rule) -> Rule:
        return register(
            prim,
            rule,
            min_opset=min_opset,
            onnx_ops=onnx_ops,
            key_data=key_data,
            complex_pairs=complex_pairs,
        )

    return decorate


def load_plugins() -> None:
    """Load the lowerings shipped by other packages, once, into the plugin layer."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    with _layer(PLUGIN):
        for entry in importlib.metadata.entry_points(group="jax2onnx_nn.lowerings"):
            loaded = entry.load()
            if callable(loaded):
                loaded()


def lookup(name: str, overrides: Mapping[str, Registration] | None = None) -> Registration | None:
    """The rule an export uses for primitive ``name``: see the module docstring for the order."""
    load_plugins()
    if overrides and name in overrides:
        return overrides[name]
    for layer in _LAYERS:
        registration = _TABLES[layer].get(name)
        if registration is not None:
            return registration
    return None


def builtin(name: str) -> Registration | None:
    """Our own rule for ``name`` (what a wrapping rule of an adapter builds on)."""
    return _TABLES[BUILTIN].get(name)


def normalize_overrides(
    lowerings: Mapping[Any, Rule | Registration] | None,
) -> dict[str, Registration]:
    """``{primitive_or_name: rule}`` as registrations by name (registrations kept as they are)."""
    return {
        primitive_name(p): r if isinstance(r, Registration) else Registration(r, 1, ())
        for p, r in (lowerings or {}).items()
    }


def registered() -> dict[str, Registration]:
    """The rule each primitive name gets by default (for the support table and the CLI)."""
    load_plugins()
    names = set().union(*_TABLES.values())
    return {name: reg for name in sorted(names) if (reg := lookup(name)) is not None}


def layer_of(name: str) -> str | None:
    """Which layer's rule :func:`lookup` returns for ``name`` without overrides."""
    load_plugins()
    return next((layer for layer in _LAYERS if name in _TABLES[layer]), None)
