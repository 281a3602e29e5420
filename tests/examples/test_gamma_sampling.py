"""The probabilistic example: Gamma posterior samples drawn with jax.random.gamma inside the
exported function equal JAX's for the same key (one batch size per run: one JAX compilation)."""

import sys
from pathlib import Path

import jax
import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import to_onnx, verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.gamma_sampling import COUNTS, KEY, NUM_SAMPLES, posterior_rates


@pytest.fixture(scope="module")
def model():
    return to_onnx(posterior_rates, [KEY, COUNTS])


def test_graph_keeps_the_rejection_loop_and_symbolic_batch(model):
    assert model.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "B"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "B"
    ops = {n.op_type for n in model.graph.node}
    assert "Loop" in ops and not any(
        op.startswith("Random") for op in ops
    )  # JAX's bits, not ONNX's
    onnx.checker.check_model(model)


@given(
    seed=st.integers(0, 2**32 - 1),
    counts=hnp.arrays(np.int64, (3, 12), elements=st.integers(0, 50)),
)
def test_samples_match_jax(model, seed, counts):
    key_data = np.asarray(jax.random.key_data(jax.random.key(seed)))
    counts = counts.astype(np.float32)
    verify(
        posterior_rates, model, [KEY, COUNTS], input_values=[key_data, counts], jit=True
    ).raise_if_failed()
    samples, _ = posterior_rates(key_data, counts)
    assert samples.shape == (counts.shape[0], NUM_SAMPLES)
