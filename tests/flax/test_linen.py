"""Flax Linen exports (jax2onnx_nn/flax/linen.py): weights named by variable path through
``module.apply``, a bound module and :func:`export_onnx`, activations as their one op; each
model run by onnxruntime at two batch sizes against JAX."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import onnx
import pytest
from flax import linen as nn

from jax2onnx_nn import onnx_function, to_onnx, verify
from jax2onnx_nn.flax.linen import export_onnx, variable_names
from jax2onnx_nn.testing import assert_exports_match, op_types

SIZES = {"B": [1, 3]}


class ConvNet(nn.Module):
    """The issue's model: Conv -> BatchNorm -> gelu -> mean -> LayerNorm -> Dense."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.gelu(x)
        x = x.mean(axis=(1, 2))
        x = nn.LayerNorm()(x)
        return nn.Dense(4)(x)


@pytest.fixture(scope="module")
def convnet():
    module = ConvNet()
    variables = module.init(jax.random.key(0), jnp.ones((1, 6, 6, 3)))
    # batch statistics that are not the init's zeros / ones
    stats = jax.tree.map(lambda a: a + 0.25, variables["batch_stats"])
    return module, {"params": variables["params"], "batch_stats": stats}


EXPECTED_NAMES = {
    "params/Conv_0/kernel",
    "params/Conv_0/bias",
    "params/BatchNorm_0/scale",
    "params/BatchNorm_0/bias",
    "batch_stats/BatchNorm_0/mean",
    "batch_stats/BatchNorm_0/var",
    "params/LayerNorm_0/scale",
    "params/LayerNorm_0/bias",
    "params/Dense_0/kernel",
    "params/Dense_0/bias",
}


def _weights(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.initializer if "/" in i.name}


def test_apply_in_a_lambda_names_weights_by_variable_path(convnet):
    module, variables = convnet
    model = assert_exports_match(
        lambda x: module.apply(variables, x), [("B", 6, 6, 3)], sizes=SIZES
    )
    assert _weights(model) == EXPECTED_NAMES
    assert not any(i.name.startswith("weight") for i in model.graph.initializer)
    assert "Gelu" in op_types(model)  # nn.gelu: one op (was 9 nodes)


def test_bound_module_names_weights_by_variable_path(convnet):
    module, variables = convnet
    bound = module.bind(variables)
    model = to_onnx(bound, [("B", 6, 6, 3)])
    assert _weights(model) == EXPECTED_NAMES
    verify(
        lambda x: module.apply(variables, x), model, [("B", 6, 6, 3)], sizes=SIZES
    ).raise_if_failed()


def test_export_onnx(convnet):
    module, variables = convnet
    model = export_onnx(module, variables, [("B", 6, 6, 3)])
    assert _weights(model) == EXPECTED_NAMES
    verify(
        lambda x: module.apply(variables, x), model, [("B", 6, 6, 3)], sizes=SIZES
    ).raise_if_failed()


def test_export_onnx_with_a_method_and_options():
    class Two(nn.Module):
        def setup(self):
            self.dense = nn.Dense(3)

        def __call__(self, x):
            return self.dense(x)

        def encode(self, x):
            return jax.nn.relu(self.dense(x))

    module = Two()
    variables = module.init(jax.random.key(1), jnp.ones((1, 5)))
    model = export_onnx(module, variables, [("B", 5)], method=Two.encode, opset=18)
    assert _weights(model) == {"params/dense/kernel", "params/dense/bias"}
    assert model.opset_import[0].version == 18 and "Relu" in op_types(model)
    verify(
        lambda x: module.apply(variables, x, method=Two.encode), model, [("B", 5)], sizes=SIZES
    ).raise_if_failed()


def test_use_running_average_as_a_call_argument_is_the_users():
    """``train`` is the module's call argument: the export runs it as called (here through a
    partial), with ``batch_stats`` read-only."""
    module = ConvNet()
    variables = module.init(jax.random.key(0), jnp.ones((1, 6, 6, 3)))
    apply = functools.partial(module.apply, variables, train=False)
    model = assert_exports_match(apply, [("B", 6, 6, 3)], sizes=SIZES)
    assert _weights(model) == EXPECTED_NAMES


def test_variable_names_of_a_callable_reaching_nothing_is_empty():
    assert variable_names(lambda x: x + 1) == {}
    assert variable_names(lambda x, table={"a": {"b": 1}}: x) == {}  # not a variables dict


# -- Linen layers as coarse ops (jax2onnx_nn/flax/linen_coarse.py) --------------------------


def test_issue_model_is_its_layers(convnet):
    """Conv -> BatchNorm -> gelu -> mean -> LayerNorm -> Dense: 41 nodes before, now one op
    per layer (9 nodes), named by module path."""
    module, variables = convnet
    model = assert_exports_match(
        lambda x: module.apply(variables, x), [("B", 6, 6, 3)], sizes=SIZES
    )
    ops = op_types(model)
    assert len(ops) <= 12, ops
    for op in ("Conv", "BatchNormalization", "Gelu", "LayerNormalization", "Gemm"):
        assert ops.count(op) == 1, ops
    names = {n.op_type: n.name for n in model.graph.node}
    assert "Conv_0/" in names["Conv"] and "LayerNorm_0/" in names["LayerNormalization"]
    assert "Dense_0/" in names["Gemm"] and "BatchNorm_0/" in names["BatchNormalization"]


def _layer_model(layer, shape, seed=0):
    class One(nn.Module):
        @nn.compact
        def __call__(self, x):
            return layer()(x)

    module = One()
    variables = module.init(jax.random.key(seed), jnp.ones((1, *shape[1:])))
    variables = jax.tree.map(
        lambda a: a + 0.1 * jax.random.normal(jax.random.key(seed + 1), a.shape), variables
    )
    variables = jax.tree_util.tree_map_with_path(
        lambda p, a: jnp.abs(a) + 0.5 if "var" in jax.tree_util.keystr(p) else a, variables
    )
    return module, variables


@pytest.mark.parametrize(
    "label, layer, shape, expected, options",
    [
        ("Dense", lambda: nn.Dense(4), ("B", 5), ["Gemm"], {}),
        ("Dense 3-d", lambda: nn.Dense(4, use_bias=False), ("B", 3, 5), ["MatMul"], {}),
        ("DenseGeneral", lambda: nn.DenseGeneral(4), ("B", 5), ["Gemm"], {}),
        ("DenseGeneral 3-d", lambda: nn.DenseGeneral((4,)), ("B", 3, 5), ["MatMul", "Add"], {}),
        (
            "DenseGeneral to heads",  # JAX's one Einsum (a MatMul would need two Reshapes)
            lambda: nn.DenseGeneral((2, 3)),
            ("B", 3, 5),
            ["Einsum", "Add"],
            {},
        ),
        (
            "DenseGeneral from heads",
            lambda: nn.DenseGeneral(4, axis=(-2, -1), use_bias=False),
            ("B", 3, 2, 5),
            ["Einsum"],
            {},
        ),
        (
            "Conv SAME strided",
            lambda: nn.Conv(4, (3, 3), strides=2),
            ("B", 7, 7, 3),
            ["Transpose", "Conv", "Transpose"],
            {},
        ),
        (
            "Conv VALID dilated",
            lambda: nn.Conv(4, (3,), padding="VALID", kernel_dilation=2),
            ("B", 9, 2),
            ["Transpose", "Conv", "Transpose"],
            {},
        ),
        ("LayerNorm", lambda: nn.LayerNorm(epsilon=1e-3), ("B", 3, 6), ["LayerNormalization"], {}),
        (
            "LayerNorm without bias",
            lambda: nn.LayerNorm(use_bias=False),
            ("B", 6),
            ["LayerNormalization"],
            {},
        ),
        ("RMSNorm", lambda: nn.RMSNorm(), ("B", 6), ["RMSNormalization"], {"opset": 23}),
        (
            "ConvTranspose strided",
            lambda: nn.ConvTranspose(4, (3, 3), strides=(2, 2)),
            ("B", 5, 5, 3),
            ["Transpose", "ConvTranspose", "Transpose"],
            {},
        ),
        (
            "ConvTranspose VALID, transposed kernel",
            lambda: nn.ConvTranspose(2, (3,), padding="VALID", transpose_kernel=True),
            ("B", 4, 3),
            ["Transpose", "ConvTranspose", "Transpose"],
            {},
        ),
        (
            "GroupNorm",
            lambda: nn.GroupNorm(num_groups=2),
            ("B", 4, 4, 6),
            ["Transpose", "GroupNormalization", "Transpose"],
            {"opset": 21},
        ),
        (
            "GroupNorm by group size",
            lambda: nn.GroupNorm(num_groups=None, group_size=3, use_bias=False),
            ("B", 5, 6),
            ["Transpose", "GroupNormalization", "Transpose"],
            {"opset": 21},
        ),
        (
            "GroupNorm on features",
            lambda: nn.GroupNorm(num_groups=2),
            ("B", 6),
            ["GroupNormalization"],
            {"opset": 21},
        ),
        (
            "InstanceNorm",
            lambda: nn.InstanceNorm(epsilon=1e-3),
            ("B", 4, 4, 6),
            ["Transpose", "GroupNormalization", "Transpose"],
            {"opset": 21},
        ),
        (
            "BatchNorm inference",
            lambda: nn.BatchNorm(use_running_average=True),
            ("B", 4, 3),
            ["Transpose", "BatchNormalization", "Transpose"],
            {},
        ),
    ],
)
def test_layer_is_its_op(label, layer, shape, expected, options):
    module, variables = _layer_model(layer, shape)
    model = assert_exports_match(
        lambda x: module.apply(variables, x), [shape], sizes=SIZES, **options
    )
    assert op_types(model) == expected, (label, op_types(model))


@pytest.mark.parametrize(
    "label, layer, shape",
    [
        (
            "Dense with precision",
            lambda: nn.Dense(4, precision=jax.lax.Precision.HIGHEST),
            ("B", 5),
        ),
        ("Conv CIRCULAR", lambda: nn.Conv(4, (3,), padding="CIRCULAR"), ("B", 6, 2)),
        (
            "DenseGeneral with precision",
            lambda: nn.DenseGeneral(4, precision=jax.lax.Precision.HIGHEST),
            ("B", 5),
        ),
        ("DenseGeneral over a middle axis", lambda: nn.DenseGeneral(4, axis=-2), ("B", 3, 5)),
        (
            "DenseGeneral with a custom dot_general",
            lambda: nn.DenseGeneral(4, dot_general=jax.lax.dot_general),
            ("B", 5),
        ),
        (
            "LayerNorm over two axes",
            lambda: nn.LayerNorm(reduction_axes=(-2, -1), feature_axes=-1),
            ("B", 3, 4),
        ),
        (
            "BatchNorm over two axes",
            lambda: nn.BatchNorm(use_running_average=True, axis=(-2, -1)),
            ("B", 3, 4),
        ),
        (
            "ConvTranspose CIRCULAR",
            lambda: nn.ConvTranspose(2, (3,), padding="CIRCULAR"),
            ("B", 5, 2),
        ),
        (
            "ConvTranspose with precision",
            lambda: nn.ConvTranspose(2, (3,), precision=jax.lax.Precision.HIGHEST),
            ("B", 5, 2),
        ),
        (
            "GroupNorm over the last axes only",
            lambda: nn.GroupNorm(num_groups=2, reduction_axes=(-2, -1)),
            ("B", 2, 3, 4),
        ),
        ("GroupNorm below opset 21", lambda: nn.GroupNorm(num_groups=2), ("B", 3, 4)),
        (
            "InstanceNorm over a middle feature axis",
            lambda: nn.InstanceNorm(feature_axes=1),
            ("B", 3, 4),
        ),
    ],
)
def test_options_the_op_does_not_model_keep_jax_numbers(label, layer, shape):
    module, variables = _layer_model(layer, shape)
    options = {"opset": 18} if "below opset 21" in label else {}
    model = assert_exports_match(
        lambda x: module.apply(variables, x), [shape], sizes=SIZES, **options
    )
    coarse = {"LayerNormalization", "BatchNormalization", "Gemm", "GroupNormalization"}
    assert not coarse & set(op_types(model)), (label, op_types(model))
    if label.startswith("ConvTranspose"):
        assert "ConvTranspose" not in op_types(model) or "Add" in op_types(model), label


def test_batch_norm_in_training_mode_is_its_body():
    """``use_running_average=False`` with ``mutable=["batch_stats"]``: batch statistics, op
    by op, and the updated statistics as outputs."""
    module, variables = _layer_model(lambda: nn.BatchNorm(use_running_average=False), ("B", 4, 3))
    fn = functools.partial(module.apply, variables, mutable=["batch_stats"])
    model = assert_exports_match(fn, [("B", 4, 3)], sizes={"B": [2, 3]})
    assert "BatchNormalization" not in op_types(model)


def test_embed_is_a_gather():
    class Tokens(nn.Module):
        @nn.compact
        def __call__(self, ids):
            return nn.Embed(10, 4)(ids)

    module = Tokens()
    variables = module.init(jax.random.key(0), jnp.zeros((1, 3), jnp.int32))
    ids = jnp.array(
        [[0, 9, -3], [12, 4, -11]], jnp.int32
    )  # in range, wrapped, out of range (NaN rows)
    model = assert_exports_match(lambda i: module.apply(variables, i), [ids], input_values=[ids])
    assert "Gather" in op_types(model) and len(op_types(model)) <= 8
    assert "Embed_0/" in next(n.name for n in model.graph.node if n.op_type == "Gather")


class _TiedEmbedding(nn.Module):
    """Tokens -> Embed -> Dense -> ``Embed.attend`` (tied logits), the table 300 x 64: large
    enough that the export keeps one copy of it."""

    @nn.compact
    def __call__(self, ids):
        embed = nn.Embed(300, 64)
        return embed.attend(nn.Dense(64)(embed(ids)))


def test_embed_and_attend_share_one_table():
    """A 2-d query: ``attend`` is one Gemm reading the table transposed (transB), the same
    initializer as the Gather (it was a Transpose node and a MatMul)."""
    module = _TiedEmbedding()
    variables = module.init(jax.random.key(0), jnp.zeros((1,), jnp.int32))
    spec = jax.ShapeDtypeStruct(("B",), jnp.int32)
    ids = {b: jnp.arange(b, dtype=jnp.int32) * 37 for b in SIZES["B"]}
    model = to_onnx(lambda i: module.apply(variables, i), [spec])
    for b in SIZES["B"]:
        verify(
            lambda i: module.apply(variables, i), model, [spec], input_values=[ids[b]]
        ).raise_if_failed()
    ops = op_types(model)
    assert ops.count("Gemm") == 2 and "Transpose" not in ops and "MatMul" not in ops, ops
    assert [i.name for i in model.graph.initializer if i.name.endswith("embedding")] == [
        "params/Embed_0/embedding"
    ]
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert "Embed_0/" in gemms[-1].name and "params/Embed_0/embedding" in gemms[-1].input


def test_first_export_of_a_fresh_process_has_the_linen_layers():
    """The adapter is imported by the first export (the user imported only ``flax.linen``
    and ``to_onnx``): the session patches its import adds apply to that export too."""
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from flax import linen as nn
        from jax2onnx_nn import to_onnx
        module = nn.Dense(3)
        variables = module.init(jax.random.key(0), jnp.ones((1, 4)))
        model = to_onnx(lambda x: module.apply(variables, x), [("B", 4)])
        print([n.op_type for n in model.graph.node])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    assert result.stdout.strip().splitlines()[-1] == "['Gemm']", result.stdout


# -- attention: flax.linen.dot_product_attention (MultiHeadDotProductAttention, SelfAttention) --


def _attention_model(mask: str, **options):
    class Attend(nn.Module):
        @nn.compact
        def __call__(self, x):
            layer = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, **options)
            if mask == "causal":  # float32 ones and zeros
                return layer(x, mask=nn.make_causal_mask(x[..., 0]))
            if mask == "padding":  # bool; the rows of queries 3 and 4 masked everywhere
                valid = jnp.arange(x.shape[1]) < 3
                keep = nn.make_attention_mask(valid[None], valid[None]) > 0
                return layer(x, mask=jnp.broadcast_to(keep, (x.shape[0], 1, *keep.shape[2:])))
            return layer(x)

    module = Attend()
    variables = module.init(jax.random.key(0), jnp.ones((1, 5, 8)))
    return module, variables


@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
def test_attention_is_the_attention_core(mask):
    module, variables = _attention_model(mask)
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 5, 8)], sizes=SIZES)
    ops = op_types(model)
    assert ops.count("Softmax") == 1 and ops.count("MatMul") == 2, ops
    assert "Sqrt" not in ops and "ReduceMax" not in ops, ops
    if mask == "none":
        assert len(ops) <= 16, ops  # 18 before (the query's Sqrt, the attention's Einsums)


def test_self_attention_is_the_attention_core():
    class Attend(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.SelfAttention(num_heads=2)(x)

    module = Attend()
    variables = module.init(jax.random.key(0), jnp.ones((1, 5, 8)))
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 5, 8)], sizes=SIZES)
    assert op_types(model).count("Softmax") == 1 and len(op_types(model)) <= 16


@pytest.mark.parametrize(
    "options",
    [
        {"precision": jax.lax.Precision.HIGHEST},
        {"dropout_rate": 0.5, "deterministic": False},
        {"attention_fn": functools.partial(nn.dot_product_attention, force_fp32_for_softmax=True)},
    ],
    ids=["precision", "dropout", "partial"],
)
def test_attention_options_the_op_does_not_model_keep_jax_numbers(options):
    module, variables = _attention_model("causal", **options)
    rngs = {"dropout": jax.random.key(3)}
    model = assert_exports_match(
        lambda x: module.apply(variables, x, rngs=rngs), [("B", 5, 8)], sizes=SIZES
    )
    # JAX's body divides the query by a computed Sqrt; the coarse op by a constant (also
    # through a partial: the function object itself is patched)
    assert ("Sqrt" in op_types(model)) == ("attention_fn" not in options), op_types(model)


# -- ONNX functions for Linen module classes -------------------------------------------------


class _Block(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return nn.gelu(nn.Dense(self.features)(nn.LayerNorm()(x))) + x


@onnx_function
class _FunctionBlock(_Block):
    pass


def _two_blocks(block):
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(block(8)(block(8)(x)))

    module = Model()
    return module, module.init(jax.random.key(0), jnp.ones((1, 8)))


@pytest.mark.parametrize("how", ["decorator", "auto_functions"])
def test_linen_module_class_is_one_function(how):
    """Two blocks: one FunctionProto (the blocks' coarse ops inside), two calls, weights named
    by variable path in the main graph."""
    module, variables = _two_blocks(_FunctionBlock if how == "decorator" else _Block)
    options = {"auto_functions": True} if how == "auto_functions" else {}
    model = assert_exports_match(
        lambda x: module.apply(variables, x), [("B", 8)], sizes=SIZES, **options
    )
    name = "_FunctionBlock" if how == "decorator" else "_Block"
    assert op_types(model) == [name, name, "Gemm"]
    assert len(model.functions) == 1
    assert [n.op_type for n in model.functions[0].node] == [
        "LayerNormalization",
        "Gemm",
        "Gelu",
        "Add",
    ]
    assert f"params/{name}_1/Dense_0/kernel" in _weights(model)


def test_without_auto_functions_linen_blocks_are_inline():
    module, variables = _two_blocks(_Block)
    model = to_onnx(lambda x: module.apply(variables, x), [("B", 8)])
    assert not model.functions and op_types(model).count("LayerNormalization") == 2


# -- transforms: nn.scan, nn.remat, nn.Bidirectional ---------------------------------------


class _ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return nn.gelu(nn.Dense(8)(nn.LayerNorm()(x))) + x, None


def _walk_ops(graph, found):
    for node in graph.node:
        found.append(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _walk_ops(attr.g, found)
    return found


def test_scanned_blocks_are_one_scan_of_coarse_ops():
    class Scanned(nn.Module):
        @nn.compact
        def __call__(self, x):
            scan = nn.scan(
                _ScanBlock, variable_axes={"params": 0}, split_rngs={"params": True}, length=3
            )
            return scan()(x, None)[0]

    module = Scanned()
    variables = module.init(jax.random.key(0), jnp.ones((1, 8)))
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 8)], sizes=SIZES)
    assert op_types(model) == ["Scan"]
    assert _walk_ops(model.graph, []) == ["Scan", "LayerNormalization", "Gemm", "Gelu", "Add"]
    assert "params/Scan_ScanBlock_0/Dense_0/kernel" in _weights(model)  # stacked over the layers


def test_remat_blocks_are_their_coarse_ops():
    class Remat(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.remat(_ScanBlock)()(x, None)[0]
            return nn.remat(_ScanBlock)()(x, None)[0]

    module = Remat()
    variables = module.init(jax.random.key(0), jnp.ones((1, 8)))
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 8)], sizes=SIZES)
    assert op_types(model) == ["LayerNormalization", "Gemm", "Gelu", "Add"] * 2
    assert "params/Checkpoint_ScanBlock_1/LayerNorm_0/scale" in _weights(model)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_bidirectional_rnn_is_two_recurrent_ops(cell):
    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Bidirectional(nn.RNN(cell(4)), nn.RNN(cell(4)))(x)

    module = Encoder()
    variables = module.init(jax.random.key(0), jnp.ones((1, 3, 5)))
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 3, 5)], sizes=SIZES)
    ops = _walk_ops(model.graph, [])
    op = "LSTM" if cell is nn.LSTMCell else "GRU"
    assert ops.count(op) == 2 and "Scan" not in ops and "Loop" not in ops, ops


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.OptimizedLSTMCell, nn.GRUCell])
@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_is_one_recurrent_op(cell, reverse):
    """``nn.RNN`` over a cell (forwards, or reversed with the outputs in order): one ONNX
    LSTM / GRU over the whole sequence, its weights named by the cell's variable path."""

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.RNN(cell(4), reverse=reverse, keep_order=True)(x)

    module = Encoder()
    variables = module.init(jax.random.key(0), jnp.ones((1, 3, 5)))
    model = assert_exports_match(lambda x: module.apply(variables, x), [("B", 3, 5)], sizes=SIZES)
    ops = _walk_ops(model.graph, [])
    op = "GRU" if cell is nn.GRUCell else "LSTM"
    assert ops.count(op) == 1 and "Scan" not in ops and "Loop" not in ops, ops
    # the op, its layout Transposes and Squeeze, the empty-batch guard (an If); reversed: 2 Slices
    assert len(op_types(model)) <= 10, op_types(model)
    assert f"params/{cell.__name__}_0/W" in _weights(model)  # the stacked gates


# -- export_onnx: bound modules, methods and mutable collections ---------------------------


class _Sowing(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(4)(x)
        self.sow("intermediates", "hidden", h)
        return nn.relu(h)

    def encode(self, x):
        return self(x) * 2.0


def test_export_onnx_with_mutable_intermediates_returns_them():
    module = _Sowing()
    variables = module.init(jax.random.key(0), jnp.ones((1, 3)))
    model = export_onnx(module, variables, [("B", 3)], mutable=["intermediates"])
    assert len(model.graph.output) == 2  # the output, then intermediates/_Sowing/hidden
    verify(
        lambda x: module.apply(variables, x, mutable=["intermediates"]),
        model,
        [("B", 3)],
        sizes=SIZES,
    ).raise_if_failed()


def test_bound_module_method_names_weights_by_variable_path():
    module = _Sowing()
    variables = module.init(jax.random.key(0), jnp.ones((1, 3)))
    bound = module.bind(variables)
    model = to_onnx(bound.encode, [("B", 3)])
    assert _weights(model) == {"params/Dense_0/kernel", "params/Dense_0/bias"}
    assert op_types(model)[0] == "Gemm"
    verify(
        lambda x: module.apply(variables, x, method=_Sowing.encode), model, [("B", 3)], sizes=SIZES
    ).raise_if_failed()


def test_export_onnx_in_training_mode_returns_the_batch_stats():
    """``mutable=["batch_stats"]`` with the module's ``train=True``: batch statistics op by op
    and the updated running statistics as outputs; ``train=False``: the coarse op."""
    module = ConvNet()
    variables = module.init(jax.random.key(0), jnp.ones((1, 6, 6, 3)))

    def train(m, x):
        return m(x, train=True)

    model = export_onnx(module, variables, [("B", 6, 6, 3)], method=train, mutable=["batch_stats"])
    assert "BatchNormalization" not in op_types(model) and len(model.graph.output) == 3
    verify(
        lambda x: module.apply(variables, x, train=True, mutable=["batch_stats"]),
        model,
        [("B", 6, 6, 3)],
        sizes={"B": [2, 3]},
    ).raise_if_failed()
    inference = export_onnx(module, variables, [("B", 6, 6, 3)])
    assert "BatchNormalization" in op_types(inference)


# -- SpectralNorm / WeightNorm: weights normalized at export time -----------------------------


@pytest.mark.parametrize(
    "label, make, shape, expected",
    [
        ("SpectralNorm Dense", lambda: nn.SpectralNorm(nn.Dense(4)), ("B", 5), ["MatMul", "Add"]),
        (
            "SpectralNorm Conv",
            lambda: nn.SpectralNorm(nn.Conv(3, (3,))),
            ("B", 6, 2),
            ["Transpose", "Conv", "Transpose", "Add"],
        ),
        ("WeightNorm Dense", lambda: nn.WeightNorm(nn.Dense(4)), ("B", 5), ["MatMul", "Add"]),
        (
            "WeightNorm Conv",
            lambda: nn.WeightNorm(nn.Conv(3, (3,))),
            ("B", 6, 2),
            ["Transpose", "Conv", "Transpose", "Add"],
        ),
    ],
)
def test_weight_normalizations_are_the_layer_they_wrap(label, make, shape, expected):
    """SpectralNorm (24 nodes for a Dense before: the power iteration and sigma) and
    WeightNorm (8) in inference: the wrapped layer's lax ops with the normalized weights as
    constants (computed by JAX at export time)."""

    class Normed(nn.Module):
        @nn.compact
        def __call__(self, x):
            layer = make()
            return layer(x, update_stats=False) if label.startswith("Spectral") else layer(x)

    module = Normed()
    variables = module.init(jax.random.key(0), jnp.ones((1, *shape[1:])))
    model = assert_exports_match(lambda x: module.apply(variables, x), [shape], sizes=SIZES)
    assert op_types(model) == expected, (label, op_types(model))
