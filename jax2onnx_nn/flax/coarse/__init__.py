"""Flax NNX layers and activations as coarse ONNX ops, one module per layer family.

Each layer has a handler and a rule. The handler sees one call (``module, *args, **kwargs``)
while an export runs and returns a :class:`CoarseCall` (which arrays play which role, the
static config) or ``NotApplicable`` for anything it does not model: an unknown keyword, a
subclass that overrides methods, a custom ``dot_general``, a padding mode, a mask... Those
calls run the original ``__call__`` and are lowered op by op, so they are never wrong. The
rule emits the coarse op, or returns ``NotApplicable`` (a dtype or opset it does not cover),
and then the traced original call is lowered in its place.
"""

from __future__ import annotations

import types
from typing import Any

from flax import nnx

from jax2onnx_nn.core.jax_nn.namespaces import namespace_patches, substitute
from jax2onnx_nn.core.patching import describe_module

# the families register their rules (and support-table rows) in this order
# isort: off
from jax2onnx_nn.flax.coarse import linear, conv, norms, rnn

# isort: on
from jax2onnx_nn.flax.coarse.common import MakeWrapper


def _sequential_wrapper(original: Any) -> Any:
    """nnx.Sequential holding activations captured before the export (``nnx.relu``): its call
    runs on a view whose layers are the patched functions, so they map to their coarse op."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        layers = list(getattr(self, "layers", None) or ())
        swapped = [substitute(f) for f in layers]
        if all(a is b for a, b in zip(swapped, layers, strict=True)):
            return original(self, *args, **kwargs)
        return original(types.SimpleNamespace(layers=swapped), *args, **kwargs)

    return call


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of every patch applied while an export runs.

    ``jax.nn`` itself is patched by ``core/jax_nn/`` in every export; here its re-exports in
    ``flax.nnx`` (``nnx.relu``, ``nnx.gelu``...) get the same patched functions.
    """
    return [
        *linear.patches(),
        *conv.patches(),
        *norms.patches(),
        *rnn.patches(),
        *namespace_patches(nnx),
        (nnx.Sequential, "__call__", _sequential_wrapper),
    ]


# modules without a coarse op of their own (for the support table)
describe_module("nnx.MultiHeadAttention", "its Linear layers, and jax.nn.dot_product_attention")
describe_module("nnx.Dropout", "(no node: identity in inference)")
describe_module("nnx.Sequential", "its layers")

__all__ = ["patches"]
