"""Quantized models (qwix PTQ, weight-only) against their float export: one row per model.

    python -m benchmarks.quant_bench                # mlp (3 x 2048, relu), gpt_4l, keras_mlp
    python -m benchmarks.quant_bench --models mlp keras_mlp

Each float model is quantized with qwix (``PtqProvider``): ``int8`` per output channel and
``int4`` in tiles of 64 along the input dim, then exported for onnxruntime (MatMulNBits for
int4, a float MatMul of the int8 weight: docs/quantization.md). ``keras_mlp`` is the same MLP
in Keras 3, quantized by ``model.quantize("int8")`` (int8 activations at run time:
MatMulIntegerToFloat) and ``model.quantize("int4")`` (Keras's default, blocks of 128 with a
zero point: MatMulNBits). Columns:

- ``file_kb``: the serialized model; ``x_float``: that over the float export's;
- ``rss_mb``: what creating the onnxruntime session adds to a fresh process's resident memory
  (one thread; the weights as the session holds them);
- ``b1_ms`` / ``b8_ms``: onnxruntime CPU median latency at batch 1 / 8 (interleaved runs),
  ``b1_x``: batch 1 over the float export's;
- ``err_q``: max abs difference from JAX running the quantized model; ``err_f``: from JAX
  running the float model (what quantizing costs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.export_bench import interleaved_median_ms

SCHEMES = {"int8": ("int8", None), "int4": ("int4", 64)}

_RSS_PROBE = """
import sys, onnxruntime as ort
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
before = rss()
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
print((rss() - before) / 2**20)
"""


def mlp(width: int = 2048, layers: int = 3) -> tuple[Any, list[Any], Callable[[int], Any]]:
    """A ``layers``-deep relu MLP of ``width`` (Flax NNX)."""
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(layers)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < layers - 1:
                    x = jax.nn.relu(x)
            return x

    def sample(batch: int) -> np.ndarray:
        return np.random.default_rng(batch).standard_normal((batch, width)).astype(np.float32)

    return MLP(nnx.Rngs(0)), [("B", width)], sample


def gpt_4l() -> tuple[Any, list[Any], Callable[[int], Any]]:
    """benchmarks/models.py's 4-layer GPT (width 256) at sequence length 32."""
    from benchmarks import models

    model, specs, _ = models.gpt_4l()

    def sample(batch: int) -> np.ndarray:
        return np.random.default_rng(batch).integers(0, 50, (batch, 32)).astype(np.int32)

    return model, specs, sample


def keras_mlp(width: int = 2048) -> tuple[Any, list[Any], Callable[[int], Any]]:
    """``mlp``'s layout in Keras 3 (benchmarks/models.py's ``keras_mlp``), float."""
    from benchmarks import models

    def sample(batch: int) -> np.ndarray:
        return np.random.default_rng(batch).standard_normal((batch, width)).astype(np.float32)

    return models.keras_mlp(None, width), [("B", width)], sample


MODELS: dict[str, Callable[[], tuple[Any, list[Any], Callable[[int], Any]]]] = {
    "mlp": mlp,
    "gpt_4l": gpt_4l,
    "keras_mlp": keras_mlp,
}


# the layers quantized: the GPT's Linear layers (its embeddings, read by the tied head too,
# stay float: qwix's PTQ embedding mutates the module while the export traces it)
LAYERS = {"mlp": ".*", "gpt_4l": r".*c_(attn|proj|fc).*"}


def _quantize(model: Any, scheme: str, example: Any, layers: str) -> Any:
    import qwix

    qtype, tile = SCHEMES[scheme]
    rules = [qwix.QuantizationRule(module_path=layers, weight_qtype=qtype, tile_size=tile)]
    return qwix.quantize_model(model, qwix.PtqProvider(rules), jnp.asarray(example))


def _session_rss_mb(path: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, path], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def bench(name: str, repeat: int) -> list[dict[str, Any]]:
    """The rows of one model: float, then each quantization scheme."""
    import onnxruntime as ort

    from jax2onnx_nn import to_onnx

    model, specs, sample = MODELS[name]()
    variants = {"float": model}
    for scheme in SCHEMES:
        if name == "keras_mlp":  # Keras's own quantization, on a copy of the float weights
            from benchmarks import models

            variants[scheme] = models.keras_mlp(scheme, specs[0][1])
        else:
            variants[scheme] = _quantize(model, scheme, sample(1), LAYERS[name])
    inputs = {b: sample(b) for b in (1, 8)}
    reference = {b: np.asarray(model(jnp.asarray(x))) for b, x in inputs.items()}
    rows: list[dict[str, Any]] = []
    sessions: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, fn in variants.items():
            path = os.path.join(tmp, f"{label}.onnx")
            to_onnx(fn, specs, path=path)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            feed = session.get_inputs()[0].name
            sessions[label] = (session, feed)
            got = {b: session.run(None, {feed: x})[0] for b, x in inputs.items()}
            want = {b: np.asarray(fn(jnp.asarray(x))) for b, x in inputs.items()}
            rows.append(
                {
                    "model": name,
                    "weights": label,
                    "file_kb": os.path.getsize(path) / 1024,
                    "rss_mb": _session_rss_mb(path),
                    "err_q": max(float(np.abs(got[b] - want[b]).max()) for b in inputs),
                    "err_f": max(float(np.abs(got[b] - reference[b]).max()) for b in inputs),
                }
            )
        for batch in (1, 8):
            runs = {
                label: (lambda s=s, f=f, x=inputs[batch]: s.run(None, {f: x}))
                for label, (s, f) in sessions.items()
            }
            times = interleaved_median_ms(runs, repeat=repeat, budget=5.0, warmup=3)
            for row in rows:
                row[f"b{batch}_ms"] = times[row["weights"]]
    for row in rows:
        row["x_float"] = row["file_kb"] / rows[0]["file_kb"]
        row["b1_x"] = row["b1_ms"] / rows[0]["b1_ms"]
    return rows


COLUMNS = (
    "model",
    "weights",
    "file_kb",
    "x_float",
    "rss_mb",
    "b1_ms",
    "b1_x",
    "b8_ms",
    "err_q",
    "err_f",
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    print(" ".join(f"{c:>10}" for c in COLUMNS))
    for name in args.models:
        for row in bench(name, args.repeat):
            cells = [
                f"{row[c]:>10.3g}" if isinstance(row[c], float) else f"{row[c]:>10}"
                for c in COLUMNS
            ]
            print(" ".join(cells), flush=True)


if __name__ == "__main__":
    main()
