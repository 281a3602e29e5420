"""A small BERT encoder and classifier in Equinox, as in the Equinox documentation's BERT example.

Token, position and segment ``eqx.nn.Embedding`` lookups are summed and normalised by a
LayerNorm; then ``LAYERS`` post-norm transformer layers: ``eqx.nn.MultiheadAttention`` masked
by the padding mask, residual, LayerNorm, then a per-token feed-forward (Linear, gelu, Linear),
residual, LayerNorm, all with ``eqx.nn.Dropout``. The pooler (Linear + tanh of the first,
``[CLS]``, token) feeds a Linear classification head.

Each example is ``token_ids`` (int32, ``(SEQUENCE,)``) and ``mask`` (int32, 1 for a token, 0
for padding); as in the Equinox example, the attention mask is their outer product, one per
head, as float32: ``(heads, seq, seq)``, so a padding position neither attends nor is attended
to. Single-sentence inputs: every segment id is 0.

Exported for a symbolic batch ``"B"`` in inference mode: each Embedding is one ``Gather``
(behind a clamp of the index, as JAX clamps), each LayerNorm one ``LayerNormalization``, each
attention core MatMul / Div / Where (the mask, read as ``mask != 0`` like jnp.where does: one
Equal + Not, shared by the layers) / Softmax / MatMul; the dropouts leave no node.
Run ``python -m examples.eqx_bert [out.onnx]``.
"""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import onnx

from jax2onnx_nn import verify
from jax2onnx_nn.equinox import export_onnx

VOCAB, SEGMENTS, MAX_LENGTH = 50, 2, 32
SEQUENCE, WIDTH, HEADS, FF_WIDTH, LAYERS, CLASSES = 8, 32, 4, 64, 2, 3
DROPOUT = 0.1


def _split(key: jax.Array | None, n: int) -> list[jax.Array | None]:
    return [None] * n if key is None else list(jax.random.split(key, n))


class EmbedderBlock(eqx.Module):
    token_embedder: eqx.nn.Embedding
    segment_embedder: eqx.nn.Embedding
    position_embedder: eqx.nn.Embedding
    layernorm: eqx.nn.LayerNorm
    dropout: eqx.nn.Dropout

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.token_embedder = eqx.nn.Embedding(VOCAB, WIDTH, key=k1)
        self.segment_embedder = eqx.nn.Embedding(SEGMENTS, WIDTH, key=k2)
        self.position_embedder = eqx.nn.Embedding(MAX_LENGTH, WIDTH, key=k3)
        self.layernorm = eqx.nn.LayerNorm(WIDTH)
        self.dropout = eqx.nn.Dropout(DROPOUT)

    def __call__(
        self,
        token_ids: jax.Array,
        position_ids: jax.Array,
        segment_ids: jax.Array,
        *,
        key: jax.Array | None = None,
    ) -> jax.Array:
        tokens = jax.vmap(self.token_embedder)(token_ids)
        segments = jax.vmap(self.segment_embedder)(segment_ids)
        positions = jax.vmap(self.position_embedder)(position_ids)
        embedded = jax.vmap(self.layernorm)(tokens + segments + positions)
        return self.dropout(embedded, key=key)


class AttentionBlock(eqx.Module):
    attention: eqx.nn.MultiheadAttention
    layernorm: eqx.nn.LayerNorm
    dropout: eqx.nn.Dropout

    def __init__(self, key: jax.Array) -> None:
        self.attention = eqx.nn.MultiheadAttention(
            HEADS,
            WIDTH,
            use_query_bias=True,
            use_key_bias=True,
            use_value_bias=True,
            use_output_bias=True,
            dropout_p=DROPOUT,
            key=key,
        )
        self.layernorm = eqx.nn.LayerNorm(WIDTH)
        self.dropout = eqx.nn.Dropout(DROPOUT)

    def __call__(self, x: jax.Array, mask: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        attention_key, dropout_key = _split(key, 2)
        attended = self.attention(x, x, x, mask=self_attention_mask(mask), key=attention_key)
        return jax.vmap(self.layernorm)(x + self.dropout(attended, key=dropout_key))


def self_attention_mask(mask: jax.Array) -> jax.Array:
    """(seq,) padding mask -> (heads, seq, seq): position i may attend to j if both are tokens."""
    pairs = jnp.expand_dims(mask, -1) * jnp.expand_dims(mask, -2)
    return jnp.repeat(jnp.expand_dims(pairs, -3), HEADS, axis=-3).astype(jnp.float32)


class FeedForwardBlock(eqx.Module):
    mlp: eqx.nn.Linear
    output: eqx.nn.Linear
    layernorm: eqx.nn.LayerNorm
    dropout: eqx.nn.Dropout

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.mlp = eqx.nn.Linear(WIDTH, FF_WIDTH, key=k1)
        self.output = eqx.nn.Linear(FF_WIDTH, WIDTH, key=k2)
        self.layernorm = eqx.nn.LayerNorm(WIDTH)
        self.dropout = eqx.nn.Dropout(DROPOUT)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        """One token: (width,) -> (width,)."""
        hidden = self.output(jax.nn.gelu(self.mlp(x)))
        return self.layernorm(x + self.dropout(hidden, key=key))


class TransformerLayer(eqx.Module):
    attention_block: AttentionBlock
    ff_block: FeedForwardBlock

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.attention_block = AttentionBlock(k1)
        self.ff_block = FeedForwardBlock(k2)

    def __call__(self, x: jax.Array, mask: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        attention_key, ff_key = _split(key, 2)
        x = self.attention_block(x, mask, key=attention_key)
        ff_keys = None if ff_key is None else jax.random.split(ff_key, x.shape[0])
        return jax.vmap(lambda token, k: self.ff_block(token, key=k))(x, ff_keys)


class Encoder(eqx.Module):
    embedder_block: EmbedderBlock
    layers: list[TransformerLayer]
    pooler: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k_embed, k_pool, *k_layers = jax.random.split(key, 2 + LAYERS)
        self.embedder_block = EmbedderBlock(k_embed)
        self.layers = [TransformerLayer(k) for k in k_layers]
        self.pooler = eqx.nn.Linear(WIDTH, WIDTH, key=k_pool)

    def __call__(
        self,
        token_ids: jax.Array,
        segment_ids: jax.Array,
        mask: jax.Array,
        *,
        key: jax.Array | None = None,
    ) -> dict[str, jax.Array]:
        embed_key, *layer_keys = _split(key, 1 + LAYERS)
        position_ids = jnp.arange(token_ids.shape[0])
        x = self.embedder_block(token_ids, position_ids, segment_ids, key=embed_key)
        for layer, layer_key in zip(self.layers, layer_keys, strict=True):
            x = layer(x, mask, key=layer_key)
        return {"embeddings": x, "pooled": jnp.tanh(self.pooler(x[0]))}


class BertClassifier(eqx.Module):
    encoder: Encoder
    dropout: eqx.nn.Dropout
    classifier: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.encoder = Encoder(k1)
        self.dropout = eqx.nn.Dropout(DROPOUT)
        self.classifier = eqx.nn.Linear(WIDTH, CLASSES, key=k2)

    def __call__(
        self, token_ids: jax.Array, mask: jax.Array, *, key: jax.Array | None = None
    ) -> jax.Array:
        """Class logits of one sequence: ``token_ids`` and ``mask`` are (seq,) int32."""
        encoder_key, dropout_key = _split(key, 2)
        pooled = self.encoder(token_ids, jnp.zeros_like(token_ids), mask, key=encoder_key)["pooled"]
        return self.classifier(self.dropout(pooled, key=dropout_key))


INPUTS = [((SEQUENCE,), np.int32), ((SEQUENCE,), np.int32)]
BATCHED_INPUTS = [(("B", SEQUENCE), np.int32), (("B", SEQUENCE), np.int32)]


def example_batch(batch: int, *, padded: bool = True, seed: int = 0) -> list[np.ndarray]:
    """Token ids and masks of ``batch`` sequences: with ``padded``, sequence i has
    ``SEQUENCE - 2 * i - 1`` tokens then padding (id 0, mask 0); else no padding."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, VOCAB, size=(batch, SEQUENCE)).astype(np.int32)
    lengths = [max(1, SEQUENCE - 2 * i - 1) if padded else SEQUENCE for i in range(batch)]
    mask = (np.arange(SEQUENCE)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)
    return [token_ids * mask, mask]


def main(path: str = "eqx_bert.onnx") -> onnx.ModelProto:
    bert = BertClassifier(jax.random.key(0))
    export_onnx(bert, INPUTS, path, batch=True)
    onnx_model = onnx.load(path)
    reference = jax.vmap(eqx.nn.inference_mode(bert))
    for batch, padded in [(1, False), (3, True)]:
        print(
            verify(
                reference,
                onnx_model,
                BATCHED_INPUTS,
                input_values=example_batch(batch, padded=padded),
            )
        )
    print([f"{n.name}: {n.op_type}" for n in onnx_model.graph.node])
    return onnx_model


if __name__ == "__main__":
    main(*sys.argv[1:])
