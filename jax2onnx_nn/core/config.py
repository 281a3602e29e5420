"""One export's configuration: built and validated once by the API, then passed down.

Every stage reads the same frozen :class:`ExportConfig`: the export session and the adapters
(``training``, ``auto_functions``, ``coarse_ops``), the specs (``input_params``,
``constraints``, ``enable_double_precision``), the interpreter (``opset``, ``lowerings``) and
the passes (``inputs_as_nchw`` / ``outputs_as_nchw``).

Adding an option: add a field here, ``my_option: T = _option(default, "what it does")``
(normalise or validate it in ``__post_init__``), read it where it is used
(``config.my_option``), and add the CLI flag in ``__main__.py``. ``to_onnx`` and
``export_model`` take it as a keyword argument without change (they accept exactly the
fields of this class) and their ``help()`` lists it with its documentation.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import onnx

from jax2onnx_nn.core.errors import SpecError
from jax2onnx_nn.core.registry import Registration, normalize_overrides
from jax2onnx_nn.core.targets import Target, get_target

MIN_OPSET = 13  # every op form below the newest one is written by core/opset_forms.py
DEFAULT_OPSET = 21


def newest_opset() -> int:
    """The newest opset both the installed ``onnx`` defines and, when it is installed,
    ``onnxruntime`` knows (its operator schemas): read at run time, not a constant."""
    newest = onnx.defs.onnx_opset_version()
    if importlib.util.find_spec("onnxruntime") is not None:
        from onnxruntime.capi import _pybind_state as ort_state

        known = [
            s.since_version
            for s in ort_state.get_all_operator_schema()
            if s.domain in ("", "ai.onnx")
        ]
        newest = min(newest, max(known, default=newest))
    return newest


def ir_version(opset: int) -> int:
    """The IR version of the first onnx release with ``opset`` (what runtimes of that time load)."""
    return min(ir for _, ir, ai_onnx, *_ in onnx.helper.VERSION_TABLE if ai_onnx >= opset)


MAX_OPSET = newest_opset()


def _option(default: Any, doc: str) -> Any:
    """A field of :class:`ExportConfig` with its documentation (shown in ``help(to_onnx)``)."""
    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def _names(value: Any) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


@dataclass(frozen=True)
class ExportConfig:
    """The options of one export (the keyword arguments of :func:`jax2onnx_nn.to_onnx`)."""

    input_params: Mapping[str, Any] = _option(
        {},
        "keyword arguments of ``fn`` exported as named runtime inputs, e.g. "
        '``{"deterministic": True}`` (the value gives the spec).',
    )
    input_names: tuple[str, ...] | None = _option(
        None,
        "names of the flat graph inputs; default from the argument names and pytree "
        "paths (``x``, ``params/w``).",
    )
    output_names: tuple[str, ...] | None = _option(
        None, "names of the flat graph outputs; default ``out_0``, ..."
    )
    opset: int | None = _option(
        None,
        f"ONNX opset, between {MIN_OPSET} and {MAX_OPSET} (default {DEFAULT_OPSET}, or the "
        "target's newest if older).",
    )
    enable_double_precision: bool = _option(
        False, "trace with x64 on, so float64 work stays float64."
    )
    model_name: str | None = _option(None, "the graph's name (default: the callable's name).")
    lowerings: Mapping[str, Registration] = _option(
        {}, "``{primitive_or_name: rule}`` overriding every other rule for this export."
    )
    constraints: tuple[str, ...] = _option((), 'symbolic dim constraints, e.g. ``("B >= 2",)``.')
    training: bool = _option(
        False,
        "export modules in training mode (BatchNorm batch statistics, Dropout active); "
        "default: inference mode, on a copy (the module is never changed).",
    )
    auto_functions: bool = _option(
        False,
        "make every call of a user-defined module class an ONNX function call, as "
        "``@onnx_function`` does for one class.",
    )
    coarse_ops: bool = _option(
        True,
        "lower framework layers (``nnx.Linear``, ``nnx.LayerNorm``, ...) to one coarse ONNX "
        "op each (``Gemm``, ``LayerNormalization``, ...) instead of lax ops.",
    )
    inputs_as_nchw: tuple[str | int, ...] | None = _option(
        None,
        "graph inputs (names or flat indices) of a channels-last (NHWC) callable to expose "
        "channels-first (NCHW); the boundary Transposes fold into the first Conv's own where "
        "possible.",
    )
    outputs_as_nchw: tuple[str | int, ...] | None = _option(None, "the same for graph outputs.")
    target: str | Target | None = _option(
        None,
        'the runtime the model is for: ``"onnxruntime"`` (default), ``"onnxruntime-web"``, '
        '``"openvino"``, ``"tract"``, ``"tensorrt"`` (profiles in ``jax2onnx_nn.TARGETS``): the '
        "graph is written so that it runs there and computes JAX's numbers.",
    )
    functions: str | None = _option(
        None,
        '``"keep"`` ONNX functions or ``"inline"`` their bodies (node names keep the call\'s '
        "name as prefix); default: keep, except for targets without model-local functions.",
    )
    fold_weights: bool = _option(
        False,
        "fold a BatchNorm (inference) or a per-channel Mul/Add after a Conv or Gemm into "
        "its weights, so each such layer is one node; the folded weights are rounded once, so "
        "results differ from JAX by about one ulp (float32: within 1e-5 relative).",
    )
    loop_bound: int | None = _option(
        None,
        "write every ``while_loop`` whose condition depends on the data as a ``Scan`` of at "
        "most this many steps (for runtimes without ONNX ``Loop``: tract). Steps after the "
        "condition turns false change nothing; where it still holds after the last step the "
        "loop's float results are NaN, its integer and bool results the values after the last "
        "step (a warning names the loop). Loops of a fixed or traced number of steps are "
        "unchanged.",
    )
    source_locations: bool = _option(
        True,
        "write each node's source line into its doc string, as a path relative to the "
        "installed packages (``flax/nnx/...``), the current directory or the project root "
        "(never an absolute path of this machine); ``False`` leaves them out.",
    )
    precision: str = _option(
        "as-traced",
        '``"as-traced"``: the program\'s own dtypes (bfloat16 / float16 layers as '
        "their ONNX op in float32 between one Cast in and out where the target has no kernel); "
        '``"float32"``: bfloat16 / float16 weights upcast once, every op in float32; '
        '``"float16"``: every op in float16, except reductions, softmax and norms, which '
        "accumulate in float32 as JAX does. See docs/precision.md.",
    )
    io_dtype: str | None = _option(
        None,
        'the graph\'s input and output dtype: ``"model"`` (the dtypes the program takes '
        'and gives) or ``"float32"`` (float inputs and outputs float32, Cast at the boundary); '
        'default float32 under ``precision="float32"``, else the model\'s.',
    )
    progress: bool | None = _option(
        None,
        "show progress on stderr (equations lowered, passes, weights written) once an export "
        "runs past ~2 s; default: when stderr is a terminal.",
    )

    def __post_init__(self) -> None:
        profile = get_target(self.target)
        newest = min(MAX_OPSET, profile.max_opset or MAX_OPSET)
        opset = min(DEFAULT_OPSET, newest) if self.opset is None else int(self.opset)
        if not MIN_OPSET <= opset <= newest:
            for_target = (
                f" for target {profile.name}"
                if newest < MAX_OPSET
                else " (the newest the installed onnx and onnxruntime know)"
            )
            raise ValueError(
                f"opset must be between {MIN_OPSET} and {newest}{for_target}, got {opset}"
            )
        functions = self.functions or ("keep" if profile.model_functions else "inline")
        if functions not in ("keep", "inline"):
            raise ValueError(f"functions must be 'keep' or 'inline', got {functions!r}")
        if self.loop_bound is not None and (
            isinstance(self.loop_bound, bool)
            or not isinstance(self.loop_bound, (int, np.integer))
            or self.loop_bound < 1
        ):
            raise ValueError(
                "loop_bound must be a positive int (the most steps a data-dependent while_loop "
                f"takes), got {self.loop_bound!r}"
            )
        if isinstance(self.constraints, str):
            raise SpecError(
                f"constraints must be a sequence of strings, got the string {self.constraints!r}: "
                f"write ({self.constraints!r},)"
            )
        if self.precision not in ("as-traced", "float32", "float16"):
            raise ValueError(
                f"precision must be 'as-traced', 'float32' or 'float16', got {self.precision!r}"
            )
        if self.io_dtype not in (None, "model", "float32"):
            raise ValueError(
                "io_dtype must be 'model' or 'float32' (or None: the policy's), got "
                f"{self.io_dtype!r}"
            )
        normalized = {
            "opset": opset,
            "target": profile,
            "functions": functions,
            "input_params": dict(self.input_params or {}),
            "input_names": _names(self.input_names),
            "output_names": _names(self.output_names),
            "lowerings": normalize_overrides(self.lowerings),
            "constraints": tuple(self.constraints or ()),
            "inputs_as_nchw": _names(self.inputs_as_nchw),
            "outputs_as_nchw": _names(self.outputs_as_nchw),
            "enable_double_precision": bool(self.enable_double_precision),
            "source_locations": bool(self.source_locations),
            "loop_bound": None if self.loop_bound is None else int(self.loop_bound),
        }
        for name, value in normalized.items():
            object.__setattr__(self, name, value)

    @property
    def profile(self) -> Target:
        """The target's profile: ``target`` as ``__post_init__`` resolved it (a name, or None
        for the default, becomes its :class:`Target`)."""
        return get_target(self.target)

    @property
    def opset_version(self) -> int:
        """The ONNX opset the export writes: ``opset`` as ``__post_init__`` resolved it (None
        becomes the default, or the target's newest if older)."""
        return cast(int, self.opset)  # __post_init__ stored an int

    def replace(self, **changes: Any) -> ExportConfig:
        """A copy with some options changed (validated again)."""
        return dataclasses.replace(self, **changes)


def option_names() -> tuple[str, ...]:
    """The keyword arguments an export accepts (the fields of :class:`ExportConfig`)."""
    return tuple(f.name for f in dataclasses.fields(ExportConfig))


class UnknownOptionError(TypeError):
    """A keyword argument that an entry point (``to_onnx``, ``verify``, ...) does not take."""


def checked_options(
    *forwards_to: Callable[..., Any],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an entry point so that a misspelled keyword raises :class:`UnknownOptionError`
    naming it, the closest accepted keyword and where the options are documented (not
    Python's ``ExportConfig.__init__() got an unexpected keyword argument``). The accepted
    keywords: the entry point's own parameters, the export options when it takes
    ``**options``, and those of ``forwards_to`` (functions its ``**options`` go on to)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        accepted, listed, takes_options = set(), set(), False
        for target in (fn, *forwards_to):
            params = inspect.signature(target).parameters.values()
            accepted |= {
                p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            }
            listed |= {
                p.name
                for p in params
                if p.kind is p.KEYWORD_ONLY
                or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)
            }
            # (to_onnx's options are keyword parameters in its signature: with_options_signature)
            takes_options |= (
                any(p.kind is p.VAR_KEYWORD for p in params) or set(option_names()) <= accepted
            )
        options = option_names() if takes_options else ()
        accepted |= set(options)
        own = sorted(listed - set(options))

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            unknown = [k for k in kwargs if k not in accepted]
            if unknown:
                raise UnknownOptionError(
                    _unknown_option_message(fn.__name__, unknown, accepted, own, options)
                )
            return fn(*args, **kwargs)

        return checked

    return decorate


def _unknown_option_message(
    entry: str, unknown: list[str], accepted: set[str], own: list[str], options: tuple[str, ...]
) -> str:
    lines = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(accepted), n=1, cutoff=0.6)
        suggestion = f": did you mean {close[0]!r}?" if close else ""
        lines.append(f"{entry}() got an unknown option {name!r}{suggestion}")
    if own:
        also = " and the export options" if options else ""
        lines.append(f"{entry}() takes {', '.join(own)}{also}")
    if options:
        lines.append(
            "the export options (each documented in help(jax2onnx_nn.to_onnx)): "
            + ", ".join(options)
        )
    return "\n".join(lines)


def with_options_signature(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Show the options as keyword parameters of ``fn`` (which takes ``**options``) in
    ``help()`` and ``inspect.signature``, and document them where the docstring says
    ``{options}``, from the fields of :class:`ExportConfig`."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    defaults = ExportConfig()
    for f in dataclasses.fields(ExportConfig):
        default = getattr(defaults, f.name)
        if f.name == "opset" or isinstance(default, Mapping):
            default = None
        params.append(
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type
            )
        )
    fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    if fn.__doc__ and "{options}" in fn.__doc__:
        lines = [f"        {f.name}: {f.metadata['doc']}" for f in dataclasses.fields(ExportConfig)]
        fn.__doc__ = fn.__doc__.replace("        {options}", "\n".join(lines))
    return fn


__all__ = [
    "DEFAULT_OPSET",
    "MAX_OPSET",
    "MIN_OPSET",
    "ExportConfig",
    "UnknownOptionError",
    "checked_options",
    "ir_version",
    "newest_opset",
    "option_names",
    "with_options_signature",
]
