"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, every call of a submodule runs inside ``jax.named_scope`` of its
attribute path (``block1``, ``linear1``), so node names read ``block1/linear1/Gemm``. With
``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class.
"""

from __future__ import annotations

from collections.abc import Callable

from flax import nnx

from jax2onnx_nn.core.functions import onnx_function
from jax2onnx_nn.core.patching import ModuleCallStack


class ModulePaths(ModuleCallStack):
    """Attribute paths of the modules of the exported copy, and the stack of active calls.

    Flax's own layers never become functions: each is one coarse op (or a few ops) already.
    """

    library = "flax."

    def index(self, root: nnx.Module, prefix: tuple[str, ...] = (), visit: Callable[[nnx.Module], None] | None = None) -> list[type]:
        """Record the path of every module reachable from ``root`` (the first path wins) and
        call ``visit`` on it, in one walk of the graph (a walk of a large model costs about
        as much as tracing it); ``prefix``: the root's own path, when an export reaches
        several modules. Returns the classes whose own ``__call__`` those modules run
        (subclasses first): what :meth:`scoped_calls` wraps."""
        if not prefix:
            self.root_ids.add(id(root))
        classes: dict[type, None] = {}
        for path, node in list(nnx.graph.iter_graph(root)):
            if isinstance(node, nnx.Module):
                self.record(node, prefix + tuple(str(p) for p in path))
                if visit is not None:
                    visit(node)
                for cls in type(node).__mro__:
                    if issubclass(cls, nnx.Module) and cls is not nnx.Module and "__call__" in vars(cls):
                        classes.setdefault(cls, None)
        return list(classes)


__all__ = ["ModulePaths", "onnx_function"]
