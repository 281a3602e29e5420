"""``jax.nn`` activations and attention as coarse ops in plain JAX exports (core/jax_nn/):
one ONNX op per call, under ``jax.vmap`` too, and the lax path for what the op does not model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.jax_nn.activations import ACTIVATIONS
from jax2onnx_nn.core.jax_nn.namespaces import substitute
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types

ELEMENTWISE = sorted(name for name, a in ACTIVATIONS.items() if "axis" not in a.config)


def _floats(dtype, shape):
    # no subnormals: XLA on CPU flushes them to zero, onnxruntime does not
    return hnp.arrays(
        dtype, shape, elements=st.floats(-8, 8, width=np.finfo(dtype).bits, allow_subnormal=False)
    )


@pytest.mark.parametrize("name", ELEMENTWISE)
@given(data=st.data())
def test_elementwise_activation_is_its_onnx_op(name, data):
    activation = ACTIVATIONS[name]
    dtype = data.draw(st.sampled_from(sorted(activation.dtypes, key=str)))
    x = data.draw(_floats(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    model = assert_exports_match_on(getattr(jax.nn, name), x)
    if x.size:  # an empty input may fold to a constant
        assert set(op_types(model)) <= set(activation.onnx_ops) | {"Cast"}, op_types(model)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@given(data=st.data())
def test_softmax_axes_under_vmap(name, data):
    """A positive axis inside ``jax.vmap`` still names the per-example axis."""
    shape = data.draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4))
    in_axis = data.draw(st.integers(0, len(shape) - 1))
    axis = data.draw(st.integers(-(len(shape) - 1), len(shape) - 2))
    fn = jax.vmap(lambda v: getattr(jax.nn, name)(v, axis=axis), in_axes=in_axis)
    model = assert_exports_match_on(fn, data.draw(_floats(np.float32, shape)))
    assert ACTIVATIONS[name].onnx_ops[0] in op_types(model)


def test_vmapped_activation_stays_one_op_with_a_symbolic_batch():
    fn = jax.vmap(jax.vmap(lambda v: jax.nn.gelu(v, approximate=False)))
    model = assert_exports_match(fn, [("B", 3, 5)], sizes={"B": [1, 4]})
    assert op_types(model) == ["Gelu"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda x: jax.nn.relu(x), ["Relu"]),
        (lambda x: jax.nn.softmax(x, axis=0), ["Softmax"]),
        (lambda x: jax.nn.leaky_relu(x, 0.3), ["LeakyRelu"]),
        (lambda x: jax.nn.softmax(x, where=x > 0), None),  # where=: the lax path
        (
            lambda x: jax.nn.gelu(x.astype(jnp.float16)).astype(jnp.float32),
            None,
        ),  # float16: Gelu in float32 between Casts
    ],
)
def test_calls_the_op_does_not_model_take_the_lax_path(call, expected):
    model = assert_exports_match(
        call,
        [(3, 5)],
        rtol=1e-3 if expected is None else None,
        atol=1e-3 if expected is None else None,
    )
    if expected is not None:
        assert op_types(model) == expected
    else:
        assert len(op_types(model)) > 1


def test_coarse_ops_false_exports_lax_ops():
    model = to_onnx(jax.nn.softmax, [(2, 5)], coarse_ops=False)
    assert "Softmax" not in op_types(model) and "ReduceMax" in op_types(model)


def test_patches_are_undone_after_an_export():
    original, code = jax.nn.gelu, jax.nn.gelu.__code__
    to_onnx(jax.nn.gelu, [(4,)])
    assert jax.nn.gelu is original and jax.nn.gelu.__code__ is code


def test_each_export_applies_the_same_patched_functions():
    """The patched functions are made once per original (not per export) and still act only
    while an export runs: outside one, a captured function is itself and calls JAX."""
    seen = []

    def f(x):
        seen.append(jax.nn.relu)
        return jax.nn.gelu(x) + jax.nn.relu(x)

    first, second = to_onnx(f, [(4,)]), to_onnx(f, [(3,)])
    assert seen[0] is seen[1] and seen[0] is not jax.nn.relu
    assert "Gelu" in op_types(first) and "Gelu" in op_types(second) and "Relu" in op_types(second)
    np.testing.assert_allclose(
        seen[0](-jnp.ones(2)), jax.nn.relu(-jnp.ones(2))
    )  # outside an export: JAX's
    assert substitute(jax.nn.relu) is jax.nn.relu


@given(data=st.data())
def test_dot_product_attention_in_a_plain_function(data):
    b, t, s, n, h = (data.draw(st.integers(1, 4)) for _ in range(5))
    kv = data.draw(
        st.sampled_from([d for d in range(1, n + 1) if n % d == 0])
    )  # grouped heads: K of them repeated
    causal = data.draw(st.booleans()) and t == s
    with_mask = data.draw(st.booleans())
    q, k, v = (
        data.draw(_floats(np.float32, shape))
        for shape in ((b, t, n, h), (b, s, kv, h), (b, s, kv, h))
    )
    mask = data.draw(hnp.arrays(np.bool_, (b, n, t, s)))
    mask[..., 0] = True  # every query attends to at least one key (else JAX and ONNX both average)

    def attend(q, k, v, mask):
        return jax.nn.dot_product_attention(
            q, k, v, mask=mask if with_mask else None, is_causal=causal
        )

    model = assert_exports_match_on(attend, q, k, v, mask, rtol=1e-5, atol=1e-6)
    contrib = kv == n and not with_mask  # onnxruntime's MultiHeadAttention (see below)
    assert ("MultiHeadAttention" in op_types(model)) == contrib
    assert ("Softmax" in op_types(model)) != contrib and "ReduceMax" not in op_types(model)


@settings(max_examples=3)  # (HYPOTHESIS_PROFILE=thorough: 200, all passed)
@given(data=st.data())
def test_dot_product_attention_is_onnx_attention_from_opset_23(data):
    b, t, s, n, h = (data.draw(st.integers(1, 4)) for _ in range(5))
    kv = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))  # grouped heads too
    causal, with_mask, with_bias = (data.draw(st.booleans()) for _ in range(3))
    scale = data.draw(st.none() | st.floats(0.1, 2.0))
    q, k, v = (
        data.draw(_floats(np.float32, shape))
        for shape in ((b, t, n, h), (b, s, kv, h), (b, s, kv, h))
    )
    # broadcast masks and biases; rows masked everywhere too (JAX averages the values)
    shapes = st.sampled_from([(b, n, t, s), (1, 1, t, s), (b, 1, 1, s), (1, n, t, 1), (1, 1, 1, 1)])
    mask = data.draw(hnp.arrays(np.bool_, data.draw(shapes)))
    bias = data.draw(_floats(np.float32, data.draw(shapes)))
    opset = data.draw(st.sampled_from([23, 24]))

    def attend(q, k, v, mask, bias):
        return jax.nn.dot_product_attention(
            q,
            k,
            v,
            bias=bias if with_bias else None,
            mask=mask if with_mask else None,
            scale=scale,
            is_causal=causal,
        )

    model = assert_exports_match_on(attend, q, k, v, mask, bias, opset=opset, rtol=1e-5, atol=1e-6)
    assert op_types(model).count("Attention") == 1 and "Softmax" not in op_types(model)
    # JAX's [B, T, N, H] reshaped to Attention's [B, T, N*H]: no transposes
    assert "Transpose" not in op_types(model)


@settings(max_examples=5)
@given(data=st.data())
def test_dot_product_attention_is_multi_head_attention_on_onnxruntime_below_23(data):
    # onnxruntime's contrib MultiHeadAttention (0.92x the decomposition's time) where ONNX
    # Attention is not there, for as many key as query heads without a mask or bias (it gives
    # zeros for a row masked everywhere); causal with T != S as a float mask
    b, t, s, n, h = (data.draw(st.integers(1, 4)) for _ in range(5))
    causal = data.draw(st.booleans())
    scale = data.draw(st.none() | st.floats(0.1, 2.0))
    q, k, v = (
        data.draw(_floats(np.float32, shape))
        for shape in ((b, t, n, h), (b, s, n, h), (b, s, n, h))
    )
    opset = data.draw(st.sampled_from([21, 25]))

    def attend(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal)

    model = assert_exports_match_on(attend, q, k, v, opset=opset, rtol=1e-5, atol=1e-6)
    assert "MultiHeadAttention" in op_types(model) and "Softmax" not in op_types(model)
    masked = to_onnx(
        lambda q, k, v, m: jax.nn.dot_product_attention(q, k, v, mask=m),
        [q.shape, k.shape, v.shape, ((b, n, t, s), "bool")],
    )
    assert "MultiHeadAttention" not in op_types(masked)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_multi_head_attention_is_onnxruntime_only_and_for_equal_heads(target):
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    specs = [("B", "T", 4, 8), ("B", "T", 4, 8), ("B", "T", 4, 8)]
    model = assert_exports_match(
        fn, specs, sizes={"B": [0, 2], "T": [1, 5]}, target=target, rtol=1e-5, atol=1e-6
    )
    assert ("MultiHeadAttention" in op_types(model, nested=True)) == (target == "onnxruntime")
    grouped = to_onnx(fn, [(2, 5, 4, 8), (2, 5, 2, 8), (2, 5, 2, 8)])  # grouped heads
    assert "MultiHeadAttention" not in op_types(grouped) and "Softmax" in op_types(grouped)


def test_dot_product_attention_of_symbolic_head_size_is_transposed():
    # Attention's [B, T, N*H] needs N*H: a symbolic head size gives it [B, N, T, H]
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, scale=0.5)  # noqa: E731
    specs = [("B", 3, 4, "H"), ("B", 5, 2, "H"), ("B", 5, 2, "H")]
    model = assert_exports_match(fn, specs, sizes={"B": [2], "H": [1, 8]}, opset=23, rtol=1e-5)
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    run_ops = [node.op_type for node in branch.attribute[1].g.node]
    assert "Attention" in run_ops and "Transpose" in op_types(model)


@pytest.mark.parametrize("target", ["onnxruntime", "openvino"])
def test_dot_product_attention_where_the_target_lacks_the_kernel(target):
    # onnxruntime 1.32 has Attention kernels for opsets 23 and 24; at 25 it expands the op's
    # function body (71 small ops, slower than the decomposition): the decomposition is written
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    specs = [(2, 5, 4, 8), (2, 5, 2, 8), (2, 5, 2, 8)]
    model = assert_exports_match(fn, specs, opset=25, target=target, rtol=1e-5, atol=1e-6)
    has_attention = "Attention" in op_types(model)
    assert has_attention == (target == "openvino")
    assert ("Softmax" in op_types(model)) == (target == "onnxruntime")


@pytest.mark.parametrize("causal", [pytest.param(False, marks=pytest.mark.slow), True])
def test_dot_product_attention_of_symbolic_size_chooses_at_run_time(causal):
    # onnxruntime's Attention refuses a batch of 0: an If on the sizes runs the decomposition then
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    specs = [
        ("B", "T", 4, 4),
        ("B", "T", 2, 4),
        ("B", "T", 2, 4),
    ]  # grouped heads: 2 queries per key head
    model = assert_exports_match(
        fn, specs, sizes={"B": [0, 1, 3], "T": [1, 5]}, opset=24, rtol=1e-5, atol=1e-6
    )
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    then_ops = [node.op_type for node in branch.attribute[0].g.node] + [
        node.op_type for node in branch.attribute[1].g.node
    ]
    # every size tested is the result's: an empty one is zeros of its shape
    assert "Attention" in then_ops and "ConstantOfShape" in then_ops
    assert "Softmax" not in then_ops
    cross = [("B", "T", 4, 4), ("B", "S", 2, 4), ("B", "S", 2, 4)]
    model = assert_exports_match(fn, cross, sizes={"B": [0, 2], "T": [1, 3], "S": [3]}, opset=24)
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    # keys of length 0 make no empty result: the decomposition's numbers then
    assert "Softmax" in [node.op_type for a in branch.attribute for node in a.g.node]
    assert "Attention" in op_types(
        to_onnx(fn, [(2, 3, 2, 4)] * 3, opset=23)
    ) and "If" not in op_types(to_onnx(fn, [(2, 3, 2, 4)] * 3, opset=23))
    assert "Attention" not in op_types(
        to_onnx(fn, [(0, 3, 2, 4)] * 3, opset=23)
    )  # a static 0: the decomposition


# -- activations however they are reached (the in-place patch and the jit recogniser) -------

_TABLE = {"act": jax.nn.swish, "gelu": jax.nn.gelu}


class _Holder:
    def __init__(self, act):
        self.act = act

    def __call__(self, x):
        return self.act(x)


def _reach_cases():
    import functools

    import flax.linen as linen
    from jax.nn import elu, gelu, relu
    from jax.nn import log_softmax as lsm
    from jax.nn import softmax as sm

    my_gelu = gelu
    return [
        ("from jax.nn import gelu", lambda x: gelu(x), ["Gelu"]),
        ("alias", lambda x: my_gelu(x, approximate=False), ["Gelu"]),
        ("flax.linen.gelu", lambda x: linen.gelu(x), ["Gelu"]),
        ("flax.linen.softmax", lambda x: linen.softmax(x), ["Softmax"]),
        ("softmax imported, axis 0", lambda x: sm(x, axis=0), ["Softmax"]),
        ("flax.linen.swish", lambda x: linen.swish(x), ["Sigmoid", "Mul"]),
        ("flax.linen.relu", lambda x: linen.relu(x), ["Relu"]),
        ("flax.linen.relu6", lambda x: linen.relu6(x), ["Clip"]),
        ("from jax.nn import relu", lambda x: relu(x), ["Relu"]),
        ("elu with alpha", lambda x: elu(x, 2.0), ["Elu"]),
        ("leaky_relu default slope", lambda x: linen.leaky_relu(x), ["LeakyRelu"]),
        ("partial", functools.partial(jax.nn.gelu, approximate=False), ["Gelu"]),
        ("partial of an import", functools.partial(lsm, axis=0), ["LogSoftmax"]),
        ("dict", lambda x: _TABLE["act"](x), ["Sigmoid", "Mul"]),
        ("dict, plain function", lambda x: _TABLE["gelu"](x), ["Gelu"]),
        ("module field", _Holder(linen.gelu), ["Gelu"]),
        ("vmap", jax.vmap(lambda v: gelu(v)), ["Gelu"]),
        (
            "vmap of a jitted import",
            jax.vmap(linen.swish, in_axes=1, out_axes=1),
            ["Sigmoid", "Mul"],
        ),
    ]


@pytest.mark.parametrize(
    "label, fn, expected", _reach_cases(), ids=lambda c: c if isinstance(c, str) else ""
)
def test_activation_is_its_op_however_reached(label, fn, expected):
    """``from jax.nn import gelu``, ``flax.linen.*``, aliases, partials, dicts, module fields
    and vmap: the one op, matching JAX at two batch sizes (before: 9 nodes for an imported
    gelu, 12 for ``flax.linen.softmax``)."""
    model = assert_exports_match(fn, [("B", 5)], sizes={"B": [1, 4]})
    assert op_types(model) == expected, (label, op_types(model))


def test_a_users_function_named_like_an_activation_is_its_body():
    """The recogniser compares the whole body with JAX's: a user's jitted ``relu`` that
    computes something else keeps its own numbers."""

    @jax.jit
    def relu(x):
        return jnp.maximum(x, 0.5)

    model = assert_exports_match(lambda x: relu(x), [("B", 5)], sizes={"B": [1, 3]})
    assert op_types(model) == ["Max"]


def test_reached_calls_the_op_does_not_model_keep_jax_numbers():
    """An imported softmax with ``where=`` and a leaky_relu with an array slope (not a
    literal): the body, op by op, with JAX's numbers."""
    from jax.nn import leaky_relu, softmax

    masked = assert_exports_match(lambda x: softmax(x, where=x > 0), [(3, 5)])
    assert "Softmax" not in op_types(masked)
    sloped = assert_exports_match(lambda x, s: leaky_relu(x, s), [(3, 5), ()])
    assert "LeakyRelu" not in op_types(sloped)


def test_imported_activation_with_coarse_ops_false_is_its_body():
    from jax.nn import gelu

    model = to_onnx(lambda x: gelu(x), [(2, 5)], coarse_ops=False)
    assert "Gelu" not in op_types(model)
