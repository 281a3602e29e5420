"""onnxruntime's rewrites (core/targets/onnxruntime_attention.py): self-attention on projections
of one input as one ``com.microsoft.Attention``, the guard against a batch or length of 0 gone,
with JAX's numbers at sizes 0 too."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from jax2onnx_nn import verify
from jax2onnx_nn.core.targets import onnxruntime_attention as packed
from jax2onnx_nn.core.targets.onnxruntime_layer_norm import layer_norm_on_rows
from tests.core.targets.rewrite_check import exported, op_counts

D, HEADS = 32, 4
_rng = np.random.default_rng(0)
W_QKV = (_rng.standard_normal((D, 3 * D)) / np.sqrt(D)).astype(np.float32)
B_QKV = _rng.standard_normal(3 * D).astype(np.float32)
REWRITES = (
    packed.packed_attention,
    packed.packed_onnx_attention,
    packed.packed_multi_head_attention,
)


def gpt_attention(x: jax.Array, *, causal: bool = True) -> jax.Array:
    """GPT-2's attention: one projection to q, k and v, split in three."""
    b, t, _ = x.shape
    q, k, v = jnp.split(x @ W_QKV + B_QKV, 3, axis=-1)
    heads = (b, t, HEADS, D // HEADS)
    y = jax.nn.dot_product_attention(
        q.reshape(heads), k.reshape(heads), v.reshape(heads), is_causal=causal
    )
    return jnp.tanh(y.reshape(b, t, D))


def vit_attention(x: jax.Array) -> jax.Array:
    """Three projections (``nnx.MultiHeadAttention``'s), the key without a bias."""
    b, t, _ = x.shape
    heads = (b, t, HEADS, D // HEADS)
    q = (x @ W_QKV[:, :D] + B_QKV[:D]).reshape(heads)
    k = (x @ W_QKV[:, D : 2 * D]).reshape(heads)
    v = (x @ W_QKV[:, 2 * D :] + B_QKV[2 * D :]).reshape(heads)
    return jax.nn.dot_product_attention(q, k, v).reshape(b, t, D)


def cross_attention(x: jax.Array, memory: jax.Array) -> jax.Array:
    """Keys and values from another input: not one packed projection."""
    b, t, _ = x.shape
    q = (x @ W_QKV[:, :D]).reshape(b, t, HEADS, D // HEADS)
    k = (memory @ W_QKV[:, D : 2 * D]).reshape(b, t, HEADS, D // HEADS)
    v = (memory @ W_QKV[:, 2 * D :]).reshape(b, t, HEADS, D // HEADS)
    return jax.nn.dot_product_attention(q, k, v).reshape(b, t, D)


SYMBOLIC = [(("B", "T", D), "float32")]
STATIC = [((2, 5, D), "float32")]
CASES: dict[str, tuple[Any, list[Any]]] = {
    "gpt": (gpt_attention, SYMBOLIC),
    "gpt_bidirectional": (lambda x: gpt_attention(x, causal=False), SYMBOLIC),
    "vit": (vit_attention, SYMBOLIC),
    "gpt_static": (gpt_attention, STATIC),
}


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("case", sorted(c for c in CASES if c.startswith(("vit", "gpt_bi"))))
def test_self_attention_is_one_packed_attention(case: str, opset: int) -> None:
    fn, specs = CASES[case]
    model = exported("onnxruntime", (), fn, specs, opset=opset)
    counts = op_counts(model.graph)
    packed_ops = [n for n in model.graph.node if n.domain == "com.microsoft"]
    assert [n.op_type for n in packed_ops] == ["Attention"], counts
    for op in ("If", "Split", "MultiHeadAttention", "MatMul"):
        assert counts[op] == 0, counts
    sizes = {} if specs is STATIC else {"B": [2, 0, 1, 3], "T": [7, 3, 0, 1]}
    report = verify(fn, model, specs, sizes=sizes, rtol=1e-5, atol=1e-5)
    assert report.ok, report


@pytest.mark.parametrize("opset", [21, 23])
@pytest.mark.parametrize("case", ["gpt", "gpt_static"])
def test_causal_self_attention_softmax_stays_on_the_fast_exp(case: str, opset: int) -> None:
    """Causal: one packed projection, then the softmax written out with its argument clamped
    at -87 (no fused kernel, no Softmax: both exponentiate the masked -inf logits on
    onnxruntime's slow path), the masked weights zeroed by a Trilu."""
    fn, specs = CASES[case]
    model = exported("onnxruntime", (), fn, specs, opset=opset)
    counts = op_counts(model.graph)
    assert [n.domain for n in model.graph.node if n.domain] == [], counts
    for op, count in {"MatMul": 3, "Split": 1, "Exp": 1, "Max": 1, "Trilu": 2}.items():
        assert counts[op] == count, counts
    for op in ("If", "Attention", "Softmax", "Where"):
        assert counts[op] == 0, counts
    (clamp,) = [n for n in model.graph.node if n.op_type == "Max"]
    floor = [i for i in model.graph.initializer if i.name == clamp.input[1]] + [
        n.attribute[0].t for n in model.graph.node if n.output[0] == clamp.input[1]
    ]
    assert [onnx.numpy_helper.to_array(f) for f in floor] == [np.float32(-87.0)]
    sizes = {} if specs is STATIC else {"B": [2, 0, 1, 3], "T": [7, 3, 0, 1]}
    report = verify(fn, model, specs, sizes=sizes, rtol=1e-5, atol=1e-5)
    assert report.ok, report


@pytest.mark.parametrize("opset", [21, 23])
def test_without_the_rewrite_the_attention_stays_guarded(opset: int) -> None:
    counts = op_counts(
        exported("onnxruntime", REWRITES, gpt_attention, SYMBOLIC, opset=opset).graph
    )
    assert counts["If"] == 1 and counts["MatMul"] == 1, counts


def test_cross_attention_is_left_alone() -> None:
    specs = SYMBOLIC * 2
    model = exported("onnxruntime", (), cross_attention, specs, opset=23)
    assert [n.op_type for n in model.graph.node if n.domain == "com.microsoft"] == []
    assert op_counts(model.graph)["Attention"] == 1
    assert verify(cross_attention, model, specs, sizes={"B": [2, 0], "T": [3, 2]}).ok


def test_causal_softmax_with_logits_far_apart_is_jax_s() -> None:
    """Logits hundreds apart in a row (the clamp at -87 reached by visible weights too):
    JAX's numbers, the masked weights exactly 0."""
    fn = lambda x: gpt_attention(40.0 * x)  # noqa: E731
    model = exported("onnxruntime", (), fn, SYMBOLIC, opset=21)
    assert op_counts(model.graph)["Trilu"] == 2
    report = verify(fn, model, SYMBOLIC, sizes={"B": [2], "T": [9]}, rtol=1e-5, atol=1e-5)
    assert report.ok, report


def _residual_norm() -> Any:
    """A residual sum and a LayerNorm over it (the sum read by nothing else)."""
    from flax import nnx

    class ResidualNorm(nnx.Module):
        def __init__(self) -> None:
            self.norm = nnx.LayerNorm(D, rngs=nnx.Rngs(0))
            self.norm.scale[...] = jnp.asarray(_rng.standard_normal(D), jnp.float32)
            self.norm.bias[...] = jnp.asarray(_rng.standard_normal(D), jnp.float32)

        def __call__(self, x: jax.Array, skip: jax.Array) -> jax.Array:
            return self.norm(x + skip)

    return ResidualNorm()


def _session_ops(model: onnx.ModelProto, tmp_path: Any) -> list[str]:
    """The op types of ``model`` after onnxruntime's default optimizations."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


@pytest.mark.parametrize("batch", ["B", 3])
def test_residual_layer_norm_stays_out_of_skip_layer_normalization(
    batch: Any, tmp_path: Any
) -> None:
    specs = [((batch, 6, D), "float32")] * 2
    fn = _residual_norm()
    model = exported("onnxruntime", (), fn, specs)
    ops = _session_ops(model, tmp_path)
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") == 1, ops
    sizes = {"B": [2, 0, 1]} if batch == "B" else {}
    report = verify(fn, model, specs, sizes=sizes, rtol=1e-5, atol=1e-5)
    assert report.ok, report
    without = exported("onnxruntime", (layer_norm_on_rows,), fn, specs)
    assert "SkipLayerNormalization" in _session_ops(without, tmp_path)
