"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, each call of one of its submodules runs inside
``jax.named_scope`` of its pytree path (``layers/0``), so node names read
``layers/0/Gemm``; Equinox's own scopes (``eqx.nn.Linear``) are left out, the path says more.
With ``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class. Calls under ``jax.vmap`` stay function calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import equinox as eqx
import jax

from jax2onnx_nn.core.functions import call_function
from jax2onnx_nn.core.patching import ModuleCallStack, active_options, patch
from jax2onnx_nn.equinox.modules import prefixes, submodules

_NAMED_SCOPE_CODE = jax.named_scope("probe")(lambda: None).__code__


def without_named_scope(method: Any, cls: type) -> Any:
    """An Equinox layer's method without its ``@jax.named_scope("eqx.nn...")`` decorator."""
    if cls.__module__.startswith("equinox.") and getattr(method, "__code__", None) is _NAMED_SCOPE_CODE:
        return getattr(method, "__wrapped__", method)
    return method


class ModulePaths(ModuleCallStack):
    """Pytree paths of the modules of the exported copy, and the stack of active calls."""

    def index(self, roots: dict[str, Any]) -> None:
        """Record the path of every module of the roots (the first path wins)."""
        for name, root in roots.items():
            prefix = tuple(p for p in prefixes(roots)[name].split(".") if p)
            for path, module in submodules(root):
                if not path and not prefix:
                    self.root_ids.add(id(module))
                self.record(module, prefix + path)


def module_call_classes(roots: dict[str, Any]) -> list[type]:
    """Classes whose own ``__call__`` a module of the roots runs (subclasses first)."""
    seen: dict[type, None] = {}
    for root in roots.values():
        for _, module in submodules(root):
            for cls in type(module).__mro__:
                if issubclass(cls, eqx.Module) and cls is not eqx.Module and callable(vars(cls).get("__call__")):
                    seen.setdefault(cls, None)
    return list(seen)


def auto_function_class(cls: type) -> bool:
    """Classes that become functions under ``auto_functions``: the user's own classes.

    Equinox's layers are left out: each is one coarse op (or a few ops) already.
    """
    return not cls.__module__.startswith("equinox")


def scope_wrapper(paths: ModulePaths, cls: type) -> Callable[[Any], Any]:
    """A ``make_wrapper`` for :func:`patch`: module calls get a name scope (and functions)."""

    def make(original: Any) -> Any:
        inner = without_named_scope(original, cls)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            options = active_options()
            if options is None:
                return original(self, *args, **kwargs)
            path = paths.paths.get(id(self))
            stack = paths.stack
            if path is None or (stack and stack[-1][0] is self):
                return inner(self, *args, **kwargs)  # unknown module (rebuilt by a transform), or super()
            with paths.entered(self, path) as scope, jax.named_scope(scope) if scope else contextlib.nullcontext():
                if (
                    options.auto_functions
                    and id(self) not in paths.root_ids
                    and auto_function_class(type(self))
                    and not getattr(original, "__onnx_function__", False)
                ):
                    return call_function(inner, (self, *args), kwargs, name=type(self).__name__, key=type(self))
                return inner(self, *args, **kwargs)

        call.__wrapped__ = original  # type: ignore[attr-defined]
        return call

    return make


@contextlib.contextmanager
def scoped_module_calls(classes: list[type], paths: ModulePaths) -> Iterator[None]:
    """Wrap the ``__call__`` of ``classes`` with :func:`scope_wrapper` while exporting."""
    with contextlib.ExitStack() as stack:
        for cls in classes:
            stack.enter_context(patch(cls, "__call__", scope_wrapper(paths, cls)))
        yield


__all__ = ["ModulePaths", "auto_function_class", "module_call_classes", "scope_wrapper", "scoped_module_calls", "without_named_scope"]
