"""The Flax example models, exported and compared with JAX through onnxruntime."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flax")

from flax import nnx

from examples import flax_cnn, flax_gpt2, flax_mlp, flax_mlp_functions
from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.core.functions import DOMAIN
from jax2onnx_nn.flax import mode_copy


def _node_count(model) -> int:
    return len(model.graph.node) + sum(len(f.node) for f in model.functions)


def test_readme_mlp(tmp_path: Path) -> None:
    model = flax_mlp.main(str(tmp_path / "mlp.onnx"))
    assert [n.op_type for n in model.graph.node] == ["Gemm", "BatchNormalization", "Gelu", "Gemm"]
    assert (tmp_path / "mlp.onnx").exists()


def test_readme_functions(tmp_path: Path) -> None:
    model = flax_mlp_functions.main(str(tmp_path / "model_with_function.onnx"))
    assert [f.name for f in model.functions] == ["MLPBlock"]
    assert [n.op_type for n in model.graph.node if n.domain == DOMAIN] == ["MLPBlock", "MLPBlock"]


def test_cnn() -> None:
    module = flax_cnn.CNN(rngs=nnx.Rngs(0))
    model = to_onnx(module, flax_cnn.IMAGES)
    verify(
        mode_copy(module), model, flax_cnn.IMAGES, sizes={"B": [1, 5]}, jit=True
    ).raise_if_failed()
    ops = [n.op_type for n in model.graph.node]
    assert (
        ops.count("Conv") == 2
        and ops.count("BatchNormalization") == 2
        and ops.count("AveragePool") == 2
    )
    # in and out of channels-first once; in, with one channel, is a Reshape
    # (passes.relabel_transposes)
    assert ops[0] == "Reshape" and ops.count("Transpose") == 1
    assert len(ops) < len(to_onnx(module, flax_cnn.IMAGES, coarse_ops=False).graph.node)


@pytest.mark.parametrize("tied_head", [True, False])
def test_gpt2_small(tied_head: bool) -> None:
    config = flax_gpt2.GPTConfig.small(tied_head=tied_head)
    module = flax_gpt2.GPT(config, rngs=nnx.Rngs(0))
    sizes = {"B": [1, 3], "T": [config.block_size, 5]}
    model = to_onnx(module, flax_gpt2.TOKENS, auto_functions=True)
    verify(mode_copy(module), model, flax_gpt2.TOKENS, sizes=sizes, jit=True).raise_if_failed()
    assert sorted(f.name for f in model.functions) == ["Block", "CausalSelfAttention", "MLP"]
    assert [n.op_type for n in model.graph.node if n.domain == DOMAIN] == ["Block"] * config.n_layer
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["B", "T"]
    plain = to_onnx(module, flax_gpt2.TOKENS)
    lax_level = to_onnx(module, flax_gpt2.TOKENS, coarse_ops=False)
    verify(mode_copy(module), lax_level, flax_gpt2.TOKENS, sizes=sizes, jit=True).raise_if_failed()
    assert _node_count(model) < len(plain.graph.node) < len(lax_level.graph.node) / 2


@pytest.mark.slow
def test_gpt2_124m() -> None:
    module = flax_gpt2.GPT(flax_gpt2.GPTConfig.gpt2(), rngs=nnx.Rngs(0))
    start = time.perf_counter()
    model = to_onnx(module, flax_gpt2.TOKENS, auto_functions=True)
    export_seconds = time.perf_counter() - start
    assert sorted(f.name for f in model.functions) == ["Block", "CausalSelfAttention", "MLP"]
    report = verify(
        mode_copy(module),
        model,
        flax_gpt2.TOKENS,
        sizes={"B": [1, 2], "T": [64, 17]},
        rtol=1e-4,
        atol=1e-4,
        jit=True,
    )
    report.raise_if_failed()
    lax_level = to_onnx(module, flax_gpt2.TOKENS, coarse_ops=False)
    assert _node_count(model) < len(lax_level.graph.node) / 5
    assert export_seconds < 120
    assert np.isfinite(report.max_abs)
