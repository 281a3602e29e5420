"""Regenerate the "Runtime support" table (docs/runtimes.md): every example and benchmark model on
every runtime.

    python scripts/gen_runtime_table.py           # rewrite docs/runtimes.md from the record,
                                                  # tests/runtime_matrix.txt
    python scripts/gen_runtime_table.py --check   # exit 1 if docs/runtimes.md is stale
    python scripts/gen_runtime_table.py --record  # export and verify every (model, runtime) pair
                                                  # with that runtime's target profile, rewrite the
                                                  # record, then docs/runtimes.md
    python scripts/gen_runtime_table.py --record gru/tract heat_while/openvino
                                                  # the same for these pairs only (the other rows
                                                  # of the record are kept)

Each model (a :class:`Case`: benchmarks/models.py's models, then the examples/*.py models that
are not one of them, at the example's own small sizes) is exported with ``target=<runtime>`` and
checked with ``verify(..., runtime=<runtime>)`` against JAX at the default tolerances, on each of
the case's runs (sizes of its symbolic dims, or concrete inputs); options a runtime needs beyond
its profile (``loop_bound`` on tract) are named in the cell. Never edit the table by hand.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(
    0, str(ROOT)
)  # this checkout's package, examples and benchmarks (not an installed one)
BEGIN = "<!-- runtime-table:begin -->"
END = "<!-- runtime-table:end -->"
PAGE = ROOT / "docs" / "runtimes.md"  # the page holding the table
RECORD = ROOT / "tests" / "runtime_matrix.txt"
BENCHMARKS = (
    "jax_mlp",
    "flax_mlp",
    "cnn",
    "eqx_mlp",
    "eqx_transformer",
    "eqx_vit",
    "vit",
    "gru",
    "heat_fori",
    "heat_while",
    "gpt2_small",
    "qwix_mlp_int8",
    "qwix_mlp_int4",
    "keras_mlp_int8",
)
RUNTIMES = ("onnxruntime", "onnxruntime-web", "openvino", "tract")


@dataclass
class Case:
    """One model of the matrix: the JAX callable, how it is exported for a target (``export(target,
    **options)``, options overriding the case's own, e.g. ``opset``), its input specs and the
    ``verify`` keyword arguments of each checked run (sizes or concrete values)."""

    source: str
    reference: Callable[..., Any]
    export: Callable[[str], Any]
    specs: list[Any]
    runs: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    jit: bool = True
    # export options a runtime needs beyond its target profile, shown in the table (tract has no
    # Loop: a data-dependent while_loop runs there bounded, ``loop_bound``)
    runtime_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def _benchmark(name: str) -> Case:
    import benchmarks.models as models
    from jax2onnx_nn import to_onnx

    fn, specs, options = getattr(models, name)()
    return Case(
        "benchmarks/models.py",
        fn,
        lambda target, **more: to_onnx(fn, specs, target=target, **{**options, **more}),
        specs,
    )


def _example(name: str) -> Any:
    return importlib.import_module(f"examples.{name}")


def _eqx(
    name: str,
    module: Any,
    inputs: list[Any],
    reference: Any = None,
    sizes: dict[str, list[int]] | None = None,
    **options: Any,
) -> Case:
    """An Equinox example exported with ``batch=True`` (a symbolic ``B``) and checked vmapped."""
    import equinox as eqx

    from jax2onnx_nn.equinox import export_onnx

    batched = [
        (("B", *spec[0]), *spec[1:]) if spec and isinstance(spec[0], tuple) else ("B", *spec)
        for spec in inputs
    ]
    reference = reference if reference is not None else jax.vmap(eqx.nn.inference_mode(module))
    return Case(
        f"examples/{name}.py",
        reference,
        lambda target, **more: export_onnx(
            module, inputs, batch=True, target=target, **{**options, **more}
        ),
        batched,
        [{"sizes": sizes or {"B": [1, 3]}}],
    )


def _flax(
    name: str, model: Any, specs: list[Any], sizes: dict[str, list[int]], **options: Any
) -> Case:
    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.flax import mode_copy

    return Case(
        f"examples/{name}.py",
        mode_copy(model),
        lambda target, **more: to_onnx(model, specs, target=target, **{**options, **more}),
        specs,
        [{"sizes": sizes}],
    )


def _function(
    name: str,
    fn: Any,
    specs: list[Any],
    runs: list[dict[str, Any]],
    *,
    jit: bool = True,
    **options: Any,
) -> Case:
    from jax2onnx_nn import to_onnx

    return Case(
        f"examples/{name}.py",
        fn,
        lambda target, **more: to_onnx(fn, specs, target=target, **{**options, **more}),
        specs,
        runs,
        jit,
    )


def eqx_bert() -> Case:
    import equinox as eqx

    m = _example("eqx_bert")
    bert = m.BertClassifier(jax.random.key(0))
    case = _eqx("eqx_bert", bert, m.INPUTS)
    case.reference = jax.vmap(eqx.nn.inference_mode(bert))
    case.runs = [
        {"input_values": m.example_batch(batch, padded=padded)}
        for batch, padded in [(1, False), (3, True)]
    ]
    return case


def eqx_cnn() -> Case:
    m = _example("eqx_cnn")
    model, state = m.build()
    return _eqx("eqx_cnn", model, [(1, 28, 28)], m.reference(model, state), state=state)


def eqx_dcgan_generator() -> Case:
    m = _example("eqx_dcgan")
    generator, g_state, _, _ = m.build()
    return _eqx(
        "eqx_dcgan", generator, [(m.LATENT,)], m.reference(generator, g_state), state=g_state
    )


def eqx_dcgan_discriminator() -> Case:
    m = _example("eqx_dcgan")
    _, _, discriminator, d_state = m.build()
    return _eqx(
        "eqx_dcgan",
        discriminator,
        [(m.CHANNELS, m.SIZE, m.SIZE)],
        m.reference(discriminator, d_state),
        state=d_state,
    )


def eqx_neural_ode() -> Case:
    from jax2onnx_nn.core.jax_internals import x64

    m = _example("eqx_neural_ode")
    with x64(True):
        model = m.build()
    return _eqx(
        "eqx_neural_ode", model, [(m.STATE,)], jax.vmap(model), enable_double_precision=True
    )


def eqx_rnn() -> Case:
    m = _example("eqx_rnn")
    model = m.SequenceModel(jax.random.key(0))
    return _eqx("eqx_rnn", model, [(m.STEPS, m.FEATURES)], jax.vmap(model))


def eqx_unet() -> Case:
    m = _example("eqx_unet")
    model = m.build()
    return _eqx("eqx_unet", model, [(), (m.CHANNELS, m.SIZE, m.SIZE)], m.reference(model), opset=21)


def flax_autoencoder() -> Case:
    from flax import nnx

    m = _example("flax_autoencoder")
    return _flax("flax_autoencoder", m.AutoEncoder(rngs=nnx.Rngs(0)), m.IMAGES, {"B": [1, 6]})


def flax_cnn() -> Case:
    from flax import nnx

    m = _example("flax_cnn")
    return _flax("flax_cnn", m.CNN(rngs=nnx.Rngs(0)), m.IMAGES, {"B": [1, 8]})


def flax_mlp_functions() -> Case:
    from flax import nnx

    m = _example("flax_mlp_functions")
    return _flax("flax_mlp_functions", m.MyModel(256, rngs=nnx.Rngs(0)), [(100, 256)], {})


def gamma_sampling() -> Case:
    m = _example("gamma_sampling")
    counts = np.random.default_rng(0).poisson(3.0, size=(4, 12)).astype(np.float32)
    key_data = np.asarray(jax.random.key_data(jax.random.key(0)))
    case = _function(
        "gamma_sampling",
        m.posterior_rates,
        [m.KEY, m.COUNTS],
        [{"input_values": [key_data, counts]}],
    )
    case.runtime_options = {"tract": {"loop_bound": 16}}  # (the rejection loops take a few steps)
    return case


def gaussian_process() -> Case:
    m = _example("gaussian_process")
    x, y = m.training_data()
    runs = [
        {
            "input_values": [
                x,
                y,
                np.linspace(-2.5, 2.5, n)[:, None],
                np.float64(0.7),
                np.float64(1.0),
                np.float64(0.01),
            ]
        }
        for n in (1, 50)
    ]
    return _function(
        "gaussian_process", m.gp_posterior, m.SPECS, runs, enable_double_precision=True
    )


def heat_equation() -> Case:
    from jax2onnx_nn.core.jax_internals import x64

    m = _example("heat_equation")
    specs = [(("N",), "float64"), ((), "float64"), ((), "float64")]
    with x64(True):
        runs = [
            {
                "input_values": [
                    np.asarray(m.initial_condition(n)),
                    np.float64(0.5),
                    np.float64(0.02),
                ]
            }
            for n in (11, 41)
        ]
    case = _function(
        "heat_equation",
        m.heat_solve,
        specs,
        runs,
        enable_double_precision=True,
        constraints=("N >= 3",),
    )
    case.runtime_options = {"tract": {"loop_bound": 64}}  # (3 and 40 steps on these grids)
    return case


def spectral_poisson() -> Case:
    m = _example("spectral_poisson")
    runs = [{"input_values": [m.manufactured(n)[0], np.float64(2 * np.pi)]} for n in (8, 15)]
    return _function(
        "spectral_poisson", m.poisson_solve, m.SPECS, runs, enable_double_precision=True
    )


# Examples that are not already a benchmark model (eqx_mlp, eqx_transformer, eqx_vit,
# flax_gpt2 (gpt2_small), flax_gru (gru), flax_mlp and flax_vit (vit) are).
EXAMPLES = {
    f.__name__: f
    for f in (
        eqx_bert,
        eqx_cnn,
        eqx_dcgan_generator,
        eqx_dcgan_discriminator,
        eqx_neural_ode,
        eqx_rnn,
        eqx_unet,
        flax_autoencoder,
        flax_cnn,
        flax_mlp_functions,
        gamma_sampling,
        gaussian_process,
        heat_equation,
        spectral_poisson,
    )
}
# bfloat16 / float16 variants (docs/precision.md): a benchmark NNX model in the dtype
# (``models.in_dtype``), exported as traced or under a precision policy (float16 with
# ``io_dtype="float32"``); a passing cell names the
# float types its arithmetic nodes compute in on that target (float32 alone: the target has no
# kernels for the dtype and each layer is widened; the dtype itself: its own kernels)
LOW_PRECISION = {
    f"{model}_{short}{'' if policy == 'as-traced' else '_as_' + policy}": (model, dtype, policy)
    for model in ("flax_mlp", "gpt2_small")
    for short, dtype, policy in (
        ("bf16", "bfloat16", "as-traced"),
        ("bf16", "bfloat16", "float32"),
        ("bf16", "bfloat16", "float16"),
        ("fp16", "float16", "as-traced"),
    )
}
MODELS = BENCHMARKS + tuple(EXAMPLES) + tuple(LOW_PRECISION)
# the example file of a model whose name is not the file's (the benchmark models that are an
# example's model are exported as the example exports it)
EXAMPLE_OF = {
    "flax_mlp": "flax_mlp",
    "eqx_mlp": "eqx_mlp",
    "eqx_transformer": "eqx_transformer",
    "eqx_vit": "eqx_vit",
    "vit": "flax_vit",
    "gru": "flax_gru",
    "gpt2_small": "flax_gpt2",
    "eqx_dcgan_generator": "eqx_dcgan",
    "eqx_dcgan_discriminator": "eqx_dcgan",
}


def _low_precision(name: str) -> Case:
    import benchmarks.models as models
    from jax2onnx_nn import to_onnx

    model_name, dtype, policy = LOW_PRECISION[name]
    fn, specs, options = getattr(models, model_name)()
    low, low_specs = models.in_dtype(fn, specs, dtype)
    # float16 as deployed to a GPU / WebGPU: float32 at the boundary (docs/precision.md)
    io = {"io_dtype": "float32"} if policy == "float16" else {}
    return Case(
        "benchmarks/models.py",
        low,
        lambda target, **more: to_onnx(
            low, low_specs, target=target, precision=policy, **{**options, **io, **more}
        ),
        low_specs,
        # XLA:CPU compiles no float16 dot accumulating in float32 ("The precision
        # 'F16_F16_F32' is not supported by dot_general on CPU"); run op by op it does
        jit=dtype != "float16",
    )


def case(model_name: str) -> Case:
    if model_name in LOW_PRECISION:
        return _low_precision(model_name)
    return EXAMPLES[model_name]() if model_name in EXAMPLES else _benchmark(model_name)


# nodes that move or retype values, not arithmetic (what a low-precision cell reports ignores them)
_PLUMBING = frozenset(
    "Cast Reshape Transpose Squeeze Unsqueeze Concat Split Slice Gather Identity Expand Shape "
    "Flatten Constant ConstantOfShape".split()
)


def computes_in(model: Any) -> str:
    """The float types the arithmetic nodes of ``model`` (main graph and functions) produce."""
    import onnx_ir as ir

    from jax2onnx_nn.core.ir.walk import graphs

    found = {
        out.dtype.numpy().name
        for g in graphs(ir.from_proto(model))
        for node in g
        if node.op_type not in _PLUMBING and node.domain in ("", "ai.onnx")  # (not a call)
        for out in node.outputs
        if out.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    }
    return ", ".join(sorted(found, key=["bfloat16", "float16", "float32"].index))


def _gist(message: str) -> str:
    """An error's first line, and where that only introduces what follows (``...:``), the first
    line that says something itself (OpenVINO's reason, a ConversionError's source line)."""
    lines = [
        line.strip() for line in message.replace(str(ROOT) + "/", "").splitlines() if line.strip()
    ]
    if not lines:
        return "(no message)"
    said = (
        next((line for line in lines[1:] if not line.endswith(":")), "")
        if lines[0].endswith(":")
        else ""
    )
    return (f"{lines[0]} {said}" if said else lines[0])[:240]


def check_pair(model_name: str, runtime: str) -> str:
    """``ok`` or ``fails: <first line of the error>`` for one (model, runtime) pair (``ok with
    loop_bound=64``, ``fails with ...: ...`` where the case exports with options for the
    runtime)."""
    from jax2onnx_nn import verify
    from jax2onnx_nn.core.targets import get_target

    c = case(model_name)
    options = c.runtime_options.get(runtime, {})
    used = "".join(f" with {name}={value}" for name, value in options.items())
    reports = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # (heat_equation's step count: a bounded loop's int result)
            model = c.export(runtime, **options)
        for run in c.runs:
            reports.append(verify(c.reference, model, c.specs, runtime=runtime, jit=c.jit, **run))
    except Exception as err:
        return f"fails{used}: {type(err).__name__}: {_gist(str(err))}"
    if all(report.ok for report in reports):
        return (
            f"ok{used}" if model_name not in LOW_PRECISION else f"ok; computes {computes_in(model)}"
        )
    float64 = any(
        o.dtype == "float64" for report in reports for r in report.runs for o in r.outputs
    )
    cause = (
        f"{runtime} computes float64 in float32: "
        if float64 and not get_target(runtime).float64
        else ""
    )
    # the order of magnitude only: the exact error moves with any change to how a model is written
    bound = 10.0 ** (np.floor(np.log10(max(max(report.max_abs for report in reports), 1e-300))) + 1)
    return f"fails{used}: {cause}max abs error below {bound:.0e}"


def read_record() -> dict[tuple[str, str], str]:
    rows = {}
    for line in RECORD.read_text().splitlines():
        if line.strip():
            model, runtime, result = line.split("\t", 2)
            rows[(model, runtime)] = result
    return rows


def record(pairs: list[str] | None = None) -> None:
    """Check every (model, runtime) pair, or only ``pairs`` (``"model/runtime"``, the other
    rows kept as recorded), and rewrite the record."""
    from jax2onnx_nn.core.runtimes import missing_reason

    chosen = None if not pairs else {tuple(p.split("/", 1)) for p in pairs}
    unknown = (chosen or set()) - {(m, r) for m in MODELS for r in RUNTIMES}
    if unknown:
        raise SystemExit(
            f"unknown pairs {sorted(unknown)}: give model/runtime, a model of {MODELS} and a "
            f"runtime of {RUNTIMES}"
        )
    recorded = read_record() if chosen else {}
    lines = []
    for model in MODELS:
        for runtime in RUNTIMES:
            if chosen is not None and (model, runtime) not in chosen:
                result = recorded.get((model, runtime), "not run")
            else:
                reason = missing_reason(runtime)
                result = check_pair(model, runtime) if reason is None else f"not run: {reason}"
                print(f"{model} / {runtime}: {result}", flush=True)
            lines.append(f"{model}\t{runtime}\t{result}")
    RECORD.write_text("\n".join(lines) + "\n")


def render() -> str:
    rows = read_record()
    head = ["| model | from | " + " | ".join(RUNTIMES) + " |", "|---|---|" + "---|" * len(RUNTIMES)]
    body = []
    notes = []
    for model in MODELS:
        cells = []
        for runtime in RUNTIMES:
            result = rows.get((model, runtime), "not run")
            if result == "ok":
                cells.append("yes")
            elif result.startswith("ok with "):
                cells.append(f"yes, `{result.removeprefix('ok with ')}`")
            elif result.startswith("ok; "):
                cells.append(f"yes, {result.removeprefix('ok; ')}")
            else:
                notes.append(f"{len(notes) + 1}. `{model}` on {runtime}: {result}")
                cells.append(f"no ({len(notes)})")
        source = (
            f"examples/{EXAMPLE_OF.get(model, model)}.py"
            if model in EXAMPLES or model in EXAMPLE_OF
            else "benchmarks/models.py"
        )
        body.append(f"| `{model}` | `{source}` | " + " | ".join(cells) + " |")
    return "\n".join(head + body + ([""] + notes if notes else []))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--record",
        nargs="*",
        metavar="MODEL/RUNTIME",
        default=None,
        help="re-check every pair (or only those given) and rewrite the record",
    )
    args = parser.parse_args()
    if args.record is not None:
        record(args.record)
    from jax2onnx_nn.testing.support import refresh_generated_block

    return refresh_generated_block(
        PAGE,
        BEGIN,
        END,
        render(),
        check=args.check,
        what="runtime table",
        script="scripts/gen_runtime_table.py",
    )


if __name__ == "__main__":
    sys.exit(main())
