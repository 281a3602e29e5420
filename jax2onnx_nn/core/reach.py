"""The modules an exported callable reaches, and the callable rebuilt around copies of them.

Users export modules in many wrappers: the module itself, a bound method (``model.encode``),
``lambda x: model(x)``, ``def predict(x): return model(x)`` over a global, a default argument
(``def f(x, model=model)``), ``functools.partial(apply, model)``, ``jax.jit(model)``, or a
dict / list of modules the function closes over. :func:`retarget` walks all of these (closure
cells, defaults, partial arguments, bound ``__self__``, the globals a function's code names,
``__wrapped__``) and rebuilds the callable with ``convert(value)`` in place of every value
that ``holds(value)`` says holds modules, so that exporting the rebuilt callable is exporting
the module itself. Framework-free: an adapter says what holds its modules and how to convert.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

from jax2onnx_nn.core.jax_internals import library_dirs

MAX_DEPTH = 4  # wrappers of wrappers: jax.vmap(model) inside a lambda is three levels deep

Holds = Callable[[Any], bool]
Convert = Callable[[Any], Any]


def retarget(fn: Any, holds: Holds, convert: Convert, depth: int = 0) -> tuple[Any, dict[str, Any]]:
    """``fn`` rebuilt around converted values, and those values by where they were found
    (``""`` for the callable itself or its ``__self__``, else the variable's name, dotted for
    nested wrappers). A callable reaching nothing comes back unchanged with no roots."""
    if _holds(holds, fn):
        new = convert(fn)
        return new, {"": new}
    if isinstance(fn, types.MethodType) and _holds(holds, fn.__self__):
        owner = convert(fn.__self__)
        return types.MethodType(fn.__func__, owner), {"": owner}
    if depth >= MAX_DEPTH:
        return fn, {}
    if isinstance(fn, functools.partial):
        return _retarget_partial(fn, holds, convert, depth)
    if isinstance(fn, types.FunctionType):
        return _retarget_function(fn, holds, convert, depth)
    wrapped = getattr(fn, "__wrapped__", None)
    if callable(wrapped):
        # ``jax.jit(model)``: exporting the wrapped callable traces the same computation
        inner, roots = retarget(wrapped, holds, convert, depth + 1)
        return (inner, roots) if roots else (fn, {})
    return fn, {}


def _holds(holds: Holds, value: Any) -> bool:
    try:
        return bool(holds(value))
    except Exception:  # an odd object (unsortable dict keys, a failing __eq__): holds nothing
        return False


def _value(
    value: Any, name: str, holds: Holds, convert: Convert, depth: int
) -> tuple[Any, dict[str, Any]]:
    """One value a function reaches (a cell, a default, a global, a partial argument)."""
    if callable(value) and not isinstance(value, type):
        new, inner = retarget(value, holds, convert, depth + 1)
        return new, {(f"{name}.{k}" if k else name): v for k, v in inner.items()}
    if _holds(holds, value):
        new = convert(value)
        return new, {name: new}
    return value, {}


def _retarget_partial(
    fn: functools.partial, holds: Holds, convert: Convert, depth: int
) -> tuple[Any, dict[str, Any]]:
    func, roots = retarget(fn.func, holds, convert, depth + 1)
    args = list(fn.args)
    for i, arg in enumerate(args):
        args[i], found = _value(arg, f"args.{i}", holds, convert, depth)
        roots.update(found)
    keywords = dict(fn.keywords)
    for key, arg in keywords.items():
        keywords[key], found = _value(arg, key, holds, convert, depth)
        roots.update(found)
    if not roots:
        return fn, {}
    return functools.partial(func, *args, **keywords), roots


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names a function's code (nested functions and lambdas included) may load as globals."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _retarget_function(
    fn: types.FunctionType, holds: Holds, convert: Convert, depth: int
) -> tuple[Any, dict[str, Any]]:
    roots: dict[str, Any] = {}
    cells = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell (a variable not assigned yet)
            cells.append(cell)
            continue
        new, found = _value(content, name, holds, convert, depth)
        cells.append(cell if new is content else types.CellType(new))
        roots.update(found)
    defaults = list(fn.__defaults__ or ())
    n_positional = fn.__code__.co_argcount
    names = fn.__code__.co_varnames[n_positional - len(defaults) : n_positional]
    for i, (name, value) in enumerate(zip(names, defaults, strict=True)):
        defaults[i], found = _value(value, name, holds, convert, depth)
        roots.update(found)
    kwdefaults = dict(fn.__kwdefaults__ or {})
    for name, value in kwdefaults.items():
        kwdefaults[name], found = _value(value, name, holds, convert, depth)
        roots.update(found)
    namespace = fn.__globals__
    changed_globals = {}
    # the user's globals only: a library function (jax.vmap's wrapper) names library globals
    user_code = not fn.__code__.co_filename.startswith(library_dirs())
    for name in dict.fromkeys(_global_names(fn.__code__)) if user_code else ():
        if name in namespace and name not in roots:
            value = namespace[name]
            if isinstance(value, types.ModuleType):
                continue
            new, found = _value(value, name, holds, convert, depth)
            if new is not value:
                changed_globals[name] = new
            roots.update(found)
    if not roots:
        return fn, {}
    # a snapshot of the module's globals with the converted values, for this export only
    namespace = {**namespace, **changed_globals} if changed_globals else namespace
    rebuilt = types.FunctionType(
        fn.__code__, namespace, fn.__name__, tuple(defaults) or None, tuple(cells) or None
    )
    rebuilt.__kwdefaults__ = kwdefaults or None
    rebuilt.__qualname__ = fn.__qualname__
    rebuilt.__dict__.update(fn.__dict__)
    return rebuilt, roots


def containers_hold(tree: Any, is_module: Callable[[Any], bool], depth: int = 0) -> bool:
    """True when ``tree`` is a module or a dict / list / tuple holding one (nested)."""
    if is_module(tree):
        return True
    if depth > 8:
        return False
    if isinstance(tree, dict):
        return any(containers_hold(v, is_module, depth + 1) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(containers_hold(v, is_module, depth + 1) for v in tree)
    return False


def map_containers(tree: Any, is_module: Callable[[Any], bool], convert: Convert) -> Any:
    """``tree`` with ``convert`` applied to every module in it (dicts, lists, tuples rebuilt)."""
    if is_module(tree):
        return convert(tree)
    if isinstance(tree, dict):
        return {k: map_containers(v, is_module, convert) for k, v in tree.items()}
    if isinstance(tree, list):
        return [map_containers(v, is_module, convert) for v in tree]
    if isinstance(tree, tuple) and type(tree) is tuple:
        return tuple(map_containers(v, is_module, convert) for v in tree)
    return tree


__all__ = ["containers_hold", "map_containers", "retarget"]
