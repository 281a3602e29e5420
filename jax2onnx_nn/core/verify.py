"""Run an exported model in a runtime (onnxruntime by default) and the callable in JAX on the same inputs."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import ExportConfig
from jax2onnx_nn.core.patching import export_session
from jax2onnx_nn.core.runtimes import open_session
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.core.targets import TARGETS

DEFAULT_SIZE = 3


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for comparing an output of ``dtype``; exact for ints and bools."""
    name = np.dtype(dtype).name
    return {
        "float64": (1e-12, 1e-12),
        "float32": (1e-5, 1e-5),
        "float16": (2e-3, 2e-3),
        "bfloat16": (1.6e-2, 1.6e-2),
    }.get(name, (0.0, 0.0))


@dataclass
class OutputComparison:
    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool
    detail: str = ""


@dataclass
class VerifyRun:
    sizes: dict[str, int]
    outputs: list[OutputComparison]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)


@dataclass
class VerifyReport:
    runtime: str = "onnxruntime"
    runs: list[VerifyRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for r in self.runs for o in r.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.max_rel for r in self.runs for o in r.outputs), default=0.0)

    @property
    def note(self) -> str:
        """Why float64 outputs are off, where the runtime computes float64 in float32 (its
        target profile's ``float64=False``: OpenVINO's CPU plugin); empty otherwise."""
        off = [o for r in self.runs for o in r.outputs if not o.ok and o.dtype == "float64"]
        profile = TARGETS.get(self.runtime)
        if not off or profile is None or profile.float64:
            return ""
        rel = max(o.max_rel for o in off)
        rtol, _ = default_tolerance(np.float32)
        return (f"note: {self.runtime} computes float64 in float32 (no graph can change that), so float64 outputs "
                f"match JAX to float32 precision at best: max rel error {rel:.3g} here "
                f"({'within' if rel <= rtol else 'beyond'} float32's tolerance {rtol:g}); "
                "pass rtol/atol to verify for float32 precision, or run float64 models on another runtime")

    def __str__(self) -> str:
        lines = []
        for run in self.runs:
            sizes = ", ".join(f"{k}={v}" for k, v in run.sizes.items()) or "static shapes"
            for o in run.outputs:
                mark = "ok" if o.ok else "MISMATCH"
                lines.append(
                    f"[{sizes}] {o.name} {o.dtype}{list(o.shape)}: max abs {o.max_abs:.3g}, "
                    f"max rel {o.max_rel:.3g} {mark}{(' - ' + o.detail) if o.detail else ''}"
                )
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise AssertionError(f"{self.runtime} and JAX disagree:\n" + str(self))


def compare(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float | None = None, atol: float | None = None) -> OutputComparison:
    """Compare one output: exact for ints/bools, rtol/atol for floats, NaN where NaN."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    d_rtol, d_atol = default_tolerance(expected.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    base = OutputComparison(name, expected.dtype.name, tuple(expected.shape), 0.0, 0.0, True)
    if actual.shape != expected.shape:
        base.ok, base.detail = False, f"shape {actual.shape} != JAX {expected.shape}"
        return base
    if actual.dtype != expected.dtype:
        base.ok, base.detail = False, f"dtype {actual.dtype} != JAX {expected.dtype}"
        return base
    if expected.size == 0:
        return base
    if expected.dtype.kind in "biu":
        diff = actual != expected
        base.max_abs = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
        base.ok = not bool(diff.any())
        if not base.ok:
            idx = tuple(int(i) for i in np.argwhere(diff)[0])
            base.detail = f"first difference at {idx}: {actual[idx]} vs {expected[idx]}"
        return base
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    same_special = (nan_a & nan_e) | (np.isinf(e) & (a == e))
    finite = ~(nan_a | nan_e | np.isinf(a) | np.isinf(e))
    # differences of finite pairs only: inf - inf would warn (and mean nothing)
    err = np.abs(np.subtract(a, e, out=np.zeros_like(e), where=finite))
    # relative to the expected value where it is not 0 (a 0 is only compared absolutely)
    relative = finite & (e != 0)
    rel = np.divide(err, np.abs(e), out=np.zeros_like(e), where=relative)
    base.max_abs = float(err.max())
    base.max_rel = float(rel.max())
    # the tolerance of finite pairs only: rtol=0 times an inf would warn
    bad = ~(same_special | (finite & (err <= atol + rtol * np.abs(np.where(finite, e, 0.0)))))
    base.ok = not bool(bad.any())
    if not base.ok:
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        base.detail = f"{int(bad.sum())} elements off; first at {idx}: {actual[idx]} vs {expected[idx]}"
    return base


def random_inputs(avals: Sequence[Any], sizes: Mapping[str, int], rng: np.random.Generator) -> list[Any]:
    """Random values for avals, symbolic dims set from ``sizes`` (default 3 each)."""
    values = []
    for aval in avals:
        shape = tuple(jxi.evaluate_dim(d, sizes, DEFAULT_SIZE) for d in aval.shape)
        dtype = aval.dtype
        if jxi.is_key_dtype(dtype):
            data = rng.integers(0, 2**32, size=shape + jxi.key_data_shape(dtype), dtype=np.uint64).astype(np.uint32)
            values.append(jax.random.wrap_key_data(data, impl=jxi.key_impl(dtype)))
            continue
        dtype = np.dtype(dtype)
        if dtype == np.bool_:
            values.append(rng.random(shape) < 0.5)
        elif dtype.kind == "i":
            values.append(rng.integers(-10, 11, size=shape).astype(dtype))
        elif dtype.kind == "u":
            values.append(rng.integers(0, 21, size=shape).astype(dtype))
        elif dtype.kind == "c":
            values.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype))
        else:
            values.append(rng.standard_normal(shape).astype(dtype))
    return values


def run_onnx(model: onnx.ModelProto | str | os.PathLike[str] | bytes, flat_inputs: Sequence[Any], runtime: str = "onnxruntime") -> list[np.ndarray]:
    """Run a model in ``runtime`` (default onnxruntime CPU) on flat inputs in graph-input order
    (complex inputs may be given as complex arrays: they are fed as their (real, imag) pairs)."""
    return open_session(model, runtime)(_feeds(flat_inputs))


def _feeds(flat_inputs: Sequence[Any]) -> list[np.ndarray]:
    """Flat inputs as numpy arrays, as ONNX holds them: typed PRNG keys as their uint32 key
    data, complex numbers as float (real, imag) pairs."""
    return [jxi.to_data(v) for v in flat_inputs]


def _reference_call(fn: Callable[..., Any], args: Any, kwargs: Any, jit: bool) -> Any:
    """``fn(*args, **kwargs)``, compiled with ``jax.jit`` if asked (one XLA program instead of
    one per op: much faster for real models) and it can be (a reference that needs concrete
    values runs op by op)."""
    if not jit:
        return fn(*args, **kwargs)
    try:
        return jax.jit(fn)(*args, **kwargs)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError, jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError):
        return fn(*args, **kwargs)


def verify(
    fn: Callable[..., Any],
    model: onnx.ModelProto | str | os.PathLike[str],
    inputs: Sequence[Any],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    input_params: Mapping[str, Any] | None = None,
    enable_double_precision: bool | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    input_values: Sequence[Any] | None = None,
    on_run: Callable[[VerifyRun, list[Any], list[np.ndarray], list[np.ndarray]], None] | None = None,
    training: bool = False,
    jit: bool = False,
    runtime: str = "onnxruntime",
) -> VerifyReport:
    """Run ``model`` in ``runtime`` and ``fn`` in JAX on the same random inputs and compare.

    Args:
        fn: the exported callable.
        model: the ModelProto (or a path to it).
        inputs: the same input specs as given to ``to_onnx``.
        sizes: values to try for each symbolic dim, e.g. ``{"B": [1, 5, 64]}``; run i uses
            the i-th size of each dim (cycling shorter lists). Unnamed dims get 3.
        input_params: as for ``to_onnx``; their values are fed as given.
        enable_double_precision: as for ``to_onnx`` (default: read from the model metadata).
        rtol, atol: float tolerances (default by dtype: f32 1e-5, f64 1e-12); ints and bools
            are always compared exactly.
        input_values: flat concrete inputs to use instead of random ones (one run).
        on_run: called after each run with the run, its flat inputs, the onnxruntime outputs
            and the JAX outputs (for diffs that need the arrays themselves).
        training: as for ``to_onnx``: modules are compared in the mode they were exported in
            (inference by default), on a copy; the module itself is not changed.
        jit: run ``fn`` compiled by ``jax.jit`` (several times faster on real models). Off by
            default: XLA compiles whole programs, and a rare program (a jitted philox4x32 key
            stream, on jax 0.10) never finishes compiling, where op by op it runs.

    Returns:
        A :class:`VerifyReport`; ``report.ok``, ``report.max_abs``, ``report.max_rel``;
        ``report.raise_if_failed()`` raises an AssertionError with the comparison table.

    Raises:
        RuntimeUnavailable: ``runtime`` is not installed here (the message says how to install).
    """
    session = open_session(model, runtime)
    if enable_double_precision is None:
        enable_double_precision = _model_x64(model)
    rng = np.random.default_rng(seed)
    sizes = {k: list(v) if isinstance(v, (list, tuple)) else [int(v)] for k, v in (sizes or {}).items()}
    n_runs = max((len(v) for v in sizes.values()), default=1)
    report = VerifyReport(runtime)
    with jxi.x64(enable_double_precision):
        specs = parse_specs(inputs, input_params=dict(input_params or {}), enable_double_precision=enable_double_precision, warn=False)
        pairs, treedef = specs.flat()
        avals = [leaf for _, leaf in pairs]
        for i in range(n_runs):
            run_sizes = {k: v[i % len(v)] for k, v in sizes.items()}
            if input_values is not None:  # as the graph takes them (float64 -> float32 without x64)
                flat = [_as_input(v, aval) for v, aval in zip(input_values, avals, strict=True)]
            else:
                flat = random_inputs(avals, run_sizes, rng)
                n_args = len(jax.tree_util.tree_leaves(specs.args))
                # input_params keep the user's values (a flag stays the flag they asked for)
                param_leaves = jax.tree_util.tree_leaves(dict(input_params or {}))
                if len(param_leaves) == len(flat) - n_args:
                    flat[n_args:] = [np.asarray(v) for v in param_leaves]
            # JAX arrays, so that fn sees what it sees in JAX (x.at[...], JAX indexing rules)
            as_jax = [v if hasattr(v, "dtype") and jxi.is_key_dtype(v.dtype) else jnp.asarray(v) for v in flat]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, as_jax)
            # the reference is what was exported: modules in the same (inference) mode
            with export_session(fn, ExportConfig(training=training, coarse_ops=False)) as prepared:
                expected = jax.tree_util.tree_leaves(_reference_call(prepared.fn, args, kwargs, jit))
            actual = session(_feeds(flat))
            outputs = [
                compare(f"out_{j}", a, _as_numpy(e), rtol, atol)
                for j, (a, e) in enumerate(itertools.zip_longest(actual, expected))
            ] if len(actual) == len(expected) else [
                OutputComparison("outputs", "", (), 0.0, 0.0, False, f"{len(actual)} ONNX outputs vs {len(expected)} JAX outputs")
            ]
            report.runs.append(VerifyRun(run_sizes, outputs))
            if on_run is not None:
                on_run(report.runs[-1], flat, actual, [_as_numpy(e) for e in expected])
            if input_values is not None:
                break
    return report


def _as_input(value: Any, aval: Any) -> Any:
    """A user-given input value in the dtype of its graph input (typed keys as they are)."""
    if hasattr(value, "dtype") and jxi.is_key_dtype(value.dtype):
        return value
    return np.asarray(value, dtype=aval.dtype)


def _as_numpy(value: Any) -> np.ndarray:
    """A JAX output as numpy, as ONNX holds it: typed PRNG keys as their uint32 data, complex
    numbers as float (real, imag) pairs in a trailing dim of 2."""
    return jxi.to_data(value)


def _model_x64(model: Any) -> bool:
    if isinstance(model, onnx.ModelProto):
        for p in model.metadata_props:
            if p.key == "jax2onnx_nn.enable_double_precision":
                return p.value == "True"
    return False
