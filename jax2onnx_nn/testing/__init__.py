"""Helpers for testing exports: one-line assertions, pytest fixtures, hypothesis strategies.

* :func:`assert_exports_match` / :func:`roundtrip`: export, check, run onnxruntime, compare;
  :func:`assert_exports_match_on` does it on given values (what a property test draws);
  :func:`sizes_for`: the sizes of the dims a case's specs have.
* ``jax2onnx_nn.testing.plugin``: the pytest plugin (``assert_onnx_matches``, ``onnx_roundtrip``),
  registered by the package's ``pytest11`` entry point.
* ``jax2onnx_nn.testing.strategies``: hypothesis strategies (imported on demand: the rest
  works without hypothesis).
"""

from jax2onnx_nn.testing.assertions import assert_exports_match, assert_exports_match_on, op_types
from jax2onnx_nn.testing.roundtrip import RoundTrip, reference_for, roundtrip, sizes_for

__all__ = [
    "RoundTrip",
    "assert_exports_match",
    "assert_exports_match_on",
    "op_types",
    "reference_for",
    "roundtrip",
    "sizes_for",
]
