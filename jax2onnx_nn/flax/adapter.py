"""The Flax NNX side of an export session (see ``core/patching.py``).

For the duration of one export: the coarse-op patches of ``coarse.py`` are applied; when the
exported callable is a module (or a bound method of one), it is traced on a copy made inside
the trace and set to inference mode (or training mode if asked), so the user's module is never
changed; its arrays are named by attribute path (``block1.linear1.kernel``); and module calls
get name scopes (and ONNX functions with ``auto_functions``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from flax import nnx

from jax2onnx_nn.core import jax_nn
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.patching import Prepared, patch
from jax2onnx_nn.flax import coarse
from jax2onnx_nn.flax.functions import ModulePaths, module_call_classes


def exported_module(fn: Any) -> nnx.Module | None:
    """The module an exported callable belongs to: the module itself or a method's owner."""
    if isinstance(fn, nnx.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    if inspect.ismethod(fn) and isinstance(owner, nnx.Module):
        return owner
    return None


def array_names(module: nnx.Module) -> dict[int, str]:
    """id(array) -> dotted attribute path (``linear1.kernel``) for every array of the module."""
    names: dict[int, str] = {}
    for path, variable in nnx.to_flat_state(nnx.state(module)):
        value = variable.get_value() if isinstance(variable, nnx.Variable) else variable
        names.setdefault(id(value), ".".join(str(p) for p in path))
    return names


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
        module = exported_module(prepared.fn)
        if module is None:
            yield prepared
            return
        paths = ModulePaths()
        stack.enter_context(paths.scoped_calls(module_call_classes(module)))
        names = {**prepared.const_names, **array_names(module)}
        yield Prepared(traced_copy(prepared.fn, module, options.training, paths), names)
