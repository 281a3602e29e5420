"""Equinox layers as coarse ONNX ops, one module per layer family.

Each layer has a handler and a rule. The handler sees one call (``module, *args, **kwargs``)
while an export runs and returns a :class:`CoarseCall` (which arrays play which role, the
static config) or ``NotApplicable`` for anything it does not model: a subclass overriding a
method, mixed dtypes, a padding mode, training-mode dropout... Those calls run the original
``__call__`` and are lowered op by op, so they are never wrong. The rule emits the coarse op,
or returns ``NotApplicable`` (a dtype, rank or opset it does not cover), and then the traced
original call is lowered in its place.

Equinox layers work on one example; batches come from ``jax.vmap``. The primitives here are
re-bound under vmap (``jxi.rebind_under_vmap``), so a rule sees the vmapped operands with the
batch dims in front, and ``vmap_levels`` says which operand carries which of them:
``jax.vmap(linear)`` over ``("B", 784)`` is one Gemm with the batch dim kept symbolic.
"""

from __future__ import annotations

from typing import Any

from jax2onnx_nn.core.patching import describe_module

# the families register their rules (and support-table rows) in this order
# isort: off
from jax2onnx_nn.equinox.coarse import linear, conv, norms, attention, embedding, rope, rnn, pools

# isort: on
from jax2onnx_nn.equinox.coarse.common import MakeWrapper

describe_module("eqx.nn.MLP", "its Linear layers and activations")
describe_module("eqx.nn.Sequential", "its layers")
describe_module("eqx.nn.Lambda", "its function")
describe_module("eqx.nn.Dropout", "(no node: identity in inference)")
describe_module("eqx.nn.Identity", "(no node)")


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of every patch applied while an export runs."""
    return [
        *linear.patches(),
        *conv.patches(),
        *norms.patches(),
        *attention.patches(),
        *embedding.patches(),
        *rope.patches(),
        *rnn.patches(),
        *pools.patches(),
    ]


__all__ = ["patches"]
