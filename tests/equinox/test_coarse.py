"""Equinox layers as coarse ONNX ops: every option matches JAX, batched by vmap or not, and
calls the rules do not model fall back to the lax path (still matching JAX)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.config import MAX_OPSET
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.testing import assert_exports_match
from jax2onnx_nn.testing.coverage import recording
from tests.equinox.helpers import all_ops, assert_module_matches, initializer_names, node_ops

KEY = jax.random.key(0)
BATCH = st.booleans()


def _key(seed: int) -> Any:
    return jax.random.key(seed)


# -- Linear ---------------------------------------------------------------------------------


@settings(max_examples=6)
@given(
    features=st.sampled_from(
        [("scalar", 3), (4, "scalar"), ("scalar", "scalar"), (5, 3), (1, 1), (3, 0)]
    ),
    use_bias=st.booleans(),
    batch=BATCH,
    seed=st.integers(0, 9),
)
def test_linear(features: tuple[Any, Any], use_bias: bool, batch: bool, seed: int) -> None:
    n_in, n_out = features
    layer = eqx.nn.Linear(n_in, n_out, use_bias=use_bias, key=_key(seed))
    model = assert_module_matches(layer, [() if n_in == "scalar" else (n_in,)], batch=batch)
    assert ("Gemm" if batch else "MatMul") in node_ops(model)
    assert initializer_names(model) >= ({"weight", "bias"} if use_bias else {"weight"})


def test_vmap_over_batch_is_one_gemm_with_a_symbolic_batch() -> None:
    mlp = eqx.nn.MLP(784, 10, 32, 2, key=KEY)
    model = to_onnx(jax.vmap(mlp), [("B", 784)])
    assert node_ops(model) == [
        "Gemm",
        "Relu",
        "Gemm",
        "Relu",
        "Gemm",
    ]  # captured jax.nn.relu: one Relu
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "B"
    x = np.random.default_rng(0).standard_normal((7, 784)).astype(np.float32)
    np.testing.assert_allclose(run_onnx(model, [x])[0], jax.vmap(mlp)(x), rtol=1e-5, atol=1e-5)


@settings(max_examples=3)
@given(depth=st.integers(1, 3), seed=st.integers(0, 9))
def test_nested_vmaps_fold_into_matmul(depth: int, seed: int) -> None:
    layer = eqx.nn.Linear(4, 3, key=_key(seed))
    fn: Any = layer
    for _ in range(depth):
        fn = jax.vmap(fn)
    dims = ("A", "B", "C")[:depth]
    model = assert_module_matches(fn, [(*dims, 4)], sizes={d: [1, 3] for d in dims})
    assert "Gemm" in node_ops(model) or "MatMul" in node_ops(model)
    assert "Einsum" not in node_ops(model)


def test_vmap_over_stacked_weights_falls_back() -> None:
    # an ensemble: the weights carry the vmap dim, which one Gemm cannot take
    layers = eqx.filter_vmap(lambda k: eqx.nn.Linear(3, 2, key=k))(jax.random.split(KEY, 4))

    def ensemble(x: Any) -> Any:
        return eqx.filter_vmap(lambda layer: layer(x))(layers)

    model = assert_module_matches(ensemble, [(3,)])
    assert "Gemm" not in node_ops(model)


def test_vmap_dim_carried_only_by_the_key_argument() -> None:
    # x is shared, only the (ignored) keys are batched: the output still has the batch dim
    layer = eqx.nn.Linear(3, 2, key=KEY)

    def fn(x: Any) -> Any:
        return jax.vmap(lambda k: layer(x, key=k))(jax.random.split(KEY, 5))

    model = assert_module_matches(fn, [(3,)])
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 5


def test_mixed_dtypes_fall_back() -> None:
    layer = eqx.nn.Linear(3, 2, key=KEY)
    model = assert_module_matches(layer, [((3,), "int32")], batch=True)
    assert "Gemm" not in node_ops(model)


# -- Conv / ConvTranspose -------------------------------------------------------------------

PADDINGS = st.sampled_from(["VALID", "SAME", "SAME_LOWER", 0, 1, 2, ((1, 0),), ((0, 2),)])


@settings(max_examples=6)
@given(
    dims=st.integers(1, 3),
    groups=st.sampled_from([1, 2]),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    padding=PADDINGS,
    use_bias=st.booleans(),
    batch=BATCH,
    size=st.integers(3, 6),
)
def test_conv(
    dims: int,
    groups: int,
    kernel: int,
    stride: int,
    dilation: int,
    padding: Any,
    use_bias: bool,
    batch: bool,
    size: int,
) -> None:
    if isinstance(padding, tuple):
        padding = padding * dims
    conv = eqx.nn.Conv(dims, 2, 4, kernel, stride, padding, dilation, groups, use_bias, key=KEY)
    try:
        out = conv(jnp.zeros((2, *(size,) * dims)))
    except Exception:
        return  # a configuration JAX rejects
    model = assert_module_matches(conv, [(2, *(size,) * dims)], batch=batch)
    assert ("Conv" in node_ops(model)) == (out.size > 0)  # an empty result is the lax path's
    if out.size > 0:  # (an empty result needs no weight)
        assert initializer_names(model) >= ({"weight", "bias"} if use_bias else {"weight"})


@pytest.mark.parametrize("mode", ["REFLECT", "REPLICATE", "CIRCULAR"])
def test_conv_padding_modes_fall_back(mode: str) -> None:
    conv = eqx.nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode, key=KEY)
    assert_module_matches(conv, [(2, 5, 5)], batch=True)


def test_conv_with_symbolic_spatial_dims() -> None:
    # (padding="SAME" over symbolic dims cannot be vmapped by JAX itself: its padding is symbolic)
    conv = eqx.nn.Conv2d(2, 3, 3, padding=1, stride=2, key=KEY)
    model = assert_module_matches(
        jax.vmap(conv), [("B", 2, "H", "W")], sizes={"B": [1, 2], "H": [5, 6], "W": [7, 4]}
    )
    assert node_ops(model) == ["Conv"]


@settings(max_examples=6)
@given(
    dims=st.integers(1, 2),
    groups=st.sampled_from([1, 2]),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 2),
    padding=st.sampled_from(["VALID", "SAME", "SAME_LOWER", 0, 1]),
    output_padding=st.integers(0, 2),
    use_bias=st.booleans(),
    batch=BATCH,
)
def test_conv_transpose(
    dims: int,
    groups: int,
    kernel: int,
    stride: int,
    dilation: int,
    padding: Any,
    output_padding: int,
    use_bias: bool,
    batch: bool,
) -> None:
    if output_padding >= stride:
        output_padding = 0
    conv = eqx.nn.ConvTranspose(
        dims, 2, 4, kernel, stride, padding, output_padding, dilation, groups, use_bias, key=KEY
    )
    model = assert_module_matches(conv, [(2, *(4,) * dims)], batch=batch)
    assert "ConvTranspose" in node_ops(model) or "Conv" in node_ops(model)


def test_conv_transpose_weight_keeps_its_name() -> None:
    conv = eqx.nn.ConvTranspose2d(2, 4, 3, stride=2, groups=2, key=KEY)
    model = assert_module_matches(conv, [(2, 4, 4)], batch=True)
    assert node_ops(model) == ["ConvTranspose"]
    assert initializer_names(model) == {"weight", "bias"}
    weight = next(i for i in model.graph.initializer if i.name == "weight")
    assert tuple(weight.dims) == (2, 2, 3, 3)  # ONNX's (in, out / groups, kH, kW)


def test_conv_transpose_circular_falls_back() -> None:
    conv = eqx.nn.ConvTranspose1d(
        2, 3, 3, stride=2, padding="SAME", padding_mode="CIRCULAR", key=KEY
    )
    assert_module_matches(conv, [(2, 5)], batch=True)


# -- normalisations -------------------------------------------------------------------------


@settings(max_examples=5)
@given(
    shape=st.sampled_from([(5,), (3, 4), (1,), (2, 1, 3)]),
    use_weight=st.booleans(),
    use_bias=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-3]),
    batch=BATCH,
)
def test_layer_norm(
    shape: tuple[int, ...], use_weight: bool, use_bias: bool, eps: float, batch: bool
) -> None:
    norm = jax.tree_util.tree_map(
        lambda a: a + 0.5, eqx.nn.LayerNorm(shape, eps, use_weight, use_bias)
    )
    model = assert_module_matches(norm, [shape], batch=batch)
    assert node_ops(model) == ["LayerNormalization"]


@pytest.mark.parametrize("opset", [21, 23])
@settings(max_examples=4)
@given(
    shape=st.sampled_from([(5,), (3, 4)]),
    use_weight=st.booleans(),
    use_bias=st.booleans(),
    batch=BATCH,
)
def test_rms_norm(
    opset: int, shape: tuple[int, ...], use_weight: bool, use_bias: bool, batch: bool
) -> None:
    norm = eqx.nn.RMSNorm(shape, 1e-5, use_weight, use_bias)
    model = assert_module_matches(norm, [shape], batch=batch, opset=opset)
    assert ("RMSNormalization" in node_ops(model)) == (opset >= 23)


@settings(max_examples=5)
@given(
    groups=st.sampled_from([1, 2, 4]),
    affine=st.booleans(),
    spatial=st.sampled_from([(3,), (2, 3), (1, 1)]),
    batch=BATCH,
)
def test_group_norm(groups: int, affine: bool, spatial: tuple[int, ...], batch: bool) -> None:
    norm = eqx.nn.GroupNorm(groups, 4, channelwise_affine=affine)
    model = assert_module_matches(norm, [(4, *spatial)], batch=batch)
    assert "GroupNormalization" in node_ops(model)


def test_norm_called_with_a_state_falls_back() -> None:
    norm = eqx.nn.LayerNorm(3)
    model = assert_module_matches(lambda x: norm(x, eqx.nn.State(norm))[0], [(3,)])
    assert "LayerNormalization" not in node_ops(model)


class _BatchNormNet(eqx.Module):
    conv: eqx.nn.Conv2d
    bn: eqx.nn.BatchNorm

    def __call__(self, x: Any, state: Any) -> Any:
        x, state = self.bn(self.conv(x), state)
        return jax.nn.relu(x), state


def _with_statistics(state: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda a: (
            a + 0.25 if jnp.issubdtype(a.dtype, jnp.floating) else a + 3 if a.dtype != bool else a
        ),
        state,
    )


@pytest.mark.parametrize("mode", ["ema", "batch"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("batch", [False, True])
def test_batch_norm_with_state(mode: str, affine: bool, batch: bool) -> None:
    net, state = eqx.nn.make_with_state(_BatchNormNet)(
        eqx.nn.Conv2d(2, 3, 3, key=KEY),
        eqx.nn.BatchNorm(3, "batch", channelwise_affine=affine, mode=mode),
    )
    model = assert_module_matches(net, [(2, 6, 6)], batch=batch, state=_with_statistics(state))
    assert "BatchNormalization" in node_ops(model)
    names = initializer_names(model)
    assert (
        {"bn.ema_state_index.mean", "bn.ema_state_index.var"} <= names
        if mode == "ema"
        else "bn.batch_counter" in names
    )


def test_batch_norm_training_mode_falls_back() -> None:
    # batch statistics (a pmean over the vmapped batch, which must be static for JAX)
    net, state = eqx.nn.make_with_state(_BatchNormNet)(
        eqx.nn.Conv2d(2, 3, 3, key=KEY), eqx.nn.BatchNorm(3, "batch", mode="batch")
    )

    def fn(x: Any) -> Any:
        return jax.vmap(lambda xi: net(xi, state)[0], axis_name="batch")(x)

    model = assert_module_matches(fn, [(4, 2, 6, 6)], training=True)
    assert "BatchNormalization" not in node_ops(model)


# -- attention ------------------------------------------------------------------------------


class _Attention(eqx.Module):
    attention: eqx.nn.MultiheadAttention

    def __call__(self, q: Any, kv: Any, mask: Any = None) -> Any:
        return self.attention(q, kv, kv, mask)


@settings(max_examples=4)
@given(
    heads=st.sampled_from([1, 2]),
    mask=st.sampled_from(["none", "2d", "3d"]),
    bias=st.booleans(),
    batch=BATCH,
    seq=st.sampled_from([(3, 3), (2, 5)]),
)
def test_multihead_attention(
    heads: int, mask: str, bias: bool, batch: bool, seq: tuple[int, int]
) -> None:
    attention = eqx.nn.MultiheadAttention(
        heads, 8, use_query_bias=bias, use_output_bias=bias, key=KEY
    )
    q, s = seq
    mask_spec = {"none": [], "2d": [((q, s), bool)], "3d": [((heads, q, s), bool)]}[mask]
    model = assert_module_matches(_Attention(attention), [(q, 8), (s, 8), *mask_spec], batch=batch)
    ops = node_ops(model)
    assert "Softmax" in ops and "ReduceMax" not in ops
    assert ("Where" in ops) == (mask != "none")


def test_fully_masked_rows_match_jax() -> None:
    attention = _Attention(eqx.nn.MultiheadAttention(2, 8, key=KEY))
    rng = np.random.default_rng(0)
    q, kv = (
        rng.standard_normal((3, 8)).astype(np.float32),
        rng.standard_normal((4, 8)).astype(np.float32),
    )
    mask = np.zeros((3, 4), bool)
    mask[0, 1] = True
    model = to_onnx(attention, [(3, 8), (4, 8), ((3, 4), bool)])
    np.testing.assert_allclose(
        run_onnx(model, [q, kv, mask])[0], attention(q, kv, mask), rtol=1e-5, atol=1e-5
    )


def test_attention_dropout_in_training_falls_back() -> None:
    attention = eqx.nn.MultiheadAttention(2, 8, dropout_p=0.5, key=KEY)
    lowered: set[str] = set()
    with recording(lowered):
        to_onnx(lambda q: attention(q, q, q, key=KEY), [(3, 8)], training=True)
    assert "eqx_attention" not in lowered and "eqx_linear" in lowered


# -- Embedding, PReLU, RoPE -----------------------------------------------------------------


@settings(max_examples=4)
@given(dtype=st.sampled_from(["int32", "int64", "uint8", "int8"]), batch=BATCH)
def test_embedding_index_semantics(dtype: str, batch: bool) -> None:
    embedding = eqx.nn.Embedding(7, 3, key=KEY)
    model = to_onnx(
        jax.vmap(embedding), [(("B",), dtype)], enable_double_precision=dtype == "int64"
    )
    values = np.array([0, 6, 7, 100, -1, -7, -8, -100], dtype=np.int64)
    values = values[(values >= np.iinfo(dtype).min) & (values <= np.iinfo(dtype).max)].astype(dtype)
    with x64(dtype == "int64"):
        expected = jax.vmap(embedding)(values)
    np.testing.assert_array_equal(run_onnx(model, [values])[0], expected)
    assert "Gather" in node_ops(model)
    if batch:
        assert_module_matches(embedding, [((), "int32")], batch=True)


@settings(max_examples=4)
@given(slope=st.sampled_from([0.25, (3,), (2, 3)]), batch=BATCH)
def test_prelu(slope: Any, batch: bool) -> None:
    alpha = (
        slope
        if isinstance(slope, float)
        else jnp.linspace(-1, 1, int(np.prod(slope))).reshape(slope)
    )
    model = assert_module_matches(eqx.nn.PReLU(alpha), [(2, 3)], batch=batch)
    assert node_ops(model) == ["PRelu"]


def test_prelu_nan_and_signed_zero() -> None:
    prelu = eqx.nn.PReLU(0.5)
    x = np.array([np.nan, -0.0, 0.0, -2.0, np.inf, -np.inf], np.float32)
    model = to_onnx(prelu, [(6,)])
    out = run_onnx(model, [x])[0]
    np.testing.assert_array_equal(out, prelu(x))
    np.testing.assert_array_equal(np.signbit(out), np.signbit(np.asarray(prelu(x))))


@settings(max_examples=4)
@given(
    size=st.sampled_from([2, 8]),
    seq=st.integers(1, 5),
    theta=st.sampled_from([10_000.0, 500.0]),
    batch=BATCH,
)
def test_rope(size: int, seq: int, theta: float, batch: bool) -> None:
    rope = eqx.nn.RotaryPositionalEmbedding(size, theta)
    model = assert_module_matches(rope, [(seq, size)], batch=batch)
    assert "Tile" not in node_ops(model) and "Split" in node_ops(model)


@settings(max_examples=3)
@given(
    size=st.sampled_from([2, 8]),
    seq=st.integers(1, 5),
    theta=st.sampled_from([10_000.0, 500.0]),
    batch=BATCH,
    opset=st.sampled_from([23, MAX_OPSET]),
)
def test_rope_is_onnx_rotary_embedding_from_opset_23(
    size: int, seq: int, theta: float, batch: bool, opset: int
) -> None:
    rope = eqx.nn.RotaryPositionalEmbedding(size, theta)
    model = assert_module_matches(
        rope, [(seq, size)], batch=batch, sizes={"B": [0, 2]} if batch else None, opset=opset
    )
    assert node_ops(model).count("RotaryEmbedding") == 1 and "Split" not in node_ops(model)


def test_rope_over_vmapped_heads_is_one_rotary_embedding() -> None:
    rope = eqx.nn.RotaryPositionalEmbedding(4)
    per_head = jax.vmap(jax.vmap(rope, in_axes=1, out_axes=1))  # (B, seq, heads, size)
    model = assert_exports_match(per_head, [("B", 6, 3, 4)], sizes={"B": [0, 1, 2]}, opset=23)
    # on [B, seq, heads * size] with num_heads: the Transposes vmap made are gone
    assert node_ops(model).count("RotaryEmbedding") == 1 and "Transpose" not in node_ops(model)


def test_rope_float64() -> None:
    with x64(
        True
    ):  # at opset 23 too: onnxruntime's RotaryEmbedding has float32 / float16 kernels only
        rope = eqx.nn.RotaryPositionalEmbedding(4, dtype=jnp.float64)
        model = assert_module_matches(
            rope, [(3, 4)], batch=True, enable_double_precision=True, opset=23
        )
    assert "RotaryEmbedding" not in node_ops(model) and "Split" in node_ops(model)


# -- GRU / LSTM cells -----------------------------------------------------------------------


class _GRU(eqx.Module):
    cell: eqx.nn.GRUCell

    def __call__(self, x: Any, h: Any) -> Any:
        return self.cell(x, h)


class _LSTM(eqx.Module):
    cell: eqx.nn.LSTMCell

    def __call__(self, x: Any, h: Any, c: Any) -> Any:
        return self.cell(x, (h, c))


@settings(max_examples=4)
@given(use_bias=st.booleans(), batch=BATCH, sizes=st.sampled_from([(3, 4), (1, 2)]))
def test_gru_cell(use_bias: bool, batch: bool, sizes: tuple[int, int]) -> None:
    n_in, n_hidden = sizes
    model = assert_module_matches(
        _GRU(eqx.nn.GRUCell(n_in, n_hidden, use_bias, key=KEY)), [(n_in,), (n_hidden,)], batch=batch
    )
    assert (
        "GRU" in all_ops(model) and ("If" in node_ops(model)) == batch
    )  # a symbolic batch of 0 guarded


@settings(max_examples=4)
@given(use_bias=st.booleans(), batch=BATCH, sizes=st.sampled_from([(3, 4), (1, 2)]))
def test_lstm_cell(use_bias: bool, batch: bool, sizes: tuple[int, int]) -> None:
    n_in, n_hidden = sizes
    spec = [(n_in,), (n_hidden,), (n_hidden,)]
    model = assert_module_matches(
        _LSTM(eqx.nn.LSTMCell(n_in, n_hidden, use_bias, key=KEY)), spec, batch=batch
    )
    assert "LSTM" in all_ops(model) and ("If" in node_ops(model)) == batch


class _Scan(eqx.Module):
    """GRU / LSTM cells stacked in one step of a scan over the time axis of ``xs`` ``(T, F)``;
    returns the final carries and the last cell's h at every step."""

    cells: tuple[Any, ...]
    reverse: bool = eqx.field(static=True)

    def __call__(self, xs: Any) -> Any:
        def start(cell: Any, k: int) -> Any:
            h = jnp.full((cell.hidden_size,), 0.25 * (k + 1), xs.dtype)
            return (h, h * 2.0) if isinstance(cell, eqx.nn.LSTMCell) else h

        def step(carries: tuple[Any, ...], x: Any) -> Any:
            new = []
            for cell, carry in zip(self.cells, carries, strict=True):
                carry = cell(x, carry)
                x = carry[0] if isinstance(carry, tuple) else carry
                new.append(carry)
            return tuple(new), x

        return jax.lax.scan(
            step, tuple(start(c, k) for k, c in enumerate(self.cells)), xs, reverse=self.reverse
        )


@settings(max_examples=4)
@given(
    kinds=st.lists(st.booleans(), min_size=1, max_size=2),
    batch=BATCH,
    reverse=st.booleans(),
    time=st.sampled_from(["T", 3]),
)
def test_scan_of_cells_is_one_op_per_cell(
    kinds: list[bool], batch: bool, reverse: bool, time: Any
) -> None:
    """With and without vmap, forward and reverse, static and symbolic length: each cell runs
    once over the sequence, no Loop or Scan left."""
    sizes = [3, 4, 2][: len(kinds) + 1]
    cells = tuple(
        (eqx.nn.LSTMCell if lstm else eqx.nn.GRUCell)(a, b, key=_key(k))
        for k, (lstm, a, b) in enumerate(zip(kinds, sizes[:-1], sizes[1:], strict=True))
    )
    run_sizes = {
        d: v for d, v in {"B": [1, 3], "T": [1, 4]}.items() if d == time or (d == "B" and batch)
    }
    model = assert_module_matches(
        _Scan(cells, reverse), [(time, 3)], batch=batch, sizes=run_sizes or None
    )
    ops = all_ops(model)
    assert "Loop" not in ops and "Scan" not in ops
    assert (ops.count("LSTM"), ops.count("GRU")) == (sum(kinds), len(kinds) - sum(kinds))


def test_rnn_cells_in_float64_fall_back() -> None:
    with x64(True):
        cell = _GRU(eqx.nn.GRUCell(3, 4, dtype=jnp.float64, key=KEY))
        model = assert_module_matches(cell, [(3,), (4,)], batch=True, enable_double_precision=True)
    assert "GRU" not in all_ops(model)


# -- pools ----------------------------------------------------------------------------------


@settings(max_examples=8)
@given(
    kind=st.sampled_from(["max", "avg"]),
    dims=st.integers(1, 3),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 1),
    use_ceil=st.booleans(),
    batch=BATCH,
    size=st.integers(3, 6),
)
def test_pools(
    kind: str,
    dims: int,
    kernel: int,
    stride: int,
    padding: int,
    use_ceil: bool,
    batch: bool,
    size: int,
) -> None:
    classes = {
        "max": (eqx.nn.MaxPool1d, eqx.nn.MaxPool2d, eqx.nn.MaxPool3d),
        "avg": (eqx.nn.AvgPool1d, eqx.nn.AvgPool2d, eqx.nn.AvgPool3d),
    }
    pool = classes[kind][dims - 1](kernel, stride, padding, use_ceil)
    try:
        pool(jnp.zeros((2, *(size,) * dims)))
    except Exception:
        return  # eqx rejects the configuration
    model = assert_module_matches(pool, [(2, *(size,) * dims)], batch=batch)
    if padding < kernel and not use_ceil:
        assert ("MaxPool" if kind == "max" else "AveragePool") in node_ops(model)


def test_max_pool_nan_and_infinities_match_jax() -> None:
    pool = eqx.nn.MaxPool1d(2, 2)
    x = np.array(
        [[np.nan, 1.0, -np.inf, -np.inf, 3.0, np.nan, -np.inf, 2.0, np.inf, np.nan]], np.float32
    )
    model = to_onnx(pool, [(1, 10)])
    np.testing.assert_array_equal(run_onnx(model, [x])[0], pool(x))


@settings(max_examples=5)
@given(
    kind=st.sampled_from(["avg", "max"]),
    target=st.sampled_from([(1, 1), (2, 3), (3, 2), (6, 6)]),
    batch=BATCH,
)
def test_adaptive_pools(kind: str, target: tuple[int, int], batch: bool) -> None:
    pool = (eqx.nn.AdaptiveAvgPool2d if kind == "avg" else eqx.nn.AdaptiveMaxPool2d)(target)
    model = assert_module_matches(pool, [(2, 6, 6)], batch=batch)
    assert ("AveragePool" if kind == "avg" else "MaxPool") in node_ops(model)


def test_uneven_adaptive_pool_falls_back() -> None:
    model = assert_module_matches(eqx.nn.AdaptiveAvgPool1d(4), [(2, 7)], batch=True)
    assert "AveragePool" not in node_ops(model)


# -- containers and activations -------------------------------------------------------------


def test_sequential_lambda_identity_dropout() -> None:
    model = eqx.nn.Sequential(
        [
            eqx.nn.Linear(4, 6, key=KEY),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Dropout(0.5),
            eqx.nn.Identity(),
            eqx.nn.Linear(6, 2, key=_key(1)),
        ]
    )
    onnx_model = assert_module_matches(model, [(4,)], batch=True)
    assert node_ops(onnx_model) == [
        "Gemm",
        "Relu",
        "Gemm",
    ]  # Dropout (inference) and Identity: no node


def test_mlp_with_scan_over_hidden_layers() -> None:
    mlp = eqx.nn.MLP(3, 2, 5, 3, activation=jax.nn.tanh, scan=True, key=KEY)
    onnx_model = assert_module_matches(mlp, [(3,)], batch=True)
    assert "Gemm" in node_ops(onnx_model)


def test_subclass_overriding_a_method_falls_back() -> None:
    class Shifted(eqx.nn.Linear):
        def extra(self) -> int:
            return 1

    layer = Shifted(3, 2, key=KEY)
    onnx_model = assert_module_matches(layer, [(3,)], batch=True)
    assert "Gemm" not in node_ops(onnx_model)


def test_coarse_ops_off() -> None:
    model = assert_module_matches(
        eqx.nn.Conv2d(2, 3, 3, key=KEY), [(2, 5, 5)], batch=True, coarse_ops=False
    )
    assert node_ops(model) != ["Conv"]
