"""core/layers/attention.py: the masked-logit value of each library, on the rows where it
decides the result (compared with JAX in onnxruntime)."""

from __future__ import annotations

import sys

import equinox as eqx
import jax
import numpy as np

from jax2onnx_nn.testing import assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types

# Unmasked logits of -3e38: below jax.nn's masked value (-0.7 * max = -2.4e38), above
# Equinox's (finfo.min = -3.4e38). Row 0 is fully masked (uniform weights in both), row 1
# masks one key: jax.nn gives that key all the weight, Equinox the others.
QUERY = np.full((2, 1), 1e19, np.float32)
KEY = np.full((3, 1), -3e19, np.float32)
VALUE = np.array([[1, 2], [10, 20], [100, 300]], np.float32)
MASK = np.array([[False, False, False], [True, False, True]])


def test_jax_nn_attention_masks_with_its_large_negative() -> None:
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0)

    # head size 2 (jax.nn takes values of the query's head size): logits 2 * 1e19 * -1.5e19
    q, k, v = (
        np.repeat(a, 2, axis=1)[None, :, None, :] for a in (QUERY, KEY / 2, VALUE[:, :1])
    )  # B T N H
    expected = np.asarray(fn(q, k, v, MASK[None, None]))
    assert np.allclose(expected[0, 1, 0], VALUE[1, 0])  # the masked key wins
    assert np.allclose(expected[0, 0, 0], VALUE[:, 0].mean())  # a fully masked row: uniform
    model = assert_exports_match_on(fn, q, k, v, MASK[None, None])
    assert "Softmax" in op_types(model)


def test_equinox_attention_masks_with_finfo_min() -> None:
    attention_module = sys.modules[eqx.nn.MultiheadAttention.__module__]

    def fn(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        return attention_module.dot_product_attention(q, k, v, mask)

    expected = np.asarray(fn(QUERY, KEY, VALUE, MASK))
    assert np.allclose(expected[1], (VALUE[0] + VALUE[2]) / 2)  # the unmasked keys share it
    assert np.allclose(expected[0], VALUE.mean(axis=0))  # a fully masked row: uniform
    model = assert_exports_match_on(fn, QUERY, KEY, VALUE, MASK)
    assert "Softmax" in op_types(model)


def test_onnx_attention_adds_the_masked_value_exactly_below_1e31() -> None:
    # from opset 23 jax.nn's attention is ONNX Attention with the mask added to the logits:
    # a logit below half an ulp of the masked value (1e31) rounds to it, so rows masked
    # everywhere average the values as in JAX (and ONNX's own boolean mask would give zeros)
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0)

    q, k, v = (
        np.repeat(a, 2, axis=1)[None, :, None, :] for a in (QUERY / 1e4, KEY / 2e5, VALUE[:, :1])
    )  # logits -1.5e30
    expected = np.asarray(fn(q, k, v, MASK[None, None]))
    assert np.allclose(expected[0, 0, 0], VALUE[:, 0].mean())  # a fully masked row: uniform
    model = assert_exports_match_on(fn, q, k, v, MASK[None, None], opset=23)
    assert op_types(model).count("Attention") == 1
