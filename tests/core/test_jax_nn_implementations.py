"""jax.nn.dot_product_attention's accelerator switches export as the same ONNX attention."""

import jax
import numpy as np
import onnx
import pytest

from jax2onnx_nn import to_onnx
from jax2onnx_nn.testing.roundtrip import roundtrip


def attention(implementation):
    def fn(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)

    return fn


SHAPES = [(2, 5, 4, 8), (2, 5, 2, 8), (2, 5, 2, 8)]


@pytest.mark.parametrize("implementation", ["xla", "cudnn"])
@pytest.mark.parametrize("opset", [18, 23])
def test_implementations_export_as_the_portable_attention(implementation, opset):
    portable = to_onnx(attention(None), SHAPES, opset=opset)
    model = to_onnx(attention(implementation), SHAPES, opset=opset)
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in portable.graph.node]
    assert ("Attention" in [n.op_type for n in model.graph.node]) == (opset >= 23)
    # JAX has no cudnn on this host ("cuDNN is not detected"): the reference is the portable call
    result = roundtrip(
        attention(implementation), SHAPES, onnx_model=model, reference=attention(None)
    )
    result.raise_if_failed()
    onnx.checker.check_model(model)


def test_cudnn_without_a_gpu_fails_in_jax_itself():
    """What the export spares the user: JAX refuses the call before any op is traced."""
    q = np.ones((1, 4, 2, 8), np.float32)
    with pytest.raises(RuntimeError, match="cuDNN"):
        jax.make_jaxpr(attention("cudnn"))(q, q, q)
