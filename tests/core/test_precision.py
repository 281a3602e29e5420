"""bfloat16 and float16 models (core/precision.py): coarse ops stay one ONNX op at every
precision, computed in float32 between one Cast in and one Cast out where onnxruntime has no
kernel for the dtype, and the exports verify in onnxruntime against JAX."""

from __future__ import annotations

from collections import Counter

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.runtimes import run_model

LOW = [jnp.bfloat16, jnp.float16]


class MLP(nnx.Module):
    """The issue's model: Linear -> BatchNorm -> gelu -> Linear."""

    def __init__(self, dtype, param_dtype, rngs):
        self.l1 = nnx.Linear(16, 32, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.bn = nnx.BatchNorm(32, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.l2 = nnx.Linear(32, 8, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.gelu(self.bn(self.l1(x))))


def _mlp(dtype, param_dtype):
    model = MLP(dtype, param_dtype, nnx.Rngs(0))
    model.eval()
    return model


def _nodes(model) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _eqx(module, dtype):
    return jax.tree.map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, module)


LAYERS = {
    "nnx.Linear": (lambda dt: nnx.Linear(8, 4, dtype=dt, param_dtype=dt, rngs=nnx.Rngs(0)), (2, 8)),
    "nnx.Conv": (
        lambda dt: nnx.Conv(3, 4, (3, 3), dtype=dt, param_dtype=dt, rngs=nnx.Rngs(0)),
        (1, 6, 6, 3),
    ),
    "nnx.LayerNorm": (
        lambda dt: nnx.LayerNorm(8, dtype=dt, param_dtype=dt, rngs=nnx.Rngs(0)),
        (2, 8),
    ),
    "jax.nn.softmax": (lambda dt: jax.nn.softmax, (2, 8)),
    "jax.nn.gelu": (lambda dt: lambda x: jax.nn.gelu(x, approximate=False), (2, 8)),
    "eqx.nn.Linear": (lambda dt: _eqx(eqx.nn.Linear(8, 4, key=jax.random.key(0)), dt), (8,)),
    "eqx.nn.LayerNorm": (lambda dt: _eqx(eqx.nn.LayerNorm(8), dt), (8,)),
    "eqx.nn.Conv2d": (
        lambda dt: _eqx(eqx.nn.Conv2d(3, 4, 3, key=jax.random.key(0)), dt),
        (3, 6, 6),
    ),
}


@settings(max_examples=12, deadline=None)
@given(layer=st.sampled_from(sorted(LAYERS)), dtype=st.sampled_from(LOW))
def test_layer_is_its_float32_ops_between_one_cast_in_and_out(layer, dtype):
    make, shape = LAYERS[layer]
    float32 = to_onnx(make(jnp.float32), [jax.ShapeDtypeStruct(shape, jnp.float32)])
    low = make(dtype)
    spec = [jax.ShapeDtypeStruct(shape, dtype)]
    model = to_onnx(low, spec)
    ops = _nodes(model)
    assert ops["Cast"] == 2, ops  # the input in, the result out
    assert ops - Counter(Cast=2) == _nodes(float32) - Counter(Cast=99), (ops, _nodes(float32))
    report = verify(low, model, spec, sizes={})
    assert report.ok, str(report)


@settings(max_examples=10, deadline=None)
@given(
    layer=st.sampled_from(sorted(LAYERS)),
    dtype=st.sampled_from(LOW),
    policy=st.sampled_from(["float32", "float16"]),
)
def test_layer_under_a_policy_verifies_and_keeps_its_op(layer, dtype, policy):
    make, shape = LAYERS[layer]
    float32 = to_onnx(make(jnp.float32), [jax.ShapeDtypeStruct(shape, jnp.float32)])
    low = make(dtype)
    spec = [jax.ShapeDtypeStruct(shape, dtype)]
    model = to_onnx(low, spec, precision=policy, io_dtype="float32")
    ops = _nodes(model) - Counter(Cast=99)
    assert ops == _nodes(float32) - Counter(Cast=99), (ops, _nodes(float32))
    low_types = {10, 16}  # float16, bfloat16
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    held = {v.type.tensor_type.elem_type for v in values} | {
        t.data_type for t in model.graph.initializer
    }
    if policy == "float32":
        assert not held & low_types, held
    report = verify(low, model, spec, sizes={})
    assert report.ok, str(report)


@pytest.mark.parametrize("param_dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "mixed"])
def test_bfloat16_mlp_is_lean_and_verifies(param_dtype):
    # before: 77 nodes (bf16) and 87 (mixed), 55 / 61 of them Casts, no Gemm or
    # BatchNormalization; float32: 4 nodes
    model = _mlp(jnp.bfloat16, param_dtype)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    onnx_model = to_onnx(model, spec)
    ops = _nodes(onnx_model)
    assert sum(ops.values()) <= 3 * 4 + 4, ops
    assert ops - Counter(Cast=99) == Counter(Gemm=2, BatchNormalization=1, Gelu=1), ops
    report = verify(model, onnx_model, spec, sizes={"B": [1, 64]})
    assert report.ok, str(report)


def test_mixed_weights_are_rounded_to_the_compute_dtype_as_flax_does():
    model = _mlp(jnp.bfloat16, jnp.float32)
    onnx_model = to_onnx(model, [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)])
    x = np.random.default_rng(1).standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    (y,) = run_model(onnx_model, [x])
    expected = np.asarray(model(jnp.asarray(x)))
    assert y.dtype == expected.dtype == np.dtype(ml_dtypes.bfloat16)
    # one rounding per layer as in JAX: at most an ulp or two of bfloat16 apart
    np.testing.assert_allclose(
        y.astype(np.float32), expected.astype(np.float32), rtol=2**-6, atol=2**-6
    )


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn])
def test_run_model_feeds_and_reads_low_precision_arrays(dtype):
    x = np.asarray([1.5, -2.0, 0.25], dtype)
    (y,) = run_model(to_onnx(lambda a: a, [jax.ShapeDtypeStruct((3,), dtype)]), [x])
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def _float32_twin(model):
    twin = _mlp(jnp.float32, jnp.float32)
    nnx.update(twin, jax.tree.map(lambda a: a.astype(jnp.float32), nnx.state(model)))
    return twin


@settings(max_examples=6, deadline=None)
@given(
    param_dtype=st.sampled_from([jnp.bfloat16, jnp.float16, jnp.float32]),
    policy=st.sampled_from(["float32", "float16"]),
)
def test_policy_matches_the_upcast_model(param_dtype, policy):
    dtype = jnp.float16 if param_dtype == jnp.float16 else jnp.bfloat16
    model = _mlp(dtype, param_dtype)
    onnx_model = to_onnx(
        model, [jax.ShapeDtypeStruct(("B", 16), dtype)], precision=policy, io_dtype="float32"
    )
    ops = _nodes(onnx_model)
    assert ops - Counter(Cast=99) == Counter(Gemm=2, BatchNormalization=1, Gelu=1), ops
    stored = {t.data_type for t in onnx_model.graph.initializer}
    if policy == "float32":
        assert ops["Cast"] == 0 and stored == {1}, (ops, stored)  # no bfloat16 / float16 left
    x = np.random.default_rng(2).standard_normal((64, 16)).astype(np.float32)
    (y,) = run_model(onnx_model, [x])
    expected = np.asarray(_float32_twin(model)(jnp.asarray(x)))
    tolerance = 1e-5 if policy == "float32" else 1e-2
    np.testing.assert_allclose(y, expected, rtol=tolerance, atol=tolerance)


def test_float16_policy_keeps_model_io_and_accumulates_norms_in_float32():
    model = _mlp(jnp.bfloat16, jnp.float32)
    onnx_model = to_onnx(
        model, [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)], precision="float16"
    )
    graph = onnx_model.graph
    assert (
        graph.input[0].type.tensor_type.elem_type == 16
        and graph.output[0].type.tensor_type.elem_type == 16
    )
    norm = next(n for n in graph.node if n.op_type == "BatchNormalization")
    weights = {t.name: t.data_type for t in graph.initializer}
    assert all(weights[name] == 1 for name in norm.input[1:]), weights  # statistics in float32
    assert (
        sum(weights[name] == 10 for n in graph.node if n.op_type == "Gemm" for name in n.input[1:])
        == 4
    )


def test_float16_overflow_of_a_weight_names_it():
    model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
    model.kernel.value = model.kernel.value.at[0, 0].set(1e6)
    with pytest.warns(UserWarning, match="weight 'kernel' has 1 values beyond float16's range"):
        onnx_model = to_onnx(model, [("B", 4)], precision="float16")
    (y,) = run_model(onnx_model, [np.ones((1, 4), np.float32)])
    assert np.isfinite(y).all()


def test_bad_policy_names_the_choices():
    with pytest.raises(
        ValueError, match="precision must be 'as-traced', 'float32' or 'float16', got 'fp8'"
    ):
        to_onnx(jnp.sin, [(3,)], precision="fp8")
    with pytest.raises(ValueError, match="io_dtype must be 'model' or 'float32'"):
        to_onnx(jnp.sin, [(3,)], io_dtype="bfloat16")


@pytest.mark.parametrize("policy", ["as-traced", "float32", "float16"])
def test_verify_prints_the_dtype_tolerance_and_the_error_against_jax_in_float32(policy):
    model = _mlp(jnp.bfloat16, jnp.bfloat16)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    onnx_model = to_onnx(model, spec, precision=policy, io_dtype="float32")
    report = verify(model, onnx_model, spec, sizes={"B": [64]})
    assert report.ok, str(report)
    (out,) = report.runs[0].outputs
    assert (out.rtol, out.atol) == (1.6e-2, 1.6e-2) and "(rtol 0.016, atol 0.016)" in str(report)
    assert "vs JAX in float32" in str(report)
    # bfloat16 itself is ~1e-2 from the float answer; the float32 graph is much nearer to it
    assert out.jax_float32_abs > 4e-3
    if policy == "float32":
        assert out.float32_abs < out.jax_float32_abs / 5, str(report)


def test_a_target_without_bfloat16_names_the_tensors_and_the_policy_to_use():
    from jax2onnx_nn import ConversionError

    model = _mlp(jnp.bfloat16, jnp.bfloat16)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    with pytest.raises(
        ConversionError,
        match=r"target tract cannot hold bfloat16 tensors(.|\n)*bfloat16: x, "
        r"(.|\n)*precision='float32'",
    ):
        to_onnx(model, spec, target="tract")
    onnx_model = to_onnx(model, spec, target="tract", precision="float32")
    assert all(t.data_type == 1 for t in onnx_model.graph.initializer)
    # float16 inside, bfloat16 only at the boundary: the message names io_dtype
    with pytest.raises(
        ConversionError, match=r"bfloat16: x, out_0 \(2 values\)(.|\n)*io_dtype='float32'"
    ):
        to_onnx(model, spec, target="tract", precision="float16")


def test_bfloat16_clip_runs_on_onnxruntime():
    # onnxruntime 1.32 lists a bfloat16 Clip but fails to load it ("Could not find an
    # implementation for Less(13)"): Keras' ReLU(6.0) under mixed_bfloat16 did not load
    spec = [jax.ShapeDtypeStruct((2, 5), jnp.bfloat16)]
    report = verify(jax.nn.relu6, to_onnx(jax.nn.relu6, spec), spec)
    assert report.ok, str(report)


@pytest.mark.parametrize("runtime", ["openvino", "tract"])
def test_bfloat16_mlp_on_other_runtimes(runtime):
    from jax2onnx_nn.core.runtimes import missing_reason

    if missing_reason(runtime):
        pytest.skip(missing_reason(runtime))
    model = _mlp(jnp.bfloat16, jnp.bfloat16)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    # OpenVINO holds bfloat16 (fed and read as its bits); tract has none: float32 policy
    onnx_model = to_onnx(
        model, spec, **({"target": "tract", "precision": "float32"} if runtime == "tract" else {})
    )
    report = verify(model, onnx_model, spec, sizes={"B": [8]}, runtime=runtime)
    assert report.ok, str(report)


def test_onnxruntime_web_takes_bfloat16_models_through_a_float32_boundary():
    from jax2onnx_nn import ConversionError
    from jax2onnx_nn.core.runtimes import missing_reason

    model = _mlp(jnp.bfloat16, jnp.bfloat16)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    # its JavaScript API has no bfloat16 array: the profile makes the boundary float32
    onnx_model = to_onnx(model, spec, target="onnxruntime-web")
    graph = onnx_model.graph
    assert [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]] == [1, 1]
    assert _nodes(onnx_model) - Counter(Cast=99) == Counter(Gemm=2, BatchNormalization=1, Gelu=1)
    # float16 has a JavaScript array (Uint16Array): kept
    f16 = to_onnx(
        _mlp(jnp.float16, jnp.float16),
        [jax.ShapeDtypeStruct(("B", 16), jnp.float16)],
        target="onnxruntime-web",
    )
    assert f16.graph.input[0].type.tensor_type.elem_type == 10
    with pytest.raises(
        ConversionError,
        match=r"target onnxruntime-web cannot feed or read bfloat16 inputs and outputs(.|\n)*"
        r"bfloat16: x, (.|\n)*io_dtype='float32'",
    ):
        to_onnx(model, spec, target="onnxruntime-web", io_dtype="model")
    if missing_reason("onnxruntime-web"):
        pytest.skip(missing_reason("onnxruntime-web"))
    report = verify(model, onnx_model, spec, sizes={"B": [8]}, runtime="onnxruntime-web")
    assert report.ok, str(report)
    with pytest.raises(TypeError, match="no tensor type for bfloat16 .*target='onnxruntime-web'"):
        verify(model, to_onnx(model, spec), spec, sizes={"B": [8]}, runtime="onnxruntime-web")


def _benchmark_in_bfloat16(name):
    import benchmarks.models as models

    fn, specs, options = getattr(models, name)()
    low, low_specs = models.in_dtype(fn, specs, jnp.bfloat16)
    return low, low_specs, {k: v for k, v in options.items() if k != "auto_functions"}


REAL_WORLD = [
    pytest.param(name, sizes, marks=[] if name == "gpt2_small" else [pytest.mark.slow])
    for name, sizes in [
        ("gpt2_small", {"B": [2], "T": [7]}),
        ("vit", {"B": [2]}),
        ("cnn", {"B": [2]}),
    ]
]


@pytest.mark.parametrize(("name", "sizes"), REAL_WORLD)
@pytest.mark.parametrize("policy", ["as-traced", "float32", "float16"])
def test_real_world_models_verify_in_bfloat16(name, sizes, policy):
    # before: a bfloat16 GPT's logits differ from JAX's by up to 0.03 (beyond two ulps of 1)
    # under every policy, while as near the float answer as JAX's own bfloat16 (0.04)
    model, specs, options = _benchmark_in_bfloat16(name)
    io = {} if policy == "as-traced" else {"io_dtype": "float32"}
    onnx_model = to_onnx(model, specs, precision=policy, **io, **options)
    report = verify(model, onnx_model, specs, sizes=sizes, jit=True)
    assert report.ok, str(report)
    out = report.runs[0].outputs[0]
    assert out.float32_abs <= out.jax_float32_abs + out.atol, str(report)
    if policy == "float32":  # the float answer, up to JAX's bfloat16-rounded constants
        assert out.float32_abs < out.jax_float32_abs / 4, str(report)


def test_a_wrong_bfloat16_export_still_fails_verify():
    model = _mlp(jnp.bfloat16, jnp.bfloat16)
    spec = [jax.ShapeDtypeStruct(("B", 16), jnp.bfloat16)]
    onnx_model = to_onnx(model, spec)
    model.l2.bias.value = model.l2.bias.value + 0.25  # JAX's answer moves, the export does not
    report = verify(model, onnx_model, spec, sizes={"B": [8]})
    assert not report.ok and "as near JAX in float32" not in str(report), str(report)


def test_float16_policy_retypes_each_inlined_copy_of_a_function_on_its_own():
    # an inlined function body's copies shared their type objects: retyping the first GPT
    # block's Softmax to float32 retyped the second's, whose MatMul then read float32 beside
    # float16 (OpenVINO: "Arguments do not have the same element type", tract: "Failed analyse")
    model, specs, _ = _benchmark_in_bfloat16("gpt2_small")
    onnx_model = to_onnx(
        model,
        specs,
        precision="float16",
        io_dtype="float32",
        auto_functions=True,
        target="openvino",
    )
    graph = onnx_model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input]}
    types.update({t.name: t.data_type for t in graph.initializer})
    assert sum(n.op_type == "Softmax" for n in graph.node) == 2 and not onnx_model.functions
    for node in graph.node:
        if node.op_type in ("MatMul", "Gemm", "Add", "Mul"):
            assert len({types.get(name) for name in node.input}) == 1, (node.name, node.input)


def _boundary_casts(onnx_model):
    """(the Cast types the graph input is read through, the Cast types that make the output)."""
    graph = onnx_model.graph
    producers = {out: node for node in graph.node for out in node.output}

    def to(node):
        return next(a.i for a in node.attribute if a.name == "to")

    reads = [to(n) for n in graph.node if n.op_type == "Cast" and graph.input[0].name in n.input]
    chain, name = [], graph.output[0].name
    while name in producers and producers[name].op_type == "Cast":
        chain.append(to(producers[name]))
        name = producers[name].input[0]
    return reads, chain


def test_jmp_policy_params_float32_compute_bfloat16():
    jmp = pytest.importorskip("jmp")
    policy = jmp.get_policy("params=float32,compute=bfloat16,output=float32")
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (16, 32)) * 0.3,
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, 8)) * 0.3,
        "b2": jnp.ones(8),
    }

    def mlp(x):  # jmp's pattern: float32 params cast to the compute dtype at call time
        p, x = policy.cast_to_compute((params, x))
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return policy.cast_to_output(h @ p["w2"] + p["b2"])

    onnx_model = to_onnx(mlp, [("B", 16)])
    graph = onnx_model.graph
    assert [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]] == [1, 1]
    # the input rounded to bfloat16 at the boundary, the result rounded to bfloat16 and given
    # as float32, as JAX does; the arithmetic widened to float32 (onnxruntime has no bfloat16
    # MatMul, Add or Gelu)
    reads, chain = _boundary_casts(onnx_model)
    assert reads == [16] and chain[:2] == [1, 16], (reads, chain)
    assert _nodes(onnx_model) - Counter(Cast=99, Unsqueeze=99) == Counter(MatMul=2, Add=2, Gelu=1)
    # the output is float32 but holds bfloat16 values: compared at bfloat16's tolerance
    report = verify(mlp, onnx_model, [("B", 16)], sizes={"B": [1, 64]}, rtol=2**-6, atol=2**-6)
    assert report.ok, str(report)


def test_keras_mixed_float16_matches_keras_within_float16_epsilon():
    keras = pytest.importorskip("keras")
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        net = keras.Sequential(
            [
                keras.Input((16,)),
                keras.layers.Dense(32, activation="gelu"),
                keras.layers.LayerNormalization(),
                keras.layers.Dense(8),
            ]
        )
    finally:
        keras.mixed_precision.set_dtype_policy("float32")

    def fn(x):
        return net(x, training=False)

    onnx_model = to_onnx(fn, [("B", 16)])
    graph = onnx_model.graph
    # a mixed policy takes float32 and gives the compute dtype; variables stay float32
    assert [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]] == [1, 10]
    reads, _ = _boundary_casts(onnx_model)
    assert reads and set(reads) == {10}, reads  # the input cast to float16 once, as Keras does
    x = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
    (y,) = run_model(onnx_model, [x])
    expected = np.asarray(net(x, training=False))
    assert y.dtype == expected.dtype == np.float16
    eps = float(np.finfo(np.float16).eps)  # 2**-10
    scale = np.maximum(1.0, np.abs(expected.astype(np.float32)))
    assert (np.abs(y.astype(np.float32) - expected.astype(np.float32)) <= 2 * eps * scale).all()
    report = verify(fn, onnx_model, [("B", 16)], sizes={"B": [1, 64]})
    assert report.ok, str(report)
