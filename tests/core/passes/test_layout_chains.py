"""Chains of layout ops cancel."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types

_LAYOUT = {"Transpose", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten"}


def _layout_op_fed_by_same_kind(model) -> list[str]:
    """Layout nodes whose input comes from a node the chain pass should have merged them with."""
    producers = {out: node for node in model.graph.node for out in node.output}
    shape_ops = {"Reshape", "Squeeze", "Unsqueeze", "Flatten"}
    found = []
    for node in model.graph.node:
        source = producers.get(node.input[0]) if node.input else None
        if source is None:
            continue
        if node.op_type == source.op_type == "Transpose" or (
            node.op_type in shape_ops and source.op_type in shape_ops
        ):
            found.append(f"{source.op_type}->{node.op_type}")
    return found


@st.composite
def _layout_chains(draw):
    """A shape and a chain of (step, argument) valid on it: transposes, expand_dims/squeeze,
    flattening reshapes and casts (lossless and rounding ones)."""
    start = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    shape, plan = list(start), []
    for step in draw(
        st.lists(
            st.sampled_from(["transpose", "expand", "squeeze", "flatten", "f16", "f32", "i32"]),
            min_size=1,
            max_size=6,
        )
    ):
        if step == "transpose":
            perm = draw(st.permutations(range(len(shape))))
            plan.append((step, tuple(perm)))
            shape = [shape[p] for p in perm]
        elif step == "expand":
            axis = draw(st.integers(0, len(shape)))
            plan.append((step, axis))
            shape.insert(axis, 1)
        elif step == "squeeze" and 1 in shape:
            plan.append((step, shape.index(1)))
            shape.remove(1)
        elif step == "flatten":
            plan.append((step, None))
            shape = [int(np.prod(shape))]
        elif step in ("f16", "f32", "i32"):
            plan.append((step, None))
    return start, plan


def _apply(plan, x):
    dtypes = {"f16": jnp.float16, "f32": jnp.float32, "i32": jnp.int32}
    for step, arg in plan:
        if step == "transpose":
            x = jnp.transpose(x, arg)
        elif step == "expand":
            x = jnp.expand_dims(x, arg)
        elif step == "squeeze":
            x = jnp.squeeze(x, arg)
        elif step == "flatten":
            x = x.reshape(-1)
        else:
            x = x.astype(dtypes[step])
    return x * 2


@given(chain=_layout_chains())
def test_layout_chains_cancel_and_match_jax(chain):
    """The values are JAX's, and no Transpose or shape op is left feeding another of its kind."""
    shape, plan = chain
    model = assert_exports_match(lambda x: _apply(plan, x), [(shape, "float32")])
    assert not _layout_op_fed_by_same_kind(model), op_types(model)


def test_transpose_twice_and_wide_cast_back_are_no_nodes():
    model = assert_exports_match(
        lambda x: jnp.transpose(x.T.astype(jnp.float64).astype(jnp.float32)).T * 2,
        [(("B", 3), "float32")],
        sizes={"B": [1, 2]},
        enable_double_precision=True,
    )
    assert op_types(model) == ["Transpose", "Mul"], op_types(model)


def test_a_merged_reshape_of_a_symbolic_dim_to_another_position_uses_minus_one():
    model = assert_exports_match(
        lambda x: jnp.expand_dims(x.reshape(-1), 0).reshape(1, -1, 2) * 2,
        [(("B", 6), "float32")],
        sizes={"B": [0, 1, 3]},
    )
    assert op_types(model).count("Reshape") <= 1, op_types(model)


def test_a_rounding_cast_pair_stays():
    model = assert_exports_match(lambda x: x.astype(jnp.float16).astype(jnp.float32) * 2, [(4,)])
    assert op_types(model).count("Cast") == 2


# -- size-0 dims through the shape passes ------------------------------------------------------


def _shape_step(draw: st.DrawFn, rank: int) -> tuple[str, object]:
    """One JAX shape operation for an array of ``rank``: its kind and parameters."""
    kind = draw(
        st.sampled_from(
            ["slice", "newaxis", "transpose", "reshape", "broadcast", "where", "squeeze"]
        )
    )
    if kind == "slice":
        axis = draw(st.integers(0, rank - 1))
        start, stop = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))
        return kind, (axis, start, stop)
    if kind == "newaxis":
        return kind, draw(st.integers(0, rank))
    if kind == "transpose":
        return kind, draw(st.permutations(range(rank)))
    if kind == "broadcast":
        return kind, draw(st.integers(1, 2))
    return kind, draw(st.integers(0, 2**16))


def _apply_shape_step(x: jnp.ndarray, kind: str, param: object) -> jnp.ndarray:
    if kind == "slice":
        axis, start, stop = param
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop)
        return x[tuple(index)]
    if kind == "newaxis":
        return jnp.expand_dims(x, param)
    if kind == "transpose":
        return jnp.transpose(x, param)
    if kind == "broadcast":
        return jnp.broadcast_to(x, (param, *x.shape))
    if kind == "where":
        return jnp.where(x > 0.5, x, -x)
    if kind == "squeeze":
        ones = [a for a, d in enumerate(x.shape) if d == 1]
        return jnp.squeeze(x, ones[param % len(ones)]) if ones else x
    # reshape: the dims in another order and split/merged where they are 0 or 1
    dims = list(x.shape)
    order = np.random.default_rng(param).permutation(len(dims)).tolist()
    return x.reshape([dims[i] for i in order] + ([1] if param % 2 else []))


@given(data=st.data(), shape=st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=1, max_size=4))
def test_shape_ops_on_size_zero_dims_match_jax(data, shape):
    """Chains of slices (empty ones too: ``x[:, -2:-2]``), new axes, transposes, reshapes,
    broadcasts, squeezes and ``where`` over arrays with size-0 dims in any position: the shape
    passes (merged shape ops, Transposes relabelled as Reshapes) keep a 0 a 0, not "copy the
    input dim"."""
    steps = []
    probe = jnp.zeros(shape)
    for _ in range(data.draw(st.integers(1, 4))):
        if probe.ndim == 0 or probe.ndim >= 6:
            break
        step = _shape_step(data.draw, probe.ndim)
        steps.append(step)
        probe = _apply_shape_step(probe, *step)

    def f(x):
        for step in steps:
            x = _apply_shape_step(x, *step)
        return x

    assert_exports_match_on(
        f, np.linspace(0, 1, int(np.prod(shape))).astype(np.float32).reshape(shape)
    )


def test_an_empty_slice_under_a_new_axis_keeps_its_zero():
    """``x[:, :, -2:-2, 3]`` (size 0) through ``where`` and a new axis: Slice, Squeeze and
    Unsqueeze merged into one Reshape must not read the 0 as "copy the input dim"."""
    assert_exports_match_on(
        lambda x: jnp.where(x[:, :, -2:-2, 3] > 0, x[:, :, -2:-2, 3], 0.0)[:, None],
        np.ones((2, 3, 4, 5), np.float32),
    )


def test_a_no_op_between_graph_input_and_output_is_an_identity():
    """A transpose of unit dims (a Reshape) to the input's own shape, the graph's output: the
    input keeps its name, so the output is an Identity of it, not a Reshape (hypothesis's
    test_reshape found ((1, 1, 1, 1), dimensions=(0, 1, 3, 2)))."""
    from jax import lax

    x = np.ones((1, 1, 1, 1), np.float32)
    model = assert_exports_match_on(lambda v: lax.reshape(v, (1, 1, 1, 1), (0, 1, 3, 2)), x)
    assert op_types(model) == ["Identity"]
    model = assert_exports_match_on(lambda v: v.T.T, np.ones((3, 4), np.float32))
    assert op_types(model) == ["Identity"]
