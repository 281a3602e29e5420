"""Every opset from 13 to the newest one onnx and onnxruntime know: model families exported at
each and run in onnxruntime against JAX, and the older op forms (core/opset_forms.py) checked
one by one where they are written.

By default each family runs at 13, the 17/18 boundary (DFT, LayerNormalization; reductions'
axes and bitwise ops), 23 (RMSNormalization, Attention), the newest opset and one more that
rotates with the family; ``--run-slow`` runs every family at every opset.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.config import MAX_OPSET, MIN_OPSET, ExportConfig, ir_version, newest_opset
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on

OPSETS = list(range(MIN_OPSET, MAX_OPSET + 1))
_RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return (_RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _layer_norm(x: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)


W1, B1, W2 = _w(6, 16), _w(16), _w(16, 3)


def mlp(x: jax.Array) -> jax.Array:
    h = _layer_norm(jax.nn.gelu(x @ W1 + B1))
    return jax.nn.softmax(jax.nn.hard_swish(h) @ W2)


KERNEL = _w(3, 3, 2, 4)


def cnn(x: jax.Array) -> jax.Array:
    y = lax.conv_general_dilated(
        x, KERNEL, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    y = jax.nn.relu(y)
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return y.mean(axis=(1, 2))


WQ, WK, WV, WO = _w(8, 8), _w(8, 8), _w(8, 8), _w(8, 8)


def transformer(x: jax.Array) -> jax.Array:
    b, t, _ = x.shape
    q, k, v = ((x @ w).reshape(b, t, 2, 4) for w in (WQ, WK, WV))
    attended = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, 8)
    h = _layer_norm(x + attended @ WO)
    return _layer_norm(h + jax.nn.gelu(h @ WQ, approximate=False))


WX, WH = _w(3, 12), _w(4, 12)


def rnn_scan(xs: jax.Array) -> jax.Array:
    def cell(h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        z, r, n = jnp.split(x @ WX, 3, axis=-1)
        hz, hr, hn = jnp.split(h @ WH, 3, axis=-1)
        z, r = jax.nn.sigmoid(z + hz), jax.nn.sigmoid(r + hr)
        h = (1 - z) * jnp.tanh(n + r * hn) + z * h
        return h, h

    last, seq = lax.scan(cell, jnp.zeros((xs.shape[1], 4), xs.dtype), xs)
    return last + seq.sum(0)


def while_loop(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Newton's square root until it settles (a data-dependent trip count)."""
    a = jnp.abs(x) + 1.0

    def step(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        i, y = state
        return i + 1, 0.5 * (y + a / y)

    return lax.while_loop(
        lambda s: (s[0] < 20) & jnp.any(jnp.abs(s[1] * s[1] - a) > 1e-5 * a), step, (0, a)
    )


def random(seed: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
    key = jax.random.key(seed)
    k1, k2, k3 = jax.random.split(key, 3)
    noise = jax.random.normal(k1, x.shape)
    return (
        x + noise,
        jax.random.uniform(k2, (5,)),
        jax.random.bernoulli(k3, 0.3, (7,)),
        jax.random.randint(key, (4,), 0, 10),
    )


def scatter(x: jax.Array, i: jax.Array, u: jax.Array) -> tuple[jax.Array, ...]:
    return x.at[i].add(u), x.at[i].max(u), x.at[i].min(u), x.at[i].mul(u), x.at[i].set(u)


_SCATTER_VALUES = [
    np.array([0.0, -1.0, 2.5, np.inf, -0.0, 4.0], np.float32),
    np.array([1, 1, 3, 5, 0, 1], np.int32),  # repeated indices combine in order
    np.array([2.0, 3.0, -np.inf, 7.0, 0.0, -2.0], np.float32),
]

FAMILIES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "mlp": (mlp, {"inputs": [("B", 6)], "sizes": {"B": [1, 3]}}),
    "cnn": (cnn, {"inputs": [("B", 6, 6, 2)], "sizes": {"B": [2]}}),
    "transformer": (
        transformer,
        {"inputs": [("B", 5, 8)], "sizes": {"B": [2]}, "rtol": 1e-4, "atol": 1e-5},
    ),
    "rnn_scan": (rnn_scan, {"inputs": [(6, 2, 3)]}),
    "while_loop": (while_loop, {"inputs": [(4,)]}),
    "random": (
        random,
        {
            "inputs": [((), np.uint32), (3, 4)],
            "input_values": [np.uint32(7), np.ones((3, 4), np.float32)],
        },
    ),
    "scatter": (
        scatter,
        {"inputs": [(6,), ((6,), np.int32), (6,)], "input_values": _SCATTER_VALUES},
    ),
}


BOUNDARIES = sorted({MIN_OPSET, 17, 18, 23, MAX_OPSET})


def _default_opsets(index: int) -> list[int]:
    between = [o for o in OPSETS if o not in BOUNDARIES]
    return sorted({*BOUNDARIES, between[index % len(between)]})


def _cases() -> list[Any]:
    cases = []
    for index, name in enumerate(FAMILIES):
        default = _default_opsets(index)
        for opset in OPSETS:
            marks = () if opset in default else (pytest.mark.slow,)
            cases.append(pytest.param(name, opset, marks=marks, id=f"{name}-{opset}"))
    return cases


@pytest.mark.parametrize(("family", "opset"), _cases())
def test_family_matches_jax_at_every_opset(family: str, opset: int) -> None:
    fn, options = FAMILIES[family]
    options = dict(options)
    model = assert_exports_match(fn, options.pop("inputs"), opset=opset, **options)
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    assert model.ir_version == ir_version(opset)
    for node in model.graph.node:  # (the checker checks the bodies too)
        if node.domain not in ("", "ai.onnx"):  # a target's own ops (com.microsoft): their domain
            assert node.domain in {o.domain for o in model.opset_import}, node.domain
            continue
        assert onnx.defs.get_schema(node.op_type, opset).since_version <= opset


# -- the range ----------------------------------------------------------------------------------


def test_newest_opset_is_what_onnx_and_onnxruntime_both_know() -> None:
    expected = onnx.defs.onnx_opset_version()
    if importlib.util.find_spec("onnxruntime") is not None:
        from onnxruntime.capi import _pybind_state

        schemas = _pybind_state.get_all_operator_schema()
        expected = min(
            expected, max(s.since_version for s in schemas if s.domain in ("", "ai.onnx"))
        )
    assert MAX_OPSET == newest_opset() == expected >= 21
    assert MIN_OPSET == 13


@pytest.mark.parametrize("opset", [MIN_OPSET - 1, MAX_OPSET + 1, 7])
def test_an_opset_outside_the_range_names_the_range(opset: int) -> None:
    with pytest.raises(ValueError, match=f"between {MIN_OPSET} and {MAX_OPSET}.*got {opset}"):
        ExportConfig(opset=opset)


def test_an_op_the_opset_lacks_is_named_with_the_source_line() -> None:
    # a user's rule writing Gelu (opset 20) at opset 16; the built-in rules write older forms
    def gelu_op(ctx: Any, x: Any, **params: Any) -> Any:
        del params  # tanh's (accuracy): not modelled by this test rule
        return ctx.op.Gelu(x)

    with pytest.raises(
        ConversionError, match=r"(?s)opset 16 does not define Gelu .*test_opsets.py:\d+"
    ):
        to_onnx(lambda x: jnp.tanh(x) + 1, [("N",)], opset=16, lowerings={"tanh": gelu_op})
    assert_exports_match(
        lambda x: jnp.fft.fft(x).imag,
        [("N",)],
        sizes={"N": [1, 64]},
        opset=16,
        rtol=1e-4,
        atol=1e-4,
    )


# -- the older forms, one by one ----------------------------------------------------------------

_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@given(dtype=st.sampled_from(_INTS), data=st.data())
def test_bitwise_ops_below_opset_18_are_exact(dtype: Any, data: st.DataObject) -> None:
    info = np.iinfo(dtype)
    values = st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=6)
    a = np.array(data.draw(values), dtype)
    b = np.array(
        data.draw(
            st.lists(
                st.sampled_from([int(info.min), int(info.max), 0, -1 if info.min else 1, 85]),
                min_size=len(a),
                max_size=len(a),
            )
        ),
        dtype,
    )
    assert_exports_match_on(lambda a, b: (a & b, a | b, a ^ b, ~a), a, b, opset=MIN_OPSET)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_small_int_arithmetic_before_opset_14_wraps_as_in_jax(dtype: Any) -> None:
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 3, 100], dtype)
    b = np.array([1, -1 if info.min else 1, 7, 3], dtype)
    assert_exports_match_on(
        lambda a, b: (a + b, a - b, a * b, a // jnp.maximum(b, 1)), a, b, opset=13
    )


def test_int_relu_and_hard_swish_before_opset_14() -> None:
    model = assert_exports_match_on(
        lambda x, y: (jax.nn.relu(x), jax.nn.hard_swish(y)),
        np.array([-3, 0, 5], np.int32),
        np.linspace(-4, 4, 9, dtype=np.float32),
        opset=13,
    )
    assert not {"Relu", "HardSwish"} & {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("opset", [13, 14])
def test_size_zero_reshapes_below_opset_14(opset: int) -> None:
    # allowzero: a 0 in a computed shape (B = 0) is a size-0 dim at every opset
    assert_exports_match(
        lambda x: (x.reshape(x.shape[0], 2, 3), x.reshape(-1)),
        [("B", 6)],
        sizes={"B": [0, 1, 3]},
        opset=opset,
    )
    assert_exports_match(lambda x: x.reshape(0, 4), [(0, 2, 2)], opset=opset)


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_reductions_take_axes_as_the_opset_wants(opset: int) -> None:
    x = _RNG.standard_normal((3, 4, 2)).astype(np.float32)
    model = assert_exports_match_on(
        lambda x: (x.max(1), x.min((0, 2)), x.prod(-1), (x > 0).any(0), x.sum(1)), x, opset=opset
    )
    for node in model.graph.node:
        if node.op_type in ("ReduceMax", "ReduceMin", "ReduceProd"):
            assert ("axes" in {a.name for a in node.attribute}) == (opset < 18)


@pytest.mark.parametrize("opset", [13, 16])
def test_scatter_reductions_below_their_opset_are_a_loop(opset: int) -> None:
    model = assert_exports_match_on(scatter, *_SCATTER_VALUES, opset=opset)
    scatters = [n for n in model.graph.node if n.op_type == "ScatterND"]
    reductions = {a.s.decode() for n in scatters for a in n.attribute if a.name == "reduction"}
    assert reductions <= ({"none"} if opset < 16 else {"none", "add", "mul"})
    assert "Loop" in {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("opset", [13, 16, MAX_OPSET])
def test_layers_below_their_op_are_their_jax_body(opset: int) -> None:
    x = _RNG.standard_normal((2, 6)).astype(np.float32)
    model = assert_exports_match_on(
        lambda x: (jax.nn.gelu(x), jax.nn.mish(x), jax.nn.gelu(x, approximate=False)),
        x,
        opset=opset,
    )
    ops = {n.op_type for n in model.graph.node}
    assert ("Gelu" in ops) == (opset >= 20) and ("Mish" in ops) == (opset >= 18)


# -- other runtimes at the oldest and their newest opset ----------------------------------------

_RUNTIME_FAMILIES = ("mlp", "rnn_scan", "random", "scatter")


def _runtime_cases() -> list[Any]:
    from jax2onnx_nn.core.runtimes import missing_reason
    from jax2onnx_nn.core.targets import get_target

    cases = []
    for runtime in ("openvino", "tract", "onnxruntime-web"):
        reason = missing_reason(runtime)
        newest = min(MAX_OPSET, get_target(runtime).max_opset or MAX_OPSET)
        for family in _RUNTIME_FAMILIES:
            for opset in (MIN_OPSET, newest):
                marks = [pytest.mark.skipif(reason is not None, reason=str(reason))]
                if family != "mlp":
                    marks.append(pytest.mark.slow)
                cases.append(
                    pytest.param(
                        runtime, family, opset, marks=marks, id=f"{runtime}-{family}-{opset}"
                    )
                )
    return cases


@pytest.mark.parametrize(("runtime", "family", "opset"), _runtime_cases())
def test_family_runs_on_other_runtimes(runtime: str, family: str, opset: int) -> None:
    from jax2onnx_nn import verify

    fn, options = FAMILIES[family]
    options = dict(options)
    inputs = options.pop("inputs")
    model = to_onnx(fn, inputs, opset=opset, target=runtime)
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    report = verify(fn, model, inputs, runtime=runtime, **options)
    report.raise_if_failed()


@pytest.mark.parametrize(
    ("target", "newest"), [("onnxruntime-web", 26), ("openvino", 25), ("tract", 25)]
)
def test_target_profiles_stop_at_the_opset_they_run(target: str, newest: int) -> None:
    # onnxruntime-web 1.30 refuses opset 27; OpenVINO and tract have no BitCast (26)
    assert to_onnx(jnp.sin, [(2,)], target=target).opset_import[0].version == min(21, newest)
    with pytest.raises(ValueError, match=f"between 13 and {newest} for target {target}"):
        to_onnx(jnp.sin, [(2,)], opset=newest + 1, target=target)
