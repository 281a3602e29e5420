"""Export, check, run in onnxruntime, compare with JAX: the machinery behind every test helper.

:func:`roundtrip` never raises on a numerical mismatch; it returns a :class:`RoundTrip` whose
``str()`` is a readable diff (per-output error table, then the largest element differences).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import onnx

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.config import checked_options
from jax2onnx_nn.core.layout import nchw_reference
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.core.verify import (
    VerifyReport,
    VerifyRun,
    default_tolerance,
    symbolic_dim_names,
    verify,
)

DIFF_ROWS = 5  # largest element differences shown per mismatching output


@dataclass
class RoundTrip:
    """The result of :func:`roundtrip`: the model, the comparison report and readable diffs."""

    model: onnx.ModelProto
    report: VerifyReport
    diffs: list[str] = field(default_factory=list)
    saved_to: str | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok

    def __str__(self) -> str:
        runtime = self.report.runtime
        head = f"{runtime} matches JAX" if self.ok else f"{runtime} and JAX disagree"
        parts = [f"{head} ({self.model.graph.name}, opset {_opset(self.model)}):", str(self.report)]
        parts += self.diffs
        if self.saved_to:
            parts.append(f"model saved to {self.saved_to}")
        return "\n".join(parts)

    def raise_if_failed(self) -> None:
        """Raise an AssertionError with the diff when the runtime and JAX disagree."""
        if not self.ok:
            raise AssertionError(str(self))


@checked_options()
def roundtrip(
    model_or_fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    input_values: Sequence[Any] | None = None,
    seed: int = 0,
    reference: Callable[..., Any] | None = None,
    onnx_model: onnx.ModelProto | None = None,
    full_check: bool = False,
    save_dir: str | os.PathLike[str] | None = None,
    runtime: str = "onnxruntime",
    jit: bool = False,
    reference_device: str = "cpu",
    **to_onnx_options: Any,
) -> RoundTrip:
    """Export ``model_or_fn`` (unless ``onnx_model`` is given), run the ONNX checker, and
    compare onnxruntime with JAX on random inputs for every size in ``sizes``.

    Args:
        model_or_fn: a function or a Flax NNX / Equinox module.
        inputs: input specs, as for :func:`jax2onnx_nn.to_onnx`.
        sizes: values to try per symbolic dim, e.g. ``{"B": [1, 3]}``.
        rtol: relative float tolerance (default by dtype); ints and bools compare exactly.
        atol: absolute float tolerance (default by dtype).
        input_values: flat concrete inputs instead of random ones.
        seed: seed of the random inputs.
        reference: a JAX callable computing what the graph should, from the graph's inputs
            (default: ``model_or_fn``, a module in the mode the export uses, i.e. inference
            unless ``training=True``, with the transposes of ``inputs_as_nchw`` /
            ``outputs_as_nchw`` added).
        onnx_model: an already exported model to check instead of exporting.
        full_check: run the checker with strict shape inference.
        save_dir: on a mismatch, save the model there (the path is in the diff).
        runtime: where the model runs (see :func:`jax2onnx_nn.verify`).
        jit: run the JAX side under ``jax.jit``: one XLA compile instead of one per op (a
            linear-algebra reference compiles ~40 small programs op by op).
        reference_device: where JAX computes the reference: ``"cpu"`` (default; the
            function's arrays copied there on an accelerator host) or ``"default"`` (JAX's
            default device); see :func:`jax2onnx_nn.verify`.
        **to_onnx_options: options of :func:`jax2onnx_nn.to_onnx`.

    Returns:
        A :class:`RoundTrip`; ``result.ok``, ``result.model``, ``result.report``,
        ``result.raise_if_failed()``.

    Raises:
        ConversionError, SpecError: the export failed.
        onnx.checker.ValidationError: the model is not valid ONNX.
        AssertionError: an initializer of the model (or of a Loop/Scan/If body) is read by
            no node (see :func:`unread_initializers`).
    """
    model = (
        onnx_model if onnx_model is not None else to_onnx(model_or_fn, inputs, **to_onnx_options)
    )
    onnx.checker.check_model(model, full_check=full_check)
    unread = unread_initializers(model)
    if unread:
        raise AssertionError(
            f"initializers no node reads (onnxruntime warns and drops them): {', '.join(unread)}"
        )
    x64 = bool(to_onnx_options.get("enable_double_precision", False))
    input_params = to_onnx_options.get("input_params")
    training = bool(to_onnx_options.get("training", False))
    fn, specs, layout = reference_for(model_or_fn, training), list(inputs), {}
    if reference is not None:  # it takes the graph's inputs as they are (NCHW where they are)
        _, specs = nchw_reference(
            fn, inputs, model, input_params=dict(input_params or {}), enable_double_precision=x64
        )
        fn, layout = reference, {"inputs_as_nchw": (), "outputs_as_nchw": ()}
    output_names = [o.name for o in model.graph.output]
    diffs: list[str] = []

    def collect(
        run: VerifyRun, flat: list[Any], actual: list[np.ndarray], expected: list[np.ndarray]
    ) -> None:
        if run.ok or len(actual) != len(expected):
            return
        for j, (o, a, e) in enumerate(zip(run.outputs, actual, expected, strict=True)):
            if not o.ok:
                name = output_names[j] if j < len(output_names) else o.name
                diffs.append(element_diff(name, run.sizes, np.asarray(a), e, rtol, atol, runtime))

    report = verify(
        fn,
        model,
        specs,
        sizes=sizes,
        input_params=input_params,
        enable_double_precision=x64,
        rtol=rtol,
        atol=atol,
        seed=seed,
        input_values=input_values,
        on_run=collect,
        training=training,
        runtime=runtime,
        jit=jit,
        reference_device=reference_device,
        **layout,
    )
    result = RoundTrip(model, report, diffs)
    if not result.ok and save_dir is not None:
        os.makedirs(save_dir, exist_ok=True)
        result.saved_to = os.path.join(os.fspath(save_dir), f"{model.graph.name or 'model'}.onnx")
        onnx.save(model, result.saved_to)
    return result


def unread_initializers(model: onnx.ModelProto) -> list[str]:
    """The initializers of ``model``'s graph and of its body graphs that no node reads (in
    their graph or a body inside it) and that are no output of their graph: what an export
    should never leave (onnxruntime warns about each one and drops it).

    >>> unread_initializers(onnx.load("model.onnx"))  # doctest: +SKIP
    []
    """
    unread: list[str] = []

    def reads(nodes: Sequence[onnx.NodeProto]) -> set[str]:
        """The names ``nodes`` and the nodes of their bodies read; each body's unread
        initializers go into ``unread`` on the way."""
        names: set[str] = set()
        for node in nodes:
            names.update(node.input)
            for attr in node.attribute:
                for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    names |= check(body)
        return names

    def check(graph: onnx.GraphProto) -> set[str]:
        names = reads(graph.node)
        kept = names | {o.name for o in graph.output}
        unread.extend(t.name for t in graph.initializer if t.name not in kept)
        return names

    check(model.graph)
    for function in model.functions:  # no initializers of their own; their bodies may have
        reads(function.node)
    return unread


def reference_for(fn: Any, training: bool = False) -> Any:
    """What an export of ``fn`` computes, in JAX: a Flax NNX / Equinox module in inference mode
    (training mode if asked) on a copy; anything else as it is. Frameworks are only looked at
    when already imported."""
    if "flax.nnx" in sys.modules:
        from flax import nnx

        if isinstance(fn, nnx.Module):
            copy = nnx.merge(*nnx.split(fn), copy=True)
            copy.set_attributes(
                deterministic=not training,
                use_running_average=not training,
                raise_if_not_found=False,
            )
            return copy
    if "equinox" in sys.modules:
        import equinox as eqx

        if isinstance(fn, eqx.Module):
            return eqx.nn.inference_mode(fn, value=not training)
    return fn


def element_diff(
    name: str,
    sizes: Mapping[str, int],
    actual: np.ndarray,
    expected: np.ndarray,
    rtol: float | None = None,
    atol: float | None = None,
    runtime: str = "onnxruntime",
) -> str:
    """A table of the largest element differences between an output of ``runtime`` and JAX's."""
    where = ", ".join(f"{k}={v}" for k, v in sizes.items())
    title = f"{name}" + (f" [{where}]" if where else "")
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (
            f"{title}: {runtime} gives {actual.dtype}{list(actual.shape)}, "
            f"JAX gives {expected.dtype}{list(expected.shape)}"
        )
    d_rtol, d_atol = default_tolerance(expected.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    with np.errstate(invalid="ignore"):
        err = np.abs(a - e)
        bad = ~same & ~(err <= atol + rtol * np.abs(e))
    err = np.where(np.isnan(err), np.inf, err)
    positions = np.argwhere(bad)
    order = np.argsort(-err[bad], kind="stable")[:DIFF_ROWS]
    rows = [("index", runtime, "JAX", "abs diff")]
    for k in order:
        idx = tuple(int(i) for i in positions[k])
        rows.append((str(idx), _fmt(actual[idx]), _fmt(expected[idx]), _fmt(err[idx])))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    table = [
        "    " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]
    shown = min(len(positions), DIFF_ROWS)
    header = (
        f"{title}: {len(positions)} of {expected.size} elements differ "
        f"(rtol={rtol:g}, atol={atol:g}); the {shown} largest:"
    )
    return "\n".join([header, *table])


def dim_names_of(specs: Sequence[Any]) -> list[str]:
    """The symbolic dim names the specs use, in order of first use."""
    return symbolic_dim_names(jax.tree_util.tree_leaves(parse_specs(list(specs), warn=False).args))


def sizes_for(specs: Sequence[Any], sizes: Mapping[str, Sequence[int]]) -> dict[str, Sequence[int]]:
    """The entries of ``sizes`` for the symbolic dims ``specs`` have: one ``sizes`` for the
    cases of a parametrized test whose specs have some of its dims (``verify`` refuses a size
    for a dim the inputs lack, a misspelled name being the usual reason).

    >>> sizes_for([("B", 3)], {"B": [1, 4], "T": [2]})
    {'B': [1, 4]}
    """
    dims = set(dim_names_of(specs))
    return {name: values for name, values in sizes.items() if name in dims}


def _fmt(value: Any) -> str:
    value = np.asarray(value)
    if value.dtype.kind == "f":
        return f"{float(value):.7g}"
    return str(value.item())


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
