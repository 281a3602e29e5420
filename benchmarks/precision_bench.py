"""bfloat16 models under each precision policy: one row per model and policy.

    python -m benchmarks.precision_bench                 # cnn, vit, gpt_4l, keras_mobilenet
    python -m benchmarks.precision_bench --models cnn vit --batch 4

Each model of ``benchmarks/models.py`` is made bfloat16 (``models.in_dtype``: its float
weights and inputs cast, and a layer's fixed float32 ``dtype`` made bfloat16); the Keras
application is built under ``keras.mixed_precision.set_dtype_policy("mixed_bfloat16")``. Its
float32 twin holds the same (bfloat16-rounded) weights in float32: the float answer. Columns:

- ``nodes``: nodes of the main graph and of function bodies; ``cast``: how many are Casts;
- ``file_kb``: the serialized model; ``ort_ms``: onnxruntime CPU median latency at ``--batch``
  (``interleaved_median_ms`` of export_bench);
- ``err_bf16``: max abs difference from JAX running the bfloat16 model; ``err_f32``: from JAX
  running the float32 twin (the float answer); ``jax_bf16_f32``: JAX bfloat16 vs the twin,
  how far bfloat16 itself is from the float answer.

``as-traced`` takes and gives bfloat16; the policies take and give float32 (``io_dtype``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from benchmarks import models
from benchmarks.export_bench import interleaved_median_ms

POLICIES = ("as-traced", "float32", "float16")
DEFAULT_MODELS = ("cnn", "vit", "gpt_4l", "keras_mobilenet")


def _concrete(spec: Any, batch: int, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    shape, given = (spec[0], spec[1]) if isinstance(spec[0], tuple) else (spec, "float32")
    sizes = [
        batch if isinstance(d, str) and d == "B" else 8 if isinstance(d, str) else d for d in shape
    ]
    if np.dtype(given).kind == "i":
        return rng.integers(0, 50, size=sizes).astype(given)
    return rng.standard_normal(sizes).astype(np.float32).astype(dtype)


def _flax_pair(factory: Callable[[], Any]) -> tuple[Any, Any, list[Any], dict[str, Any]]:
    """(bfloat16 model, float32 twin, bfloat16 specs, options) of a Flax NNX factory."""
    from flax import nnx

    model, specs, options = factory()
    options = {k: v for k, v in options.items() if k != "auto_functions"}
    low, low_specs = models.in_dtype(model, specs, jnp.bfloat16)
    twin_state = jax.tree.map(
        lambda a: a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a, nnx.state(low)
    )
    return low, nnx.merge(nnx.graphdef(model), twin_state), low_specs, options


def _keras_mobilenet() -> tuple[Any, Any, list[Any], dict[str, Any]]:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    def build(policy: str) -> Any:
        keras.mixed_precision.set_dtype_policy(policy)
        keras.utils.set_random_seed(0)
        net = keras.applications.MobileNetV2(
            input_shape=(64, 64, 3), alpha=0.35, weights=None, classes=10
        )
        keras.mixed_precision.set_dtype_policy("float32")
        return net

    low, twin = build("mixed_bfloat16"), build("float32")
    twin.set_weights(low.get_weights())
    return (
        (lambda x: low(x, training=False)),
        (lambda x: twin(x, training=False)),
        [(("B", 64, 64, 3), "float32")],
        {},
    )


def pairs() -> dict[str, Callable[[], tuple[Any, Any, list[Any], dict[str, Any]]]]:
    return {
        "cnn": lambda: _flax_pair(models.cnn),
        "vit": lambda: _flax_pair(models.vit),
        "gpt_4l": lambda: _flax_pair(models.gpt_4l),
        "keras_mobilenet": _keras_mobilenet,
    }


def _count(model: Any) -> tuple[int, int]:
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    return len(nodes), sum(n.op_type == "Cast" for n in nodes)


def bench(name: str, batch: int, repeat: int) -> list[dict[str, Any]]:
    import onnxruntime as ort

    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.core.runtimes import _from_ort_value, _ort_value

    low, twin, specs, options = pairs()[name]()
    rng = np.random.default_rng(0)
    keras_io = name.startswith("keras")  # a mixed policy takes float32 inputs
    inputs = [
        _concrete(s, batch, np.float32 if keras_io else ml_dtypes.bfloat16, rng) for s in specs
    ]
    jax_low = [np.asarray(v, np.float32) for v in jax.tree.leaves(low(*map(jnp.asarray, inputs)))]
    jax_f32 = [
        np.asarray(v, np.float32)
        for v in jax.tree.leaves(
            twin(*(v if v.dtype.kind in "iub" else jnp.asarray(v, np.float32) for v in inputs))
        )
    ]
    rows = []
    for policy in POLICIES:
        io = {} if policy == "as-traced" else {"io_dtype": "float32"}
        model = to_onnx(low, specs, precision=policy, **io, **options)
        data = model.SerializeToString()
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        feeds_np = [
            v.astype(np.float32) if policy != "as-traced" and v.dtype.kind not in "iub" else v
            for v in inputs
        ]
        feeds = {n: _ort_value(ort, v) for n, v in zip(names, feeds_np, strict=True)}

        def run(session: Any = session, feeds: dict[str, Any] = feeds) -> list[Any]:
            return session.run_with_ort_values(None, feeds)

        outs = [np.asarray(_from_ort_value(v), np.float32) for v in run()]
        ms = interleaved_median_ms({"ort": run}, repeat, budget=5.0)["ort"]
        nodes, casts = _count(model)
        rows.append(
            {
                "model": name,
                "policy": policy,
                "nodes": nodes,
                "cast": casts,
                "file_kb": len(data) / 1024,
                "ort_ms": ms,
                "err_bf16": max(
                    float(np.abs(o - e).max()) for o, e in zip(outs, jax_low, strict=True)
                ),
                "err_f32": max(
                    float(np.abs(o - e).max()) for o, e in zip(outs, jax_f32, strict=True)
                ),
                "jax_bf16_f32": max(
                    float(np.abs(a - e).max()) for a, e in zip(jax_low, jax_f32, strict=True)
                ),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", nargs="*", default=list(DEFAULT_MODELS), choices=sorted(pairs())
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    columns = (
        "model",
        "policy",
        "nodes",
        "cast",
        "file_kb",
        "ort_ms",
        "err_bf16",
        "err_f32",
        "jax_bf16_f32",
    )
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for name in args.models:
        for row in bench(name, args.batch, args.repeat):
            cells = [f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in columns]
            print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
