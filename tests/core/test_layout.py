"""inputs_as_nchw / outputs_as_nchw: NCHW graph I/O for NHWC models, Transpose pairs folded."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import SpecError, onnx_function, to_onnx
from jax2onnx_nn.testing import assert_exports_match

W = np.asarray(jax.random.normal(jax.random.key(0), (3, 3, 4, 8)), np.float32)
B8 = np.linspace(-1, 1, 8, dtype=np.float32)


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _ops(model):
    return Counter(n.op_type for n in model.graph.node)


def _conv_nhwc(x, w=W):
    return jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _nchw(fn, ins=(0,), outs=(0,)):
    """The JAX reference on NCHW data: transpose the chosen inputs to NHWC, the outputs back."""

    def reference(*args):
        args = [a.transpose(0, 2, 3, 1) if i in ins else a for i, a in enumerate(args)]
        result = fn(*args)
        flat = result if isinstance(result, tuple) else (result,)
        flat = tuple(y.transpose(0, 3, 1, 2) if j in outs else y for j, y in enumerate(flat))
        return flat if isinstance(result, tuple) else flat[0]

    return reference


def test_conv_model_takes_and_returns_nchw_with_no_transpose_left():
    def f(x):
        return jax.nn.relu(_conv_nhwc(x) + B8)

    model = assert_exports_match(
        f,
        [("B", 10, 12, 4)],
        sizes={"B": [1, 3]},
        inputs_as_nchw=[0],
        outputs_as_nchw=[0],
        reference=_nchw(f),
    )
    assert _dims(model.graph.input[0]) == ["B", 4, 10, 12]
    assert _dims(model.graph.output[0]) == ["B", 8, 10, 12]
    ops = _ops(model)
    # the boundary transposes cancel the conv's own; only the constant kernel's layout remains
    assert ops["Conv"] == 1
    transposed = [n.input[0] for n in model.graph.node if n.op_type == "Transpose"]
    assert all(name in {i.name for i in model.graph.initializer} for name in transposed)


def test_names_and_indices_select_inputs_and_outputs():
    def f(image, scale):
        y = _conv_nhwc(image) * scale
        return y, y.sum(axis=(1, 2))

    specs = [("B", 6, 6, 4), ()]
    by_name = to_onnx(f, specs, inputs_as_nchw=["image"], outputs_as_nchw=["out_0"])
    by_index = to_onnx(f, specs, inputs_as_nchw=[-2], outputs_as_nchw=[0])
    assert by_name.SerializeToString() == by_index.SerializeToString()
    assert [_dims(v) for v in by_name.graph.input] == [["B", 4, 6, 6], []]
    assert [_dims(v) for v in by_name.graph.output] == [["B", 8, 6, 6], ["B", 8]]
    assert_exports_match(
        f,
        specs,
        sizes={"B": [2]},
        inputs_as_nchw=["image"],
        outputs_as_nchw=["out_0"],
        reference=_nchw(f),
    )


def test_symbolic_dims_read_from_a_transposed_input_stay_right():
    def f(x):
        flat = x.reshape(x.shape[0], x.shape[1] * x.shape[2] * x.shape[3])  # NHWC order
        return jnp.tanh(flat)

    model = assert_exports_match(
        f,
        [("B", "H", 3, 2)],
        sizes={"B": [1, 4], "H": [2, 5]},
        inputs_as_nchw=[0],
        reference=_nchw(f, outs=()),
    )
    assert _dims(model.graph.input[0]) == ["B", 2, "H", 3]


@pytest.mark.parametrize("rank", [3, 5])
def test_one_and_three_spatial_dims(rank):
    perm_in = (0, *range(2, rank), 1)
    perm_out = (0, rank - 1, *range(1, rank - 1))

    def f(x):
        return jnp.exp(x) * 2.0

    shape = (2, *range(3, rank + 1), 5)

    def reference(x):
        return f(x.transpose(perm_in)).transpose(perm_out)

    model = assert_exports_match(
        f, [shape], inputs_as_nchw=[0], outputs_as_nchw=[0], reference=reference
    )
    assert _dims(model.graph.input[0]) == [shape[0], shape[-1], *shape[1:-1]]
    # Exp and the scaling commute with the transposes, which then cancel
    assert "Transpose" not in _ops(model)


def test_elementwise_chain_with_per_channel_constants_folds():
    mean = np.array([0.5, -1.0, 2.0, 0.0], np.float32)

    def f(x):
        return _conv_nhwc(jnp.maximum((x - mean) / 3.0, 0.0))

    model = assert_exports_match(
        f,
        [("B", 5, 5, 4)],
        sizes={"B": [1, 2]},
        inputs_as_nchw=[0],
        outputs_as_nchw=[0],
        reference=_nchw(f),
    )
    assert [
        n.op_type
        for n in model.graph.node
        if n.op_type == "Transpose" and n.input[0] == model.graph.input[0].name
    ] == []
    assert _ops(model)["Conv"] == 1


def test_the_user_function_fixture_path_adds_the_reference_itself(assert_onnx_matches):
    def f(x):
        return jax.nn.sigmoid(_conv_nhwc(x))

    model = assert_onnx_matches(
        f, [("B", 4, 4, 4)], sizes={"B": [1, 2]}, inputs_as_nchw=[0], outputs_as_nchw=[0]
    )
    assert _dims(model.graph.input[0]) == ["B", 4, 4, 4]
    assert model.graph.node[0].op_type != "Transpose" or model.graph.node[0].input[0] != "x"


@given(
    shape=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    data=st.data(),
)
def test_transpose_pairs_fold_into_one_or_none(shape, data):
    rank = len(shape)
    p1 = data.draw(st.permutations(range(rank)))
    p2 = data.draw(st.permutations(range(rank)))

    def f(x):
        return jnp.transpose(jnp.transpose(x, p1) + 1.0, p2)

    model = assert_exports_match(f, [tuple(shape)])
    composed = [p1[p] for p in p2]
    # none either when the pair moves only axes of size 1 (a Reshape: passes.relabel_transposes,
    # which leaves tensors with a 0 dim alone)
    moved = [p for p in composed if shape[p] != 1]
    relabels = moved == sorted(moved) and 0 not in shape
    expected = 0 if composed == sorted(composed) or relabels else 1
    assert _ops(model)["Transpose"] == expected


def test_transposes_of_a_value_with_other_uses_keep_it():
    def f(x):
        t = x.T
        return t.T + 1.0, t * 2.0

    model = assert_exports_match(f, [(2, 3)])
    assert _ops(model)["Transpose"] == 1


def test_layout_options_are_recorded_in_the_metadata():
    model = to_onnx(lambda x: x * 2.0, [(1, 2, 2, 3)], inputs_as_nchw=[0])
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["jax2onnx_nn.inputs_as_nchw"] == "0"
    assert "jax2onnx_nn.outputs_as_nchw" not in meta


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"inputs_as_nchw": ["y"]}, "'y' is neither an index nor one of"),
        ({"inputs_as_nchw": [3]}, "index 3 is out of range"),
        ({"outputs_as_nchw": [0]}, "channels-first needs rank >= 3"),
        ({"inputs_as_nchw": [True]}, "neither an index"),
    ],
)
def test_bad_selections_name_the_problem(options, message):
    with pytest.raises(SpecError, match=message):
        to_onnx(lambda x: x.sum(axis=(1, 2)), [(1, 2, 2, 3)], **options)


def test_a_transposed_input_used_twice_still_folds_into_the_conv():
    def f(x):
        return _conv_nhwc(jnp.abs(x)), x.sum(axis=3)

    model = assert_exports_match(
        f,
        [("B", 4, 4, 4)],
        sizes={"B": [2]},
        inputs_as_nchw=[0],
        outputs_as_nchw=[0],
        reference=_nchw(f),
    )
    # x -> Abs -> Conv directly; the sum still reads the NHWC view
    assert (
        _ops(model)["Transpose"] == 1
    )  # the view for the sum (the kernel's layout is folded into it)
    abs_node = next(n for n in model.graph.node if n.op_type == "Abs")
    assert abs_node.input[0] == "x"


# -- every consumer of a value whose layout the pass changed still sees the old layout --------

W1D = np.asarray(jax.random.normal(jax.random.key(1), (1, 4, 1)), np.float32)


def test_a_moved_op_that_is_also_a_graph_output_keeps_its_shape():
    def f(x):
        v0 = jax.lax.conv_general_dilated(
            x, W1D, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC")
        )
        v1 = jnp.clip(v0, -0.5, 0.75)
        return v0, v1, jnp.transpose(v1, (1, 0, 2))

    model = assert_exports_match(f, [("B", 4, 4)], sizes={"B": [1, 3]})
    assert [_dims(v) for v in model.graph.output] == [["B", 4, 1], ["B", 4, 1], [4, "B", 1]]


def test_a_residual_add_of_a_moved_value_and_a_channels_last_one():
    w = np.asarray(jax.random.normal(jax.random.key(2), (3, 3, 8, 8)), np.float32) * 0.2

    def f(x):  # ConvNeXt-style: the activated conv output feeds the next conv and the skip Add
        y = jnp.tanh(_conv_nhwc(x, w))
        return _conv_nhwc(y, w) + y, y + x

    assert_exports_match(f, [("B", 5, 6, 8)], sizes={"B": [2]})
    assert_exports_match(
        f, [("B", 5, 6, 8)], sizes={"B": [2]}, inputs_as_nchw=[0], outputs_as_nchw=[0, 1]
    )


def test_a_dense_block_concat_of_moved_values():
    w = np.asarray(jax.random.normal(jax.random.key(3), (3, 3, 4, 4)), np.float32) * 0.2

    def f(x):  # DenseNet-style: each stage's output feeds the next conv and the channel Concat
        y1 = jnp.clip(_conv_nhwc(x, w), 0.0, 6.0)
        y2 = jnp.clip(_conv_nhwc(y1, w), 0.0, 6.0)
        return jnp.concatenate([x, y1, y2], axis=-1)

    model = assert_exports_match(f, [("B", 6, 6, 4)], sizes={"B": [1, 2]}, inputs_as_nchw=[0])
    assert _dims(model.graph.output[0]) == ["B", 6, 6, 12]


_PERMS = [(0, 1, 2, 3), (0, 3, 1, 2), (0, 2, 3, 1), (0, 2, 1, 3), (0, 1, 3, 2), (0, 3, 2, 1)]
_STEPS = ("conv", "tanh", "clip", "scale", "bias", "add", "concat", "transpose")


def _random_dag(steps: list[tuple[str, int, int]], outputs: list[int]):
    """A channels-last network from drawn steps: each step reads earlier values (by index
    modulo how many exist) and appends one; the function returns the chosen values."""

    def f(x):
        values = [x]
        for i, (kind, a, b) in enumerate(steps):
            v = values[a % len(values)]
            rng = np.random.default_rng(i)
            c = v.shape[-1]
            if kind == "conv":
                w = rng.normal(size=(3, 3, c, 3)).astype(np.float32) / (3 * c)
                values.append(_conv_nhwc(v, w))
            elif kind == "tanh":
                values.append(jnp.tanh(v))
            elif kind == "clip":
                values.append(jnp.clip(v, -0.5, 0.5))
            elif kind == "scale":
                values.append(v * rng.normal(size=(c,)).astype(np.float32))
            elif kind == "bias":
                values.append(v + rng.normal(size=(c,)).astype(np.float32))
            elif kind == "add":
                same = [u for u in values if u.shape == v.shape]
                values.append(v + same[b % len(same)])
            elif kind == "concat":
                fits = [u for u in values if u.shape[:-1] == v.shape[:-1]]
                values.append(jnp.concatenate([v, fits[b % len(fits)]], axis=-1))
            else:
                values.append(jnp.transpose(v, _PERMS[b % len(_PERMS)]))
        return tuple(values[j % len(values)] for j in outputs)

    return f


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(_STEPS), st.integers(0, 99), st.integers(0, 99)),
        min_size=1,
        max_size=9,
    ),
    outputs=st.lists(st.integers(0, 99), min_size=1, max_size=3),
    nchw_in=st.booleans(),
    nchw_out=st.booleans(),
    as_function=st.booleans(),
)
def test_random_channels_last_dags_keep_every_layout(
    steps, outputs, nchw_in, nchw_out, as_function
):
    f = _random_dag(steps, [-1, *outputs])
    if as_function:  # the same network as the body of an ONNX function, outputs included
        f = onnx_function(f, name="block")
    options = {
        "inputs_as_nchw": [0] if nchw_in else None,
        "outputs_as_nchw": [0] if nchw_out else None,
    }
    assert_exports_match(f, [("B", 4, 5, 3)], sizes={"B": [2]}, **options)
