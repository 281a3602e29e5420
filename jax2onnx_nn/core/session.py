"""Export sessions: what adapters change while an export runs, and only then.

:func:`export_session` wraps one export: it takes a process-wide lock (patched classes are
process-wide), applies the patches registered with :func:`add_session_patch`, lets every
registered adapter whose framework is imported prepare the callable (an inference-mode copy,
names for its arrays) and enter its own patches, and undoes all of it on exit, on
exceptions too. :func:`active_options` tells patched code whether this thread is exporting.

Core names no framework: an adapter registers itself with :func:`register_adapter` (the
package's own adapters in ``jax2onnx_nn/__init__.py``; other packages through the entry-point
group ``jax2onnx_nn.adapters``: name = the framework module that enables it, value = the
adapter module). An adapter module defines
``export_session(prepared: Prepared, options: ExportConfig) -> ContextManager[Prepared]``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.metadata
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.registry import builtin_rules


@dataclass
class Prepared:
    """The callable to trace and the initializer names of the arrays it closes over."""

    fn: Callable[..., Any]
    const_names: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Adapter:
    """A framework adapter: imported by the first export that runs while ``trigger`` (a
    module name) is imported; ``library``: the framework's top package, whose frames are not
    the user's source line."""

    trigger: str
    module: str
    library: str | None = None


_ADAPTERS: dict[str, Adapter] = {}
_PLUGINS_LOADED = False


def register_adapter(trigger: str, module: str, *, library: str | None = None) -> None:
    """Register the adapter ``module`` for the framework module ``trigger`` (again: replaced)."""
    _ADAPTERS[module] = Adapter(trigger, module, library)
    if library is not None:
        jxi.add_library_package(library)


def adapters() -> list[Adapter]:
    """The registered adapters (entry-point plugins loaded on the first call), in order."""
    global _PLUGINS_LOADED
    if not _PLUGINS_LOADED:
        _PLUGINS_LOADED = True
        for entry in importlib.metadata.entry_points(group="jax2onnx_nn.adapters"):
            register_adapter(entry.name, entry.value, library=entry.name.partition(".")[0])
    return list(_ADAPTERS.values())


def import_adapter(adapter: Adapter) -> Any:
    """The adapter's module (its rules registered as built-ins)."""
    with builtin_rules():
        return importlib.import_module(adapter.module)


_SESSION_PATCHES: list[tuple[Any, str, Callable[[Any], Any]]] = []


def add_session_patch(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> None:
    """While an export with ``coarse_ops`` runs, ``owner.name`` is ``make_wrapper(original)``
    (a later patch of the same attribute replaces the earlier one)."""
    _SESSION_PATCHES[:] = [
        entry for entry in _SESSION_PATCHES if (entry[0], entry[1]) != (owner, name)
    ]
    _SESSION_PATCHES.append((owner, name, make_wrapper))


_LOCK = threading.RLock()
_STATE = threading.local()


def active_options() -> ExportConfig | None:
    """The options of the export running in this thread, or None outside exports."""
    return getattr(_STATE, "options", None)


def export_memo() -> dict[str, Any]:
    """A dict that lives as long as the export running in this thread (empty at its start):
    for what is computed from the options once per export instead of once per call."""
    memo = getattr(_STATE, "memo", None)
    if memo is None:
        memo = _STATE.memo = {}
    return memo


@contextlib.contextmanager
def export_session(
    fn: Callable[..., Any], options: ExportConfig | None = None
) -> Iterator[Prepared]:
    """Prepare ``fn`` for tracing and keep the adapters' patches applied meanwhile.

    Exports are serialised by a lock. A nested export (an export started while tracing
    another one, in the same thread) reuses the patches of the outer one.
    """
    options = ExportConfig() if options is None else options
    with _LOCK, contextlib.ExitStack() as stack:
        previous = active_options()
        prepared = Prepared(fn)
        if previous is None:
            # imported first: importing an adapter adds its session patches
            active = [import_adapter(a) for a in adapters() if a.trigger in sys.modules]
            if options.coarse_ops:
                stack.enter_context(patches(_SESSION_PATCHES))
            for adapter in active:
                prepared = stack.enter_context(adapter.export_session(prepared, options))
        previous_memo = getattr(_STATE, "memo", None)
        _STATE.options, _STATE.memo = options, {}
        try:
            yield prepared
        finally:
            _STATE.options, _STATE.memo = previous, previous_memo


def collector_paused(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``fn`` runs with Python's cyclic garbage collector paused, and on again at
    the end (also after a failure) if it was on.

    An export makes many objects that live until it returns (the jaxpr, the graph under
    construction, its values and attributes), so the collections that its allocations trigger
    find little garbage but scan those objects again and again, and every few exports a full
    collection scans every object of the process (about a fifth of a 4-layer GPT's warm
    export). What an export leaves as cyclic garbage is collected by the next automatic
    collection after it. Process-wide, as the collector is: another thread does not collect
    while an export runs either. (A function of this package, not a ``contextlib``
    decorator: warnings find the user's frame as the first one outside the package.)
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():  # the caller's choice (or an export running in another thread)
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return run


@contextlib.contextmanager
def patch(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> Iterator[None]:
    """Replace ``owner.name`` by ``make_wrapper(original)``; restore it on exit.

    For a class, only an attribute defined by the class itself is restored as such; an
    inherited one is removed again, so the class goes back to inheriting it.
    """
    restore = _replace(owner, name, make_wrapper)
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def patches(entries: Iterable[tuple[Any, str, Callable[[Any], Any]]]) -> Iterator[None]:
    """:func:`patch` of each ``(owner, name, make_wrapper)``, in order, as one context: the
    attributes are restored in reverse order on exit (also when one ``make_wrapper`` raises).
    One context for a table of patches costs a fraction of one context per patch, which
    every export pays."""
    restores: list[Callable[[], None]] = []
    try:
        for owner, name, make_wrapper in entries:
            restores.append(_replace(owner, name, make_wrapper))
        yield
    finally:
        for restore in reversed(restores):
            restore()


def _replace(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> Callable[[], None]:
    """Set ``owner.name`` to ``make_wrapper(original)``; returns what undoes it."""
    own = vars(owner) if isinstance(owner, type) else None
    had_own = own is None or name in own
    original = own[name] if own is not None and name in own else getattr(owner, name)
    setattr(owner, name, make_wrapper(original))
    if had_own:
        return lambda: setattr(owner, name, original)
    return lambda: delattr(owner, name)


__all__ = [
    "Adapter",
    "Prepared",
    "active_options",
    "add_session_patch",
    "adapters",
    "collector_paused",
    "export_memo",
    "export_session",
    "import_adapter",
    "patch",
    "patches",
    "register_adapter",
]
