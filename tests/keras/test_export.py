"""``jax2onnx_nn.keras.export_onnx``: Keras models exported as ``model.export(format="onnx")``
would (signature from the model, ``None`` dims symbolic, inference mode, names from the
model), checked against Keras's forward pass in onnxruntime at two sizes of every dim."""

import os

import jax
import keras
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import layers, ops

from jax2onnx_nn import SpecError, to_onnx
from jax2onnx_nn.keras import export_onnx
from jax2onnx_nn.keras.export import infer_dims, model_signature


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def graph_dims(model):
    return {i.name: dims(i) for i in model.graph.input}


def run(model, feeds):
    session = ort.InferenceSession(
        model.SerializeToString() if isinstance(model, onnx.ModelProto) else model,
        providers=["CPUExecutionProvider"],
    )
    return session.run(None, feeds)


def random_feeds(model, sizes, seed=0):
    """Random float inputs for the graph's inputs, symbolic dims at ``sizes``."""
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal(
            [sizes[d] if isinstance(d, str) else d for d in dims(i)]
        ).astype("float32")
        for i in model.graph.input
    }


def assert_matches_keras(model, onnx_model, feeds, call, rtol=1e-5, atol=1e-5):
    """onnxruntime's outputs equal Keras's (flattened as JAX flattens them: dicts by key)."""
    expected = jax.tree_util.tree_leaves(call(feeds))
    actual = run(onnx_model, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, np.asarray(e), rtol=rtol, atol=atol)


def sequential():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((8,), name="features"),
            layers.Dense(16, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(4, name="logits"),
        ]
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_sequential_batch_symbolic_names_from_the_model(batch):
    model = sequential()
    onnx_model = export_onnx(model)
    assert graph_dims(onnx_model) == {"features": ["batch", 8]}
    assert [o.name for o in onnx_model.graph.output] == ["logits"]
    assert dims(onnx_model.graph.output[0]) == ["batch", 4]
    assert onnx_model.graph.name == model.name
    feeds = random_feeds(onnx_model, {"batch": batch})
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["features"], training=False))


def two_sequences():
    """Dict inputs of unknown lengths that the model adds (so the lengths are one dim), dict
    outputs."""
    keras.utils.set_random_seed(0)
    inputs = {
        "words": keras.Input((None, 4), name="words"),
        "chars": keras.Input((None, 4), name="chars"),
        "scale": keras.Input((1,), name="scale"),
    }
    summed = layers.Add()([layers.Dense(4)(inputs["words"]), inputs["chars"]])
    pooled = layers.GlobalAveragePooling1D()(summed) * inputs["scale"]
    return keras.Model(inputs, {"sequence": summed, "pooled": pooled})


def test_functional_dict_inputs_equal_lengths_get_one_name():
    model = two_sequences()
    onnx_model = export_onnx(model)
    # the lengths Keras leaves as None, one per input, are one dim of the model: the name of
    # the input declared first
    assert graph_dims(onnx_model) == {
        "chars": ["batch", "words_1", 4],
        "scale": ["batch", 1],
        "words": ["batch", "words_1", 4],
    }
    assert [o.name for o in onnx_model.graph.output] == ["pooled", "sequence"]
    for seed, sizes in enumerate([{"batch": 1, "words_1": 2}, {"batch": 3, "words_1": 7}]):
        feeds = random_feeds(onnx_model, sizes, seed)
        assert_matches_keras(model, onnx_model, feeds, lambda f: model(f, training=False))


def test_infer_dims_unifies_only_what_the_model_needs_equal():
    model = two_sequences()
    signature = infer_dims(lambda x: model(x, training=False), model_signature(model))
    assert signature.rename == {"chars_1": "words_1"}
    assert signature.dim_names() == ["batch", "words_1"]
    assert signature.constraints() == ()


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = layers.Dense(8, activation="relu")
        self.drop = layers.Dropout(0.5)
        self.out = layers.Dense(3)

    def call(self, x, training=False):
        return self.out(self.drop(self.hidden(x), training=training))


@pytest.mark.parametrize("batch", [1, 3])
def test_subclassed_model_after_its_first_call(batch):
    keras.utils.set_random_seed(0)
    model = Net()
    model(np.ones((2, 5), "float32"))
    onnx_model = export_onnx(model)
    assert graph_dims(onnx_model) == {"x": ["batch", 5]}  # named after call's argument
    feeds = random_feeds(onnx_model, {"batch": batch})
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["x"], training=False))


def test_model_without_known_inputs_says_how_to_pass_a_signature():
    model = Net()
    with pytest.raises(SpecError, match=r"no known inputs.*input_signature=\[keras.InputSpec"):
        export_onnx(model)
    onnx_model = export_onnx(
        model, input_signature=[keras.InputSpec(shape=(None, 6), dtype="float32", name="x")]
    )
    assert graph_dims(onnx_model) == {"x": ["batch", 6]}
    feeds = random_feeds(onnx_model, {"batch": 3})
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["x"], training=False))


class PositionTable(keras.Model):
    """Adds rows of a 16-row table, as many as the sequence is long (keras.ops.slice: longer
    sequences fail in Keras)."""

    def __init__(self):
        super().__init__()
        self.table = self.add_weight(shape=(16, 4), initializer="random_normal", name="table")

    def call(self, x):
        length = ops.shape(x)[1]
        return x + ops.slice(ops.convert_to_tensor(self.table), [0, 0], [length, 4])


def test_a_bound_the_model_assumes_becomes_a_constraint():
    keras.utils.set_random_seed(0)
    model = PositionTable()
    model(np.ones((2, 3, 4), "float32"))
    signature = infer_dims(
        lambda x: model(x), model_signature(model, [keras.InputSpec(shape=(None, None, 4))])
    )
    assert signature.constraints() == ("input_1 <= 16",)
    onnx_model = export_onnx(
        model, input_signature=[keras.InputSpec(shape=(None, None, 4), name="x")]
    )
    assert graph_dims(onnx_model) == {"x": ["batch", "x_1", 4]}
    for sizes in [{"batch": 1, "x_1": 16}, {"batch": 3, "x_1": 5}]:
        feeds = random_feeds(onnx_model, sizes)
        assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["x"]))


class Branches(keras.Model):
    """Computes differently for short and long sequences: no bound to assume."""

    def call(self, x):
        if ops.shape(x)[1] <= 4:
            return x * 2.0
        return x * 3.0


def test_an_undecided_branch_names_the_dim_and_the_constraints_to_pass():
    model = Branches()
    signature = [keras.InputSpec(shape=(None, None), name="x")]
    with pytest.raises(SpecError, match=r'x_1 <= 4.*constraints=\("x_1 <= 4",\)'):
        export_onnx(model, input_signature=signature)
    onnx_model = export_onnx(model, input_signature=signature, constraints=("x_1 >= 5",))
    feeds = random_feeds(onnx_model, {"batch": 2, "x_1": 6})
    np.testing.assert_allclose(run(onnx_model, feeds)[0], feeds["x"] * 3.0)


def test_to_onnx_options_pass_through(tmp_path):
    model = sequential()
    path = export_onnx(
        model,
        tmp_path / "m.onnx",
        opset=18,
        external_data=True,
        input_names=["x"],
        model_name="mlp",
        verify={"sizes": {"batch": [1, 4]}},
    )
    assert (tmp_path / "m.onnx.data").exists()
    loaded = onnx.load(path)
    assert loaded.opset_import[0].version == 18 and loaded.graph.name == "mlp"
    assert graph_dims(loaded) == {"x": ["batch", 8]}
    feeds = random_feeds(loaded, {"batch": 2})
    assert_matches_keras(model, path, feeds, lambda f: model(f["x"], training=False))
    with pytest.raises(TypeError, match="opset"):
        export_onnx(model, opsett=18)


def test_verify_raises_when_the_runtime_differs():
    model = sequential()
    with pytest.raises(AssertionError):
        # tolerances no float32 computation meets
        export_onnx(model, verify={"rtol": 0.0, "atol": 0.0, "sizes": {"batch": [64]}})


def test_precision_option_gives_a_float16_model():
    model = sequential()
    onnx_model = export_onnx(model, precision="float16")
    weights = {i.data_type for i in onnx_model.graph.initializer}
    assert weights == {onnx.TensorProto.FLOAT16}
    feeds = random_feeds(onnx_model, {"batch": 3})
    expected = np.asarray(model(feeds["features"], training=False))
    (actual,) = run(onnx_model, feeds)
    np.testing.assert_allclose(actual, expected, rtol=1e-2, atol=1e-2)  # float16: ~1e-3 steps


@pytest.mark.parametrize("batch", [1, 3])
def test_to_onnx_takes_a_keras_model_directly(batch):
    model = sequential()
    onnx_model = to_onnx(model, [jax.ShapeDtypeStruct(("B", 8), "float32")])
    assert dims(onnx_model.graph.input[0]) == ["B", 8]
    feeds = random_feeds(onnx_model, {"B": batch})
    (name,) = feeds
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f[name], training=False))


class TwoInputs(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = layers.Dense(4)

    def call(self, a, b):
        return self.dense(a) * b


def test_subclassed_model_with_two_arguments_names_its_inputs_after_them():
    keras.utils.set_random_seed(0)
    model = TwoInputs()
    model(np.ones((2, 3), "float32"), np.ones((2, 4), "float32"))
    # Keras records the shape of the first argument only
    with pytest.raises(SpecError, match=r"1 of the 2 arguments of its call\(\) \(a, b\)"):
        export_onnx(model)
    onnx_model = export_onnx(
        model,
        input_signature=[
            keras.InputSpec(shape=(None, 3), name="a"),
            keras.InputSpec(shape=(None, 4), name="b"),
        ],
    )
    assert graph_dims(onnx_model) == {"a": ["batch", 3], "b": ["batch", 4]}
    for batch in (1, 3):
        feeds = random_feeds(onnx_model, {"batch": batch}, seed=batch)
        assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["a"], f["b"]))


def test_target_and_runtime_options_pass_through():
    pytest.importorskip("openvino")
    model = sequential()
    onnx_model = export_onnx(model, target="openvino", verify={"runtime": "openvino"})
    assert {p.key: p.value for p in onnx_model.metadata_props}["jax2onnx_nn.target"] == "openvino"


class TrainsByDefault(keras.Model):
    """A call whose training flag defaults to True: Dropout is active unless told otherwise."""

    def __init__(self):
        super().__init__()
        self.dense = layers.Dense(4)
        self.drop = layers.Dropout(0.5)

    def call(self, x, training=True):
        return self.drop(self.dense(x), training=training)


@pytest.mark.parametrize("export", ["export_onnx", "to_onnx"])
def test_a_model_is_exported_in_inference_mode(export):
    keras.utils.set_random_seed(0)
    model = TrainsByDefault()
    model(np.ones((2, 3), "float32"), training=False)
    if export == "export_onnx":
        onnx_model = export_onnx(model)
    else:  # the model itself given to to_onnx runs as Keras's export runs it: training=False
        onnx_model = to_onnx(model, [jax.ShapeDtypeStruct(("batch", 3), "float32")])
    assert not {"RandomUniform", "RandomUniformLike", "Bernoulli"} & {
        n.op_type for n in onnx_model.graph.node
    }
    (name,) = graph_dims(onnx_model)
    feeds = random_feeds(onnx_model, {"batch": 3})
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f[name], training=False))


def test_unnamed_inputs_are_input_not_the_name_keras_makes_up():
    keras.utils.set_random_seed(0)
    x, y = keras.Input((None, 3)), keras.Input((2,))  # keras_tensor_N, keras_tensor_M
    model = keras.Model([x, y], layers.GlobalMaxPooling1D()(x) * layers.Dense(3)(y))
    onnx_model = export_onnx(model)
    assert graph_dims(onnx_model) == {
        "input_0": ["batch", "input_0_1", 3],
        "input_1": ["batch", 2],
    }
    for batch, length in [(1, 1), (3, 6)]:
        feeds = random_feeds(onnx_model, {"batch": batch, "input_0_1": length})
        assert_matches_keras(
            model, onnx_model, feeds, lambda f: model([f["input_0"], f["input_1"]], training=False)
        )
    single = keras.Sequential([keras.Input((None, 3)), layers.GlobalMaxPooling1D()])
    assert graph_dims(export_onnx(single)) == {"input": ["batch", "input_1", 3]}


@given(groups=st.lists(st.integers(0, 3), min_size=2, max_size=5))
def test_infer_dims_unifies_exactly_the_lengths_the_function_adds(groups):
    """Input i belongs to group groups[i]; the function adds the inputs of each group, so the
    lengths within a group are one dim and lengths of different groups stay apart."""
    import jax.numpy as jnp

    def fn(*xs):
        sums = {}
        for g, x in zip(groups, xs, strict=True):
            sums[g] = sums[g] + x if g in sums else x
        return [jnp.sum(s, axis=1) for s in sums.values()]

    specs = [keras.InputSpec(shape=(None, None), name=f"x{i}") for i in range(len(groups))]
    signature = infer_dims(fn, model_signature(None, specs))
    length = {f"x{i}": signature.rename.get(f"x{i}_1", f"x{i}_1") for i in range(len(groups))}
    for i, g in enumerate(groups):
        for j, h in enumerate(groups):
            assert (length[f"x{i}"] == length[f"x{j}"]) == (g == h)
    assert signature.constraints() == ()


@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`")
def test_int8_quantized_model():
    model = sequential()
    model.quantize("int8")
    onnx_model = export_onnx(model)
    scales = {
        f"{layer.name}.kernel_scale" for layer in model.layers if "Dense" in type(layer).__name__
    }
    assert len(scales) == 2 and scales <= {i.name for i in onnx_model.graph.initializer}
    for batch in (1, 3):
        feeds = random_feeds(onnx_model, {"batch": batch})
        assert_matches_keras(
            model, onnx_model, feeds, lambda f: model(f["features"], training=False)
        )


def test_importing_the_keras_package_first_selects_the_jax_backend():
    """Keras picks tensorflow unless told; without KERAS_BACKEND, `import jax2onnx_nn.keras`
    before keras must give the JAX backend (before: keras tried to import tensorflow, and
    without it the import failed with ModuleNotFoundError)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    code = "import jax2onnx_nn.keras, keras; print(keras.backend.backend())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "jax"


@pytest.mark.parametrize("batch", [0, 1, 3])
def test_squeeze_and_excite_over_a_symbolic_batch_has_no_reshape(batch):
    """EfficientNet's squeeze-and-excite (pool, Reshape((1, 1, C)), 1x1 convs, Multiply) with a
    symbolic batch: in the NCHW graph the pooled [batch, C, 1, 1] value goes through a squeeze,
    the reshape and the conv's layout change, three shape ops that together are the identity;
    merged over the symbolic batch (ONNX's 0 copies it) none is left. Before: 3 Reshapes per
    block (EfficientNetB0 298 nodes with a symbolic batch, 250 at batch 1)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 6, 8), name="image")
    h = layers.Conv2D(8, 3, padding="same", activation="swish")(x)
    se = layers.GlobalAveragePooling2D()(h)
    se = layers.Reshape((1, 1, 8))(se)
    se = layers.Conv2D(2, 1, activation="swish")(se)
    se = layers.Conv2D(8, 1, activation="sigmoid")(se)
    model = keras.Model(x, layers.Multiply()([h, se]))
    onnx_model = export_onnx(model)
    ops = [n.op_type for n in onnx_model.graph.node]
    assert "Reshape" not in ops, ops
    feeds = random_feeds(onnx_model, {"batch": batch})
    assert_matches_keras(model, onnx_model, feeds, lambda f: model(f["image"], training=False))
