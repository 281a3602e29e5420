"""Quantized weights (core/quant/): the dequantization JAX computes is written as
DequantizeLinear (the QDQ form every target runs) or, for onnxruntime, MatMulNBits (4-bit) and
a float MatMul of the 8-bit weight; every export runs in onnxruntime against JAX."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.runtimes import run_model
from jax2onnx_nn.testing import assert_exports_match

QDQ = "openvino"  # a target that keeps the standard QDQ form
RNG = np.random.default_rng(0)


def _weights(k: int, n: int, dtype: str, scale_shape: tuple[int, ...]):
    info = ml_dtypes.iinfo(getattr(ml_dtypes, dtype, None) or np.dtype(dtype))
    q = RNG.integers(info.min, info.max + 1, (k, n)).astype(np.int32)
    scale = (RNG.random(scale_shape) * 0.02 + 0.001).astype(np.float32)
    return jnp.asarray(q, getattr(jnp, dtype)), jnp.asarray(scale)


def _blocked(q, scale, block: int):
    """qwix's sub-channel form: reshape -> multiply -> reshape."""
    k, n = q.shape
    w = q.astype(jnp.float32).reshape(k // block, block, n) * scale.reshape(k // block, 1, n)
    return w.reshape(k, n)


def _initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def _float_weights(model: onnx.ModelProto) -> list[str]:
    """Initializers of a float type with as many elements as a weight (>= 256)."""
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    return [
        t.name
        for t in model.graph.initializer
        if t.data_type in floats and int(np.prod(t.dims)) >= 256
    ]


@pytest.mark.parametrize(
    ("dtype", "scale_shape", "block", "attrs"),
    [
        ("int8", (), None, {}),  # per tensor
        ("int8", (1, 32), None, {"axis": 1}),  # per output channel (qwix int8)
        ("uint8", (64, 1), None, {"axis": 0}),
        ("int4", (1, 32), None, {"axis": 1}),
        ("int4", (2, 32), 32, {"axis": 0, "block_size": 32}),  # tiles of 32 along K
        ("uint4", (4, 32), 16, {"axis": 0, "block_size": 16}),
    ],
)
def test_dequantize_linear_matches_jax(dtype, scale_shape, block, attrs):
    q, scale = _weights(64, 32, dtype, scale_shape)

    def dense(x):
        w = q.astype(jnp.float32) * scale if block is None else _blocked(q, scale, block)
        return x @ w

    model = assert_exports_match(dense, [("B", 64)], sizes={"B": [1, 3]}, target=QDQ, rtol=1e-6)
    assert Counter(n.op_type for n in model.graph.node) == {"DequantizeLinear": 1, "MatMul": 1}
    (dq,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert {a.name: a.i for a in dq.attribute} == attrs
    inits = _initializers(model)
    stored = getattr(onnx.TensorProto, dtype.upper())
    assert inits[dq.input[0]].data_type == stored
    assert not _float_weights(model)


def test_int4_is_stored_packed_and_named_after_the_weight():
    q, scale = _weights(128, 64, "int4", (2, 64))
    w = {"dense": {"kernel": {"qvalue": q, "scale": scale}}}

    def dense(x):
        kernel = w["dense"]["kernel"]
        return x @ _blocked(kernel["qvalue"], kernel["scale"], 64)

    model = to_onnx(dense, [(2, 128)], target=QDQ)
    (dq,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    inits = _initializers(model)
    weight = inits[dq.input[0]]
    assert weight.data_type == onnx.TensorProto.INT4
    assert len(weight.raw_data) == 128 * 64 // 2  # two values a byte, as ONNX stores int4
    names = [dq.input[0], dq.input[1]]
    assert names[1] == f"{names[0]}.scale"


def test_dequantization_with_zero_point_is_bit_exact():
    q, scale = _weights(32, 16, "uint8", (1, 16))
    zero_point = jnp.asarray(RNG.integers(0, 256, (1, 16)), jnp.float32)
    x = jnp.asarray(RNG.standard_normal((32, 16)), jnp.float32)

    def weights(x):  # the dequantized weights themselves: equal numbers, bit for bit
        return (q.astype(jnp.float32) - zero_point) * scale + x * 0

    model = to_onnx(weights, [x], target=QDQ)
    assert [n.op_type for n in model.graph.node][0] == "DequantizeLinear"
    (got,) = run_model(model, [x])
    np.testing.assert_array_equal(got, np.asarray(weights(x)))


def test_a_zero_point_outside_the_type_stays_float_arithmetic():
    q, scale = _weights(32, 16, "int8", (1, 16))

    def dense(x):
        return x @ ((q.astype(jnp.float32) - 300.0) * scale)

    model = assert_exports_match(dense, [(2, 32)], target=QDQ)
    assert "DequantizeLinear" not in [n.op_type for n in model.graph.node]


@settings(max_examples=10, deadline=None)
@given(
    k_blocks=st.integers(1, 4),
    n=st.integers(1, 24),
    block=st.sampled_from([16, 32, 64]),
    batch=st.integers(1, 5),
)
def test_matmul_nbits_matches_jax(k_blocks, n, block, batch):
    k = k_blocks * block
    q, scale = _weights(k, n, "int4", (k_blocks, n))
    model = assert_exports_match(
        lambda x: x @ _blocked(q, scale, block), [(batch, k)], target="onnxruntime", rtol=1e-5
    )
    nodes = [n.op_type for n in model.graph.node]
    assert nodes == ["MatMulNBits"]
    (node,) = model.graph.node
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs == {"K": k, "N": n, "bits": 4, "block_size": block, "accuracy_level": 1}
    assert not _float_weights(model)


def test_per_column_int4_is_matmul_nbits_with_repeated_scales():
    q, scale = _weights(256, 8, "int4", (1, 8))
    model = assert_exports_match(
        lambda x: x @ (q.astype(jnp.float32) * scale), [(1, 256)], target="onnxruntime"
    )
    (node,) = model.graph.node
    assert node.op_type == "MatMulNBits" and node.domain == "com.microsoft"
    assert {a.name: a.i for a in node.attribute}["block_size"] == 128


@pytest.mark.parametrize(("dtype", "blocks"), [("int4", 3), ("uint4", 2)])
def test_asymmetric_int4_is_matmul_nbits_with_zero_points(dtype, blocks):
    """(q - zero point) outside a 4-bit value (Keras's asymmetric int4): MatMulNBits' own
    zero points, packed two a byte per column (an odd count of blocks padded)."""
    k, n = 32 * blocks, 8
    q, scale = _weights(k, n, dtype, (blocks, n))
    info = ml_dtypes.iinfo(getattr(ml_dtypes, dtype))
    zero = jnp.asarray(RNG.integers(info.min, info.max + 1, (blocks, n)), jnp.float32)
    zero = zero.at[0, 0].set(info.max)  # so that some q - zero point leaves the 4-bit range

    def dense(x):
        w = (q.astype(jnp.float32).reshape(blocks, 32, n) - zero[:, None]) * scale[:, None]
        return x @ w.reshape(k, n)

    model = assert_exports_match(dense, [(3, k)], target="onnxruntime", rtol=1e-5)
    (node,) = model.graph.node
    assert node.op_type == "MatMulNBits" and len(node.input) == 4
    zero_points = next(t for t in model.graph.initializer if t.name == node.input[3])
    assert list(zero_points.dims) == [n * ((blocks + 1) // 2)]
    assert not _float_weights(model)


def test_int8_weights_for_onnxruntime_are_a_float_matmul_of_the_int8_weight():
    q, scale = _weights(64, 32, "int8", (1, 32))
    model = assert_exports_match(
        lambda x: x @ (q.astype(jnp.float32) * scale), [(2, 64)], target="onnxruntime"
    )
    assert [n.op_type for n in model.graph.node] == ["Cast", "Mul", "MatMul"]
    assert _initializers(model)[model.graph.node[0].input[0]].data_type == onnx.TensorProto.INT8


def test_conv_kernel_is_dequantized_in_the_conv_layout():
    q, scale = _weights(3 * 3 * 4, 8, "int8", (1, 8))
    kernel_q = q.reshape(3, 3, 4, 8)
    kernel_scale = scale.reshape(1, 1, 1, 8)

    def conv(x):
        kernel = kernel_q.astype(jnp.float32) * kernel_scale
        return jax.lax.conv_general_dilated(
            x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    model = assert_exports_match(conv, [(1, 8, 8, 4)], target=QDQ)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DequantizeLinear") == 1 and "Conv" in ops
    assert not _float_weights(model)


def test_embedding_lookup_reads_the_dequantized_table():
    q, scale = _weights(64, 16, "int8", (64, 1))

    def embed(ids):
        return (q.astype(jnp.float32) * scale)[ids]

    ids = np.array([[0, 5, 63]], np.int32)
    model = to_onnx(embed, [ids], target=QDQ)
    ops = [n.op_type for n in model.graph.node]
    assert "DequantizeLinear" in ops and "Gather" in ops
    (got,) = run_model(model, [ids])
    np.testing.assert_array_equal(got, np.asarray(embed(ids)))


def test_below_opset_21_blocks_keep_the_float_arithmetic():
    q, scale = _weights(64, 16, "int8", (2, 16))
    model = assert_exports_match(
        lambda x: x @ _blocked(q, scale, 32), [(2, 64)], target=QDQ, opset=19
    )
    assert "DequantizeLinear" not in [n.op_type for n in model.graph.node]


@pytest.mark.parametrize(("dtype", "scale_shape"), [("int4", (8, 64)), ("int8", (1, 64))])
def test_onnxruntime_rewrites_keep_jax_numbers_under_default_session_options(dtype, scale_shape):
    """Without the rewrites, onnxruntime fuses DequantizeLinear -> MatMul at its default
    accuracy level 4 (int8 activations): not JAX's numbers."""
    import onnxruntime as ort

    from jax2onnx_nn import TARGETS
    from jax2onnx_nn.core.quant.nbits import float_int8_matmul, matmul_nbits

    q, scale = _weights(512, 64, dtype, scale_shape)
    block = 512 // scale_shape[0]

    def dense(x):
        return x @ _blocked(q, scale, block)

    x = RNG.standard_normal((1, 512)).astype(np.float32)
    want = np.asarray(dense(x))
    errors = {}
    for name, target in [
        ("with", TARGETS["onnxruntime"]),
        ("without", TARGETS["onnxruntime"].without(matmul_nbits, float_int8_matmul)),
    ]:
        model = to_onnx(dense, [x], target=target)
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        errors[name] = float(np.abs(got - want).max() / np.abs(want).max())
    assert errors["with"] < 1e-5, errors
    assert errors["without"] > 1e-4, errors


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [("int8", "int8"), ("uint8", "int8")])
def test_int8_times_int8_into_int32_is_matmul_integer(a_dtype, b_dtype):
    b = jnp.asarray(RNG.integers(-128, 128, (48, 24)), getattr(jnp, b_dtype))

    def product(a):
        return jax.lax.dot(a, b, preferred_element_type=jnp.int32)

    info = np.iinfo(a_dtype)
    a = RNG.integers(info.min, info.max + 1, (3, 48)).astype(a_dtype)
    model = to_onnx(product, [a])
    assert [n.op_type for n in model.graph.node] == ["MatMulInteger"]
    (got,) = run_model(model, [a])
    np.testing.assert_array_equal(got, np.asarray(product(a)))


def test_matmul_nbits_runs_in_onnxruntime_web():
    from jax2onnx_nn import verify
    from jax2onnx_nn.core.runtimes import missing_reason

    if missing_reason("onnxruntime-web"):
        pytest.skip(missing_reason("onnxruntime-web"))
    q, scale = _weights(128, 32, "int4", (2, 32))

    def dense(x):
        return x @ _blocked(q, scale, 64)

    model = to_onnx(dense, [("B", 128)], target="onnxruntime-web")
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
    report = verify(dense, model, [("B", 128)], sizes={"B": [1, 3]}, runtime="onnxruntime-web")
    report.raise_if_failed()


def test_a_transposed_square_weight_is_stored_transposed():
    q, scale = _weights(32, 32, "int8", (1, 32))

    def dense(x):
        return x @ (q.astype(jnp.float32) * scale).T

    model = assert_exports_match(dense, [(2, 32)], target=QDQ)
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "MatMul"]


def test_a_weight_read_twice_is_stored_once():
    q, scale = _weights(32, 16, "int8", (1, 16))
    other = jnp.asarray(np.asarray(scale) * 2)

    def two(x):
        return x @ (q.astype(jnp.float32) * scale), x @ (q.astype(jnp.float32) * other)

    model = assert_exports_match(two, [(2, 32)], target=QDQ)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DequantizeLinear") == 2
    assert [t.data_type for t in model.graph.initializer].count(onnx.TensorProto.INT8) == 1


@settings(max_examples=12, deadline=None)
@given(
    k=st.sampled_from([16, 32, 48]),
    n=st.integers(1, 9),
    dtype=st.sampled_from(["int8", "uint8", "int4", "uint4"]),
    granularity=st.sampled_from(["tensor", "rows", "columns", "blocks"]),
)
def test_every_granularity_is_one_dequantize_linear(k, n, dtype, granularity):
    shapes = {"tensor": (), "rows": (k, 1), "columns": (1, n), "blocks": (k // 16, n)}
    q, scale = _weights(k, n, dtype, shapes[granularity])

    def dense(x):
        if granularity == "blocks":
            return x @ _blocked(q, scale, 16)
        return x @ (q.astype(jnp.float32) * scale)

    model = assert_exports_match(dense, [(2, k)], target=QDQ, rtol=1e-5)
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "MatMul"]
    assert not _float_weights(model)
