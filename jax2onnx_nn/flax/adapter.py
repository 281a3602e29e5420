"""The Flax side of an export session (see ``core/patching.py``), active once any part of
Flax is imported.

For the duration of one export: the coarse-op patches of ``coarse/`` are applied, and the wrappers
of ``flags.py`` that let a Dropout / BatchNorm mode flag (nnx and Linen) be a graph input; when the
exported callable is a module (or a bound method of one), or reaches modules (a lambda or function
closing over one, a global or default it names, a partial's argument, a dict / list of them:
``core/reach.py``), it is traced on copies made inside the trace and set to inference mode (or
training mode if asked), so the user's module is never changed; its arrays are named by attribute
path (``block1.linear1.kernel``); and module calls get name scopes (and ONNX functions with
``auto_functions``).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from flax import nnx

from jax2onnx_nn.core import reach
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.jax_nn.namespaces import substitute
from jax2onnx_nn.core.patching import Prepared, patches
from jax2onnx_nn.flax import coarse, flags, linen, linen_coarse  # noqa: F401 (linen_coarse: patches)
from jax2onnx_nn.flax.functions import ModulePaths, linen_functions


def exported_module(fn: Any) -> nnx.Module | None:
    """The module an exported callable belongs to: the module itself or a method's owner."""
    if isinstance(fn, nnx.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    if inspect.ismethod(fn) and isinstance(owner, nnx.Module):
        return owner
    return None


def array_names(
    module: nnx.Module, prefix: tuple[str, ...] = (), state: Any = None
) -> dict[int, str]:
    """id(array) -> dotted attribute path (``linear1.kernel``) for every array of the module
    (``state``: its ``nnx.state``, when the caller has it already)."""
    names: dict[int, str] = {}
    for path, variable in nnx.to_flat_state(nnx.state(module) if state is None else state):
        value = variable.get_value() if isinstance(variable, nnx.Variable) else variable
        names.setdefault(id(value), ".".join(str(p) for p in (*prefix, *path)))
    return names


def _is_module(value: Any) -> bool:
    return isinstance(value, nnx.Module)


def _holds(value: Any) -> bool:
    return reach.containers_hold(value, _is_module)


def reached_modules(fn: Any) -> list[tuple[tuple[str, ...], nnx.Module]]:
    """(path prefix, module) for every module a callable reaches through closures, defaults,
    globals, partial arguments and the dicts / lists holding them; no prefix when there is
    only one (it is exported as if it were passed itself)."""
    _, roots = reach.retarget(fn, _holds, lambda value: value)
    found: dict[int, tuple[tuple[str, ...], nnx.Module]] = {}

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if _is_module(value):
            found.setdefault(id(value), (path, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*path, str(k)))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, (*path, str(i)))

    for name, value in roots.items():
        walk(value, tuple(p for p in name.split(".") if p))
    modules = list(found.values())
    return [((), modules[0][1])] if len(modules) == 1 else modules


def traced_closure(
    fn: Any,
    modules: list[tuple[tuple[str, ...], nnx.Module]],
    splits: dict[int, Any],
    training: bool,
    paths: ModulePaths,
) -> Callable[..., Any]:
    """``fn`` rebuilt, inside the trace, around copies of the modules it reaches (in the
    export's mode; their state updates stay in the trace), as :func:`traced_copy` does for a
    module passed itself; ``splits``: ``nnx.split`` of each module, by id."""

    def run(*args: Any, **kwargs: Any) -> Any:
        copies: dict[int, nnx.Module] = {}

        def copy_of(module: nnx.Module) -> nnx.Module:
            if id(module) not in copies and id(module) in splits:
                copies[id(module)] = nnx.merge(*splits[id(module)], copy=True)
            return copies.get(id(module), module)

        rebuilt, _ = reach.retarget(
            fn, _holds, lambda value: reach.map_containers(value, _is_module, copy_of)
        )
        classes: dict[type, None] = {}
        for prefix, module in modules:
            classes.update(
                dict.fromkeys(paths.index(copy_of(module), prefix, _for_export(training)))
            )
        with paths.scoped_calls(list(classes)):
            return rebuilt(*args, **kwargs)

    return run


def set_mode(module: nnx.Module, training: bool) -> None:
    """Dropout / BatchNorm (and any module with these flags) in inference or training mode."""
    module.set_attributes(
        deterministic=not training, use_running_average=not training, raise_if_not_found=False
    )


def mode_copy(module: nnx.Module, training: bool = False) -> nnx.Module:
    """A copy of ``module`` in the mode an export uses: what to compare an export with.

    The copy has Variables of its own (state updates in training mode stay in it).

    Example::

        verify(mode_copy(model), to_onnx(model, [("B", 30)]), [("B", 30)])
    """
    copy = nnx.merge(*nnx.split(module), copy=True)
    set_mode(copy, training)
    return copy


def _for_export(training: bool) -> Callable[[nnx.Module], None]:
    """What the export changes on each module of its copy, as :func:`set_mode` does (the
    Dropout / BatchNorm flags), and attributes holding functions captured before the export
    (``self.act = nnx.gelu``, ``partial(nnx.avg_pool, ...)``) replaced by the patched ones."""
    flags = {"deterministic": not training, "use_running_average": not training}

    def prepare(module: nnx.Module) -> None:
        for name, value in flags.items():
            if hasattr(module, name):
                setattr(module, name, value)
        for name, value in list(vars(module).items()):
            new = substitute(value) if callable(value) else value
            if new is not value:
                setattr(module, name, new)

    return prepare


def traced_copy(
    fn: Any, module: nnx.Module, split: Any, training: bool, paths: ModulePaths
) -> Callable[..., Any]:
    """``fn`` run on a copy of ``module`` made inside the trace (its state updates stay
    there); ``split``: ``nnx.split(module)``. The copy is prepared for the export, and its
    module calls scoped, in one walk of its graph."""
    graphdef, state = split

    def run(*args: Any, **kwargs: Any) -> Any:
        copy = nnx.merge(graphdef, state, copy=True)  # new Variables: updates stay in the trace
        with paths.scoped_calls(paths.index(copy, visit=_for_export(training))):
            if fn is module:
                return copy(*args, **kwargs)
            return fn.__func__(copy, *args, **kwargs)

    return run


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    with contextlib.ExitStack() as stack:
        if options.coarse_ops:
            stack.enter_context(patches(coarse.patches()))
            stack.enter_context(linen_coarse.patched_functions())
        stack.enter_context(patches(flags.patches()))  # outside the coarse ops: runtime flags
        if options.auto_functions:
            stack.enter_context(linen_functions())
        module = exported_module(prepared.fn)
        paths = ModulePaths()
        if module is not None:
            split = nnx.split(module)
            names = {**prepared.const_names, **array_names(module, state=split[1])}
            yield Prepared(traced_copy(prepared.fn, module, split, options.training, paths), names)
            return
        modules = reached_modules(prepared.fn)
        if not modules:
            # Linen: arrays named by variable path (the module lives outside its variables)
            names = linen.variable_names(prepared.fn) if "flax.linen" in sys.modules else {}
            yield Prepared(prepared.fn, {**names, **prepared.const_names}) if names else prepared
            return
        splits = {id(m): nnx.split(m) for _, m in modules}
        names = dict(prepared.const_names)
        for prefix, m in modules:
            names = {**array_names(m, prefix, state=splits[id(m)][1]), **names}
        yield Prepared(traced_closure(prepared.fn, modules, splits, options.training, paths), names)
