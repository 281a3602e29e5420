"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, every call of a submodule runs inside ``jax.named_scope`` of its
attribute path (``block1``, ``linear1``), so node names read ``block1/linear1/Gemm``. With
``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
from flax import nnx

from jax2onnx_nn.core.functions import call_function, onnx_function
from jax2onnx_nn.core.patching import ModuleCallStack, active_options, patch


class ModulePaths(ModuleCallStack):
    """Attribute paths of the modules of the exported copy, and the stack of active calls."""

    def index(self, root: nnx.Module) -> None:
        """Record the path of every module reachable from ``root`` (the first path wins)."""
        self.root_ids = {id(root)}
        for path, node in nnx.graph.iter_graph(root):
            if isinstance(node, nnx.Module):
                self.record(node, tuple(str(p) for p in path))


def module_call_classes(root: nnx.Module) -> list[type]:
    """Classes whose own ``__call__`` a module of the graph runs (subclasses first)."""
    seen: dict[type, None] = {}
    for _, node in nnx.graph.iter_graph(root):
        if isinstance(node, nnx.Module):
            for cls in type(node).__mro__:
                if issubclass(cls, nnx.Module) and cls is not nnx.Module and "__call__" in vars(cls):
                    seen.setdefault(cls, None)
    return list(seen)


def _auto_function_class(cls: type) -> bool:
    """Classes that become functions under ``auto_functions``: the user's own classes.

    Flax's layers are left out: each is one coarse op (or a few ops) already.
    """
    return not cls.__module__.startswith("flax.")


def scope_wrapper(paths: ModulePaths) -> Callable[[Any], Any]:
    """A ``make_wrapper`` for :func:`patch`: module calls get a name scope (and functions)."""

    def make(original: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            options = active_options()
            path = paths.paths.get(id(self))
            stack = paths.stack
            if options is None or path is None or (stack and stack[-1][0] is self):
                return original(self, *args, **kwargs)  # not exporting, unknown module, or super()
            with paths.entered(self, path) as scope, jax.named_scope(scope) if scope else contextlib.nullcontext():
                if (
                    options.auto_functions
                    and id(self) not in paths.root_ids
                    and _auto_function_class(type(self))
                    and not getattr(original, "__onnx_function__", False)
                ):
                    return call_function(original, (self, *args), kwargs, name=type(self).__name__, key=type(self))
                return original(self, *args, **kwargs)

        call.__wrapped__ = original  # type: ignore[attr-defined]
        return call

    return make


@contextlib.contextmanager
def scoped_module_calls(classes: list[type], paths: ModulePaths) -> Iterator[None]:
    """Wrap the ``__call__`` of ``classes`` with :func:`scope_wrapper` while exporting."""
    with contextlib.ExitStack() as stack:
        for cls in classes:
            stack.enter_context(patch(cls, "__call__", scope_wrapper(paths)))
        yield


__all__ = ["ModulePaths", "module_call_classes", "onnx_function", "scope_wrapper", "scoped_module_calls"]
