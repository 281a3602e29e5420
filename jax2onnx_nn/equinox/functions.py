"""Module boundaries in the exported graph: name scopes, and ONNX functions on request.

While a module is exported, each call of one of its submodules runs inside
``jax.named_scope`` of its pytree path (``layers/0``), so node names read
``layers/0/Gemm``; Equinox's own scopes (``eqx.nn.Linear``) are left out, the path says more.
With ``auto_functions=True`` each call of a user-defined module class also becomes an ONNX
function call (one FunctionProto per distinct class, config and input types), as
``@onnx_function`` does for a decorated class. Calls under ``jax.vmap`` stay function calls.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax

from jax2onnx_nn.core.patching import ModuleCallStack
from jax2onnx_nn.equinox.modules import prefixes, submodules

_NAMED_SCOPE_CODE = jax.named_scope("probe")(lambda: None).__code__


def without_named_scope(method: Any, cls: type) -> Any:
    """An Equinox layer's method without its ``@jax.named_scope("eqx.nn...")`` decorator."""
    if (
        cls.__module__.startswith("equinox.")
        and getattr(method, "__code__", None) is _NAMED_SCOPE_CODE
    ):
        return getattr(method, "__wrapped__", method)
    return method


class ModulePaths(ModuleCallStack):
    """Pytree paths of the modules of the exported copy, and the stack of active calls.

    Equinox's own layers never become functions (each is one coarse op, or a few ops,
    already), and their calls lose Equinox's ``eqx.nn...`` name scope: the path says more.
    """

    library = "equinox"

    def unwrap(self, method: Any, cls: type) -> Any:
        return without_named_scope(method, cls)

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
                if (
                    issubclass(cls, eqx.Module)
                    and cls is not eqx.Module
                    and callable(vars(cls).get("__call__"))
                ):
                    seen.setdefault(cls, None)
    return list(seen)


__all__ = ["ModulePaths", "module_call_classes", "without_named_scope"]
