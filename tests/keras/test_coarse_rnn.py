"""Keras recurrent layers as ONNX LSTM / GRU / RNN (``jax2onnx_nn/keras/coarse_rnn.py``):
op types and node counts, onnxruntime against Keras's forward at two batch sizes, and the
calls the ops do not model (a ``lax.scan`` of Keras's cell, with Keras's numbers)."""

from collections import Counter

import jax
import keras
import pytest
from keras import layers

from jax2onnx_nn.testing import assert_exports_match, op_types

BATCHES = {"batch": [1, 3]}


def S(*shape, dtype="float32"):
    return jax.ShapeDtypeStruct(shape, dtype)


def _ops(model):
    """The op types of the graph and of its If branches (the recurrent ops' guards)."""
    return Counter(op_types(model, nested=True))


def _export(model, specs):
    return assert_exports_match(lambda *xs: model(*xs, training=False), specs, sizes=BATCHES)


def _functional(*stack, steps=5):
    x = keras.Input((steps, 3))
    y = x
    for layer in stack:
        y = layer(y)
    return keras.Model(x, y)


@pytest.mark.parametrize(
    "make, op, nodes",
    [
        (lambda: layers.LSTM(4), "LSTM", 3),
        (lambda: layers.LSTM(4, return_sequences=True, return_state=True), "LSTM", 6),
        (lambda: layers.GRU(4, return_sequences=True), "GRU", 4),
        (lambda: layers.GRU(4, reset_after=False), "GRU", 3),
        (lambda: layers.SimpleRNN(4, return_state=True), "RNN", 4),
        (lambda: layers.Bidirectional(layers.LSTM(4)), "LSTM", 4),
        (lambda: layers.Bidirectional(layers.GRU(4, return_sequences=True)), "GRU", 4),
    ],
)
def test_recurrent_layers_are_one_onnx_op(make, op, nodes):
    """The op and its Transposes / Squeezes (``nodes`` at a static batch); with a symbolic
    batch the op sits in the guard against a batch of 0 (Size, Equal, If, and the Shape its
    empty branch reads: 3 nodes more)."""
    keras.utils.set_random_seed(0)
    onnx_model = _export(_functional(make()), [S("batch", 5, 3)])
    ops = _ops(onnx_model)
    assert ops[op] == 1 and ops["If"] == 1 and len(onnx_model.graph.node) == nodes + 3, ops
    assert "Scan" not in ops and "Loop" not in ops
    fixed = _functional(make())
    static = assert_exports_match(lambda x: fixed(x, training=False), [S(2, 5, 3)])
    assert _ops(static)[op] == 1 and len(static.graph.node) == nodes, _ops(static)


@pytest.mark.parametrize(
    "make",
    [
        lambda: layers.LSTM(4, return_sequences=True, return_state=True),
        lambda: layers.GRU(4),
        lambda: layers.Bidirectional(layers.SimpleRNN(4, return_sequences=True)),
    ],
)
def test_a_batch_or_sequence_of_zero_at_run_time_is_guarded(make):
    """onnxruntime aborts the process on an LSTM / GRU / RNN over a batch of 0 (or 0 steps):
    a symbolic one runs the op in an If whose other branch is Keras's zeros."""
    keras.utils.set_random_seed(0)
    model = _functional(make(), steps=None)
    onnx_model = assert_exports_match(
        lambda x: model(x, training=False),
        [S("batch", "steps", 3)],
        sizes={"batch": [0, 2], "steps": [1, 4]},  # (Keras fails on 0 steps)
    )
    ops = _ops(onnx_model)
    assert ops["If"] == 1 and ops["Size"] == 1 and "Scan" not in ops, ops
    assert sum(ops[op] for op in ("LSTM", "GRU", "RNN")) == 1, ops


def test_sequential_stack_names_its_weights_by_layer_path():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5, 3)),
            layers.GRU(6, return_sequences=True, name="encoder"),
            layers.LSTM(4, name="decoder"),
            layers.Dense(2, name="head"),
        ]
    )
    onnx_model = _export(model, [S("batch", 5, 3)])
    ops = _ops(onnx_model)
    assert ops["GRU"] == 1 and ops["LSTM"] == 1 and ops["Gemm"] == 1, ops
    # the GRU's sequence goes to the LSTM time-major: their Transposes cancel
    assert ops["Transpose"] == 1 and len(onnx_model.graph.node) == 11, ops
    names = {i.name for i in onnx_model.graph.initializer}
    assert {"encoder.gru_cell.kernel", "decoder.lstm_cell.recurrent_kernel"} <= names
    guards = [n for n in onnx_model.graph.node if n.op_type == "If"]
    assert [n.name.split("/", 1)[1] for n in guards] == ["encoder/If", "decoder/If"]
    inside = [n.name for a in guards[1].attribute for n in a.g.node]
    assert any(name.endswith("/decoder/LSTM") for name in inside), inside


class _Encoder(keras.Model):
    def __init__(self):
        super().__init__()
        self.rnn = layers.Bidirectional(layers.SimpleRNN(4, return_sequences=True))
        self.pool = layers.GlobalAveragePooling1D()

    def call(self, x):
        return self.pool(self.rnn(x))


def test_subclassed_model_with_a_bidirectional_simple_rnn():
    keras.utils.set_random_seed(0)
    model = _Encoder()
    model(keras.ops.zeros((1, 5, 3)))
    onnx_model = _export(model, [S("batch", 5, 3)])
    assert _ops(onnx_model)["RNN"] == 1


@pytest.mark.parametrize(
    "make, recurrent_ops",
    [
        (lambda: layers.LSTM(4, activation="relu"), 0),  # not ONNX's default activation
        (lambda: layers.GRU(4, go_backwards=True, return_sequences=True), 0),
        # the forward layer is its LSTM, the backward one (go_backwards) a scan
        (lambda: layers.Bidirectional(layers.LSTM(4), merge_mode="sum"), 1),
    ],
)
def test_options_the_ops_do_not_model_keep_kerass_numbers(make, recurrent_ops):
    keras.utils.set_random_seed(0)
    onnx_model = _export(_functional(make()), [S("batch", 5, 3)])
    ops = _ops(onnx_model)
    assert sum(ops[op] for op in ("LSTM", "GRU", "RNN")) == recurrent_ops and ops["Scan"] == 1
