"""The README ONNX-functions example: two MLPBlocks give ONE function and TWO call nodes.

Each block's weights stay initializers of the main graph (``block1.linear1.kernel``, ...) and
are passed to the function as inputs. Run ``python -m examples.flax_mlp_functions [out.onnx]``.
"""

from __future__ import annotations

import sys

import onnx
from flax import nnx

from jax2onnx_nn import onnx_function, to_onnx, verify
from jax2onnx_nn.flax import mode_copy


@onnx_function
class MLPBlock(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear1 = nnx.Linear(dim, dim, rngs=rngs)
        self.linear2 = nnx.Linear(dim, dim, rngs=rngs)
        self.batchnorm = nnx.BatchNorm(dim, rngs=rngs)

    def __call__(self, x):
        return nnx.gelu(self.linear2(self.batchnorm(nnx.gelu(self.linear1(x)))))


class MyModel(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.block1 = MLPBlock(dim, rngs=rngs)
        self.block2 = MLPBlock(dim, rngs=rngs)

    def __call__(self, x):
        return self.block2(self.block1(x))


def main(path: str = "model_with_function.onnx") -> onnx.ModelProto:
    model = MyModel(256, rngs=nnx.Rngs(0))
    to_onnx(model, [(100, 256)], path=path)
    onnx_model = onnx.load(path)
    reference = mode_copy(model)  # inference mode, as exported; the model itself is left as it is
    print(verify(reference, onnx_model, [(100, 256)]))
    print("functions:", [f.name for f in onnx_model.functions])
    print("main graph:", [f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
