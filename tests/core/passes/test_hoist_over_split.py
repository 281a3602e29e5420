"""Layout ops after a Split of heads hoisted over it."""

from __future__ import annotations

import jax.numpy as jnp
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, op_types, sizes_for


@given(
    batch=st.sampled_from([(), ("B",), (2,)]),
    parts=st.integers(2, 3),
    heads=st.integers(1, 3),
    head_dim=st.integers(1, 3),
    keys_transposed=st.booleans(),
    seed=st.integers(0, 100),
)
def test_heads_after_a_split_are_one_reshape_and_one_transpose(
    batch, parts, heads, head_dim, keys_transposed, seed
):
    """Attention's head split (``split(qkv)`` then each piece ``(.., T, C) -> (.., N, T, H)``)
    becomes one Reshape and one Transpose before the Split (plus one Transpose for a piece
    laid out otherwise, attention's keys); values match JAX."""
    nb = len(batch)
    usual = (*range(nb), nb + 1, nb, nb + 2)
    other = (*range(nb), nb + 1, nb + 2, nb)

    def f(x):
        pieces = jnp.split(x, parts, axis=-1)
        shaped = [p.reshape(*p.shape[:-1], heads, head_dim) for p in pieces]
        perms = [other if keys_transposed and i == 1 else usual for i in range(parts)]
        return tuple(
            jnp.transpose(p, perm) * (i + 1)
            for i, (p, perm) in enumerate(zip(shaped, perms, strict=True))
        )

    specs = [((*batch, 3, parts * heads * head_dim), "float32")]
    model = assert_exports_match(f, specs, sizes=sizes_for(specs, {"B": [1, 2]}), seed=seed)
    ops = op_types(model)
    assert ops.count("Split") == 1, ops
    # with two pieces: neither perm moves; a Transpose of size-1 heads is a Reshape
    # (relabel_transposes)
    assert ops.count("Reshape") + ops.count("Transpose") <= 2 + keys_transposed, ops
    if heads > 1 and head_dim > 1:
        assert ops.count("Reshape") == 1 and ops.count("Transpose") == 1 + keys_transposed, ops
