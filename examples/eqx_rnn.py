"""A GRU and an LSTM run over a sequence with ``lax.scan``, then a linear read-out.

The scan of the two cell steps is one ONNX ``GRU`` and one ``LSTM`` node, each run over the
whole sequence (the LSTM reads the GRU's output at every step); the cells' weights are
stored once, in ONNX's gate order. Exported for a symbolic batch of sequences.
Run ``python -m examples.eqx_rnn [out.onnx]``."""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

STEPS, FEATURES, HIDDEN = 12, 6, 16


class SequenceModel(eqx.Module):
    gru: eqx.nn.GRUCell
    lstm: eqx.nn.LSTMCell
    readout: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.gru = eqx.nn.GRUCell(FEATURES, HIDDEN, key=k1)
        self.lstm = eqx.nn.LSTMCell(HIDDEN, HIDDEN, key=k2)
        self.readout = eqx.nn.Linear(HIDDEN, 1, key=k3)

    def __call__(self, xs: jax.Array) -> jax.Array:
        zeros = jnp.zeros(HIDDEN, xs.dtype)

        def step(carry: tuple, x: jax.Array) -> tuple[tuple, jax.Array]:
            g, (h, c) = carry
            g = self.gru(x, g)
            h, c = self.lstm(g, (h, c))
            return (g, (h, c)), h

        _, hs = jax.lax.scan(step, (zeros, (zeros, zeros)), xs)
        return jax.vmap(self.readout)(hs)[:, 0]  # one prediction per time step


def main(path: str = "eqx_rnn.onnx") -> onnx.ModelProto:
    model = SequenceModel(jax.random.key(0))
    export_onnx(model, [(STEPS, FEATURES)], path, batch=True)
    onnx_model = onnx.load(path)
    print(verify(jax.vmap(model), onnx_model, [("B", STEPS, FEATURES)], sizes={"B": [1, 4]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
