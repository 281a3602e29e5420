"""The README MLP (Linear, Dropout, BatchNorm, gelu, Linear), exported with a symbolic batch.

Run ``python -m examples.flax_mlp [out.onnx]``: exports, checks onnxruntime against JAX for a few
batch sizes and prints the graph's nodes.
"""

from __future__ import annotations

import sys

import onnx
from flax import nnx

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.flax import mode_copy


class MLP(nnx.Module):
    def __init__(self, din: int, dmid: int, dout: int, *, rngs: nnx.Rngs) -> None:
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.dropout = nnx.Dropout(rate=0.1, rngs=rngs)
        self.bn = nnx.BatchNorm(dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        x = nnx.gelu(self.dropout(self.bn(self.linear1(x))))
        return self.linear2(x)


def main(path: str = "mlp.onnx") -> onnx.ModelProto:
    model = MLP(din=30, dmid=20, dout=10, rngs=nnx.Rngs(0))
    to_onnx(model, [("B", 30)], path=path)  # writes the file, returns its path
    onnx_model = onnx.load(path)
    reference = mode_copy(model)  # inference mode, as exported; the model itself is left as it is
    print(verify(reference, onnx_model, [("B", 30)], sizes={"B": [1, 7, 128]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
