"""Node counts of the Llama-style decode step of ``tests/genai/models.py`` (2 layers, GQA,
RoPE, RMSNorm, SwiGLU, a fixed-size cache written with ``dynamic_update_slice``) exported by
``jax2onnx_nn.genai.export_decoder``: the main graph's nodes at each opset, per layer (a 1-
and a 2-layer export, differenced) and outside the layers, and the op census::

    python3 -m benchmarks.genai_nodes            # opsets 21, 23, 24
    python3 -m benchmarks.genai_nodes 24         # one opset

``tests/genai/test_graph.py`` holds the budget these figures must stay within.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
from pathlib import Path

import onnx

# (beside each other, the test models are imported as tests.genai.models)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flax import nnx  # noqa: E402

from jax2onnx_nn.genai import CacheSpec, export_decoder  # noqa: E402
from tests.genai.models import Llama  # noqa: E402


def llama_graph(layers: int, opset: int) -> onnx.GraphProto:
    """The exported main graph of the test Llama (d=64, 4 heads, 2 kv heads) at ``opset``."""
    model = Llama(rngs=nnx.Rngs(0), layers=layers)
    cache = CacheSpec(num_layers=layers, kv_heads=2, head_dim=16, max_length=64)
    with tempfile.TemporaryDirectory() as folder:
        export_decoder(model, folder, cache=cache, num_heads=4, eos_token_id=96, pad_token_id=0,
                       opset=opset)  # fmt: skip
        return onnx.load(str(Path(folder) / "model.onnx")).graph


def main(argv: list[str]) -> None:
    for opset in [int(a) for a in argv] or [21, 23, 24]:
        one, two = (llama_graph(layers, opset) for layers in (1, 2))
        n1, n2 = len(one.node), len(two.node)
        ops = collections.Counter(node.op_type for node in two.node)
        print(f"opset {opset}: 2 layers {n2} nodes; {n2 - n1} per layer, {2 * n1 - n2} outside")
        print("   ", ", ".join(f"{op} {n}" for op, n in ops.most_common()))


if __name__ == "__main__":
    main(sys.argv[1:])
