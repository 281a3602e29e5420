"""What a node costs in onnxruntime, against the float64 heat loop under ``jax.jit``.

A chain of N float64 ``Add`` nodes on 256 values (the cheapest node there is) gives
onnxruntime's fixed cost per node run; the heat equation of ``benchmarks/models.py`` (200
steps of a 10-op body on 256 points) exported as it is (a ``Scan``) and with the body written
out 200 times (no loop at all) shows that its latency is that cost times its nodes, and
``jax.jit`` of the same loop is what XLA makes of it (one fused kernel). Last, whether
onnxruntime's CPU provider has a float64 ``Conv`` (a one-node stencil). Run
``python -m benchmarks.node_cost``; medians of 400 runs after 30 warm-up runs: ``jax.jit``
alone first, then the onnxruntime forms taken in turn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import onnx
from onnx import TensorProto, helper

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.runtimes import open_session

from .export_bench import interleaved_median_ms
from .models import HEAT_POINTS, HEAT_STEPS, _heat_step, heat_fori

CHAINS = (200, 400, 1000, 2000)
ROUNDS, WARMUP = 400, 30


def _model(
    nodes: list[onnx.NodeProto],
    shape: list[int],
    out_shape: list[int],
    inits: list[onnx.TensorProto],
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "node_cost",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, out_shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def add_chain(n: int) -> bytes:
    """x + c + c + ... : ``n`` float64 Add nodes on 256 values."""
    c = helper.make_tensor("c", TensorProto.DOUBLE, [HEAT_POINTS], np.full(HEAT_POINTS, 1e-3))
    names = ["x", *(f"t{i}" for i in range(n - 1)), "y"]
    nodes = [helper.make_node("Add", [names[i], "c"], [names[i + 1]]) for i in range(n)]
    return _model(nodes, [HEAT_POINTS], [HEAT_POINTS], [c])


def float64_conv_error() -> str | None:
    """onnxruntime's refusal of a float64 ``Conv`` (the stencil [1, -2, 1]), or None if it runs."""
    w = helper.make_tensor("w", TensorProto.DOUBLE, [1, 1, 3], [1.0, -2.0, 1.0])
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [1, 1, HEAT_POINTS],
        [1, 1, HEAT_POINTS - 2],
        [w],
    )
    try:
        open_session(model)([np.zeros((1, 1, HEAT_POINTS))])
    except Exception as e:
        return str(e).splitlines()[0][:160]
    return None


def main() -> None:
    u = np.random.default_rng(0).random(HEAT_POINTS)
    fn, specs, options = heat_fori()

    def unrolled(u0: jax.Array) -> jax.Array:
        for _ in range(HEAT_STEPS):
            u0 = _heat_step(u0)
        return u0

    # jax.jit first and alone: onnxruntime's idle threads spin on the cores after each run and
    # would slow XLA's loop down if the two were interleaved
    with x64(True):
        jitted = jax.jit(fn)
        jitted(u).block_until_ready()
        ms = interleaved_median_ms(
            {"jax.jit of the heat loop": lambda: jitted(u).block_until_ready()},
            ROUNDS,
            math.inf,
            WARMUP,
        )
    forms: dict[str, tuple[bytes, int]] = {}
    for n in CHAINS:
        forms[f"{n} float64 Add nodes"] = (add_chain(n), n)
    for name, f in (
        ("heat loop as exported (Scan)", fn),
        ("heat loop written out (no loop)", unrolled),
    ):
        model = to_onnx(f, specs, **options)
        body = sum(len(a.g.node) for node in model.graph.node for a in node.attribute if a.g.node)
        forms[name] = (model.SerializeToString(), len(model.graph.node) + body * HEAT_STEPS)
    runs: dict[str, Callable[[], Any]] = {}
    for name, (model, _) in forms.items():
        session = open_session(model)
        runs[name] = lambda s=session: s([u])
    load = os.getloadavg()[0]
    ms.update(interleaved_median_ms(runs, ROUNDS, math.inf, WARMUP))
    print("| form | nodes run | ms | us per node |")
    print("|---|---|---|---|")
    for name, t in ms.items():
        nodes = forms[name][1] if name in forms else None
        per_node = f"{1e3 * t / nodes:.2f}" if nodes else ""
        print(f"| {name} | {nodes or ''} | {t:.3f} | {per_node} |")
    error = float64_conv_error()
    print(f"\nfloat64 Conv on onnxruntime's CPU provider: {'runs' if error is None else error}")
    print(f"load average (1 min) {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
