"""What framework adapters change while an export runs, and only then.

Three mechanisms, all framework-free (the Flax and Equinox adapters build on them):

* **Export sessions.** :func:`export_session` wraps one export: it takes a process-wide lock
  (patched classes are process-wide), lets every adapter whose framework is imported prepare
  the callable (an inference-mode copy, names for its arrays) and enter its patches, and
  undoes all of it on exit, on exceptions too. :func:`active_options` tells patched code
  whether this thread is exporting.
* **Patches.** :func:`patch` swaps an attribute (a class's ``__call__``, a function in a
  module namespace) for a wrapper built from the original, and puts the original back.
* **Coarse ops.** :func:`coarse_wrapper` makes a patched callable bind a custom primitive
  for each call its handler accepts: the operands are the call's arrays and the arrays it
  reads (weights), the ``body`` param is the original call traced to a jaxpr, so JAX numerics
  are untouched. A rule registered with :func:`coarse_lowering` emits the coarse ONNX op;
  when it returns :data:`NotApplicable` the body is lowered instead. A handler returns
  :data:`NotApplicable` for any call it does not model, and that call runs the original.

Example (an adapter's declaration of one coarse op)::

    def linear_handler(module, x, *args, **kwargs):
        if args or kwargs:
            return NotApplicable
        return CoarseCall("nnx_linear", inputs={"x": x}, weights={"kernel": module.kernel[...]})

    @coarse_lowering("nnx_linear", onnx_ops=("MatMul",))
    def _linear(ctx, ops):
        return ctx.op.MatMul(ops["x"], ops["kernel"])
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.registry import builtin_rules, register


class _NotApplicableType:
    _instance: _NotApplicableType | None = None

    def __new__(cls) -> _NotApplicableType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NotApplicable"

    def __bool__(self) -> bool:
        return False


NotApplicable = _NotApplicableType()
"""Returned by a coarse-op handler or rule for a case it does not model (never raise)."""


# -- export sessions ------------------------------------------------------------------------


ExportOptions = ExportConfig  # the name adapters used before the one export config


@dataclass
class Prepared:
    """The callable to trace and the initializer names of the arrays it closes over."""

    fn: Callable[..., Any]
    const_names: dict[int, str] = field(default_factory=dict)


# Adapters, imported lazily: (module whose presence in sys.modules enables it, adapter module).
# An adapter module defines ``export_session(prepared, options) -> ContextManager[Prepared]``.
ADAPTERS: list[tuple[str, str]] = [
    ("jax", "jax2onnx_nn.core.jax_nn"),
    ("flax.nnx", "jax2onnx_nn.flax.adapter"),
    ("equinox", "jax2onnx_nn.equinox.adapter"),
]

_LOCK = threading.RLock()
_STATE = threading.local()


def active_options() -> ExportConfig | None:
    """The options of the export running in this thread, or None outside exports."""
    return getattr(_STATE, "options", None)


@contextlib.contextmanager
def export_session(fn: Callable[..., Any], options: ExportConfig | None = None) -> Iterator[Prepared]:
    """Prepare ``fn`` for tracing and keep the adapters' patches applied meanwhile.

    Exports are serialised by a lock. A nested export (an export started while tracing
    another one, in the same thread) reuses the patches of the outer one.
    """
    options = ExportConfig() if options is None else options
    with _LOCK, contextlib.ExitStack() as stack:
        previous = active_options()
        prepared = Prepared(fn)
        if previous is None:
            if options.coarse_ops:
                for owner, name, make_wrapper in _MAPPED_CALLS:
                    stack.enter_context(patch(owner, name, make_wrapper))
            for trigger, module_name in ADAPTERS:
                if trigger in sys.modules:
                    with builtin_rules():
                        adapter = importlib.import_module(module_name)
                    prepared = stack.enter_context(adapter.export_session(prepared, options))
        _STATE.options = options
        try:
            yield prepared
        finally:
            _STATE.options = previous


# -- patches --------------------------------------------------------------------------------


@contextlib.contextmanager
def patch(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> Iterator[None]:
    """Replace ``owner.name`` by ``make_wrapper(original)``; restore it on exit.

    For a class, only an attribute defined by the class itself is restored as such; an
    inherited one is removed again, so the class goes back to inheriting it.
    """
    own = vars(owner) if isinstance(owner, type) else None
    had_own = own is None or name in own
    original = own[name] if own is not None and name in own else getattr(owner, name)
    setattr(owner, name, make_wrapper(original))
    try:
        yield
    finally:
        if had_own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


# -- coarse ops -----------------------------------------------------------------------------


@dataclass
class CoarseCall:
    """A handler's description of one call it models.

    ``inputs``: role -> an array argument of the call (matched by identity).
    ``weights``: role -> an array the call reads (matched by identity among the arrays the
    traced call closes over); None for an absent optional weight.
    ``params``: static config the lowering rule needs (hashable values).
    """

    primitive: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    weights: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Hashable] = field(default_factory=dict)


Handler = Callable[..., "CoarseCall | _NotApplicableType"]


def is_array(x: Any) -> bool:
    """True for JAX/numpy arrays and tracers (call arguments that become operands)."""
    return isinstance(x, (jax.Array, np.ndarray))


def _is_container(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict)) or x is None


def split_arrays(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Callable[[list[Any]], tuple[tuple[Any, ...], dict[str, Any]]]]:
    """The array arguments of a call (through lists, tuples, dicts) and a function that puts
    other arrays in their places. Anything else (modules, flags, ...) stays as it is."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=lambda x: not _is_container(x))
    positions = [i for i, leaf in enumerate(leaves) if is_array(leaf)]

    def rebuild(arrays: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        filled = list(leaves)
        for i, a in zip(positions, arrays, strict=True):
            filled[i] = a
        new_args, new_kwargs = jax.tree_util.tree_unflatten(treedef, filled)
        return tuple(new_args), dict(new_kwargs)

    return [leaves[i] for i in positions], rebuild


def trace_call(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Any, list[Any], Any, int]:
    """Trace ``original(*args, **kwargs)`` over its array arguments.

    Returns (array arguments, body, operands, output treedef, number of consts): the body is a
    ClosedJaxpr taking the closed-over arrays (weights) first and the array arguments after;
    ``operands`` are those values in that order.
    """
    arrays, rebuild = split_arrays(args, kwargs)

    def run(*xs: Any) -> Any:
        a, k = rebuild(list(xs))
        return original(*a, **k)

    closed, out_shape = jax.make_jaxpr(run, return_shape=True)(*arrays)
    body, consts = jxi.hoist_consts(closed)
    return arrays, body, [*consts, *arrays], jax.tree_util.tree_structure(out_shape), len(consts)


def _index_by_identity(values: list[Any], target: Any) -> int | None:
    return next((i for i, v in enumerate(values) if v is target), None)


def bind_coarse(call: CoarseCall, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Bind ``call.primitive`` for ``original(*args, **kwargs)``; NotApplicable if a role's
    array cannot be found among the call's arrays."""
    arrays, body, operands, out_tree, n_consts = trace_call(original, args, kwargs)
    roles = []
    for role, value in call.inputs.items():
        i = _index_by_identity(arrays, value)
        if i is None:
            return NotApplicable
        roles.append((role, n_consts + i))
    for role, value in call.weights.items():
        if value is None:
            continue
        i = _index_by_identity(operands[:n_consts], value)
        if i is None:
            return NotApplicable
        roles.append((role, i))
    params = tuple(sorted(call.params.items()))
    outs = jxi.body_primitive(call.primitive).bind(*operands, body=body, roles=tuple(roles), config=params)
    return jax.tree_util.tree_unflatten(out_tree, outs)


def coarse_wrapper(handler: Handler) -> Callable[[Any], Any]:
    """A ``make_wrapper`` for :func:`patch`: calls the handler accepts bind its primitive."""

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if active_options() is None:
                return original(*args, **kwargs)
            try:
                spec = handler(*args, **kwargs)
            except Exception:  # a handler that cannot model a call must not break it
                spec = NotApplicable
            if spec is not NotApplicable:
                result = bind_coarse(spec, original, args, kwargs)
                if result is not NotApplicable:
                    return result
            return original(*args, **kwargs)

        return call

    return make


class Operands(Mapping[str, ir.Value]):
    """The operands of a coarse op by role, with their JAX avals (``ops.aval("x")``)."""

    def __init__(self, values: dict[str, ir.Value], avals: dict[str, Any]) -> None:
        self._values = values
        self._avals = avals

    def __getitem__(self, role: str) -> ir.Value:
        return self._values[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def aval(self, role: str) -> Any:
        return self._avals[role]


@dataclass(frozen=True)
class ModuleRow:
    """One row of the support table of modules: what a user calls and what it becomes."""

    target: str  # "nnx.Linear", "eqx.nn.Conv2d", "jax.nn.gelu"
    onnx_ops: str
    min_opset: int
    primitive: str | None  # the coarse primitive, None for a module that adds no node of its own


_MODULE_ROWS: dict[str, ModuleRow] = {}


def module_rows() -> list[ModuleRow]:
    """The modules and functions the imported adapters map, in declaration order."""
    return list(_MODULE_ROWS.values())


def describe_module(target: str, what: str) -> None:
    """A module without a coarse op of its own (``eqx.nn.Dropout``: no node in inference,
    ``nnx.Sequential``: its layers), for the support table."""
    _MODULE_ROWS[target] = ModuleRow(target, what, 1, None)


def coarse_lowering(
    primitive: str, *, onnx_ops: tuple[str, ...] = (), min_opset: int = 1, covers: tuple[str, ...] = ()
) -> Callable[[Any], Any]:
    """Register ``rule(ctx, ops: Operands, **config)`` for a coarse primitive.

    The rule returns the op's output value(s) or :data:`NotApplicable`, in which case the
    body (the traced original call) is lowered in its place. Below ``min_opset`` the
    interpreter does not call the rule and lowers the body too. ``covers`` names the modules and functions whose calls bind the primitive
    (``"nnx.Linear"``), for the support table.
    """
    for target in covers:
        _MODULE_ROWS[target] = ModuleRow(target, ", ".join(onnx_ops), min_opset, primitive)

    def decorate(rule: Any) -> Any:
        def lower(ctx: Any, *operands: ir.Value, body: Any, roles: tuple[tuple[str, int], ...], config: tuple[tuple[str, Any], ...] = (), **_: Any) -> Any:
            avals = ctx.avals_in
            ops = Operands({r: operands[i] for r, i in roles}, {r: avals[i] for r, i in roles})
            result = rule(ctx, ops, **dict(config))
            if result is NotApplicable:
                return ctx.lower_sub(body, list(operands))
            return result

        register(primitive, lower, onnx_ops=onnx_ops, min_opset=min_opset)
        return rule

    return decorate



_MAPPED_CALLS: list[tuple[Any, str, Callable[[Any], Any]]] = []


def map_calls(owner: Any, name: str = "__call__") -> Callable[[Handler], Handler]:
    """Decorator: while an export runs, calls of ``owner.name`` (a class's method, or a
    function of a module namespace) go through the decorated handler, which returns a
    :class:`CoarseCall` (bind that coarse primitive) or :data:`NotApplicable` (run the original,
    lowered op by op). Pair it with a :func:`coarse_lowering` rule for the primitive.

    Example: a user module as one ONNX op::

        @map_calls(ScaledTanh)
        def _scaled_tanh_call(module, x):
            return CoarseCall("scaled_tanh", inputs={"x": x}, weights={"scale": module.scale})

        @coarse_lowering("scaled_tanh", onnx_ops=("Tanh", "Mul"), covers=("ScaledTanh",))
        def _scaled_tanh(ctx, ops):
            return ctx.op.Mul(ctx.op.Tanh(ops["x"]), ops["scale"])
    """

    def decorate(handler: Handler) -> Handler:
        _MAPPED_CALLS[:] = [entry for entry in _MAPPED_CALLS if (entry[0], entry[1]) != (owner, name)]
        _MAPPED_CALLS.append((owner, name, coarse_wrapper(handler)))
        return handler

    return decorate


# -- module boundaries (shared by the adapters) ------------------------------------------------


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
        relative = path[len(outer):] if path[: len(outer)] == outer else path
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
                    return inner(module, *args, **kwargs)  # unknown module (made by a transform), or super()
                with self.entered(module, path) as scope, jax.named_scope(scope) if scope else contextlib.nullcontext():
                    if options.auto_functions and self.becomes_function(module, original):
                        # imported here: core/functions.py imports this module
                        from jax2onnx_nn.core.functions import call_function

                        return call_function(inner, (module, *args), kwargs, name=type(module).__name__, key=type(module))
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

__all__ = [
    "ADAPTERS",
    "ModuleRow",
    "describe_module",
    "module_rows",
    "ModuleCallStack",
    "overrides_nothing",
    "CoarseCall",
    "ExportConfig",
    "ExportOptions",
    "NotApplicable",
    "Operands",
    "Prepared",
    "active_options",
    "bind_coarse",
    "coarse_lowering",
    "coarse_wrapper",
    "export_session",
    "is_array",
    "map_calls",
    "patch",
    "split_arrays",
    "trace_call",
]
