"""Keras applications (``weights=None``) through ``to_onnx``: graph nodes, onnxruntime latency
and the largest difference from Keras's forward pass, one row per application.

    KERAS_BACKEND=jax python -m benchmarks.keras_applications            # all 14
    KERAS_BACKEND=jax python -m benchmarks.keras_applications --models MobileNetV2 ResNet50
    KERAS_BACKEND=jax python -m benchmarks.keras_applications --no-coarse-ops  # the lax path

Inputs are 64x64 (75x75 for the applications that refuse smaller images: InceptionV3,
InceptionResNetV2, Xception), batch 1; BatchNormalization statistics are randomised so that
inference mode shows. ``ort_ms`` is the median of ``--repeat`` onnxruntime runs;
``max_err`` the largest absolute difference from ``model(x, training=False)`` relative to
the largest output. A script, not a timed test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
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


def row(name: str, *, coarse_ops: bool, repeat: int) -> dict[str, Any]:
    import jax
    import numpy as np
    import onnxruntime as ort

    from jax2onnx_nn import to_onnx

    model, size = build(name)
    start = time.perf_counter()
    proto = to_onnx(
        lambda x: model(x, training=False),
        [jax.ShapeDtypeStruct((1, size, size, 3), "float32")],
        coarse_ops=coarse_ops,
    )
    export_s = time.perf_counter() - start
    x = np.random.default_rng(1).normal(size=(1, size, size, 3)).astype("float32")
    want = np.asarray(model(x, training=False))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    got = session.run(None, feed)[0]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t)
    return {
        "model": name,
        "input": size,
        "nodes": len(proto.graph.node),
        "ort_ms": 1e3 * statistics.median(times),
        "export_s": export_s,
        "max_err": float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(APPLICATIONS))
    parser.add_argument("--no-coarse-ops", action="store_true", help="the lax path only")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print("| model | input | nodes | ort_ms | export_s | max_err |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        try:
            r = row(name, coarse_ops=not args.no_coarse_ops, repeat=args.repeat)
        except Exception as e:  # a row per model, also for one that fails
            print(f"| {name} | | failed: {type(e).__name__}: {str(e)[:80]} | | | |", flush=True)
            continue
        print(
            f"| {r['model']} | {r['input']} | {r['nodes']} | {r['ort_ms']:.2f} | "
            f"{r['export_s']:.1f} | {r['max_err']:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
