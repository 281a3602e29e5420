"""An Equinox MLP on flattened 28x28 images, exported for a symbolic batch.

Equinox modules work on one example; ``export_onnx(..., batch=True)`` exports
``jax.vmap(model)`` with input ``("B", 784)``, and every ``eqx.nn.Linear`` becomes one Gemm
over the whole batch (not a loop). Run ``python -m examples.eqx_mlp [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import OnnxExportable


class Classifier(eqx.Module, OnnxExportable):
    mlp: eqx.nn.MLP
    dropout: eqx.nn.Dropout

    def __init__(self, key: jax.Array) -> None:
        self.mlp = eqx.nn.MLP(784, 10, width_size=128, depth=2, activation=jax.nn.relu, key=key)
        self.dropout = eqx.nn.Dropout(0.2)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        return jax.nn.log_softmax(self.mlp(self.dropout(x, key=key)))


def main(path: str = "eqx_mlp.onnx") -> onnx.ModelProto:
    model = Classifier(jax.random.key(0))
    model.export_onnx([(784,)], path, batch=True)  # writes the file, returns its path
    onnx_model = onnx.load(path)
    reference = jax.vmap(eqx.nn.inference_mode(model))  # the export is in inference mode
    print(verify(reference, onnx_model, [("B", 784)], sizes={"B": [1, 7, 64]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
