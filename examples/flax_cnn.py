"""An MNIST-sized CNN in Flax NNX (the Flax tutorial's layout, with BatchNorm and Dropout).

Input ``("B", 28, 28, 1)`` images, channels last. Convs become ONNX ``Conv`` between layout
``Transpose``s, BatchNorm a ``BatchNormalization``, pooling the windowed ops.
Run ``python -m examples.flax_cnn [out.onnx]``.
"""

from __future__ import annotations

import sys

import jax
import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


class CNN(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(32, rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.bn2 = nnx.BatchNorm(64, rngs=rngs)
        self.dropout = nnx.Dropout(0.25, rngs=rngs)
        self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
        self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.avg_pool(nnx.relu(self.bn1(self.conv1(x))), window_shape=(2, 2), strides=(2, 2))
        x = nnx.avg_pool(nnx.relu(self.bn2(self.conv2(x))), window_shape=(2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        x = self.dropout(nnx.relu(self.linear1(x)))
        return self.linear2(x)


IMAGES = [("B", 28, 28, 1)]


def main(path: str = "cnn.onnx") -> onnx.ModelProto:
    model = CNN(rngs=nnx.Rngs(0))
    to_onnx(model, IMAGES, path=path)
    onnx_model = onnx.load(path)
    reference = mode_copy(model)  # inference mode, as exported; the model itself is left as it is
    print(verify(reference, onnx_model, IMAGES, sizes={"B": [1, 8]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
