"""A pre-norm transformer block in Equinox: RMSNorm, causal MultiheadAttention with rotary
position embeddings (RoPE, applied to the heads through ``process_heads``), and an MLP.

Exported for a symbolic batch of sequences at opset 23, where RMSNorm is one
``RMSNormalization`` node and RoPE one ``RotaryEmbedding`` for queries and one for keys
(every head of every example at once); the projections are Gemm/MatMul over the batch and the
attention core is MatMul / Where (the causal mask) / Softmax / MatMul.
Run ``python -m examples.eqx_transformer [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import numpy as np
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

SEQUENCE, WIDTH, HEADS = 16, 32, 4


class TransformerBlock(eqx.Module):
    attention_norm: eqx.nn.RMSNorm
    attention: eqx.nn.MultiheadAttention
    rope: eqx.nn.RotaryPositionalEmbedding
    mlp_norm: eqx.nn.RMSNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.attention_norm = eqx.nn.RMSNorm(WIDTH, use_bias=False)
        self.attention = eqx.nn.MultiheadAttention(HEADS, WIDTH, key=k1)
        self.rope = eqx.nn.RotaryPositionalEmbedding(WIDTH // HEADS)
        self.mlp_norm = eqx.nn.RMSNorm(WIDTH, use_bias=False)
        self.mlp_in = eqx.nn.Linear(WIDTH, 4 * WIDTH, key=k2)
        self.mlp_out = eqx.nn.Linear(4 * WIDTH, WIDTH, key=k3)

    def rotate(
        self, q: jax.Array, k: jax.Array, v: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """RoPE on queries and keys, per head (heads are axis 1 of (seq, heads, size))."""
        per_head = jax.vmap(self.rope, in_axes=1, out_axes=1)
        return per_head(q), per_head(k), v

    def __call__(self, x: jax.Array) -> jax.Array:
        causal = np.tril(np.ones((x.shape[0], x.shape[0]), dtype=bool))  # a constant of the graph
        h = jax.vmap(self.attention_norm)(x)
        x = x + self.attention(h, h, h, mask=causal, process_heads=self.rotate)
        h = jax.vmap(self.mlp_norm)(x)
        return x + jax.vmap(lambda t: self.mlp_out(jax.nn.gelu(self.mlp_in(t))))(h)


def main(path: str = "eqx_transformer.onnx") -> onnx.ModelProto:
    block = TransformerBlock(jax.random.key(0))
    export_onnx(block, [(SEQUENCE, WIDTH)], path, batch=True, opset=23)
    onnx_model = onnx.load(path)
    reference = jax.vmap(eqx.nn.inference_mode(block))
    print(verify(reference, onnx_model, [("B", SEQUENCE, WIDTH)], sizes={"B": [1, 3]}))
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
