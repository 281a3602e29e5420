"""Helpers for testing exports: one-line assertions, pytest fixtures, hypothesis strategies."""

from jax2onnx_nn.testing.assertions import assert_exports_match

__all__ = ["assert_exports_match"]
