"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, every call of a submodule runs inside ``jax.named_scope`` of its
attribute path (``block1``, ``linear1``), so node names read ``block1/linear1/Gemm``. With
``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flax import nnx

from jax2onnx_nn.core.functions import onnx_function
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


__all__ = ["ModulePaths", "onnx_function"]
