"""Transposes of size-1 axes as Reshapes."""

from __future__ import annotations

import jax.numpy as jnp
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, op_types, sizes_for

# -- relabel_transposes: a Transpose that moves only size-1 axes is a Reshape -----------------


def _relabels(shape, perm) -> bool:
    """Whether one Reshape states ``transpose(x, perm)`` for ``x`` of ``shape``: only size-1
    axes move, and at most one symbolic dim leaves its index (then every other dim is static)."""
    kept = [p for p in perm if shape[p] != 1]
    out = [shape[p] for p in perm]
    moved = [i for i, d in enumerate(out) if isinstance(d, str) and shape[i] != d]
    symbolic = [d for d in out if isinstance(d, str)]
    return kept == sorted(kept) and (not moved or len(moved) == 1 and len(symbolic) == 1)


@given(
    data=st.data(), shape=st.lists(st.sampled_from([1, 1, 2, 3, "B", "T"]), min_size=1, max_size=5)
)
def test_a_transpose_of_size_one_axes_is_a_reshape(data, shape):
    """Values match JAX for any permutation (symbolic dims of size 1 and 3 included); a
    permutation moving only size-1 axes leaves no Transpose, and no graph grows."""
    perm = data.draw(st.permutations(range(len(shape))))
    specs = [(tuple(shape), "float32")]
    sizes = sizes_for(specs, {"B": [1, 3], "T": [2]})
    model = assert_exports_match(lambda x: jnp.transpose(x, perm) * 2, specs, sizes=sizes)
    ops = op_types(model)
    assert len(ops) <= 2, ops
    if perm == sorted(perm) or _relabels(shape, perm) and [shape[p] for p in perm] == shape:
        assert ops == ["Mul"], ops  # the identity
    elif _relabels(shape, perm):
        assert ops == ["Reshape", "Mul"], ops
    else:
        assert ops == ["Transpose", "Mul"], ops


@given(lead=st.sampled_from([(), (2,), ("B",)]), n=st.integers(1, 5))
def test_swapped_vectors_cancel_against_their_reshapes(lead, n):
    """``x (..., n, 1)`` swapped to a row, expanded, swapped back and squeezed is ``x``: the
    relabelled Transposes merge with the shape ops around them into nothing (as at a graph
    output too)."""

    def f(x):
        row = jnp.swapaxes(x, -1, -2)[..., None]  # (..., 1, n, 1)
        return jnp.swapaxes(row[..., 0], -1, -2) + 1, jnp.moveaxis(row, -2, -1)[..., 0, :]

    specs = [((*lead, n, 1), "float32")]
    model = assert_exports_match(f, specs, sizes=sizes_for(specs, {"B": [1, 3]}))
    ops = op_types(model)
    assert ops.count("Transpose") == 0 and ops.count("Reshape") <= 1, ops
