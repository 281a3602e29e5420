"""onnxruntime latency of the RNN examples with their scans written as ONNX Scan vs Loop, and
what one loop step costs there.

Decides ``scan_ticks`` of the onnxruntime target profile (core/targets/). Run
``python -m benchmarks.scan_vs_loop``; prints the median of 200 runs per form (a scan of
recurrent cells is no loop at all: one GRU / LSTM over the sequence, so both forms show none).
``--costs`` prints instead where the time of the float64 heat-equation loop (200 steps of a
10-node body, benchmarks/models.py) goes in onnxruntime (one thread): the exported Scan, a
Scan of the same length whose body is one Identity (the cost of a step), 2000 Adds of the
same size unrolled in the main graph (the cost of a node without a loop), and ``jax.jit``.
"""

from __future__ import annotations

import argparse
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

    def unscanned(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.scan(lambda c, _: (jax.numpy.tanh(c * 1.01 + 0.1), c), x, None, length=100)

    return {
        "fori_loop (100 steps, no scanned input)": (
            fori,
            [(8, 16)],
            [(8, 16)],
            [rng.standard_normal((8, 16), np.float32)],
        ),
        "scan without xs (100 steps, stacked ys)": (
            unscanned,
            [(8, 16)],
            [(8, 16)],
            [rng.standard_normal((8, 16), np.float32)],
        ),
        "flax_gru (B=8, T=64)": (
            flax_gru,
            [(8, 64, gru.FEATURES)],
            [(8, "T", gru.FEATURES)],
            [rng.standard_normal((8, 64, gru.FEATURES), np.float32)],
        ),
        "eqx_rnn (B=8, T=12)": (
            eqx_rnn,
            [(8, rnn.STEPS, rnn.FEATURES)],
            [(8, "T", rnn.FEATURES)],
            [rng.standard_normal((8, rnn.STEPS, rnn.FEATURES), np.float32)],
        ),
    }


def median_ms(session: Any, feeds: list[np.ndarray], runs: int = 200) -> float:
    session(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session(feeds)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def _chain(n: int, steps: int) -> Any:
    """A float64 [256] model of ``n`` Adds: in the main graph (``steps`` 0), else the body of a
    Scan of ``steps`` steps."""
    from onnx import TensorProto, helper

    def value(name: str, elem: int = TensorProto.DOUBLE, shape: list[int] | None = None) -> Any:
        return helper.make_tensor_value_info(name, elem, [256] if shape is None else shape)

    k = helper.make_tensor("k", TensorProto.DOUBLE, [], [1e-3])
    source = "u" if steps == 0 else "c"
    nodes = [
        helper.make_node("Add", [source if i == 0 else f"v{i - 1}", "k"], [f"v{i}"])
        for i in range(n)
    ]
    nodes.append(
        helper.make_node("Identity", [f"v{n - 1}" if n else source], ["y" if steps == 0 else "out"])
    )
    if steps == 0:
        graph = helper.make_graph(nodes, "chain", [value("u")], [value("y")], initializer=[k])
    else:
        body = helper.make_graph(
            nodes, "body", [value("c"), value("t", TensorProto.INT64, [])], [value("out")]
        )
        ticks = helper.make_tensor("ticks", TensorProto.INT64, [steps], list(range(steps)))
        scan = helper.make_node("Scan", ["u", "ticks"], ["y"], body=body, num_scan_inputs=1)
        graph = helper.make_graph(
            [scan], "loop", [value("u")], [value("y")], initializer=[k, ticks] if n else [ticks]
        )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def costs() -> None:
    import jax
    import onnxruntime as ort

    from benchmarks import models
    from jax2onnx_nn.core.jax_internals import x64

    def ort_ms(model: Any, u: np.ndarray) -> float:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        name = session.get_inputs()[0].name
        return median_ms(lambda feeds: session.run(None, {name: feeds[0]}), [u])

    u = np.random.default_rng(0).standard_normal(models.HEAT_POINTS)
    steps = models.HEAT_STEPS
    with x64(True):
        fn, specs, options = models.heat_fori()
        exported = to_onnx(fn, specs, **options)
        jitted = jax.jit(fn)
        jit = median_ms(lambda feeds: jitted(feeds[0]).block_until_ready(), [u])
    body = next(a.g for a in exported.graph.node[-1].attribute if a.name == "body")
    rows = {
        f"heat_fori as exported ({len(body.node)} nodes per step)": ort_ms(exported, u),
        f"a Scan of {steps} steps, body one Identity": ort_ms(_chain(0, steps), u),
        f"a Scan of {steps} steps, body 10 Adds": ort_ms(_chain(10, steps), u),
        f"{10 * steps} Adds in the main graph (no loop)": ort_ms(_chain(10 * steps, 0), u),
        "jax.jit of heat_fori": jit,
    }
    for name, ms in rows.items():
        print(f"{name}: {ms:.3f} ms ({1e3 * ms / steps:.2f} us per step)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--costs", action="store_true", help="where the time of the float64 heat loop goes"
    )
    if parser.parse_args().costs:
        costs()
        return
    scan = TARGETS["onnxruntime"]
    loop = dataclasses.replace(scan, scan_ticks=False)  # with a symbolic length: Loop
    for name, (fn, static, symbolic, feeds) in _models().items():
        row = []
        for form, specs, target in (("scan", static, scan), ("loop", symbolic, loop)):
            model = to_onnx(fn, specs, target=target)
            ops = {n.op_type for n in model.graph.node} & {"Scan", "Loop"}
            row.append(
                f"{form}: {median_ms(open_session(model), feeds):.3f} ms ({', '.join(sorted(ops))})"
            )
        print(f"{name}: " + "; ".join(row))


if __name__ == "__main__":
    main()
