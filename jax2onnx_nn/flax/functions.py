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

from flax import linen, nnx

from jax2onnx_nn.core.functions import call_function, onnx_function
from jax2onnx_nn.core.patching import ModuleCallStack


class ModulePaths(ModuleCallStack):
    """Attribute paths of the modules of the exported copy, and the stack of active calls.

    Flax's own layers never become functions: each is one coarse op (or a few ops) already.
    """

    library = "flax."

    def index(
        self,
        root: nnx.Module,
        prefix: tuple[str, ...] = (),
        visit: Callable[[nnx.Module], None] | None = None,
    ) -> list[type]:
        """Record the path of every module reachable from ``root`` (the first path wins) and
        call ``visit`` on it, in one walk of the graph (a walk of a large model costs about
        as much as tracing it); ``prefix``: the root's own path, when an export reaches
        several modules. Returns the classes whose own ``__call__`` those modules run
        (subclasses first): what :meth:`scoped_calls` wraps."""
        if not prefix:
            self.root_ids.add(id(root))
        classes: dict[type, None] = {}
        for path, node in modules_in(root):
            self.record(node, prefix + tuple(str(p) for p in path))
            if visit is not None:
                visit(node)
            for cls in type(node).__mro__:
                if (
                    issubclass(cls, nnx.Module)
                    and cls is not nnx.Module
                    and "__call__" in vars(cls)
                ):
                    classes.setdefault(cls, None)
        return list(classes)


def modules_in(root: nnx.Module) -> list[tuple[tuple[Any, ...], nnx.Module]]:
    """(path, module) of every module reachable from ``root``, as ``nnx.graph.iter_graph``
    yields them (children before their parent, keys in order, a shared module at its first
    path), at a fraction of its cost: Variables and other leaves are not visited, and whether
    a child is a graph node is asked once per type (it depends on the type alone: a Variable
    or a tracer is never one). An export walks its module copy once; ``iter_graph`` made that
    walk cost about as much as splitting the module."""
    found: list[tuple[tuple[Any, ...], nnx.Module]] = []
    visited: set[int] = set()
    is_node: dict[type, bool] = {}

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        visited.add(id(node))
        impl = nnx.graph.get_node_impl(node)
        if impl is None:
            return
        for key, child in impl.node_dict(node).items():
            kind = type(child)
            verdict = is_node.get(kind)
            if verdict is None:
                verdict = is_node[kind] = nnx.graph.is_node(child)
            if verdict and id(child) not in visited:
                walk(child, (*path, key))
        if isinstance(node, nnx.Module):
            found.append((path, node))

    walk(root, ())
    return found


def _linen_call_becomes_function(context: Any) -> bool:
    """A call of a user's Linen class under ``auto_functions``: ``__call__`` of a module
    below the root (the root's parent is its scope), not flax's own layers (coarse ops), not
    while initializing, not a class ``@onnx_function`` handles already."""
    module = context.module
    return (
        context.method_name == "__call__"
        and isinstance(module.parent, linen.Module)
        and not type(module).__module__.startswith("flax.")
        and not module.is_initializing()
        and not getattr(type(module).__call__, "__onnx_function__", False)
    )


@contextlib.contextmanager
def linen_functions() -> Iterator[None]:
    """While the block runs, each call of a user's Linen module class is an ONNX function
    call (one FunctionProto per distinct class, config and input types), through Linen's
    own method interception."""

    def interceptor(next_fun: Callable[..., Any], args: Any, kwargs: Any, context: Any) -> Any:
        if not _linen_call_becomes_function(context):
            return next_fun(*args, **kwargs)
        module = context.module
        return call_function(
            lambda _module, *a, **k: next_fun(*a, **k),
            (module, *args),
            kwargs,
            name=type(module).__name__,
            key=type(module),  # type: ignore[arg-type]
        )

    with linen.intercept_methods(interceptor):
        yield


__all__ = ["ModulePaths", "linen_functions", "onnx_function"]
