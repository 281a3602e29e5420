"""A warning where the integer or bool results of a bounded while_loop are read."""

from __future__ import annotations

import warnings

import onnx_ir as ir

from jax2onnx_nn.core.errors import user_stacklevel
from jax2onnx_nn.core.ir.walk import all_nodes

# The mark of a bounded loop's integer and bool results (no NaN to poison them with): the
# user's source line, read by :func:`warn_unpoisoned` once the graph is clean.
UNPOISONED = "jax2onnx_nn.unpoisoned"


def warn_unpoisoned(model: ir.Model) -> None:
    """Warn, once per loop, where the integer or bool results of a bounded ``while_loop``
    are read: they cannot be NaN, so a loop that did not finish in ``loop_bound`` steps
    gives them silently (its float results are NaN)."""
    lines = dict.fromkeys(
        value.meta[UNPOISONED]
        for node, _ in all_nodes(model)
        for value in node.outputs
        if UNPOISONED in value.meta and (value.uses() or value.is_graph_output())
    )
    for line in lines:
        warnings.warn(
            f"the integer or bool results of the while_loop at {line} are the values after the "
            "last of loop_bound "
            "steps if its condition still holds then (its float results are NaN); raise loop_bound "
            "if the loop may need more steps",
            stacklevel=user_stacklevel(),
        )
