"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, every call of a submodule runs inside ``jax.named_scope`` of its
attribute path (``block1``, ``linear1``), so node names read ``block1/linear1/Gemm``. With
``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class.
"""

from __future__ import annotations

from flax import nnx

from jax2onnx_nn.core.functions import onnx_function
from jax2onnx_nn.core.patching import ModuleCallStack


class ModulePaths(ModuleCallStack):
    """Attribute paths of the modules of the exported copy, and the stack of active calls.

    Flax's own layers never become functions: each is one coarse op (or a few ops) already.
    """

    library = "flax."

    def index(self, root: nnx.Module, prefix: tuple[str, ...] = ()) -> None:
        """Record the path of every module reachable from ``root`` (the first path wins);
        ``prefix``: the root's own path, when an export reaches several modules."""
        if not prefix:
            self.root_ids.add(id(root))
        for path, node in nnx.graph.iter_graph(root):
            if isinstance(node, nnx.Module):
                self.record(node, prefix + tuple(str(p) for p in path))


def module_call_classes(root: nnx.Module) -> list[type]:
    """Classes whose own ``__call__`` a module of the graph runs (subclasses first)."""
    seen: dict[type, None] = {}
    for _, node in nnx.graph.iter_graph(root):
        if isinstance(node, nnx.Module):
            for cls in type(node).__mro__:
                if issubclass(cls, nnx.Module) and cls is not nnx.Module and "__call__" in vars(cls):
                    seen.setdefault(cls, None)
    return list(seen)


__all__ = ["ModulePaths", "module_call_classes", "onnx_function"]
