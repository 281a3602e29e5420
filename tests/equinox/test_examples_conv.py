"""The convolutional Equinox examples (U-Net score network, DCGAN) match JAX through
onnxruntime, and each of their layers is one coarse ONNX op over the symbolic batch."""

from __future__ import annotations

from collections import Counter
from typing import Any

import equinox as eqx
import jax
import onnx
import pytest

from examples import eqx_dcgan, eqx_unet
from jax2onnx_nn import verify
from tests.equinox.helpers import assert_module_matches, initializer_names, node_ops

SIZES = {"B": [1, 3]}

# What the lax path of the layers leaves behind: norms as reductions and arithmetic, convs
# with their kernels flipped / transposed by nodes and the example dim squeezed around them.
DECOMPOSITIONS = frozenset(
    {
        "ReduceMean",
        "ReduceSum",
        "ReduceSumSquare",
        "Sqrt",
        "Div",
        "Pow",
        "Slice",
        "Transpose",
        "Squeeze",
        "Expand",
        "Pad",
    }
)


def _count(module: Any, cls: type) -> int:
    """How many ``cls`` layers ``module`` holds (each should be one ONNX node)."""
    leaves = jax.tree_util.tree_leaves(module, is_leaf=lambda x: isinstance(x, cls))
    return sum(isinstance(leaf, cls) for leaf in leaves)


def _first_dims(model: onnx.ModelProto, op_types: set[str]) -> set[str]:
    """The leading dim (its name, or its size as text) of every output of nodes of ``op_types``,
    after ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {
        v.name: v.type.tensor_type for v in (*inferred.graph.value_info, *inferred.graph.output)
    }
    dims = set()
    for node in inferred.graph.node:
        if node.op_type in op_types:
            for name in node.output:
                dim = types[name].shape.dim[0]
                dims.add(dim.dim_param or str(dim.dim_value))
    return dims


def _check(reference: Any, model: onnx.ModelProto, specs: list[Any]) -> None:
    onnx.checker.check_model(model, full_check=True)
    verify(reference, model, specs, sizes=SIZES, jit=True).raise_if_failed()


def _batch_dims(values: Any) -> list[str]:
    return [v.type.tensor_type.shape.dim[0].dim_param for v in values]


def test_unet_layers_are_coarse_ops(tmp_path: Any) -> None:
    model = eqx_unet.main(str(tmp_path / "unet.onnx"))
    unet = eqx_unet.build()
    shape = (eqx_unet.CHANNELS, eqx_unet.SIZE, eqx_unet.SIZE)
    _check(eqx_unet.reference(unet), model, [("B",), ("B", *shape)])

    counts = Counter(node_ops(model))
    assert counts["Conv"] == _count(unet, eqx.nn.Conv2d) == 10
    assert counts["ConvTranspose"] == _count(unet, eqx.nn.ConvTranspose2d) == 1
    assert counts["GroupNormalization"] == _count(unet, eqx.nn.GroupNorm) == 7
    assert counts["Gemm"] == _count(unet, eqx.nn.Linear) == 5  # the time MLP and one per block
    assert not DECOMPOSITIONS & set(counts), counts
    assert {
        "upsample/ConvTranspose",
        "down_block/norm1/GroupNormalization",
        "up_block/skip/Conv",
    } <= {n.name for n in model.graph.node}
    # both t (float[B]) and y (float[B, 1, 16, 16]) are batched, and every layer keeps "B"
    assert _batch_dims(model.graph.input) == ["B", "B"] and _batch_dims(model.graph.output) == ["B"]
    assert _first_dims(
        model, {"Conv", "ConvTranspose", "GroupNormalization", "Gemm", "Concat"}
    ) == {"B"}


def test_dcgan_generator_and_discriminator_with_batch_norm_state(tmp_path: Any) -> None:
    g_model, d_model = eqx_dcgan.main(
        str(tmp_path / "generator.onnx"), str(tmp_path / "discriminator.onnx")
    )
    generator, g_state, discriminator, d_state = eqx_dcgan.build()
    image = (eqx_dcgan.CHANNELS, eqx_dcgan.SIZE, eqx_dcgan.SIZE)
    _check(eqx_dcgan.reference(generator, g_state), g_model, [("B", eqx_dcgan.LATENT)])
    _check(eqx_dcgan.reference(discriminator, d_state), d_model, [("B", *image)])

    g_counts, d_counts = Counter(node_ops(g_model)), Counter(node_ops(d_model))
    assert (
        g_counts["ConvTranspose"] == 3
        and g_counts["BatchNormalization"] == 2
        and g_counts["Tanh"] == 1
    )
    assert (
        d_counts["Conv"] == 3 and d_counts["BatchNormalization"] == 1 and d_counts["Sigmoid"] == 1
    )
    assert "Conv" not in g_counts and "ConvTranspose" not in d_counts
    for counts in (g_counts, d_counts):
        assert not DECOMPOSITIONS & set(counts), counts
    # the running statistics of the state are weights, named by the layer that keeps them
    assert {
        "layers.layers.1.ema_state_index.mean",
        "layers.layers.4.ema_state_index.var",
    } <= initializer_names(g_model)
    assert {
        "layers.layers.3.ema_state_index.mean",
        "layers.layers.3.ema_state_index.var",
    } <= initializer_names(d_model)
    for model in (g_model, d_model):
        assert _batch_dims(model.graph.input) == ["B"] and _batch_dims(model.graph.output) == ["B"]
        assert _first_dims(model, {"Conv", "ConvTranspose", "BatchNormalization"}) == {"B"}


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_group_norm_of_feature_vectors_is_one_op(groups: int) -> None:
    """GroupNorm of (channels,) with no spatial dims: ONNX GroupNormalization takes (N, C)."""
    keys = jax.random.split(jax.random.key(groups))
    norm = eqx.nn.GroupNorm(groups, 8)
    norm = eqx.tree_at(
        lambda n: (n.weight, n.bias),
        norm,
        (jax.random.normal(keys[0], (8,)), jax.random.normal(keys[1], (8,))),
    )
    model = assert_module_matches(norm, [(8,)], batch=True, sizes=SIZES)
    assert node_ops(model) == ["GroupNormalization"]
    assert node_ops(assert_module_matches(norm, [(8,)])) == [
        "Unsqueeze",
        "GroupNormalization",
        "Squeeze",
    ]
