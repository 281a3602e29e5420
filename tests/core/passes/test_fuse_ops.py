"""fuse_ops: attention and the rotary embedding a model writes out become ONNX ``Attention`` and
``RotaryEmbedding`` where the opset has them, with JAX's numbers."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types


def _attend(q, k, v, keep, softcap):
    """Attention as models write it: kv heads repeated, scores scaled, soft-capped, masked."""
    groups = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
    scores = jnp.einsum("bhsd,bhtd->bhst", q, k) / math.sqrt(q.shape[-1])
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    if keep is not None:
        scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
    return jnp.einsum("bhst,bhtd->bhsd", jax.nn.softmax(scores, axis=-1), v)


@settings(max_examples=12, deadline=None)
@given(
    kv_heads=st.sampled_from([1, 2, 4]),
    length=st.integers(1, 5),
    slots=st.integers(1, 7),
    head_dim=st.sampled_from([4, 6]),
    softcap=st.sampled_from([None, 5.0]),
    masked=st.sampled_from(["none", "keys", "full"]),
    seed=st.integers(0, 100),
)
def test_written_out_attention_is_onnx_attention(
    kv_heads, length, slots, head_dim, softcap, masked, seed
):
    """GQA heads read unrepeated, the scale, the soft-cap and a mask (broadcast over the
    queries, or one per query; rows masked everywhere included: JAX averages the values);
    compared with JAX at float32 tolerance."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 4, length, head_dim), np.float32) * 3
    k, v = (rng.standard_normal((2, kv_heads, slots, head_dim), np.float32) for _ in "kv")
    shape = {"none": None, "keys": (2, 1, 1, slots), "full": (2, 4, length, slots)}[masked]
    keep = None if shape is None else rng.random(shape) < 0.6

    def f(q, k, v, *mask):
        return _attend(q, k, v, mask[0] if mask else None, softcap)

    model = assert_exports_match_on(f, q, k, v, *([] if keep is None else [keep]), opset=23)
    ops = op_types(model, nested=True)
    if slots > 1:  # (one slot: the keys' transpose is a Reshape, left written out)
        assert ops.count("Attention") == 1 and "Softmax" not in ops, ops


def test_attention_is_left_written_out_below_opset_23():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 3, 4), np.float32) for _ in "qkv")
    model = assert_exports_match_on(lambda q, k, v: _attend(q, k, v, None, None), q, k, v)
    assert "Attention" not in op_types(model) and "Softmax" in op_types(model)


def test_attention_weights_read_elsewhere_stay_written_out():
    """The softmax is a result too: nothing is fused (the op does not return it)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 3, 4), np.float32) for _ in "qkv")

    def f(q, k, v):
        weights = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) * 0.5, axis=-1)
        return weights @ v, weights

    assert "Attention" not in op_types(assert_exports_match_on(f, q, k, v, opset=23))


def _rope(x, positions, theta=10000.0):
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[:, None, :, None].astype(jnp.float32) * freqs
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("head_dim", [2, 8])
def test_rotate_half_is_rotary_embedding_from_opset_23(opset, head_dim):
    rng = np.random.default_rng(head_dim)
    x = rng.standard_normal((2, 3, 5, head_dim), np.float32)
    positions = rng.integers(0, 50, (2, 5)).astype(np.int32)
    model = assert_exports_match_on(_rope, x, positions, opset=opset)
    ops = op_types(model)
    assert ops.count("RotaryEmbedding") == (opset >= 23), ops
    if opset >= 23:
        assert "Concat" not in ops and "Sub" not in ops, ops


def _rope_interleaved(x, positions, theta=10000.0):
    """GPT-J's rotary embedding: each pair (x0, x1), (x2, x3), ... of the last axis rotated."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[:, None, :, None].astype(jnp.float32) * freqs
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).reshape(x.shape)


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("head_dim", [2, 8])
def test_interleaved_pairs_are_interleaved_rotary_embedding_from_opset_23(opset, head_dim):
    rng = np.random.default_rng(head_dim)
    x = rng.standard_normal((2, 3, 5, head_dim), np.float32) * 4
    positions = rng.integers(0, 50, (2, 5)).astype(np.int32)
    model = assert_exports_match_on(_rope_interleaved, x, positions, opset=opset)
    nodes = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(nodes) == (opset >= 23), op_types(model)
    if opset >= 23:
        assert [a.i for a in nodes[0].attribute if a.name == "interleaved"] == [1]
        # the tables (Cos, Sin and what feeds them), two Squeezes and the op: no Slice, Concat,
        # Unsqueeze of x's pairs, Sub or Reshape left
        for op in ("Slice", "Concat", "Sub", "Reshape"):
            assert op not in op_types(model), op_types(model)
        assert len(model.graph.node) <= 12, op_types(model)


def test_interleaved_pairs_rotated_the_other_way_are_left_written_out():
    """``x2 * cos - x1 * sin`` first: the pairs swapped, another rotation: not fused."""

    def f(x, positions):
        angles = positions[:, None, :, None].astype(jnp.float32) * jnp.arange(1.0, 3.0)
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return jnp.stack([x2 * cos - x1 * sin, x1 * cos + x2 * sin], axis=-1).reshape(x.shape)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 3, 4), np.float32)
    positions = np.arange(3, dtype=np.int32)[None]
    assert "RotaryEmbedding" not in op_types(assert_exports_match_on(f, x, positions, opset=23))


def test_rotation_of_other_halves_is_left_written_out():
    """``x2 * cos + x1 * sin`` first is another rotation (the sign flips): not fused."""

    def f(x, positions):
        half = x.shape[-1] // 2
        angles = positions[:, None, :, None].astype(jnp.float32) * jnp.arange(1.0, half + 1)
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        x1, x2 = x[..., :half], x[..., half:]
        return jnp.concatenate([x2 * cos - x1 * sin, x1 * cos + x2 * sin], axis=-1)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 3, 4), np.float32)
    positions = np.arange(3, dtype=np.int32)[None]
    assert "RotaryEmbedding" not in op_types(assert_exports_match_on(f, x, positions, opset=23))


@pytest.mark.parametrize("empty", ["batch", "queries", "keys", "none"])
def test_fused_attention_of_symbolic_batch_or_length_0_gives_jax_zeros(empty):
    """onnxruntime refuses an Attention of batch or length 0: an If gives JAX's result there
    (empty, or a sum over no keys: zeros)."""
    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.core.verify import run_onnx

    def f(q, k, v):
        return _attend(q, k, v, None, None)

    specs = [(("B", 4, "T", 8), np.float32), *[(("B", 2, "S", 8), np.float32)] * 2]
    model = to_onnx(f, specs, opset=23)
    assert "Attention" in op_types(model, nested=True) and "Softmax" not in op_types(model)
    b, t, s = {"batch": (0, 3, 5), "queries": (2, 0, 5), "keys": (2, 3, 0), "none": (2, 3, 5)}[
        empty
    ]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, 4, t, 8), np.float32)
    k, v = (rng.standard_normal((b, 2, s, 8), np.float32) for _ in "kv")
    (got,) = run_onnx(model, [q, k, v])
    np.testing.assert_allclose(got, np.asarray(f(q, k, v)), rtol=1e-5, atol=1e-6)


def _decoder_attention(x, past_k, past_v, wq, wk, wv, positions, rotate, fused=False):
    """A decoder layer's attention over a growing cache: projections (one fused qkv one,
    split, or three) split into heads (and rotated), the new keys and values concatenated to
    the past (also returned: the present), the heads merged after."""
    b, s, _ = x.shape
    heads, kv_heads, head_dim = 4, past_k.shape[1], past_k.shape[3]

    def split(y, n):
        return y.reshape(b, s, n, head_dim).transpose(0, 2, 1, 3)

    if fused:
        qkv = x @ jnp.concatenate([wq, wk, wv], axis=1)
        xq, xk, xv = jnp.split(qkv, [wq.shape[1], wq.shape[1] + wk.shape[1]], axis=-1)
    else:
        xq, xk, xv = x @ wq, x @ wk, x @ wv
    q, k = split(xq, heads), split(xk, kv_heads)
    if rotate:
        q, k = _rope(q, positions), _rope(k, positions)
    keys = jnp.concatenate([past_k, k], axis=2)
    values = jnp.concatenate([past_v, split(xv, kv_heads)], axis=2)
    out = _attend(q, keys, values, None, None)
    return out.transpose(0, 2, 1, 3).reshape(b, s, heads * head_dim), keys, values


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("past", [0, 3])
def test_attention_over_a_concatenated_cache_takes_the_past(rotate, past, fused):
    """The past and present go into and out of one Attention, which takes the 3D projections
    (3D RotaryEmbeddings where rotated): no head splits, merges or Concats are left; the
    results are JAX's (the past empty or not)."""
    rng = np.random.default_rng(past)
    x = rng.standard_normal((2, 3, 16), np.float32)
    past_k, past_v = (rng.standard_normal((2, 2, past, 4), np.float32) for _ in "kv")
    wq = rng.standard_normal((16, 16), np.float32) / 4
    wk, wv = (rng.standard_normal((16, 8), np.float32) / 4 for _ in "kv")
    positions = (past + np.arange(3, dtype=np.int32))[None].repeat(2, 0)

    def f(x, past_k, past_v, positions):
        return _decoder_attention(x, past_k, past_v, wq, wk, wv, positions, rotate, fused)

    model = assert_exports_match_on(f, x, past_k, past_v, positions, opset=23)
    ops = op_types(model, nested=True)
    assert ops.count("Attention") == 1, ops
    assert not {"Concat", "Transpose", "Reshape"} & set(op_types(model)), ops
    assert op_types(model).count("Split") == fused, ops
    assert ops.count("RotaryEmbedding") == 2 * rotate, ops


@pytest.mark.parametrize("sizes", [(0, 3, 2), (2, 0, 2), (2, 3, 0), (2, 3, 2)])
def test_attention_taking_the_past_of_symbolic_batch_or_length_0(sizes):
    """The If around it (onnxruntime refuses a batch or length of 0) gives JAX's zeros and
    the past with the new keys and values concatenated there."""
    from jax2onnx_nn import to_onnx
    from jax2onnx_nn.core.verify import run_onnx

    rng = np.random.default_rng(1)
    wq = rng.standard_normal((16, 16), np.float32) / 4
    wk, wv = (rng.standard_normal((16, 8), np.float32) / 4 for _ in "kv")

    def f(x, past_k, past_v, positions):
        return _decoder_attention(x, past_k, past_v, wq, wk, wv, positions, True)

    specs = [
        (("B", "S", 16), np.float32),
        *[(("B", 2, "P", 4), np.float32)] * 2,
        (("B", "S"), np.int32),
    ]
    model = to_onnx(f, specs, opset=23)
    ops = op_types(model)
    assert "Attention" in op_types(model, nested=True) and not {"Transpose", "Reshape"} & set(ops)
    b, s, p = sizes
    x = rng.standard_normal((b, s, 16), np.float32)
    past_k, past_v = (rng.standard_normal((b, 2, p, 4), np.float32) for _ in "kv")
    positions = (p + np.arange(s, dtype=np.int32))[None].repeat(b, 0)
    got = run_onnx(model, [x, past_k, past_v, positions])
    for have, want in zip(got, f(x, past_k, past_v, positions), strict=True):
        np.testing.assert_allclose(have, np.asarray(want), rtol=1e-5, atol=1e-5)
