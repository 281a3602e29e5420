"""OpenVINO's rewrites: each model runs on OpenVINO and matches JAX with the rewrite, not
without it.

Rewrites whose direct case also matched without them on OpenVINO 2026.4 (each docstring says so):
nan_propagating_max_min, greater_as_less, reduce_extremes_of_infinities,
float_to_uint32_via_int32, int32_extremes_on_halves, integer_sum_as_cumsum,
integer_matmul_as_cumsum, dft_on_axis_one, real_dft_reshaped."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core.targets import openvino
from tests.core.targets.rewrite_check import assert_needed, needs

pytestmark = needs("openvino")


def test_expand_after_arithmetic() -> None:
    assert_needed(
        "openvino",
        openvino.expand_after_arithmetic,
        lambda x: jnp.zeros((x.shape[0], 4)) + 0.5,
        [("B", 4)],
        [np.zeros((0, 4), np.float32)],
    )
