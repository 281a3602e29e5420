"""onnxruntime latency of the RNN examples with their scans written as ONNX Scan vs Loop.

Decides ``scan_loops`` of the onnxruntime target profile (core/targets.py). Run
``python -m benchmarks.scan_vs_loop``; prints the median of 200 runs per form.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from typing import Any

import numpy as np

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.runtimes import open_session
from jax2onnx_nn.core.targets import TARGETS


def _models() -> dict[str, tuple[Any, list[Any], list[Any], list[np.ndarray]]]:
    """name -> (callable, specs with a static length, specs with a symbolic one, inputs)."""
    import jax
    from flax import nnx

    gru = importlib.import_module("examples.flax_gru")
    rnn = importlib.import_module("examples.eqx_rnn")
    rng = np.random.default_rng(0)
    flax_gru = gru.GRUClassifier(gru.FEATURES, gru.HIDDEN, gru.CLASSES, rngs=nnx.Rngs(0))
    eqx_rnn = jax.vmap(rnn.SequenceModel(jax.random.key(0)))

    def fori(x: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, 100, lambda i, c: jax.numpy.tanh(c * 1.01 + 0.1), x)

    return {
        "fori_loop (100 steps, no scanned input)": (fori, [(8, 16)], [(8, 16)], [rng.standard_normal((8, 16), np.float32)]),
        "flax_gru (B=8, T=64)": (flax_gru, [(8, 64, gru.FEATURES)], [(8, "T", gru.FEATURES)], [rng.standard_normal((8, 64, gru.FEATURES), np.float32)]),
        "eqx_rnn (B=8, T=12)": (eqx_rnn, [(8, rnn.STEPS, rnn.FEATURES)], [(8, "T", rnn.FEATURES)], [rng.standard_normal((8, rnn.STEPS, rnn.FEATURES), np.float32)]),
    }


def median_ms(session: Any, feeds: list[np.ndarray], runs: int = 200) -> float:
    session(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session(feeds)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    scan = TARGETS["onnxruntime"]
    loop = dataclasses.replace(scan, scan_ticks=False)  # with a symbolic length: Loop
    for name, (fn, static, symbolic, feeds) in _models().items():
        row = []
        for form, specs, target in (("scan", static, scan), ("loop", symbolic, loop)):
            model = to_onnx(fn, specs, target=target)
            ops = {n.op_type for n in model.graph.node} & {"Scan", "Loop"}
            row.append(f"{form}: {median_ms(open_session(model), feeds):.3f} ms ({', '.join(sorted(ops))})")
        print(f"{name}: " + "; ".join(row))


if __name__ == "__main__":
    main()
