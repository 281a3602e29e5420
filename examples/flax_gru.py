"""An ``nnx.GRUCell`` run over a sequence with ``jax.lax.scan``, exported with symbolic batch
and sequence length.

Input ``("B", "T", F)``; the cell's carry starts at zeros, the scan runs over time (one ONNX
``GRU`` over the whole sequence, inside an ``If`` that returns the initial carry when ``T``
is 0 at run time), and a linear head reads every step's hidden state. Returns the outputs
``(B, T, classes)`` and the final hidden state ``(B, hidden)``.

Run ``python -m examples.flax_gru [out.onnx]``.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


class GRUClassifier(nnx.Module):
    def __init__(self, features: int, hidden: int, classes: int, *, rngs: nnx.Rngs) -> None:
        self.cell = nnx.GRUCell(features, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, classes, rngs=rngs)
        self.hidden = hidden

    def __call__(self, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        carry = jnp.zeros((xs.shape[0], self.hidden), xs.dtype)

        def step(h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            return self.cell(h, x)

        final, hs = jax.lax.scan(step, carry, jnp.swapaxes(xs, 0, 1))  # time-major inside the scan
        return self.head(jnp.swapaxes(hs, 0, 1)), final


FEATURES, HIDDEN, CLASSES = 5, 8, 3
SEQUENCES = [("B", "T", FEATURES)]


def main(path: str = "gru.onnx") -> onnx.ModelProto:
    model = GRUClassifier(FEATURES, HIDDEN, CLASSES, rngs=nnx.Rngs(0))
    to_onnx(model, SEQUENCES, path=path)
    onnx_model = onnx.load(path)
    print(verify(mode_copy(model), onnx_model, SEQUENCES, sizes={"B": [1, 4], "T": [1, 9]}))
    print(f"{len(onnx_model.graph.node)} nodes: {[n.op_type for n in onnx_model.graph.node]}")
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
