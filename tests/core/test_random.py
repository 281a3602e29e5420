"""jax.random inside exported functions: onnxruntime draws the same numbers as JAX.

Random bits, uniform floats, bernoulli, randint, categorical and keys are compared exactly;
normal goes through erf_inv, so it is compared with float tolerances. Every test runs under
both settings of ``jax_threefry_partitionable`` (drawn), which changes the bits JAX draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.core.registry import registered
from jax2onnx_nn.testing import assert_exports_match

# Each example exports a graph with one or more 20-round threefry hashes; fewer examples
# than the profile's default keep the file fast while the profile still scales them.
few = settings(max_examples=max(4, settings.default.max_examples // 3))

shapes = array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
seeds = st.integers(0, 2**32 - 1)
partitionable = st.booleans()
key_kinds = st.sampled_from(["typed", "raw"])
float_dtypes = st.sampled_from([np.float32, np.float64])
RANDOM_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}


def make_key(kind: str, seed: int) -> Any:
    return jax.random.key(seed) if kind == "typed" else jax.random.PRNGKey(seed)


def assert_random_matches(
    fn: Callable[..., Any],
    inputs: list[Any],
    *,
    partitionable: bool,
    x64: bool = False,
    **options: Any,
) -> onnx.ModelProto:
    """Export and compare under one threefry setting (it decides the bits at export time)."""
    with jax.threefry_partitionable(partitionable):
        model = assert_exports_match(
            fn, inputs, input_values=inputs, enable_double_precision=x64, **options
        )
    assert not RANDOM_OPS & {n.op_type for n in model.graph.node}
    return model


@few
@given(
    shape=shapes,
    dtype=st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64]),
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_bits_match_jax_exactly(
    shape: tuple[int, ...], dtype: Any, seed: int, kind: str, part: bool
) -> None:
    x64 = dtype == np.uint64
    assert_random_matches(
        lambda k: jax.random.bits(k, shape, dtype),
        [make_key(kind, seed)],
        partitionable=part,
        x64=x64,
    )


@few
@given(
    shape=shapes,
    dtype=float_dtypes,
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
    bounds=st.sampled_from([(0.0, 1.0), (-3.0, 2.5)]),
)
def test_uniform_matches_jax(
    shape: tuple[int, ...],
    dtype: Any,
    seed: int,
    kind: str,
    part: bool,
    bounds: tuple[float, float],
) -> None:
    def fn(key: Any) -> Any:
        return jax.random.uniform(key, shape, dtype, *bounds)

    # On [0, 1) the floats are the bits; scaling to other bounds is a multiply-add that XLA
    # may contract to one fused op, so there the last bit may differ.
    exact = {"rtol": 0.0, "atol": 0.0} if bounds == (0.0, 1.0) else {}
    assert_random_matches(
        fn, [make_key(kind, seed)], partitionable=part, x64=dtype == np.float64, **exact
    )


@few
@given(
    shape=shapes,
    dtype=float_dtypes,
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
    lower=st.floats(-3, 0.5),
    width=st.floats(0.1, 4),
)
def test_truncated_normal_matches_jax(
    shape: tuple[int, ...], dtype: Any, seed: int, kind: str, part: bool, lower: float, width: float
) -> None:
    """erf_inv of a uniform draw clamped with nextafter inside (lower, upper)."""
    tolerance = (
        {"rtol": 1e-11, "atol": 1e-11} if dtype == np.float64 else {"rtol": 1e-5, "atol": 1e-6}
    )
    assert_random_matches(
        lambda k: jax.random.truncated_normal(k, lower, lower + width, shape, dtype),
        [make_key(kind, seed)],
        partitionable=part,
        x64=dtype == np.float64,
        **tolerance,
    )


@few
@given(shape=shapes, dtype=float_dtypes, seed=seeds, kind=key_kinds, part=partitionable)
def test_normal_matches_jax(
    shape: tuple[int, ...], dtype: Any, seed: int, kind: str, part: bool
) -> None:
    # The uniform draw under erf_inv is exact (above); erf_inv's float64 lowering differs from
    # XLA's by up to ~1.2e-12 relative in the tails, so float64 gets 1e-11.
    tolerance = {"rtol": 1e-11, "atol": 1e-11} if dtype == np.float64 else {}
    assert_random_matches(
        lambda k: jax.random.normal(k, shape, dtype),
        [make_key(kind, seed)],
        partitionable=part,
        x64=dtype == np.float64,
        **tolerance,
    )


@few
@given(shape=shapes, p=st.floats(0.0, 1.0), seed=seeds, kind=key_kinds, part=partitionable)
def test_bernoulli_matches_jax_exactly(
    shape: tuple[int, ...], p: float, seed: int, kind: str, part: bool
) -> None:
    assert_random_matches(
        lambda k: jax.random.bernoulli(k, p, shape), [make_key(kind, seed)], partitionable=part
    )


@few
@given(
    shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
    data=st.data(),
    dtype=float_dtypes,
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_categorical_matches_jax_exactly(
    shape: tuple[int, ...], data: st.DataObject, dtype: Any, seed: int, kind: str, part: bool
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    logits = data.draw(
        st.lists(
            st.floats(-4, 4, width=32), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
        ),
        label="logits",
    )
    logits = np.asarray(logits, dtype).reshape(shape)
    assert_random_matches(
        lambda k, x: jax.random.categorical(k, x, axis=axis),
        [make_key(kind, seed), logits],
        partitionable=part,
        x64=dtype == np.float64,
    )


@few
@given(
    shape=shapes,
    bounds=st.tuples(st.integers(-1000, 1000), st.integers(-1000, 1000)),
    dtype=st.sampled_from([np.int32, np.int64, np.uint8]),
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_randint_matches_jax_exactly(
    shape: tuple[int, ...], bounds: tuple[int, int], dtype: Any, seed: int, kind: str, part: bool
) -> None:
    info = np.iinfo(dtype)
    low, high = sorted(int(np.clip(b, info.min, info.max)) for b in bounds)
    assert_random_matches(
        lambda k: jax.random.randint(k, shape, low, high, dtype),
        [make_key(kind, seed)],
        partitionable=part,
        x64=dtype == np.int64,
    )


@few
@given(
    num=st.one_of(st.integers(0, 5), array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=3)),
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_split_matches_jax_exactly(
    num: int | tuple[int, ...], seed: int, kind: str, part: bool
) -> None:
    # typed keys come back as keys: the ONNX output is their uint32 data
    assert_random_matches(
        lambda k: jax.random.split(k, num), [make_key(kind, seed)], partitionable=part
    )


@few
@given(
    message=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.uint32, np.int32]),
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_fold_in_matches_jax_exactly(
    message: int, dtype: Any, seed: int, kind: str, part: bool
) -> None:
    data = np.asarray(message, np.uint32).astype(dtype)  # int32 messages wrap like JAX's
    assert_random_matches(
        lambda k, m: jax.random.uniform(jax.random.fold_in(k, m), (3,)),
        [make_key(kind, seed), data],
        partitionable=part,
    )


@few
@given(
    seed=st.one_of(
        st.integers(-(2**31), 2**31 - 1).map(np.int32),
        st.integers(0, 2**32 - 1).map(np.uint32),
        st.integers(-(2**63), 2**63 - 1).map(np.int64),
    ),
    kind=key_kinds,
    part=partitionable,
)
def test_keys_made_from_a_seed_input(seed: np.integer, kind: str, part: bool) -> None:
    def fn(s: Any) -> Any:
        key = make_key(kind, s)
        data = jax.random.key_data(key) if kind == "typed" else key
        return data, jax.random.bits(key, (2,)), jax.random.normal(jax.random.split(key)[1], (3,))

    assert_random_matches(fn, [np.asarray(seed)], partitionable=part, x64=seed.dtype == np.int64)


@few
@given(
    impl=st.sampled_from(["threefry2x32", "threefry4x32", "philox2x32", "philox4x32"]),
    shape=shapes,
    seed=st.integers(-(2**31), 2**31 - 1),
    part=partitionable,
)
def test_every_counter_based_key_impl(
    impl: str, shape: tuple[int, ...], seed: int, part: bool
) -> None:
    def fn(s: Any, message: Any) -> Any:
        a, b = jax.random.split(jax.random.fold_in(jax.random.key(s, impl=impl), message))
        return a, jax.random.bits(b, shape), jax.random.uniform(a, shape)

    inputs = [np.asarray(seed, np.int32), np.asarray(seed % 2**32, np.uint32)]
    assert_random_matches(fn, inputs, partitionable=part, rtol=0.0, atol=0.0)


@few
@given(
    batch=array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=3),
    seed=seeds,
    kind=key_kinds,
    part=partitionable,
)
def test_vmap_over_keys(batch: tuple[int, ...], seed: int, kind: str, part: bool) -> None:
    keys = jax.random.split(make_key(kind, seed), batch)
    messages = np.arange(int(np.prod(batch)), dtype=np.uint32).reshape(batch)

    def per_key(key: Any, message: Any) -> Any:
        a, b = jax.random.split(jax.random.fold_in(key, message))
        return jax.random.normal(a, (2,)), jax.random.bits(b, (3,))

    fn = per_key
    for _ in batch:
        fn = jax.vmap(fn)
    assert_random_matches(fn, [keys, messages], partitionable=part)


@pytest.mark.parametrize("part", [True, False])
def test_typed_keys_rearranged_like_arrays(part: bool) -> None:
    """Slicing, reshaping, transposing, concatenating and selecting keys acts on each key whole."""

    def fn(key: Any, flags: Any) -> Any:
        grid = jax.random.split(key, (2, 3))
        keys = jnp.concatenate([grid.T.reshape(6), grid[1], grid[0, ::-1]])
        keys = jnp.where(flags, keys, jax.random.fold_in(key, 7))
        picked = keys[jnp.array([4, 0, 11])]
        return (
            keys,
            jax.vmap(lambda k: jax.random.uniform(k, (2,)))(picked),
            jnp.broadcast_to(keys[3], (2, 2)),
        )

    flags = np.arange(12) % 3 == 0
    assert_random_matches(fn, [jax.random.key(42), flags], partitionable=part)


@pytest.mark.parametrize("part", [True, False])
def test_symbolic_shapes(part: bool) -> None:
    def fn(x: Any, key: Any) -> Any:
        return x + jax.random.normal(key, x.shape), jax.random.randint(
            key, (x.shape[0] * 2,), 0, 100
        )

    with jax.threefry_partitionable(part):
        assert_exports_match(fn, [("B", 3), jax.random.key(0)], sizes={"B": [1, 4]})


def test_closed_over_keys() -> None:
    key = jax.random.key(3)
    keys = jax.random.split(key, 20)
    assert_random_matches(
        lambda x: (x + jax.random.normal(key, x.shape), jax.random.uniform(keys[7], (2,))),
        [np.zeros(4, np.float32)],
        partitionable=True,
    )


def test_symbolic_batch_of_keys() -> None:
    (b,) = jax.export.symbolic_shape("B")
    keys = jax.ShapeDtypeStruct((b,), jax.random.key(0).dtype)
    model = assert_exports_match(
        jax.vmap(lambda k: jax.random.uniform(k, (2,))), [keys], sizes={"B": [1, 5]}
    )
    assert [
        d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim
    ] == ["B", 2]


@pytest.mark.skipif("sort" not in registered(), reason="needs the sort lowering")
@few
@given(n=st.integers(0, 8), seed=seeds, part=partitionable)
def test_permutation_matches_jax_exactly(n: int, seed: int, part: bool) -> None:
    x = np.arange(n, dtype=np.float32) * 10
    assert_random_matches(
        lambda k, x: (jax.random.permutation(k, n), jax.random.permutation(k, x)),
        [jax.random.key(seed), x],
        partitionable=part,
    )


@pytest.mark.parametrize("part", [True, False])
def test_one_threefry_hash_per_draw(part: bool) -> None:
    """A draw is one 20-round hash (40 shifts for its rotations), and nothing else random."""
    with jax.threefry_partitionable(part):
        model = to_onnx(lambda k: jax.random.bits(k, (5,)), [jax.random.key(0)])
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("BitShift") == 40
