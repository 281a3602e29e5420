"""The Flax side of an export session (see ``core/patching.py``), active once any part of
Flax is imported.

For the duration of one export: the coarse-op patches of ``coarse.py`` are applied, and the
wrappers of ``flags.py`` that let a Dropout / BatchNorm mode flag (nnx and Linen) be a graph
input; when the
exported callable is a module (or a bound method of one), or reaches modules (a lambda or
function closing over one, a global or default it names, a partial's argument, a dict / list
of them: ``core/reach.py``), it is traced on copies made inside the trace and set to inference mode (or training mode if asked), so the user's module is never
changed; its arrays are named by attribute path (``block1.linear1.kernel``); and module calls
get name scopes (and ONNX functions with ``auto_functions``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from flax import nnx

from jax2onnx_nn.core import jax_nn, reach
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.patching import Prepared, patch
from jax2onnx_nn.flax import coarse, flags
from jax2onnx_nn.flax.functions import ModulePaths, module_call_classes


def exported_module(fn: Any) -> nnx.Module | None:
    """The module an exported callable belongs to: the module itself or a method's owner."""
    if isinstance(fn, nnx.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    if inspect.ismethod(fn) and isinstance(owner, nnx.Module):
        return owner
    return None


def array_names(module: nnx.Module, prefix: tuple[str, ...] = ()) -> dict[int, str]:
    """id(array) -> dotted attribute path (``linear1.kernel``) for every array of the module."""
    names: dict[int, str] = {}
    for path, variable in nnx.to_flat_state(nnx.state(module)):
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


def traced_closure(fn: Any, modules: list[tuple[tuple[str, ...], nnx.Module]], training: bool, paths: ModulePaths) -> Callable[..., Any]:
    """``fn`` rebuilt, inside the trace, around copies of the modules it reaches (in the
    export's mode; their state updates stay in the trace), as :func:`traced_copy` does for a
    module passed itself."""
    splits = {id(module): nnx.split(module) for _, module in modules}

    def run(*args: Any, **kwargs: Any) -> Any:
        copies: dict[int, nnx.Module] = {}

        def copy_of(module: nnx.Module) -> nnx.Module:
            if id(module) not in copies and id(module) in splits:
                copy = nnx.merge(*splits[id(module)], copy=True)
                set_mode(copy, training)
                substitute_captured(copy)
                copies[id(module)] = copy
            return copies.get(id(module), module)

        rebuilt, _ = reach.retarget(fn, _holds, lambda value: reach.map_containers(value, _is_module, copy_of))
        for prefix, module in modules:
            paths.index(copy_of(module), prefix)
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


def substitute_captured(root: nnx.Module) -> None:
    """Module attributes holding functions captured before the export (``self.act = nnx.gelu``,
    ``partial(nnx.avg_pool, ...)``) get the patched versions, on the export's own copy."""
    for _, node in nnx.graph.iter_graph(root):
        if isinstance(node, nnx.Module):
            for name, value in list(vars(node).items()):
                new = jax_nn.substitute(value) if callable(value) else value
                if new is not value:
                    setattr(node, name, new)


def traced_copy(fn: Any, module: nnx.Module, training: bool, paths: ModulePaths) -> Callable[..., Any]:
    """``fn`` run on a copy of ``module`` made inside the trace (its state updates stay there)."""
    graphdef, state = nnx.split(module)

    def run(*args: Any, **kwargs: Any) -> Any:
        copy = nnx.merge(graphdef, state, copy=True)  # new Variables: updates stay in the trace
        set_mode(copy, training)
        substitute_captured(copy)
        paths.index(copy)
        if fn is module:
            return copy(*args, **kwargs)
        return fn.__func__(copy, *args, **kwargs)

    return run


@contextlib.contextmanager
def export_session(prepared: Prepared, options: ExportConfig) -> Iterator[Prepared]:
    with contextlib.ExitStack() as stack:
        if options.coarse_ops:
            for owner, name, make_wrapper in coarse.patches():
                stack.enter_context(patch(owner, name, make_wrapper))
        for owner, name, make_wrapper in flags.patches():  # outside the coarse ops: runtime flags
            stack.enter_context(patch(owner, name, make_wrapper))
        module = exported_module(prepared.fn)
        paths = ModulePaths()
        if module is not None:
            stack.enter_context(paths.scoped_calls(module_call_classes(module)))
            names = {**prepared.const_names, **array_names(module)}
            yield Prepared(traced_copy(prepared.fn, module, options.training, paths), names)
            return
        modules = reached_modules(prepared.fn)
        if not modules:
            yield prepared
            return
        classes = list(dict.fromkeys(c for _, m in modules for c in module_call_classes(m)))
        stack.enter_context(paths.scoped_calls(classes))
        names = dict(prepared.const_names)
        for prefix, m in modules:
            names = {**array_names(m, prefix), **names}
        yield Prepared(traced_closure(prepared.fn, modules, options.training, paths), names)
