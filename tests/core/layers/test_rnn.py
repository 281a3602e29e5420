"""core/layers/rnn.py: GRU / LSTM steps of Flax NNX and Equinox cells, and scans of them."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx
import pytest
from flax import nnx

from jax2onnx_nn import to_onnx, verify


class FlaxStep(nnx.Module):
    """A user module around a cell: with ``auto_functions`` an ONNX function in the scan body,
    which the cells-over-the-sequence form cannot see into, so the scan stays a loop."""

    def __init__(self, lstm: bool) -> None:
        cls = nnx.LSTMCell if lstm else nnx.GRUCell
        self.cell = cls(3, 4, rngs=nnx.Rngs(0))

    def __call__(self, carry: Any, x: jax.Array) -> Any:
        return self.cell(carry, x)


class FlaxScan(nnx.Module):
    def __init__(self, lstm: bool) -> None:
        self.step, self.lstm = FlaxStep(lstm), lstm

    def __call__(self, xs: jax.Array) -> Any:
        h = jnp.zeros((xs.shape[0], 4), xs.dtype) + 0.5
        return jax.lax.scan(self.step, (h, h * 2.0) if self.lstm else h, jnp.swapaxes(xs, 0, 1))


class EqxStep(eqx.Module):
    cell: Any

    def __init__(self, lstm: bool) -> None:
        cls = eqx.nn.LSTMCell if lstm else eqx.nn.GRUCell
        self.cell = cls(3, 4, key=jax.random.key(0))

    def __call__(self, carry: Any, x: jax.Array) -> Any:
        carry = self.cell(x, carry)
        return carry, carry[0] if isinstance(carry, tuple) else carry


class EqxScan(eqx.Module):
    step: EqxStep
    lstm: bool = eqx.field(static=True)

    def __init__(self, lstm: bool) -> None:
        self.step, self.lstm = EqxStep(lstm), lstm

    def __call__(self, xs: jax.Array) -> Any:
        def one(seq: jax.Array) -> Any:
            h = jnp.zeros(4) + 0.5
            return jax.lax.scan(lambda c, x: self.step(c, x), (h, h * 2.0) if self.lstm else h, seq)

        return jax.vmap(one)(xs)


def _guarded_cells(nodes: Any, guarded: bool = False) -> list[bool]:
    """For every GRU / LSTM in ``nodes`` (bodies included), whether an If holds it."""
    found = []
    for node in nodes:
        if node.op_type in ("GRU", "LSTM"):
            found.append(guarded)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found += _guarded_cells(attr.g.node, guarded or node.op_type == "If")
    return found


CASES = [
    (module, lstm, functions)
    for module in (FlaxScan, EqxScan)
    for lstm in (False, True)
    for functions in ("keep", "inline")
]


FAST = {(FlaxScan, False, "keep"), (EqxScan, True, "inline")}


@pytest.mark.parametrize(
    "module, lstm, functions",
    [pytest.param(*c, marks=() if c in FAST else pytest.mark.slow) for c in CASES],
)
def test_cells_in_kept_loops_and_functions_are_guarded_against_an_empty_batch(
    module: type, lstm: bool, functions: str
) -> None:
    """A scan whose step is a user module kept as an ONNX function (or inlined into the loop
    body) stays a loop of single cell steps; with a symbolic batch each step sits in an If on
    the batch being empty (onnxruntime aborts the process on a GRU or LSTM of batch 0; the
    batch-0 run is the slow test below, in a process of its own)."""
    fn = module(lstm)
    model = to_onnx(fn, [("B", 5, 3)], auto_functions=True, functions=functions)
    verify(fn, model, [("B", 5, 3)], sizes={"B": [1, 3]}).raise_if_failed()
    cells = _guarded_cells(model.graph.node) + [
        g for f in model.functions for g in _guarded_cells(f.node)
    ]
    assert cells and all(cells)
    assert bool(model.functions) == (functions == "keep")


_EMPTY_BATCH = """
import numpy as np
from jax2onnx_nn import to_onnx, verify
from tests.core.layers.test_rnn import CASES
for module, lstm, functions in CASES:
    fn = module(lstm)
    model = to_onnx(fn, [("B", 5, 3)], auto_functions=True, functions=functions)
    verify(fn, model, [("B", 5, 3)], sizes={"B": [0, 3]}).raise_if_failed()
print("ok")
"""


@pytest.mark.slow
def test_cells_in_kept_loops_and_functions_run_an_empty_batch() -> None:
    """Batch 0 and 3 at run time against JAX, every case above (a process of its own: an
    unguarded GRU or LSTM of batch 0 aborts onnxruntime's process)."""
    root = pathlib.Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "-c", _EMPTY_BATCH], capture_output=True, text=True, timeout=600, cwd=root
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def _body_ops(nodes: Any, in_loop: bool = False) -> list[str]:
    """The op types of every node inside a Loop / Scan body in ``nodes`` (If branches in it too)."""
    ops: list[str] = []
    for node in nodes:
        ops += [node.op_type] if in_loop else []
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops += _body_ops(attr.g.node, in_loop or node.op_type in ("Loop", "Scan"))
    return ops


@pytest.mark.parametrize("module", [FlaxScan, EqxScan])
def test_an_inlined_cells_weight_layout_runs_before_the_loop(module: type) -> None:
    """Inlined into the scan body, the cell's weight layout (Split / Concat / Transpose of
    the kernels into ONNX's gate order) moves in front of the loop and folds into the
    initializers: the body holds the step's own work only."""
    fn = module(False)
    model = to_onnx(fn, [("B", 5, 3)], auto_functions=True, functions="inline")
    ops = _body_ops(model.graph.node)
    assert "GRU" in ops and not {"Split", "Concat", "Transpose", "Constant"} & set(ops), ops
    assert "Split" not in {n.op_type for n in model.graph.node}  # folded, not only moved
    verify(fn, model, [("B", 5, 3)], sizes={"B": [1, 3]}).raise_if_failed()


@pytest.mark.parametrize(
    "module, lstm",
    [
        pytest.param(m, lstm, marks=() if (m, lstm) == (FlaxScan, False) else pytest.mark.slow)
        for m in (FlaxScan, EqxScan)
        for lstm in (False, True)
    ],
)
def test_a_scan_of_cell_steps_runs_an_empty_batch_on_openvino(module: type, lstm: bool) -> None:
    """The step module inlined into a Scan for OpenVINO: batch 0 and 3 against JAX there and on
    onnxruntime (the Flax scan's initial carry ``zeros((B, 4)) + 0.5`` was (1, 4) on OpenVINO)."""
    from jax2onnx_nn.core.runtimes import missing_reason

    if missing_reason("openvino") is not None:
        pytest.skip(str(missing_reason("openvino")))
    fn = module(lstm)
    model = to_onnx(fn, [("B", 5, 3)], auto_functions=True, target="openvino")
    for runtime in ("openvino", "onnxruntime"):
        verify(fn, model, [("B", 5, 3)], sizes={"B": [0, 3]}, runtime=runtime).raise_if_failed()
