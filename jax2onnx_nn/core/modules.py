"""Module boundaries shared by the adapters: module paths, name scopes, ONNX functions."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

from jax2onnx_nn.core.functions import call_function
from jax2onnx_nn.core.session import active_options, patch


class ModuleCallStack:
    """Paths of the modules of an exported copy, and the stack of module calls in progress.

    Adapters fill ``paths`` (``id(module) -> path``) and ``root_ids`` in their own ``index``,
    name the framework's own layers (``library``: never functions, they are coarse ops
    already) and may strip a framework decorator from a method (``unwrap``).
    :meth:`scoped_calls` then wraps module classes so that, while exporting, each call of a
    known module runs in the name scope of its path relative to the enclosing module call and,
    with ``auto_functions``, a call of a user class becomes an ONNX function call.
    """

    library: str = "\0"  # module-name prefix of the framework's own layer classes

    def __init__(self) -> None:
        self.paths: dict[int, tuple[str, ...]] = {}
        self.root_ids: set[int] = set()
        self._keep: list[Any] = []  # keeps id() unique while the export runs
        self._local = threading.local()

    def record(self, module: Any, path: tuple[str, ...]) -> None:
        """Remember ``module`` at ``path`` unless it was seen first elsewhere."""
        if id(module) not in self.paths:
            self.paths[id(module)] = path
            self._keep.append(module)

    @property
    def stack(self) -> list[tuple[Any, tuple[str, ...]]]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    @contextlib.contextmanager
    def entered(self, module: Any, path: tuple[str, ...]) -> Iterator[str]:
        """Push a module call; yields its scope relative to the enclosing module call."""
        outer = self.stack[-1][1] if self.stack else ()
        relative = path[len(outer) :] if path[: len(outer)] == outer else path
        self.stack.append((module, path))
        try:
            yield "/".join(relative)
        finally:
            self.stack.pop()

    def unwrap(self, method: Any, cls: type) -> Any:
        """``method`` of ``cls`` as the export runs it (an adapter may drop a decorator)."""
        return method

    def becomes_function(self, module: Any, original: Any) -> bool:
        """Whether a call of ``module`` becomes an ONNX function under ``auto_functions``:
        user classes only, not the exported root, not what ``@onnx_function`` handles."""
        return (
            id(module) not in self.root_ids
            and not type(module).__module__.startswith(self.library)
            and not getattr(original, "__onnx_function__", False)
        )

    def wrapper(self, cls: type) -> Callable[[Any], Any]:
        """A ``make_wrapper`` for :func:`patch` of ``cls.__call__``."""

        def make(original: Any) -> Any:
            inner = self.unwrap(original, cls)

            def call(module: Any, *args: Any, **kwargs: Any) -> Any:
                options = active_options()
                if options is None:
                    return original(module, *args, **kwargs)
                path = self.paths.get(id(module))
                stack = self.stack
                if path is None or (stack and stack[-1][0] is module):
                    return inner(
                        module, *args, **kwargs
                    )  # unknown module (made by a transform), or super()
                with (
                    self.entered(module, path) as scope,
                    jax.named_scope(scope) if scope else contextlib.nullcontext(),
                ):
                    if options.auto_functions and self.becomes_function(module, original):
                        # a class is hashable; mypy does not see type[Any] as Hashable
                        return call_function(
                            inner,
                            (module, *args),
                            kwargs,
                            name=type(module).__name__,
                            key=type(module),  # type: ignore[arg-type]
                        )
                    return inner(module, *args, **kwargs)

            call.__wrapped__ = original  # type: ignore[attr-defined]
            return call

        return make

    @contextlib.contextmanager
    def scoped_calls(self, classes: list[type]) -> Iterator[None]:
        """Wrap the ``__call__`` of ``classes`` (see the class docstring) while the block runs."""
        with contextlib.ExitStack() as stack:
            for cls in classes:
                stack.enter_context(patch(cls, "__call__", self.wrapper(cls)))
            yield


def overrides_nothing(module: Any, cls: type, allowed: frozenset[str]) -> bool:
    """True when ``module`` is a ``cls`` whose subclasses (if any) override no method beyond
    ``allowed``: a coarse op models ``cls`` itself, not what a subclass changed."""
    mro = type(module).__mro__
    if cls not in mro:
        return False
    for sub in mro[: mro.index(cls)]:
        for name, value in vars(sub).items():
            if name in allowed:
                continue
            if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
                return False
    return True


__all__ = ["ModuleCallStack", "overrides_nothing"]
