"""core/layers/conv.py: Conv pads from padding specs, ConvTranspose pads and kernels, through
the lax rule and both adapters (compared with JAX in onnxruntime)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from jax import lax

from jax2onnx_nn.core.layers.conv import (
    conv_pads,
    conv_transpose_padding,
    conv_transpose_pads,
    padding_pairs,
)
from jax2onnx_nn.testing import assert_exports_match_on
from jax2onnx_nn.testing.assertions import op_types
from tests.flax.helpers import assert_module_matches

# output_padding is the end padding past the kernel's reach: kernel 2 with dilation 3 reaches
# 3 positions, so an end pad of 3 + extra leaves ``extra`` outputs that no input reaches.
# onnxruntime takes output_padding < stride only, also where the dilation is larger: extra 2
# with stride 2 and dilation 3 (between the two limits the copies had) goes to the Conv path.
STRIDE, DILATION, KERNEL = 2, 3, 2


@pytest.mark.parametrize("extra", [0, 1, 2])
def test_lax_conv_transpose_output_padding_up_to_the_dilation(extra: int) -> None:
    rng = np.random.default_rng(extra)
    x, w = (
        rng.normal(size=(1, 2, 5)).astype(np.float32),
        rng.normal(size=(3, 2, KERNEL)).astype(np.float32),
    )

    def fn(a: jax.Array, b: jax.Array) -> jax.Array:
        return lax.conv_transpose(
            a,
            b,
            (STRIDE,),
            [(0, 3 + extra)],
            rhs_dilation=(DILATION,),
            dimension_numbers=("NCH", "OIH", "NCH"),
        )

    model = assert_exports_match_on(fn, x, w)
    assert ("ConvTranspose" in op_types(model)) == (extra < STRIDE)


@pytest.mark.parametrize("extra", [0, 1, 2])
def test_flax_conv_transpose_output_padding_up_to_the_dilation(extra: int) -> None:
    layer = nnx.ConvTranspose(
        2,
        3,
        (KERNEL,),
        strides=STRIDE,
        kernel_dilation=DILATION,
        padding=((0, 3 + extra),),
        rngs=nnx.Rngs(0),
    )
    model = assert_module_matches(layer, [(2, 5, 2)])
    assert ("ConvTranspose" in op_types(model)) == (extra < STRIDE)


def test_conv_pads_of_padding_specs() -> None:
    assert conv_pads("VALID", (5, 5), (3, 3), (1, 1), (1, 1)) == (0, 0, 0, 0)
    assert conv_pads("SAME", (5, 6), (3, 2), (1, 2), (1, 1)) == (1, 0, 1, 0)
    assert conv_pads("SAME_LOWER", jax.export.symbolic_shape("H"), (3,), (1,), (1,)) == "SAME_LOWER"
    assert conv_pads(1, (5,), (3,), (1,), (1,)) == (1, 1)
    assert conv_pads([(1, 2), 3], (5, 5), (3, 3), (1, 1), (1, 1)) == (1, 3, 2, 3)
    assert conv_pads("CIRCULAR", (5,), (3,), (1,), (1,)) is None
    assert conv_pads([(-1, 0)], (5,), (3,), (1,), (1,)) is None
    assert padding_pairs(True, 1) is None


@pytest.mark.parametrize(("k", "s", "d"), [(3, 2, 1), (4, 3, 2), (1, 1, 1), (2, 3, 1)])
def test_conv_transpose_padding_gives_lax_output_sizes(k: int, s: int, d: int) -> None:
    """SAME gives n * s outputs, VALID n * s + max(K - s, 0) (K the dilated kernel), as lax."""
    n, dilated = 4, (k - 1) * d + 1
    for padding, expected in (("SAME", n * s), ("VALID", n * s + max(dilated - s, 0))):
        ((lo, hi),) = conv_transpose_padding(padding, (k,), (s,), (d,))
        assert (n - 1) * s + 1 + lo + hi - dilated + 1 == expected
        assert conv_transpose_pads([(lo, hi)], (k,), (s,), (d,)) is not None
    assert conv_transpose_pads([(4, 0)], (2,), (1,), (1,)) is None  # a negative begin pad
