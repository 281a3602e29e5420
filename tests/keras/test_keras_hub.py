"""keras-hub backbones built small from their classes (no downloads) export through
``export_onnx`` with no input signature: batch and sequence symbolic, the sequence one dim of
every text input, the position table's length a constraint; onnxruntime matches Keras at two
sizes."""

import jax
import numpy as np
import onnxruntime as ort
import pytest

keras_hub = pytest.importorskip("keras_hub")

from jax2onnx_nn.keras import export_onnx  # noqa: E402

VOCABULARY = 50
TABLE = 32  # max_sequence_length of the models with a position table

TEXT = {
    "bert": lambda m: m.BertBackbone(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=TABLE,
    ),
    "gpt2": lambda m: m.GPT2Backbone(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=TABLE,
    ),
    "llama": lambda m: m.LlamaBackbone(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
    ),
    "gemma": lambda m: m.GemmaBackbone(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
        head_dim=4,
    ),
}
# (the largest node count today: a ceiling that coarse ops only lower). Llama 117 -> 118: its
# four multi-axis EinsumDense projections are MatMuls between Reshapes now (Einsum 5 -> 1,
# MatMul 5 -> 8, Reshape 5 -> 8, Unsqueeze 15 -> 14); keras-hub's own attention (RoPE) keeps
# the reshapes that Keras's MultiHeadAttention cancels.
NODES = {"bert": 141, "gpt2": 125, "llama": 118, "gemma": 140, "vit": 85, "resnet": 125}


def build(name):
    import keras

    keras.utils.set_random_seed(0)
    return TEXT[name](keras_hub.models)


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def matches_keras(backbone, onnx_model, feeds, rtol=1e-4, atol=1e-5):
    session = ort.InferenceSession(
        onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    actual = session.run(None, feeds)
    expected = jax.tree_util.tree_leaves(backbone(dict(feeds), training=False))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, np.asarray(e), rtol=rtol, atol=atol)


def text_feeds(names, batch, length, seed):
    rng = np.random.default_rng(seed)
    padding = (np.arange(length)[None, :] < rng.integers(1, length + 1, (batch, 1))).astype("int32")
    values = {
        "token_ids": rng.integers(0, VOCABULARY, (batch, length)).astype("int32"),
        "segment_ids": rng.integers(0, 2, (batch, length)).astype("int32"),
        "padding_mask": padding,
    }
    return {name: values[name] for name in names}


@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_backbone_batch_and_sequence_symbolic(name):
    backbone = build(name)
    onnx_model = export_onnx(backbone)
    inputs = {i.name: dims(i) for i in onnx_model.graph.input}
    # one batch and one sequence length for token_ids, padding_mask (and BERT's segment_ids)
    assert set(inputs) >= {"token_ids", "padding_mask"}
    assert all(d == ["batch", "token_ids_1"] for d in inputs.values())
    assert len(onnx_model.graph.node) <= NODES[name]
    for seed, (batch, length) in enumerate([(1, 5), (3, 12)]):
        matches_keras(backbone, onnx_model, text_feeds(inputs, batch, length, seed))


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_position_table_length_is_a_constraint(name):
    """The sequence may be as long as the position table: the export runs at that length,
    though no signature said so."""
    backbone = build(name)
    onnx_model = export_onnx(backbone)
    names = [i.name for i in onnx_model.graph.input]
    matches_keras(backbone, onnx_model, text_feeds(names, 2, TABLE, 0))


def test_output_names_are_the_backbone_outputs():
    onnx_model = export_onnx(build("bert"))
    assert [o.name for o in onnx_model.graph.output] == ["pooled_output", "sequence_output"]
    assert [dims(o) for o in onnx_model.graph.output] == [
        ["batch", 8],
        ["batch", "token_ids_1", 8],
    ]


def image_run(backbone, onnx_model, shapes):
    (image,) = onnx_model.graph.input
    rng = np.random.default_rng(0)
    session = ort.InferenceSession(
        onnx_model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for shape in shapes:
        x = rng.standard_normal(shape).astype("float32")
        (actual,) = session.run(None, {image.name: x})
        expected = np.asarray(backbone(x, training=False))
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


def test_vit_batch_symbolic():
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    onnx_model = export_onnx(backbone)
    assert [dims(i) for i in onnx_model.graph.input] == [["batch", 16, 16, 3]]
    assert len(onnx_model.graph.node) <= NODES["vit"]
    image_run(backbone, onnx_model, [(1, 16, 16, 3), (3, 16, 16, 3)])


def test_resnet_batch_height_and_width_symbolic():
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 16],
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
        use_pre_activation=False,
        image_shape=(None, None, 3),
    )
    onnx_model = export_onnx(backbone)
    (image,) = onnx_model.graph.input
    assert dims(image)[0] == "batch" and all(isinstance(d, str) for d in dims(image)[1:3])
    assert len(onnx_model.graph.node) <= NODES["resnet"]
    image_run(backbone, onnx_model, [(1, 32, 32, 3), (3, 40, 24, 3)])


def test_encoder_decoder_lengths_stay_two_dims():
    """BART's encoder and decoder inputs: each side's tokens and mask share a length, the two
    lengths stay independent (nothing in the model makes them equal)."""
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BartBackbone(
        vocabulary_size=VOCABULARY,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=TABLE,
    )
    onnx_model = export_onnx(backbone)
    inputs = {i.name: dims(i) for i in onnx_model.graph.input}
    assert inputs == {
        "decoder_padding_mask": ["batch", "decoder_token_ids_1"],
        "decoder_token_ids": ["batch", "decoder_token_ids_1"],
        "encoder_padding_mask": ["batch", "encoder_token_ids_1"],
        "encoder_token_ids": ["batch", "encoder_token_ids_1"],
    }
    for seed, (batch, encoder, decoder) in enumerate([(1, 5, 3), (3, 12, 7)]):
        rng = np.random.default_rng(seed)
        lengths = {"encoder": encoder, "decoder": decoder}
        feeds = {}
        for side, length in lengths.items():
            feeds.update(
                {
                    f"{side}_{key}": value
                    for key, value in text_feeds(
                        ["token_ids", "padding_mask"], batch, length, int(rng.integers(99))
                    ).items()
                }
            )
        matches_keras(backbone, onnx_model, feeds)
