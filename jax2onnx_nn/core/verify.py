"""Run an exported model in a runtime (onnxruntime by default) and the callable in JAX on the same
inputs."""

from __future__ import annotations

import difflib
import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.config import ExportConfig, checked_options
from jax2onnx_nn.core.layout import Selection, layout_reference, recorded_layout, resolve
from jax2onnx_nn.core.lower import is_float
from jax2onnx_nn.core.patching import export_session
from jax2onnx_nn.core.precision import LOW_FLOATS
from jax2onnx_nn.core.runtimes import open_session
from jax2onnx_nn.core.signature import LoadedModel, ModelLike, ModelSignature, load_model
from jax2onnx_nn.core.specs import parse_specs
from jax2onnx_nn.core.targets import TARGETS
from jax2onnx_nn.core.widened import eval_widened

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
    rtol: float = 0.0
    atol: float = 0.0
    # bfloat16 / float16 outputs: max abs error against JAX running the same program in
    # float32, of the runtime's output and of JAX's own low-precision output
    float32_abs: float | None = None
    jax_float32_abs: float | None = None


@dataclass
class VerifyRun:
    """One run: the size of every symbolic dim of the inputs (empty for static shapes) and
    the comparison of each output."""

    sizes: dict[str, int]
    outputs: list[OutputComparison]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.sizes.items()) or "static shapes"

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)


@dataclass
class VerifyReport:
    runtime: str = "onnxruntime"
    runs: list[VerifyRun] = field(default_factory=list)
    reference: str = ""  # where JAX computed the reference (see :func:`verify`'s reference_device)

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
        return (
            f"note: {self.runtime} computes float64 in float32 (no graph can change that), so "
            f"float64 outputs match JAX to float32 precision at best: max rel error {rel:.3g} here "
            f"({'within' if rel <= rtol else 'beyond'} float32's tolerance {rtol:g}); "
            "pass rtol/atol to verify for float32 precision, or run float64 models on another "
            "runtime"
        )

    def __str__(self) -> str:
        lines = []
        for run in self.runs:
            for o in run.outputs:
                mark = "ok" if o.ok else "MISMATCH"
                tolerance = (
                    f" (rtol {o.rtol:g}, atol {o.atol:g})" if o.dtype in _LOW_PRECISION else ""
                )
                lines.append(
                    f"[{run.label}] {o.name} {o.dtype}{list(o.shape)}: max abs {o.max_abs:.3g}, "
                    f"max rel {o.max_rel:.3g}{tolerance} "
                    f"{mark}{(' - ' + o.detail) if o.detail else ''}"
                )
                if o.float32_abs is not None:
                    lines.append(
                        f"    vs JAX in float32: max abs {o.float32_abs:.3g} "
                        f"(JAX's own {o.dtype}: {o.jax_float32_abs:.3g})"
                    )
        if self.note:
            lines.append(self.note)
        if self.reference:
            lines.append(f"JAX reference: {self.reference}")
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise AssertionError(f"{self.runtime} and JAX disagree:\n" + str(self))


def compare(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    rtol: float | None = None,
    atol: float | None = None,
    runtime: str = "ONNX",
) -> OutputComparison:
    """Compare one output: exact for ints/bools, rtol/atol for floats, NaN where NaN and
    infinities of the same sign. ``max_abs`` and ``max_rel`` are over the finite pairs; the
    detail of a mismatch counts the elements where only one side is NaN, where infinities
    differ, and where finite values are beyond the tolerance, each with its first index and
    both values (``runtime`` names the ONNX side)."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    d_rtol, d_atol = default_tolerance(expected.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    base = OutputComparison(
        name, expected.dtype.name, tuple(expected.shape), 0.0, 0.0, True, rtol=rtol, atol=atol
    )
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
        base.max_abs = float(
            np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)))
        )
        base.ok = not bool(diff.any())
        if not base.ok:
            idx = tuple(int(i) for i in np.argwhere(diff)[0])
            base.detail = f"first difference at {idx}: {actual[idx]} vs {expected[idx]}"
        return base
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    special = nan_a | nan_e | np.isinf(a) | np.isinf(e)
    finite = ~special
    # differences of finite pairs only: inf - inf would warn (and mean nothing)
    err = np.abs(np.subtract(a, e, out=np.zeros_like(e), where=finite))
    # relative to the expected value where it is not 0 (a 0 is only compared absolutely)
    relative = finite & (e != 0)
    rel = np.divide(err, np.abs(e), out=np.zeros_like(e), where=relative)
    base.max_abs = float(err.max())
    base.max_rel = float(rel.max())
    # the tolerance of finite pairs only: rtol=0 times an inf would warn
    beyond = finite & ~(err <= atol + rtol * np.abs(np.where(finite, e, 0.0)))
    kinds = (
        (nan_e & ~nan_a, "NaN in JAX only"),
        (nan_a & ~nan_e, f"NaN in {runtime} only"),
        (special & ~nan_a & ~nan_e & (a != e), "infinities differ"),
        (beyond, "beyond tolerance"),
    )
    bad = np.logical_or.reduce([mask for mask, _ in kinds])
    base.ok = not bool(bad.any())
    if not base.ok:
        parts = []
        for mask, what in kinds:
            if mask.any():
                idx = tuple(int(i) for i in np.argwhere(mask)[0])
                values = f"{runtime} {actual[idx]}, JAX {expected[idx]}"
                parts.append(f"{what} at {int(mask.sum())}, first at {idx} ({values})")
        base.detail = f"{int(bad.sum())} elements off: " + "; ".join(parts)
    return base


def random_inputs(
    avals: Sequence[Any], sizes: Mapping[str, int], rng: np.random.Generator
) -> list[Any]:
    """Random values for avals, symbolic dims set from ``sizes`` (default 3 each)."""
    values = []
    for aval in avals:
        shape = tuple(jxi.evaluate_dim(d, sizes, DEFAULT_SIZE) for d in aval.shape)
        dtype = aval.dtype
        if jxi.is_key_dtype(dtype):
            data = rng.integers(
                0, 2**32, size=shape + jxi.key_data_shape(dtype), dtype=np.uint64
            ).astype(np.uint32)
            values.append(jax.random.wrap_key_data(jnp.asarray(data), impl=jxi.key_impl(dtype)))
            continue
        dtype = np.dtype(dtype)
        if dtype == np.bool_:
            values.append(rng.random(shape) < 0.5)
        elif dtype.kind == "i":
            values.append(rng.integers(-10, 11, size=shape).astype(dtype))
        elif dtype.kind == "u":
            values.append(rng.integers(0, 21, size=shape).astype(dtype))
        elif dtype.kind == "c":
            values.append(
                (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
            )
        else:
            values.append(rng.standard_normal(shape).astype(dtype))
    return values


def run_onnx(
    model: ModelLike | LoadedModel, flat_inputs: Sequence[Any], runtime: str = "onnxruntime"
) -> list[np.ndarray]:
    """Run a model in ``runtime`` (default onnxruntime CPU) on flat inputs in graph-input order
    (complex inputs may be given as complex arrays: they are fed as their (real, imag) pairs)."""
    return open_session(model, runtime)(_feeds(flat_inputs))


def _feeds(flat_inputs: Sequence[Any]) -> list[np.ndarray]:
    """Flat inputs as numpy arrays, as ONNX holds them: typed PRNG keys as their uint32 key
    data, complex numbers as float (real, imag) pairs."""
    return [jxi.to_data(v) for v in flat_inputs]


_LOW_PRECISION = frozenset(d.name for d in LOW_FLOATS)
PRECISION_KEY = "jax2onnx_nn.precision"


def _both_float(a: Any, b: Any) -> bool:
    return is_float(np.asarray(a).dtype) and is_float(np.asarray(b).dtype)


def _policy_feeds(feeds: list[np.ndarray], signature: ModelSignature) -> list[np.ndarray]:
    """A precision policy's export (``precision=`` / ``io_dtype=``) takes float inputs in its
    own float dtype (float32 at the boundary): the feeds in the graph's dtypes."""
    return [
        f.astype(g.dtype) if g.dtype is not None and _both_float(f, np.zeros((), g.dtype)) else f
        for f, g in zip(feeds, signature.inputs, strict=False)
    ]


def _float32_errors(
    outputs: list[OutputComparison],
    actual: list[np.ndarray],
    expected: list[np.ndarray],
    reference: list[Any],
    accept_as_near: bool,
) -> None:
    """Fill the float32 errors of the bfloat16 / float16 outputs (the reference: JAX in
    float32). With ``accept_as_near`` (default tolerances), an output beyond the tolerance of
    JAX's low-precision result passes when it is no farther from the float32 answer than
    that result plus ``atol``: both are roundings of one float computation, in other orders."""
    for o, a, e, r in zip(outputs, actual, expected, reference, strict=False):
        if o.dtype not in _LOW_PRECISION or np.shape(a) != np.shape(r):
            continue
        r = np.asarray(r, np.float64)
        o.float32_abs = float(np.nanmax(np.abs(np.asarray(a, np.float64) - r), initial=0.0))
        o.jax_float32_abs = float(np.nanmax(np.abs(np.asarray(e, np.float64) - r), initial=0.0))
        # only values that are all finite, of the right shape and dtype, may pass this way
        comparable = not o.detail.startswith(("shape ", "dtype ")) and bool(
            np.isfinite(np.asarray(a, np.float64)).all() and np.isfinite(r).all()
        )
        if (
            accept_as_near
            and not o.ok
            and comparable
            and o.float32_abs <= o.jax_float32_abs + o.atol
        ):
            o.ok = True
            o.detail = (
                f"beyond the tolerance of JAX's {o.dtype}, but as near JAX in float32 "
                f"({o.float32_abs:.3g} vs JAX's {o.jax_float32_abs:.3g}, atol {o.atol:g})"
            )


def _float32_reference(fn: Callable[..., Any], args: Any, kwargs: Any) -> list[Any] | None:
    """``fn``'s flat outputs computed in float32 where it computes bfloat16 / float16; None
    where the program cannot be re-run that way."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))

    def flat_fn(*xs: Any) -> Any:
        a, k = jax.tree_util.tree_unflatten(treedef, list(xs))
        return fn(*a, **k)

    try:
        return [np.asarray(v) for v in eval_widened(flat_fn, leaves, LOW_FLOATS)]
    except Exception:  # the reference is extra information: never fail verify for it
        return None


REFERENCE_DEVICES = ("cpu", "default")


def _reference_call(fn: Callable[..., Any], args: Any, kwargs: Any, jit: bool) -> Any:
    """``fn(*args, **kwargs)``, compiled with ``jax.jit`` if asked (one XLA program instead of
    one per op: much faster for real models) and it can be (a reference that needs concrete
    values runs op by op)."""
    if not jit:
        return fn(*args, **kwargs)
    try:
        return jax.jit(fn)(*args, **kwargs)
    except _TRACE_ERRORS:
        return fn(*args, **kwargs)


_TRACE_ERRORS = (
    TypeError,
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _default_platform() -> str:
    """The platform JAX runs on by default here (``cpu``, ``tpu``, ``gpu``)."""
    return jax.default_backend()


def reference_outputs(
    fn: Callable[..., Any], args: Any, kwargs: Any, *, jit: bool = False, device: str = "cpu"
) -> tuple[Any, str]:
    """``fn(*args, **kwargs)`` computed where its numbers are comparable with a runtime's, and
    a phrase saying where.

    An accelerator computes float32 matrix products at its default precision (bfloat16 passes
    on a TPU): an export that is right is then 1e-2 off. So with ``device="cpu"`` (default) on
    a host whose default device is not the CPU, ``fn`` is traced, its arrays (weights closed
    over or held by a module) are copied to the CPU and the jaxpr runs there; a function that
    cannot be traced (it needs concrete values) runs where its arrays are, at matmul precision
    "highest". ``device="default"`` runs ``fn`` as it is, on the default device.
    """
    if device not in REFERENCE_DEVICES:
        raise ValueError(f"reference_device must be one of {REFERENCE_DEVICES}, got {device!r}")
    platform = _default_platform()
    if device == "default":
        return _reference_call(fn, args, kwargs, jit), f"{platform} (the default device, as asked)"
    if platform == "cpu":
        return _reference_call(fn, args, kwargs, jit), "cpu"
    cpu = jax.devices("cpu")[0]
    flat, treedef = jax.tree_util.tree_flatten((args, kwargs))

    def flat_fn(*leaves: Any) -> Any:
        a, k = jax.tree_util.tree_unflatten(treedef, leaves)
        return fn(*a, **k)

    try:
        closed = jax.make_jaxpr(flat_fn)(*flat)
    except _TRACE_ERRORS:
        with jax.default_device(cpu), jax.default_matmul_precision("highest"):
            outs = fn(*args, **kwargs)
        return outs, (
            f"{platform} at matmul precision 'highest' (the function needs concrete "
            "values: its arrays could not be moved to the cpu)"
        )
    consts = jax.device_put(list(closed.consts), cpu)
    on_cpu = jax.device_put(flat, cpu)
    with jax.default_device(cpu):
        run = jex.core.jaxpr_as_fun(jex.core.ClosedJaxpr(closed.jaxpr, consts))
        outs = (jax.jit(run) if jit else run)(*on_cpu)
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(flat_fn, *flat))
    return (
        jax.tree_util.tree_unflatten(out_tree, list(outs)),
        f"cpu (the function's arrays copied from {platform}; reference_device='default' runs it "
        "there)",
    )


@checked_options()
def verify(
    fn: Callable[..., Any],
    model: ModelLike | LoadedModel,
    inputs: Sequence[Any],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    input_params: Mapping[str, Any] | None = None,
    enable_double_precision: bool | None = None,
    inputs_as_nchw: Selection = None,
    outputs_as_nchw: Selection = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    input_values: Sequence[Any] | None = None,
    on_run: Callable[[VerifyRun, list[Any], list[np.ndarray], list[np.ndarray]], None]
    | None = None,
    training: bool = False,
    jit: bool = False,
    runtime: str = "onnxruntime",
    reference_device: str = "cpu",
) -> VerifyReport:
    """Run ``model`` in ``runtime`` and ``fn`` in JAX on the same random inputs and compare.

    Args:
        fn: the exported callable.
        model: the ModelProto, an onnx_ir Model, the serialized bytes, or a path to the file.
        inputs: the same input specs as given to ``to_onnx``.
        sizes: values to try for each symbolic dim, e.g. ``{"B": [1, 5, 64]}``; run i uses
            the i-th size of each dim (cycling shorter lists). Dims not named get 3. A name
            that is no dim of ``inputs`` is an error.
        input_params: as for ``to_onnx``; their values are fed as given.
        enable_double_precision: as for ``to_onnx`` (default: as the model records it, else
            whether it has 64-bit inputs or outputs).
        inputs_as_nchw: as for ``to_onnx`` (default: as the model records it): ``fn`` and
            ``inputs`` stay channels-last, and the JAX side is transposed to the graph's
            channels-first inputs.
        outputs_as_nchw: as for ``to_onnx`` (default: as the model records it): the graph's
            channels-first outputs are compared with the JAX side transposed.
        rtol: relative float tolerance (default by dtype: f32 1e-5, f64 1e-12, float16 2e-3,
            bfloat16 1.6e-2: about two ulps of 1; printed in the report for 16-bit floats); ints
            and bools are always compared exactly. A bfloat16 / float16 output's line also
            gives its error against JAX running the same program in float32, beside JAX's own.
            At the default tolerances such an output also passes when it is no farther from
            that float32 answer than JAX's own result plus ``atol`` (a deep bfloat16 model's
            logits differ by more than two ulps between two orders of rounding, each as near
            the float answer as the other); the line says so.
        atol: absolute float tolerance (default by dtype, as ``rtol``).
        input_values: flat concrete inputs to use instead of random ones (one run), one per
            graph input, in order.
        on_run: called after each run with the run, its flat inputs, the runtime's outputs
            and the JAX outputs (for diffs that need the arrays themselves).
        training: as for ``to_onnx``: modules are compared in the mode they were exported in
            (inference by default), on a copy; the module itself is not changed.
        jit: run ``fn`` compiled by ``jax.jit`` (several times faster on real models). Off by
            default: XLA compiles whole programs, and a rare program (a jitted philox4x32 key
            stream, on jax 0.10) never finishes compiling, where op by op it runs.
        runtime: ``"onnxruntime"`` (CPU), ``"openvino"``, ``"tract"`` or ``"onnxruntime-web"``.
        reference_device: where JAX computes the reference. ``"cpu"`` (default): on the CPU,
            the function's arrays copied there, so that an accelerator's default matmul
            precision (bfloat16 passes on a TPU) does not make a right export look wrong; a
            function that cannot be traced runs at matmul precision "highest" instead.
            ``"default"``: on JAX's default device, as the function runs there.
            ``report.reference`` (and its text) says which was used.

    Returns:
        A :class:`VerifyReport`; ``report.ok``, ``report.max_abs``, ``report.max_rel``;
        ``report.raise_if_failed()`` raises an AssertionError with the comparison table. Each
        run is labelled with the size of every symbolic dim it ran with.

    Raises:
        RuntimeUnavailable: ``runtime`` is not installed here (the message says how to install).
        ValueError: ``sizes`` names a dim the inputs do not have; ``input_values`` has too
            few or too many values; the inputs do not match what the model takes (count,
            dtype or static shape).

    Example::

        model = to_onnx(f, [("B", 3)], path="f.onnx")
        verify(f, "f.onnx", [("B", 3)], sizes={"B": [1, 8]}).raise_if_failed()
    """
    model = load_model(model)
    signature = model.signature
    session = open_session(model, runtime)
    policy_io = PRECISION_KEY in signature.metadata
    if enable_double_precision is None:
        enable_double_precision = signature.enable_double_precision
    input_params = dict(input_params or {})
    fn_name = _name_of(fn)
    ins, outs = recorded_layout(signature.metadata)
    if inputs_as_nchw is not None:
        ins = set(resolve(inputs_as_nchw, signature.input_names, "inputs_as_nchw"))
    if outputs_as_nchw is not None:
        outs = set(resolve(outputs_as_nchw, signature.output_names, "outputs_as_nchw"))
    rng = np.random.default_rng(seed)
    if reference_device not in REFERENCE_DEVICES:
        raise ValueError(
            f"reference_device must be one of {REFERENCE_DEVICES}, got {reference_device!r}"
        )
    report = VerifyReport(runtime)
    with jxi.x64(enable_double_precision):
        parse_options: dict[str, Any] = {
            "input_params": input_params,
            "enable_double_precision": enable_double_precision,
        }
        fn, inputs = layout_reference(fn, inputs, ins, outs, **parse_options)
        specs = parse_specs(inputs, warn=False, **parse_options)
        pairs, treedef = specs.flat()
        avals = [leaf for _, leaf in pairs]
        names = _input_names(signature, len(avals))
        dims = symbolic_dim_names(avals)
        size_lists = sizes_per_dim(sizes, dims)
        n_runs = max((len(v) for v in size_lists.values()), default=1)
        if input_values is not None:
            _check_count(input_values, names, fn_name)
        for i in range(n_runs):
            if input_values is not None:  # as the graph takes them (float64 -> float32 without x64)
                flat = [_as_input(v, aval) for v, aval in zip(input_values, avals, strict=True)]
                run_sizes = _sizes_of(flat, avals)
            else:
                run_sizes = {d: _cycle(size_lists.get(d, [DEFAULT_SIZE]), i) for d in dims}
                flat = random_inputs(avals, run_sizes, rng)
                n_args = len(jax.tree_util.tree_leaves(specs.args))
                # input_params keep the user's values (a flag stays the flag they asked for)
                param_leaves = jax.tree_util.tree_leaves(input_params)
                if len(param_leaves) == len(flat) - n_args:
                    flat[n_args:] = [np.asarray(v) for v in param_leaves]
            feeds = _feeds(flat)
            if policy_io:
                feeds = _policy_feeds(feeds, signature)
            _check_feeds(feeds, names, signature, enable_double_precision, bool(ins))
            # JAX arrays, so that fn sees what it sees in JAX (x.at[...], JAX indexing rules)
            as_jax = [
                v if hasattr(v, "dtype") and jxi.is_key_dtype(v.dtype) else jnp.asarray(v)
                for v in flat
            ]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, as_jax)
            # the reference is what was exported: modules in the same (inference) mode
            with export_session(fn, ExportConfig(training=training, coarse_ops=False)) as prepared:
                outputs_tree, report.reference = reference_outputs(
                    prepared.fn, args, kwargs, jit=jit, device=reference_device
                )
                expected = jax.tree_util.tree_leaves(outputs_tree)
                low = any(getattr(e, "dtype", None) in LOW_FLOATS for e in expected)
                reference = _float32_reference(prepared.fn, args, kwargs) if low else None
            actual = raw = session(feeds)
            if policy_io:  # a precision policy's float32 boundary: compared in JAX's dtypes
                actual = [
                    np.asarray(a).astype(np.asarray(e).dtype) if _both_float(a, e) else a
                    for a, e in zip(actual, map(_as_numpy, expected), strict=False)
                ]
            outputs = (
                [
                    compare(f"out_{j}", a, _as_numpy(e), rtol, atol, runtime)
                    for j, (a, e) in enumerate(itertools.zip_longest(actual, expected))
                ]
                if len(actual) == len(expected)
                else [
                    OutputComparison(
                        "outputs",
                        "",
                        (),
                        0.0,
                        0.0,
                        False,
                        f"{len(actual)} ONNX outputs vs {len(expected)} JAX outputs",
                    )
                ]
            )
            if reference is not None and len(reference) == len(outputs):
                _float32_errors(
                    outputs,
                    raw,
                    [_as_numpy(e) for e in expected],
                    reference,
                    accept_as_near=rtol is None and atol is None,
                )
            report.runs.append(VerifyRun(run_sizes, outputs))
            if on_run is not None:
                on_run(report.runs[-1], flat, actual, [_as_numpy(e) for e in expected])
            if input_values is not None:
                break
    return report


def symbolic_dim_names(avals: Sequence[Any]) -> list[str]:
    """The names of the symbolic dims of ``avals`` (shape structs), in order of first use."""
    names: dict[str, None] = {}
    for aval in avals:
        for d in aval.shape:
            names.update(dict.fromkeys(sorted(jxi.dim_vars(d))))
    return list(names)


def sizes_per_dim(sizes: Mapping[str, Any] | None, dims: Sequence[str]) -> dict[str, list[int]]:
    """``sizes`` (as :func:`verify` takes them) as a list of sizes per dim.

    Raises:
        ValueError: a name that is none of ``dims`` (the message names those and the closest
            one), or no size >= 0.
    """
    lists: dict[str, list[int]] = {}
    for name, values in (sizes or {}).items():
        if name not in dims:
            known = ", ".join(dims) if dims else "none: the input shapes are static"
            same_letters = [d for d in dims if d.lower() == str(name).lower()]
            close = same_letters or difflib.get_close_matches(str(name), dims, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"sizes: {name!r} is not a symbolic dim of the inputs (their dims: {known}){hint}"
            )
        several = isinstance(values, (list, tuple, range))
        lists[name] = [int(v) for v in values] if several else [int(values)]
        if not lists[name] or min(lists[name]) < 0:
            raise ValueError(
                f"sizes[{name!r}]: give one or more sizes >= 0, e.g. {{{name!r}: [1, 4]}}, "
                f"got {values!r}"
            )
    return lists


def _sizes_of(flat: Sequence[Any], avals: Sequence[Any]) -> dict[str, int]:
    """The sizes that given input values set for the symbolic dims that are a bare name."""
    sizes: dict[str, int] = {}
    for value, aval in zip(flat, avals, strict=True):
        for d, n in zip(aval.shape, np.shape(value), strict=False):
            if jxi.is_symbolic_dim(d) and str(d) in jxi.dim_vars(d):
                sizes.setdefault(str(d), int(n))
    return sizes


def _input_names(signature: ModelSignature, count: int) -> list[str]:
    """The names of the flat inputs: the graph's, where it takes as many as the specs give."""
    if len(signature.inputs) != count:
        raise ValueError(
            f"the input specs give {count} flat inputs, but the model takes "
            f"{len(signature.inputs)} "
            f"({', '.join(signature.input_names) or 'none'}): pass the specs (and input_params) "
            "the model was exported with"
        )
    return signature.input_names


def _check_count(values: Sequence[Any], names: Sequence[str], fn_name: str) -> None:
    """Too few or too many ``input_values``: say how many the model takes and which."""
    if len(values) == len(names):
        return
    given = f"{len(values)} value{'s' if len(values) != 1 else ''}"
    plural = "s" if len(names) != 1 else ""
    takes = f"{fn_name} takes {len(names)} flat input{plural} ({', '.join(names)})"
    if len(values) < len(names):
        missing = names[len(values) :]
        problem = f"missing {', '.join(missing)}"
    else:
        problem = f"{len(values) - len(names)} extra"
    raise ValueError(
        f"input_values has {given}, but {takes}: {problem} (one value per input, in order)"
    )


def _check_feeds(
    feeds: Sequence[np.ndarray],
    names: Sequence[str],
    signature: ModelSignature,
    x64: bool,
    nchw: bool,
) -> None:
    """Each feed has the element type and static dims of its graph input, else a ValueError
    that says which input differs, how, and what to pass (instead of the runtime's own)."""
    for name, value, graph_input in zip(names, feeds, signature.inputs, strict=True):
        dtype_ok = graph_input.dtype is None or value.dtype == graph_input.dtype
        shape = graph_input.shape
        shape_ok = shape is None or (
            len(shape) == value.ndim
            and all(
                not isinstance(d, int) or d == n for d, n in zip(shape, value.shape, strict=True)
            )
        )
        if dtype_ok and shape_ok:
            continue
        listed = ", ".join("?" if d is None else str(d) for d in shape or ())
        dims = "" if shape is None else f"[{listed}]"
        want = f"{graph_input.dtype if graph_input.dtype is not None else '?'}{dims}"
        hints = ["pass the input specs the model was exported with"]
        wider = graph_input.dtype is not None and graph_input.dtype.itemsize > value.dtype.itemsize
        if not dtype_ok and wider and not x64:
            hints.append("enable_double_precision=True, as for to_onnx")
        if not shape_ok and not nchw and value.ndim >= 3:
            hints.append(
                "inputs_as_nchw / outputs_as_nchw as for to_onnx if it was exported with them"
            )
        raise ValueError(
            f"input {name!r}: the model takes {want}, "
            f"verify would feed {value.dtype}{list(value.shape)}: " + ", and ".join(hints)
        )


def _cycle(values: Sequence[int], i: int) -> int:
    return values[i % len(values)]


def _name_of(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    try:
        params = ", ".join(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return name
    return f"{name}({params})"


def _as_input(value: Any, aval: Any) -> Any:
    """A user-given input value in the dtype of its graph input (typed keys as they are)."""
    if hasattr(value, "dtype") and jxi.is_key_dtype(value.dtype):
        return value
    return np.asarray(value, dtype=aval.dtype)


def _as_numpy(value: Any) -> np.ndarray:
    """A JAX output as numpy, as ONNX holds it: typed PRNG keys as their uint32 data, complex
    numbers as float (real, imag) pairs in a trailing dim of 2."""
    return jxi.to_data(value)
