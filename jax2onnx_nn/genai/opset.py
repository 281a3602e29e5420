"""The opset a decoder is exported at by default: the newest at which the target runs ONNX
``Attention`` with a kernel of its own.

The package's default opset (21) predates ``Attention`` (23), ``RotaryEmbedding`` (23) and
``RMSNormalization`` (23), so a decoder exported at it keeps attention, the rotary embedding and
the norms written out. onnxruntime 1.32 runs ``Attention`` with its kernel at opsets 23 and 24
and onnxruntime-genai 0.18 loads both; from opset 25 onnxruntime runs ``Attention`` as its
function body. So :func:`~jax2onnx_nn.genai.export_decoder` exports at 24 for onnxruntime (and
onnxruntime-web, whose profile says the same), and at the package default for a target whose
profile names no ``Attention`` kernel.
"""

from __future__ import annotations

from typing import Any

from jax2onnx_nn.core.config import MAX_OPSET
from jax2onnx_nn.core.targets import get_target


def decoder_opset(target: Any = None) -> int | None:
    """The newest opset at which ``target`` (a name or profile; None: onnxruntime) runs ONNX
    ``Attention`` with its own kernel, within the opsets it and the installed onnx load; None
    (the package default) where its profile names no such kernel."""
    profile = get_target(target)
    kernel = profile.kernel_opsets.get("Attention")
    if kernel is None or not profile.runs("Attention"):
        return None
    newest = min(kernel[1], MAX_OPSET, profile.max_opset or MAX_OPSET)
    return newest if newest >= kernel[0] else None
