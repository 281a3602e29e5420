"""Keras applications (``weights=None``): graph nodes and onnxruntime latency before (the lax
path, ``coarse_ops=False``) and after (the Keras layers as ONNX ops), and the symbolic-batch
export of ``jax2onnx_nn.keras.export_onnx`` checked against Keras at two batch sizes.

    KERAS_BACKEND=jax python -m benchmarks.keras_applications            # all 14
    KERAS_BACKEND=jax python -m benchmarks.keras_applications --models MobileNetV2 ResNet50

Inputs are 64x64 (75x75 for the applications that refuse smaller images: InceptionV3,
InceptionResNetV2, Xception); BatchNormalization statistics are randomised so that inference
mode shows. Latency: batch 1, onnxruntime's CPU provider with one intra-op and one inter-op
thread, ``--warmup`` runs of each session, then ``--repeat`` rounds alternating the two
sessions (so that a slow spell of the machine falls on both); the median per session and the
ratio of the medians. ``err`` is the largest absolute difference between ``export_onnx``'s
model (symbolic batch) and ``model(x, training=False)`` at batch 1 and 3, relative to the
largest output; ``lax_err`` / ``err1`` the same for the batch-1 exports. A script, not a
timed test: the latencies depend on the machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import statistics
import tempfile
import time
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")

APPLICATIONS = (
    "MobileNet",
    "MobileNetV2",
    "MobileNetV3Small",
    "ResNet50",
    "ResNet50V2",
    "DenseNet121",
    "EfficientNetB0",
    "EfficientNetV2B0",
    "ConvNeXtTiny",
    "VGG16",
    "NASNetMobile",
    "Xception",
    "InceptionV3",
    "InceptionResNetV2",
)
_LARGER = {"Xception": 75, "InceptionV3": 75, "InceptionResNetV2": 75}
BATCHES = (1, 3)


def build(name: str) -> tuple[Any, int]:
    """The application, untrained, with random moving statistics; its input size."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    size = _LARGER.get(name, 64)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    rng = np.random.default_rng(0)
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.moving_mean.shape
            layer.moving_mean.assign(rng.normal(size=n).astype("float32") * 0.1)
            layer.moving_variance.assign(rng.uniform(0.5, 2, size=n).astype("float32"))
    return model, size


def _session(proto: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _run(session: Any, x: Any) -> Any:
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _rel_err(got: Any, want: Any) -> float:
    import numpy as np

    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


def latencies(sessions: list[Any], x: Any, *, warmup: int, repeat: int) -> list[float]:
    """Median milliseconds per session: ``warmup`` runs each, then ``repeat`` alternating
    rounds."""
    for session in sessions:
        for _ in range(warmup):
            _run(session, x)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(repeat):
        for session, ts in zip(sessions, times, strict=True):
            start = time.perf_counter()
            _run(session, x)
            ts.append(time.perf_counter() - start)
    return [1e3 * statistics.median(ts) for ts in times]


def prepare(name: str, folder: str) -> dict[str, Any]:
    """One application's exports and checks: both batch-1 exports (written to ``folder`` with
    the batch-1 input, for :func:`row` to time) and ``export_onnx``'s symbolic batch checked
    at :data:`BATCHES`."""
    import jax
    import numpy as np
    import onnx

    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.keras import export_onnx

    model, size = build(name)
    spec = [jax.ShapeDtypeStruct((1, size, size, 3), "float32")]
    rng = np.random.default_rng(1)
    xs = {b: rng.normal(size=(b, size, size, 3)).astype("float32") for b in BATCHES}
    want = {b: np.asarray(model(xs[b], training=False)) for b in BATCHES}
    figures: dict[str, Any] = {"model": name, "input": size}
    for coarse_ops, key in ((False, "lax"), (True, "coarse")):
        proto = to_onnx(lambda x: model(x, training=False), spec, coarse_ops=coarse_ops)
        figures[f"{key}_nodes"] = len(proto.graph.node)
        figures[f"{key}_err"] = _rel_err(_run(_session(proto), xs[1]), want[1])
        onnx.save(proto, os.path.join(folder, f"{name}.{key}.onnx"))
    symbolic = export_onnx(model)
    dims = symbolic.graph.input[0].type.tensor_type.shape.dim
    if not dims[0].dim_param:
        raise AssertionError(f"{name}: export_onnx's batch is not symbolic ({dims[0]})")
    session = _session(symbolic)
    figures["sym_nodes"] = len(symbolic.graph.node)
    figures["err"] = max(_rel_err(_run(session, xs[b]), want[b]) for b in BATCHES)
    np.save(os.path.join(folder, f"{name}.x.npy"), xs[1])
    return figures


def row(figures: dict[str, Any], folder: str, *, warmup: int, repeat: int) -> dict[str, Any]:
    """:func:`prepare`'s figures with the two batch-1 exports' latencies (``lax_ms``,
    ``ms``)."""
    import numpy as np
    import onnx

    name = figures["model"]
    x = np.load(os.path.join(folder, f"{name}.x.npy"))
    sessions = [
        _session(onnx.load(os.path.join(folder, f"{name}.{key}.onnx"))) for key in ("lax", "coarse")
    ]
    lax_ms, ms = latencies(sessions, x, warmup=warmup, repeat=repeat)
    return {**figures, "lax_ms": lax_ms, "ms": ms}


HEADER = (
    "| model | input | nodes lax | nodes | ms lax | ms | speed-up | lax_err | err1 | "
    "export_onnx nodes | err (batch 1, 3) |"
)


def format_row(r: dict[str, Any]) -> str:
    """A Markdown table row of :func:`row`'s figures."""
    return (
        f"| {r['model']} | {r['input']} | {r['lax_nodes']} | {r['coarse_nodes']} | "
        f"{r['lax_ms']:.2f} | {r['ms']:.2f} | {r['lax_ms'] / r['ms']:.2f}x | "
        f"{r['lax_err']:.1e} | {r['coarse_err']:.1e} | {r['sym_nodes']} | {r['err']:.1e} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(APPLICATIONS))
    parser.add_argument("--repeat", type=int, default=30, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per session")
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes exporting at once (timing is serial)"
    )
    args = parser.parse_args()
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|", flush=True)
    cells = " |" * (HEADER.count(" | ") - 1)
    with tempfile.TemporaryDirectory() as folder:
        context = multiprocessing.get_context("spawn")  # (JAX does not survive a fork)
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            futures = [pool.submit(prepare, name, folder) for name in args.models]
            prepared = []
            for name, future in zip(args.models, futures, strict=True):
                try:
                    prepared.append(future.result())
                except Exception as e:  # a row per model, also for one that fails
                    print(f"| {name} | failed: {type(e).__name__}: {str(e)[:100]}{cells}")
        # timed one at a time, after every export: nothing else runs meanwhile
        for figures in prepared:
            r = row(figures, folder, warmup=args.warmup, repeat=args.repeat)
            print(format_row(r), flush=True)


if __name__ == "__main__":
    main()
