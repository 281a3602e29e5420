"""One token at a time: the prefill of a framework cache that takes a single token per call.

``nnx.MultiHeadAttention`` and Linen's ``MultiHeadDotProductAttention`` with ``decode=True``
write one token into their cache per call (they refuse a key of length > 1). The contract's
step takes ``S`` tokens (the prompt, then 1); :func:`scan_tokens` runs the model's one-token
call over them with ``lax.scan``, so a symbolic ``S`` exports as one ONNX ``Loop``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Pairs = list[tuple[jax.Array, jax.Array]]

#: ``one_token(carry, input_ids [B, 1], position_ids [B, 1], mask) -> (logits [B, 1, V], carry)``
OneToken = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]


def scan_tokens(
    one_token: OneToken,
    carry: Any,
    input_ids: jax.Array,
    position_ids: jax.Array,
    attention_mask: jax.Array,
) -> tuple[jax.Array, Any]:
    """Run ``one_token`` over the ``S`` tokens of ``input_ids`` ``[B, S]`` in order.

    Args:
        one_token: the model's call on one token per row, threading ``carry`` (its cache).
        carry: the cache before the first token.
        input_ids, position_ids: int32 ``[B, S]``.
        attention_mask: int ``[B, slots]`` (1 at a real token); given to ``one_token`` as the
            boolean mask ``[B, 1, 1, slots]`` Flax's attention takes (``mask=``).

    Returns:
        ``(logits [B, S, V], carry)`` after the last token.
    """
    mask = (attention_mask > 0)[:, None, None, :]

    def body(carry: Any, token: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
        ids, positions = token
        logits, carry = one_token(carry, ids[:, None], positions[:, None], mask)
        return carry, logits[:, 0]

    carry, logits = lax.scan(body, carry, (input_ids.T, position_ids.T))
    return jnp.transpose(logits, (1, 0, 2)), carry


def heads_first(cache: Pairs) -> Pairs:
    """``[B, T, heads, head_dim]`` (Flax's layout) -> ``[B, heads, T, head_dim]`` (the
    contract's), for every key and value; the same swap goes back."""
    return [(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)) for k, v in cache]
