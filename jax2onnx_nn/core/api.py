"""to_onnx: specs -> jaxpr -> ONNX graph -> clean, typed ModelProto (and file)."""

from __future__ import annotations

import inspect
import os
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

import jax
import onnx
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.config import (
    DEFAULT_OPSET,
    MAX_OPSET,
    MIN_OPSET,
    ExportConfig,
    checked_options,
    ir_version,
    with_options_signature,
)
from jax2onnx_nn.core.errors import ConversionError, SpecError
from jax2onnx_nn.core.graph import GraphBuilder
from jax2onnx_nn.core.ir.walk import all_nodes
from jax2onnx_nn.core.lower import Lowerer, onnx_aval
from jax2onnx_nn.core.memo import BoundedMemo
from jax2onnx_nn.core.opset_forms import has_op, missing_types
from jax2onnx_nn.core.passes import run_pipeline
from jax2onnx_nn.core.patching import export_session
from jax2onnx_nn.core.precision import check_target_dtypes
from jax2onnx_nn.core.save import check_path, save_model
from jax2onnx_nn.core.session import collector_paused
from jax2onnx_nn.core.source_locations import set_source_locations
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.core.targets import Target
from jax2onnx_nn.core.trace import trace
from jax2onnx_nn.core.version import __version__


@overload
def to_onnx(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    config: ExportConfig | None = None,
    *,
    path: None = None,
    external_data: None = None,
    **options: Any,
) -> onnx.ModelProto: ...


@overload
def to_onnx(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    config: ExportConfig | None = None,
    *,
    path: str | os.PathLike[str],
    external_data: bool | None = None,
    **options: Any,
) -> str: ...


@checked_options()
@with_options_signature
def to_onnx(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    config: ExportConfig | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    external_data: bool | None = None,
    **options: Any,
) -> onnx.ModelProto | str:
    """Export a JAX callable to ONNX.

    The options are the fields of :class:`~jax2onnx_nn.core.config.ExportConfig`, given as
    keywords or as a ``config`` (keywords then change it); they are validated once (an
    unknown option raises ``UnknownOptionError``, a ``TypeError`` naming the closest option;
    an opset out of range ``ValueError``).

    Args:
        fn: a function, a ``jax.jit``-ed function, or a Flax NNX / Equinox module.
        inputs: one spec per positional argument: a shape tuple (``("B", 30)``; strings are
            symbolic dims, the same name is the same dim everywhere), a ``(shape, dtype)``
            pair, a ``jax.ShapeDtypeStruct``, an array, a Python scalar (a runtime scalar
            input) or a pytree of these.
        path: write the model to this file instead of returning it: atomically, tensor by
            tensor from the weights' buffers (no copy of the weights is made), with the
            umask's permissions. Checked first: a missing folder or a directory raises at once.
        external_data: with ``path``: ``True`` writes the weights to ``<path>.data`` beside
            the model, ``False`` one file (at most 2 GB), ``None`` (default) external data above
            ~1.8 GB of weights.
        {options}

    Returns:
        Without ``path``, the ``onnx.ModelProto`` (it holds a copy of the weights). With
        ``path``, the path written, as a ``str`` (what ``onnxruntime.InferenceSession`` and
        ``onnx.load`` take); ``onnx.load(path)`` gives the ModelProto back.

    Raises:
        ConversionError: unsupported primitives (all listed, with source lines), or ops the
            target cannot run (named, with source lines).
        SpecError: an input spec that cannot be understood.
        FileNotFoundError, IsADirectoryError, PermissionError: ``path`` cannot be written.

    Example::

        model = to_onnx(lambda x, w: jnp.tanh(x @ w), [("B", 30), (30, 4)])
        path = to_onnx(lambda x, w: jnp.tanh(x @ w), [("B", 30), (30, 4)], path="f.onnx")
    """
    if path is not None:
        path = check_path(path)
    elif external_data is not None:
        raise ValueError("external_data needs a path to write the weights beside")
    model = export_model(fn, inputs, config, **options)
    if path is None:
        return ir.to_proto(model)
    return save_model(
        model, path, external_data=external_data, progress=model.meta.get("jax2onnx_nn.progress")
    )


@checked_options()
@with_options_signature
@collector_paused
def export_model(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    config: ExportConfig | None = None,
    *,
    const_names: Mapping[int, str] | None = None,
    timings: dict[str, float] | None = None,
    **options: Any,
) -> ir.Model:
    """Like :func:`to_onnx` but returns the ``onnx_ir.Model`` (weights not yet copied).

    ``config`` (an :class:`ExportConfig`) or the options as keywords (both: the keywords
    change the config). ``timings``, if given, receives the seconds spent tracing, lowering
    and in clean-up passes.
    """
    config = (
        ExportConfig(**options)
        if config is None
        else config.replace(**options)
        if options
        else config
    )
    if not callable(fn):
        raise TypeError(f"to_onnx needs a callable (function or module), got {type(fn).__name__}")
    with (
        jxi.x64(config.enable_double_precision),
        jxi.quick_function_names(),
        export_session(fn, config) as prepared,
        kernels.target_kernels(
            config.profile.kernels, missing_types(config.opset_version, tuple(kernels.SUPPORTED))
        ),
    ):
        arg_names = _positional_names(fn)
        specs = parse_specs(
            inputs,
            input_params=dict(config.input_params),
            enable_double_precision=config.enable_double_precision,
            constraints=config.constraints,
            arg_names=arg_names,
        )
        started = time.perf_counter()
        traced = trace(prepared.fn, specs, arg_names)
        traced_at = time.perf_counter()
        names = _input_names(arg_names, traced.in_names, config.input_names)
        builder = GraphBuilder(config.model_name or _callable_name(fn))
        builder.opset_imports[""] = config.opset_version
        lowerer = Lowerer(builder, config)
        lowerer.const_names.update(prepared.const_names)
        lowerer.const_names.update(const_names or {})
        graph_inputs = []
        for name, leaf in zip(names, traced.in_avals, strict=True):
            dtype, shape = onnx_aval(leaf)
            value = builder.add_input(name, dtype, shape)
            lowerer.dims.add_source(value, shape)
            graph_inputs.append(value)
        try:
            outs = lowerer.lower_jaxpr(traced.closed_jaxpr, graph_inputs, builder)
        except NotImplementedError as err:
            raise ConversionError(f"cannot export: {err}") from err
        if lowerer.unsupported:
            raise ConversionError.from_unsupported(lowerer.unsupported)
    _set_outputs(builder, outs, traced.out_avals, config.output_names)
    model = ir.Model(
        builder.build_graph(),
        ir_version=ir_version(config.opset_version),
        producer_name="jax2onnx_nn",
        producer_version=_version(),
        functions=[f.function for f in lowerer.functions.values()],
    )
    model.metadata_props.update(
        {
            "jax2onnx_nn.jax_version": jax.__version__,
            "jax2onnx_nn.opset": str(config.opset_version),
            "jax2onnx_nn.enable_double_precision": str(config.enable_double_precision),
            "jax2onnx_nn.target": config.profile.name,
        }
    )
    lowered_at = time.perf_counter()
    progress = lowerer.progress
    progress.update("passes", 0, 3)
    marks = {
        "inline_functions": 1,
        "fill_missing_types": 2,
    }  # (after the layout, after the rewrites)

    def on_stage(stage: str) -> None:
        if stage in marks:
            progress.update("passes", marks[stage], 3)

    census = run_pipeline(model, config, on_stage)
    _check_target_ops(model, census, config.profile, config.opset_version)
    check_target_dtypes(model, config.profile.lacks_dtypes, config.profile.name)
    set_source_locations(model, config.source_locations)  # errors above name absolute paths
    progress.finish()
    model.meta["jax2onnx_nn.progress"] = progress
    if timings is not None:
        timings.update(
            trace=traced_at - started,
            lower=lowered_at - traced_at,
            passes=time.perf_counter() - lowered_at,
        )
    return model


def _check_target_ops(model: ir.Model, census: set[str], profile: Target, opset: int) -> None:
    """Ops the opset does not define or the target cannot run, named with the source lines
    that made them, before writing. ``census``: the model's op types of the default domain
    (or more, :func:`~jax2onnx_nn.core.ir.census.op_census`), each asked once; the nodes are
    walked only to name the lines of the ops missing."""
    lacking = {op for op in census if not (has_op(op, opset) and profile.runs(op))}
    missing: dict[str, list[str]] = {}
    if lacking:
        for node, _ in all_nodes(model):
            if node.domain in ("", "ai.onnx") and node.op_type in lacking:
                missing.setdefault(node.op_type, []).append(_made_at(node))
    if missing:
        by_target = any(has_op(op, opset) for op in missing)
        lacks = (
            f"target {profile.name} cannot run" if by_target else f"opset {opset} does not define"
        )
        lines = [
            f"{lacks} {', '.join(sorted(missing))} ({len(missing)} ONNX op(s) this model needs, at "
            f"opset {opset}); nothing was exported:"
        ]
        for op, where in sorted(missing.items()):
            places = list(dict.fromkeys(where))
            lines.append(
                f"  {op} (used {len(where)}x) at "
                f"{', '.join(places[:5])}{' ...' if len(places) > 5 else ''}"
            )
            if op in profile.lacks:
                lines.append(f"    ({profile.lacks[op]})")
        lines.append(
            "Export at a newer opset or for another target, or avoid the JAX operations these "
            "lines use."
        )
        raise ConversionError("\n".join(lines))


def _made_at(node: ir.Node) -> str:
    """The user's source line that made ``node``, and the name scope it was made in (the
    library call that wrote it, ``qr``, or the module): an op the user never wrote is traced
    to the call that did."""
    where = node.doc_string or "<unknown location>"
    scope = (node.name or "").rpartition("/")[0]
    return f"{where} in {scope}" if scope else where


def _version() -> str:
    return __version__


def _callable_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "main" if name == "<lambda>" else name


def _input_names(params: list[str], paths: list[str], given: Sequence[str] | None) -> list[str]:
    if given is not None:
        given = list(given)
        if len(given) != len(paths):
            raise SpecError(
                f"input_names has {len(given)} names for {len(paths)} flat inputs ({paths})"
            )
        if len(set(given)) != len(given):
            raise SpecError(f"input_names must be unique, got {given}")
        return given
    names = []
    for path in paths:
        head, _, rest = path.partition("/")
        if head.isdigit():  # positional argument i
            i = int(head)
            head = params[i] if i < len(params) else f"input_{i}"
        names.append(f"{head}/{rest}" if rest else head)
    return names


def _positional_names(fn: Any) -> list[str]:
    """The names of ``fn``'s positional parameters (graph input names), asked of
    ``inspect.signature`` once per function code: a plain function, or a callable object
    whose class's ``__call__`` is one (a module), is keyed by that code."""
    return list(_POSITIONAL_NAMES.get_or_make(_signature_key(fn), lambda: _signature_names(fn)))


_POSITIONAL_NAMES: BoundedMemo[list[str]] = BoundedMemo(256)


def _signature_key(fn: Any) -> Any:
    """What ``inspect.signature(fn)``'s parameters depend on alone, or None: the code of a
    plain function, or of a plain ``__call__`` of the object's class (then bound: "self" left
    out); anything wrapped, partial or carrying its own ``__signature__`` is asked each time."""
    if hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
        return None
    if isinstance(fn, types.FunctionType):
        return fn.__code__
    call = next((vars(c)["__call__"] for c in type(fn).__mro__ if "__call__" in vars(c)), None)
    if not isinstance(fn, type) and isinstance(call, types.FunctionType):
        return (call.__code__, "bound")
    return None


def _signature_names(fn: Any) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _set_outputs(
    builder: GraphBuilder, outs: list[ir.Value], avals: list[Any], given: Sequence[str] | None
) -> None:
    if given is not None and len(given) != len(outs):
        raise SpecError(f"output_names has {len(given)} names for {len(outs)} outputs")
    seen: set[int] = set()
    inputs = {id(v) for v in builder.inputs}
    for i, (value, aval) in enumerate(zip(outs, avals, strict=True)):
        # an output must be the output of a node of its own with the output's name
        if value.producer() is None or id(value) in inputs or id(value) in seen:
            value = builder.op.Identity(value)
            dtype, shape = onnx_aval(aval)
            from jax2onnx_nn.core.graph import set_type

            set_type(value, dtype, shape)
        seen.add(id(value))
        value.name = builder.names.fresh(given[i] if given is not None else f"out_{i}")
        builder.outputs.append(value)


__all__ = ["DEFAULT_OPSET", "MAX_OPSET", "MIN_OPSET", "export_model", "save_model", "to_onnx"]
