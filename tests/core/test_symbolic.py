"""The rule toolkit: dim predicates of core/symbolic.py on symbolic dims, and the ``ctx``
helpers (reshape, slice, expand, cast, iota, any, all) through rules of our own, onnxruntime
against JAX on size-0 dims and a symbolic batch dim."""

from functools import reduce
from operator import mul

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn.core.config import MIN_OPSET
from jax2onnx_nn.core.lower import onnx_aval
from jax2onnx_nn.core.symbolic import has_zero, is_positive, is_zero, same_dim, same_shape
from jax2onnx_nn.testing import assert_exports_match, sizes_for
from jax2onnx_nn.testing.assertions import op_types

B, T = jax.export.symbolic_shape("B, T")


def test_same_dim_is_provable_equality():
    assert same_dim(B, B) and same_dim(2 * B, B + B) and same_dim(B * T, T * B)
    assert same_dim(3, np.int64(3)) and not same_dim(3, 4)
    # not provably equal: different variables, a variable and an int
    assert not same_dim(B, T) and not same_dim(B, 3) and not same_dim(1, B)
    assert (
        same_shape((B, 3), (B, 3))
        and not same_shape((B, 3), (T, 3))
        and not same_shape((B,), (B, 1))
    )


def test_zero_and_positive_dims():
    assert is_zero(0) and is_zero(np.int64(0)) and not is_zero(B) and not is_zero(1)
    assert has_zero((B, 0, 3)) and not has_zero((B, 3)) and not has_zero(())
    # JAX assumes every dim variable is >= 1
    assert is_positive(B) and is_positive(2 * B) and is_positive(B * T) and is_positive(1)
    assert not is_positive(0) and not is_positive(B - 1)


def _neg_through_toolkit(ctx, x, **_):
    """-x, computed by a round trip through the toolkit's shape helpers."""
    dims = onnx_aval(ctx.aval_in)[1]
    flat = ctx.reshape(x, [reduce(mul, dims, 1)])
    y = ctx.reshape(flat, [1, *dims])
    y = ctx.expand(y, [3, *dims])  # a 1 would keep the dim; 3 copies
    y = ctx.slice(y, [0], [1], [2])  # the second copy
    y = ctx.reshape(ctx.cast(y, ctx.aval_in.dtype), dims)  # a cast to its own type is no node
    return ctx.op.Neg(y)


@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), symbolic=st.booleans()
)
def test_reshape_slice_expand_cast(shape, symbolic):
    specs = [(("B", *shape) if symbolic else shape, np.float32)]
    sizes = sizes_for(specs, {"B": [1, 2]})
    model = assert_exports_match(
        jnp.negative, specs, sizes=sizes, lowerings={"neg": _neg_through_toolkit}
    )
    assert "Cast" not in op_types(model)


@pytest.mark.parametrize(
    ("lead", "dtype"),
    [(0, np.int32), (5, np.int8), (300, np.int8), (2000, np.float16), ("B", np.int32)],
)
def test_iota(lead, dtype):
    """ctx.iota: a constant when short and static, else a Range; converted as XLA does."""
    specs = [((lead, 2), dtype)]
    model = assert_exports_match(
        lambda x: x + lax.broadcasted_iota(x.dtype, x.shape, 0),
        specs,
        sizes=sizes_for(specs, {"B": [1, 3]}),
    )
    assert ("Range" in op_types(model)) == (lead in (2000, "B"))
    if lead == "B":  # a run-time Range is typed with its length, not a name inference invents
        ranges = {n.output[0] for n in model.graph.node if n.op_type == "Range"}
        typed = {
            vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.value_info
        }
        assert ranges and all(typed[name] == ["B"] for name in ranges)


def _any_rule(ctx, x, *, axes, **_):
    return ctx.any(x, axes)


def _all_rule(ctx, x, *, axes, **_):
    return ctx.all(x, axes)


@pytest.mark.parametrize("opset", [MIN_OPSET, 18])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3), data=st.data())
def test_any_and_all_over_axes(opset, shape, data):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    values = data.draw(hnp.arrays(np.bool_, shape))
    fn, prim, rule = data.draw(
        st.sampled_from([(jnp.any, "reduce_or", _any_rule), (jnp.all, "reduce_and", _all_rule)])
    )
    assert_exports_match(
        lambda x: fn(x, axis=tuple(axes)),
        [(shape, np.bool_)],
        input_values=[values],
        opset=opset,
        lowerings={prim: rule},
    )
